"""kubemoon_io: what every adapter shares and that is not pure.

Loading configuration files, building the ``ssl.SSLContext`` of a configuration, reading
token files, the credentials provider, the transport errors, the Prometheus collector,
OpenTelemetry tracing (``kubemoon[otel]``), the JSON log formatter and the settings
``kubemoon run`` hands the Managers it builds (:class:`RunSettings`). It imports no adapter and
no event loop, so ``kubemoon_trio``, ``kubemoon_asyncio``, ``kubemoon_sync`` and code that
embeds the core in any other loop all use the same pieces.
"""

from kubemoon_core._public import publish

from ._certs import (
    CertificateMaterial,
    CertificateSource,
    ServingCertificate,
    pem_fingerprints,
    require_cryptography,
)
from ._config import (
    TOKEN_FILE_LIMIT,
    FileToken,
    kubeconfig_paths,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
)
from ._credentials import PLUGIN_OUTPUT_LIMIT, PLUGIN_TIMEOUT, CredentialProvider, PluginRun
from ._gate import (
    LATE_SENDS,
    SendGuard,
    arm_send_guard,
    check_armed_guard,
    current_send_guard,
    disarm_send_guard,
    gate_guard,
    gated_writes,
    report_late_send,
)
from ._gc import paused_gc
from ._limits import raise_open_file_limit
from ._logging import JsonLogFormatter, object_context
from ._metrics import MetricsSnapshot, MetricsSource, RuntimeCollector
from ._network import ClosingNetworkBackend
from ._proxy import ProxySettings, proxy_settings
from ._run_settings import RunSettings, current_run_settings, using_run_settings
from ._tls import InsecureTLSWarning, check_transport, load_cert_chain, ssl_context
from ._tracing import TRACER_NAME, tracing_enabled, use_tracer_provider
from ._transport import (
    ResponseTooLarge,
    TLSError,
    TransportError,
    TransportTimeout,
    transport_error,
)

__all__ = [
    "CertificateMaterial",
    "CertificateSource",
    "ServingCertificate",
    "pem_fingerprints",
    "PLUGIN_OUTPUT_LIMIT",
    "PLUGIN_TIMEOUT",
    "TRACER_NAME",
    "ClosingNetworkBackend",
    "TOKEN_FILE_LIMIT",
    "CredentialProvider",
    "FileToken",
    "InsecureTLSWarning",
    "JsonLogFormatter",
    "MetricsSnapshot",
    "MetricsSource",
    "PluginRun",
    "LATE_SENDS",
    "SendGuard",
    "arm_send_guard",
    "check_armed_guard",
    "current_send_guard",
    "disarm_send_guard",
    "gate_guard",
    "gated_writes",
    "report_late_send",
    "ProxySettings",
    "RunSettings",
    "current_run_settings",
    "using_run_settings",
    "ResponseTooLarge",
    "RuntimeCollector",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "check_transport",
    "kubeconfig_paths",
    "load_cert_chain",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
    "object_context",
    "paused_gc",
    "proxy_settings",
    "raise_open_file_limit",
    "require_cryptography",
    "ssl_context",
    "tracing_enabled",
    "transport_error",
    "use_tracer_provider",
]

# Objects report the path users import them from, not the private module.
publish(__name__, globals(), __all__)
