"""kubemoon_testing: test tools for KubeMoon and for operators built on it.

A strict fake transport for the pure core, a scripted h11 server for faults, and a real
kube-apiserver with etcd and kube-controller-manager for integration tests (see the pytest
plugin; ``kubemoon-testenv build`` builds the binaries once).
"""

from ._apiserver import (
    ADMIN_USER,
    CONTROLLER_MANAGER_USER,
    KUBERNETES_VERSION,
    LIMITED_USER,
    MONITORING_USER,
    NOBODY_USER,
    ApiServer,
    ApiServerError,
    MissingBinariesError,
    RawResponse,
    default_binary_dir,
)
from ._certs import WebhookCertificates
from ._fake import Exchange, FakeTransport, FakeTransportError, json_response
from ._scripted import RecordedRequest, Reply, ScriptedServer, watch_lines

__all__ = [
    "ADMIN_USER",
    "CONTROLLER_MANAGER_USER",
    "KUBERNETES_VERSION",
    "LIMITED_USER",
    "MONITORING_USER",
    "NOBODY_USER",
    "ApiServer",
    "ApiServerError",
    "Exchange",
    "FakeTransport",
    "FakeTransportError",
    "MissingBinariesError",
    "RawResponse",
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "WebhookCertificates",
    "default_binary_dir",
    "json_response",
    "watch_lines",
]
