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

The Kubernetes version is chosen per run: ``pytest --kubernetes-version 1.36`` (or the
environment variable ``KUBEMOON_KUBERNETES_VERSION``; default the newest supported
release) makes every fixture and every ``ApiServer()`` run that release's binaries, and
the ``kubernetes_version`` fixture says which (``v1.X.Y``). Tests that need more declare it
and are skipped with the reason on other versions:

- ``@pytest.mark.needs_kubernetes("1.36")``: kube-apiserver 1.36 or newer;
- ``@pytest.mark.needs_feature("ShardedListAndWatch")``: a feature gate that the version
  must have (:data:`~kubemoon_testing.FEATURE_GATES` says since which minor).

The binaries come from ``kubemoon-testenv build`` (needs Go; ``make testenv`` in the
KubeMoon repository); without them the fixtures fail (never skip) with a message saying
so. The report header says where the binaries are and whether the controller manager
(garbage collection, namespace deletion) runs. This module is loaded by every pytest run in
an environment where KubeMoon is installed, so it imports nothing heavy and registers only
the ``integration``, ``needs_kubernetes`` and ``needs_feature`` markers and the
``--kubernetes-version`` option.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator, Sequence

import pytest

from kubemoon_testing import (
    FEATURE_GATES,
    ApiServer,
    CrdSource,
    controller_manager_wanted,
    default_binary_dir,
)
from kubemoon_testing._versions import (
    VERSION_ENV,
    UnsupportedVersionError,
    parse_version,
    release_for,
    selected_version,
)

__all__ = [
    "kube_apiserver",
    "kube_apiserver_crds",
    "kube_apiserver_no_controllers",
    "kube_apiserver_nocache",
    "kube_apiserver_tracing",
    "kube_namespace",
    "kube_tracing_endpoint",
    "kubernetes_version",
]

_OPTION = "--kubernetes-version"
# The environment variable as it was before pytest_configure set it.
_SAVED_ENV = pytest.StashKey[str | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--kubernetes-version``."""
    parser.addoption(
        _OPTION,
        metavar="VERSION",
        default=None,
        help="the Kubernetes release the real-apiserver fixtures run: a supported minor "
        f"(1.36) or release (v1.36.3); default ${VERSION_ENV}, else the newest",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; make ``--kubernetes-version`` every ``ApiServer``'s default."""
    config.addinivalue_line(
        "markers",
        "integration: runs against the real kube-apiserver built by `kubemoon-testenv build`",
    )
    config.addinivalue_line(
        "markers",
        "needs_kubernetes(minor): skipped unless the run's Kubernetes version is at least "
        "this minor ('1.36')",
    )
    config.addinivalue_line(
        "markers",
        "needs_feature(gate): skipped unless the run's kube-apiserver has this feature gate",
    )
    chosen = config.getoption(_OPTION, default=None)
    if chosen:
        try:
            version = release_for(chosen).version
        except UnsupportedVersionError as exc:
            raise pytest.UsageError(f"{_OPTION}: {exc}") from None
        # Through the environment, so ApiServer() anywhere, and subprocesses, follow it.
        config.stash[_SAVED_ENV] = os.environ.get(VERSION_ENV)
        os.environ[VERSION_ENV] = version
    else:
        try:
            selected_version()
        except UnsupportedVersionError as exc:
            raise pytest.UsageError(f"${VERSION_ENV}: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put ``KUBEMOON_KUBERNETES_VERSION`` back as it was."""
    if _SAVED_ENV in config.stash:
        saved = config.stash[_SAVED_ENV]
        if saved is None:
            os.environ.pop(VERSION_ENV, None)
        else:
            os.environ[VERSION_ENV] = saved


def _version_skip(item: pytest.Item, version: str) -> str | None:
    """Why ``item`` cannot run on Kubernetes ``version``, or None."""
    minor, _patch = parse_version(version)
    for marker in item.iter_markers("needs_kubernetes"):
        (wanted,) = marker.args
        wanted_minor, _ = parse_version(str(wanted))
        if minor < wanted_minor:
            return f"needs Kubernetes >= 1.{wanted_minor} (this run: {version})"
    for marker in item.iter_markers("needs_feature"):
        (gate,) = marker.args
        since = FEATURE_GATES.get(str(gate))
        if since is None:
            raise pytest.UsageError(
                f"{item.nodeid}: needs_feature({gate!r}) names no gate of "
                f"kubemoon_testing.FEATURE_GATES ({', '.join(sorted(FEATURE_GATES))})"
            )
        if minor < since:
            return (
                f"needs the {gate} feature gate (kube-apiserver >= 1.{since}; this run: {version})"
            )
    return None


@pytest.hookimpl(tryfirst=True)  # before any fixture starts a server
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose ``needs_kubernetes``/``needs_feature`` the run's version lacks."""
    if item.get_closest_marker("needs_kubernetes") or item.get_closest_marker("needs_feature"):
        reason = _version_skip(item, selected_version())
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def kubernetes_version() -> str:
    """The Kubernetes release (``v1.X.Y``) this run's fixtures start."""
    return selected_version()


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
    return f"kubemoon: kube-apiserver {selected_version()} from {default_binary_dir()}, {mode}"


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
