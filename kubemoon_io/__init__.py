"""kubemoon_io: what every adapter shares and that is not pure.

Loading configuration files, building the ``ssl.SSLContext`` of a configuration, reading
token files, the credentials provider, and the transport errors. It imports no adapter and
no event loop, so ``kubemoon_trio``, ``kubemoon_asyncio``, ``kubemoon_sync`` and code that
embeds the core in any other loop all use the same pieces.
"""

from ._config import (
    TOKEN_FILE_LIMIT,
    FileToken,
    kubeconfig_paths,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
)
from ._credentials import PLUGIN_OUTPUT_LIMIT, PLUGIN_TIMEOUT, CredentialProvider, PluginRun
from ._metrics import MetricsSource, RuntimeCollector
from ._proxy import ProxySettings, proxy_settings
from ._tls import InsecureTLSWarning, check_transport, ssl_context
from ._transport import (
    ResponseTooLarge,
    TLSError,
    TransportError,
    TransportTimeout,
    transport_error,
)

__all__ = [
    "PLUGIN_OUTPUT_LIMIT",
    "PLUGIN_TIMEOUT",
    "TOKEN_FILE_LIMIT",
    "CredentialProvider",
    "FileToken",
    "InsecureTLSWarning",
    "MetricsSource",
    "PluginRun",
    "ProxySettings",
    "ResponseTooLarge",
    "RuntimeCollector",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "check_transport",
    "kubeconfig_paths",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
    "proxy_settings",
    "ssl_context",
    "transport_error",
]
