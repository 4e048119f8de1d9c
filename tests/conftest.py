"""Shared test configuration: Hypothesis profiles, and the ``backend`` fixture.

``default`` keeps the everyday loop fast; ``fuzz`` (``make fuzz``) runs the same suites much
longer. Select with HYPOTHESIS_PROFILE.
"""

import gc
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kubemoon_core._json import dumps
from kubemoon_core.json_backends import (
    set_json_backend,
    use_fast_json,
    use_msgspec_json,
    use_standard_json,
)
from kubemoon_testing import CrdSource

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# CI (.ci/run sets CI=true) replays fixed examples, so a run judges the change and not the
# luck of the draw; local runs and `make fuzz` keep exploring and report what they find.
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
_DEFAULT_PROFILE = "ci" if os.environ.get("CI") else "default"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _DEFAULT_PROFILE))


@pytest.fixture(params=["json", "orjson", "msgspec", "custom"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each JSON backend in turn: the standard library, orjson, msgspec (whose line structs
    the watch decoder runs), and any other (which the watch decoder hands bytes lines)."""
    if request.param == "orjson":
        assert use_fast_json()
    elif request.param == "msgspec":
        assert use_msgspec_json()
    elif request.param == "custom":
        set_json_backend("custom", lambda data: json.loads(bytes(data)), dumps)
    try:
        yield request.param
    finally:
        use_standard_json()


@pytest.fixture(scope="session")
def kube_apiserver_crds() -> Sequence[CrdSource]:
    """The Widget and TeamSpace CRDs, installed before the session apiserver's controller
    manager starts (so the garbage collector handles their children at once)."""
    examples = Path(__file__).parents[1] / "examples"
    return [examples / "widgets" / "crd.yaml", examples / "teamspace" / "crd.yaml"]


_LEAKY_TIERS = ("fault", "integration", "e2e")


@pytest.fixture(autouse=True)
def _collect_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that opens sockets, collect garbage while it is still the current test.

    An object left unclosed in a reference cycle (a socket in an exception's traceback) is
    otherwise found at a random later moment, and its ``ResourceWarning`` fails whichever
    test runs then. Torn down last, after every other fixture of the test.
    """
    yield
    if any(tier in request.node.path.parts for tier in _LEAKY_TIERS):
        gc.collect()
