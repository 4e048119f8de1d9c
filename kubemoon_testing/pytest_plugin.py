"""pytest fixtures that run a real kube-apiserver (registered as the ``kubemoon`` plugin).

Fixtures:

- ``kube_apiserver`` (session): an :class:`~kubemoon_testing.ApiServer` with the default
  profile (watch cache on, kube-controller-manager running the garbage collector and the
  namespace controller), started the first time a test asks for it.
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
so. This module is loaded by every pytest run in an environment where KubeMoon is
installed, so it imports nothing heavy and registers only the ``integration`` marker.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator

import pytest

from kubemoon_testing import ApiServer

__all__ = [
    "kube_apiserver",
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


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[ApiServer]:
    """A real kube-apiserver shared by the whole session (watch cache on, controllers on)."""
    with ApiServer() as server:
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
