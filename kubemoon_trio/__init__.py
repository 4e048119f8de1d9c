"""kubemoon_trio: the trio adapter of KubeMoon.

Performs the core's requests over real TLS with ``httpcore`` on trio: a :class:`Client`
with CRUD, paginated LIST and WATCH (each watch on a connection of its own), and the
configuration loaders (kubeconfig, in-cluster), and a :class:`WebhookServer` for
admission and conversion webhooks. ``kubemoon_sync`` is generated from this package and
offers the same surface, blocking (the webhook server is not generated yet).
"""

from kubemoon_sync._config import load_config, load_in_cluster_config, load_kubeconfig
from kubemoon_sync._tls import InsecureTLSWarning
from kubemoon_sync._transport import TLSError, TransportError, TransportTimeout

from ._client import Client, StreamResponse, Watch
from ._controller import (
    ControllerRunner,
    Reconcile,
)
from ._informer import Informer
from ._leader import (
    LeaderElection,
)
from ._webhook_server import WebhookServer

__all__ = [
    "Client",
    "ControllerRunner",
    "Informer",
    "InsecureTLSWarning",
    "LeaderElection",
    "Reconcile",
    "StreamResponse",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "Watch",
    "WebhookServer",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
]
