"""kubemoon_sync: the blocking adapter of KubeMoon.

The same surface as ``kubemoon_trio``, blocking, on ``httpcore.ConnectionPool``: no thread
and no event loop are started, ever. ``_client``, ``_auth`` and ``_informer`` are generated
from ``kubemoon_trio`` by ``scripts/unasync.py``; configuration loading, TLS and transport
errors live here and serve both adapters.
"""

from ._client import Client, StreamResponse, Watch
from ._config import load_config, load_in_cluster_config, load_kubeconfig
from ._informer import Informer
from ._tls import InsecureTLSWarning
from ._transport import TLSError, TransportError, TransportTimeout

__all__ = [
    "Client",
    "Informer",
    "InsecureTLSWarning",
    "StreamResponse",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "Watch",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
]
