"""kubemoon_testing: test tools for KubeMoon and for operators built on it.

A strict fake transport for the pure core, a scripted h11 server for faults, and a real
kube-apiserver with etcd and kube-controller-manager for integration tests (see the pytest
plugin; ``kubemoon-testenv build`` installs or builds the binaries once).
"""

from kubemoon_core._public import publish

from . import sim  # the simulated API server (preview): kubemoon_testing.sim
from ._apiserver import (
    KUBERNETES_VERSION,
    ApiServer,
    controller_manager_wanted,
    default_binary_dir,
)
from ._apiserver_errors import ApiServerError, CrdInstallError, MissingBinariesError
from ._certs import WebhookCertificates
from ._crds import CrdSource
from ._envtest import (
    ENVTEST_INDEX_URL,
    ArchiveHashError,
    ArchiveVersionError,
    DownloadDeadlineError,
    EnvtestArchive,
    EnvtestArchiveError,
    find_envtest_archive,
    install_envtest_archive,
)
from ._fake import Exchange, FakeTransport, FakeTransportError, json_response
from ._running import ManagerStopTimeout, running_manager, running_manager_in_thread
from ._scripted import RecordedRequest, Reply, ScriptedServer, watch_lines
from ._stdlib_http import RawResponse
from ._users import (
    ADMIN_USER,
    CONTROLLER_MANAGER_USER,
    LIMITED_USER,
    MONITORING_USER,
    NOBODY_USER,
)
from ._versions import FEATURE_GATES, SUPPORTED_RELEASES, KubernetesRelease, UnsupportedVersionError

__all__ = [
    "ADMIN_USER",
    "CONTROLLER_MANAGER_USER",
    "ENVTEST_INDEX_URL",
    "FEATURE_GATES",
    "KUBERNETES_VERSION",
    "LIMITED_USER",
    "MONITORING_USER",
    "NOBODY_USER",
    "SUPPORTED_RELEASES",
    "ApiServer",
    "ApiServerError",
    "ArchiveHashError",
    "ArchiveVersionError",
    "CrdInstallError",
    "CrdSource",
    "DownloadDeadlineError",
    "EnvtestArchive",
    "EnvtestArchiveError",
    "Exchange",
    "FakeTransport",
    "FakeTransportError",
    "KubernetesRelease",
    "ManagerStopTimeout",
    "MissingBinariesError",
    "RawResponse",
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "UnsupportedVersionError",
    "WebhookCertificates",
    "controller_manager_wanted",
    "default_binary_dir",
    "find_envtest_archive",
    "install_envtest_archive",
    "json_response",
    "running_manager",
    "running_manager_in_thread",
    "sim",
    "watch_lines",
]

# Objects report the path users import them from, not the private module.
publish(__name__, globals(), __all__)
