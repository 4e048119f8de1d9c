"""Long runs of the watch-pipeline property suites (``make fuzz``; run this folder alone).

The same tests as ``tests/property/test_watch_chunking.py`` and
``tests/property/test_reflector_model.py``, under the ``fuzz`` Hypothesis profile that
``tests/conftest.py`` registers (``HYPOTHESIS_PROFILE`` overrides it), with longer stateful
runs. The profile must be loaded before the suites are imported: their settings inherit it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import settings

_TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "property")]

import conftest  # type: ignore[import-not-found]  # noqa: E402  (registers the profiles)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fuzz"))

from test_reflector_model import ReflectorMachine  # noqa: E402
from test_watch_chunking import (  # noqa: E402
    backend,
    test_corruption_raises_only_kubemoon_errors,
    test_every_chunking_gives_the_events_of_the_whole,
    test_objects_of_several_mebibytes,
)

__all__ = [
    "TestReflectorFuzz",
    "backend",
    "conftest",
    "test_corruption_raises_only_kubemoon_errors",
    "test_every_chunking_gives_the_events_of_the_whole",
    "test_objects_of_several_mebibytes",
]


class ReflectorFuzzMachine(ReflectorMachine):
    """The reflector model, with runs more than twice as long."""


ReflectorFuzzMachine.TestCase.settings = settings(
    settings(), stateful_step_count=100, deadline=None
)
TestReflectorFuzz = ReflectorFuzzMachine.TestCase
