"""pytest fixtures that run a real kube-apiserver (registered as the ``kubemoon`` plugin).

Fixtures:

- ``kube_apiserver`` (session): an :class:`~kubemoon_testing.ApiServer` with the default
  profile (watch cache on, kube-controller-manager running the garbage collector and the
  namespace controller when it is built), started the first time a test asks for it,
  with the CRDs of ``kube_apiserver_crds`` installed before the controller manager starts.
- ``kube_apiserver_crds`` (session): what ``kube_apiserver`` installs at startup, empty
  by default; override it in your ``conftest.py`` to return CRD files or declared classes.
- ``kube_apiserver_nocache`` (session): a second server with ``--watch-cache=false``, for
  tests that compact etcd and expect the API to report it; started only if requested.
- ``kube_apiserver_no_controllers`` (session): a server without kube-controller-manager,
  for tests that must see the bare API (nothing garbage collected, deleted namespaces stay
  ``Terminating``); started only if requested.
- ``kube_apiserver_tracing`` (session): a server (without kube-controller-manager) that
  exports its OpenTelemetry spans over OTLP/gRPC to ``kube_tracing_endpoint`` and samples
  every request (``samplingRatePerMillion: 1000000``); started only if requested.
- ``kube_tracing_endpoint`` (session): the ``host:port`` it exports to: the environment
  variable ``KUBEMOON_TESTENV_OTLP_ENDPOINT``; override the fixture to start a receiver.
- ``kube_namespace`` (function): a fresh namespace on ``kube_apiserver``, named after the
  test, deleted afterwards (the namespace controller removes it with its objects in the
  background).

The binaries come from ``kubemoon-testenv build`` (needs Go; ``make testenv`` in the
KubeMoon repository); without them the fixtures fail (never skip) with a message saying
so. The report header says where the binaries are and whether the controller manager
(garbage collection, namespace deletion) runs. This module is loaded by every pytest run in
an environment where KubeMoon is installed, so it imports nothing heavy and registers only
the ``integration`` marker.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator, Sequence

import pytest

from kubemoon_testing import (
    KUBERNETES_VERSION,
    ApiServer,
    CrdSource,
    controller_manager_wanted,
    default_binary_dir,
)

__all__ = [
    "kube_apiserver",
    "kube_apiserver_crds",
    "kube_apiserver_no_controllers",
    "kube_apiserver_nocache",
    "kube_apiserver_tracing",
    "kube_namespace",
    "kube_tracing_endpoint",
]


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``integration`` marker."""
    config.addinivalue_line(
        "markers",
        "integration: runs against the real kube-apiserver built by `kubemoon-testenv build`",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Leave tests marked ``@pytest.mark.asyncio`` to pytest-asyncio even where
    pytest-trio's ``trio_mode`` (which marks every ``async def`` test for trio) is on, so a
    project can test on both loops."""
    for item in items:
        if item.get_closest_marker("asyncio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]


def pytest_report_header(config: pytest.Config) -> str:
    """One line: the binaries' directory and the mode ``kube_apiserver`` runs in."""
    if controller_manager_wanted():
        mode = "with kube-controller-manager (garbage collection, namespace deletion)"
    else:
        mode = (
            "WITHOUT kube-controller-manager: nothing is garbage collected and deleted "
            "namespaces stay Terminating (`kubemoon-testenv build` builds it with Go)"
        )
    return f"kubemoon: kube-apiserver {KUBERNETES_VERSION} from {default_binary_dir()}, {mode}"


@pytest.fixture(scope="session")
def kube_apiserver_crds() -> Sequence[CrdSource]:
    """The CRDs ``kube_apiserver`` installs before it starts the controller manager.

    Empty here; override this fixture in your ``conftest.py`` to return CRD YAML files,
    manifests or classes declared with ``custom_resource``, so the garbage collector
    handles your kinds' children from the first test on.
    """
    return ()


@pytest.fixture(scope="session")
def kube_apiserver(kube_apiserver_crds: Sequence[CrdSource]) -> Iterator[ApiServer]:
    """A real kube-apiserver shared by the whole session (watch cache on, the controller
    manager on when built), with ``kube_apiserver_crds`` installed."""
    with ApiServer(crds=kube_apiserver_crds) as server:
        yield server


@pytest.fixture(scope="session")
def kube_apiserver_nocache() -> Iterator[ApiServer]:
    """A real kube-apiserver without the watch cache (``--watch-cache=false``).

    Reads and watches go straight to etcd, so :meth:`ApiServer.compact` turns old
    resourceVersions into 410 Expired answers.
    """
    with ApiServer(watch_cache=False) as server:
        yield server


@pytest.fixture(scope="session")
def kube_apiserver_no_controllers() -> Iterator[ApiServer]:
    """A real kube-apiserver and etcd without kube-controller-manager.

    Owner references are never acted upon and a deleted namespace stays ``Terminating``
    with its objects, as on a bare apiserver.
    """
    with ApiServer(controller_manager=False) as server:
        yield server


@pytest.fixture(scope="session")
def kube_tracing_endpoint() -> str:
    """``host:port`` of the OTLP/gRPC receiver :func:`kube_apiserver_tracing` exports to.

    Read from ``KUBEMOON_TESTENV_OTLP_ENDPOINT``; override this fixture in a
    ``conftest.py`` to point at a receiver the session starts itself.
    """
    endpoint = os.environ.get("KUBEMOON_TESTENV_OTLP_ENDPOINT", "").strip()
    if not endpoint:
        pytest.fail(
            "kube_apiserver_tracing needs an OTLP/gRPC endpoint: set "
            "KUBEMOON_TESTENV_OTLP_ENDPOINT=host:port or override the kube_tracing_endpoint "
            "fixture"
        )
    return endpoint


@pytest.fixture(scope="session")
def kube_apiserver_tracing(kube_tracing_endpoint: str) -> Iterator[ApiServer]:
    """A real kube-apiserver tracing every request to ``kube_tracing_endpoint``.

    It adopts the W3C ``traceparent`` of trusted callers (``system:masters``,
    ``system:monitoring``: the token of :data:`~kubemoon_testing.MONITORING_USER`) and
    links its own trace to the caller's span for anyone else. No kube-controller-manager.
    """
    with ApiServer(
        controller_manager=False,
        tracing_endpoint=kube_tracing_endpoint,
        tracing_sampling_rate_per_million=1_000_000,
    ) as server:
        yield server


def _namespace_name(test_name: str) -> str:
    # A DNS label (<= 63 chars) that still says which test made it.
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{stem or 'test'}-{secrets.token_hex(4)}"


@pytest.fixture
def kube_namespace(kube_apiserver: ApiServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new, uniquely named namespace on ``kube_apiserver`` for one test.

    It is deleted at teardown without waiting: the namespace controller removes its
    objects and then the namespace in the background. Names are never reused.
    """
    name = kube_apiserver.create_namespace(_namespace_name(request.node.name))
    yield name
    kube_apiserver.delete_namespace(name)
