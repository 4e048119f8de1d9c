"""kubemoon_trio: the trio adapter of KubeMoon.

Performs the core's requests over real TLS with ``httpcore``: a :class:`Client` with CRUD,
paginated LIST and WATCH (each watch on a connection of its own), informers, leader
election, the controller runner, the runtime, and a webhook server for admission and
conversion reviews. The three adapters (trio, asyncio, blocking) offer the
same surface: the asyncio and blocking packages are generated from the trio source by
``scripts/unasync.py``, and only ``_backend.py`` is written by hand for each loop.
Configuration loading, TLS and the transport errors come from ``kubemoon_io``, which every
adapter shares.
"""

from kubemoon_core._public import publish
from kubemoon_io import (
    InsecureTLSWarning,
    ResponseTooLarge,
    TLSError,
    TransportError,
    TransportTimeout,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
)

from ._builder import ControllerBuilder, ReconcileFunction, RuntimeController
from ._cache import CacheReader, SharedInformers
from ._client import Client
from ._context import ReconcileContext
from ._controller import ControllerRunner, Reconcile
from ._events import EventRecorder
from ._informer import Informer
from ._leader import LeaderElection
from ._manager import LeaderElectionConfig, Manager
from ._options import WebhookOptions, WebhookServerOptions
from ._probes import ProbeServer
from ._runtime_protocols import Cluster, ControllerRunnable, Runnable
from ._sharded import ShardedControl, ShardingConfig, ShardStatus, default_shard_identity
from ._sharding import ShardMembership, detect_sharded_list_and_watch
from ._streams import StreamResponse, Watch
from ._webhook_manager import WebhookManager
from ._webhook_server import DEFAULT_INLINE_BODY_SIZE, WebhookServer

__all__ = [
    "DEFAULT_INLINE_BODY_SIZE",
    "CacheReader",
    "Client",
    "Cluster",
    "ControllerBuilder",
    "ControllerRunnable",
    "ControllerRunner",
    "EventRecorder",
    "Informer",
    "InsecureTLSWarning",
    "LeaderElection",
    "LeaderElectionConfig",
    "Manager",
    "ProbeServer",
    "Reconcile",
    "ReconcileContext",
    "ReconcileFunction",
    "ResponseTooLarge",
    "Runnable",
    "RuntimeController",
    "ShardMembership",
    "ShardStatus",
    "ShardedControl",
    "ShardingConfig",
    "SharedInformers",
    "StreamResponse",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "Watch",
    "WebhookManager",
    "WebhookOptions",
    "WebhookServer",
    "WebhookServerOptions",
    "default_shard_identity",
    "detect_sharded_list_and_watch",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
]

# Objects report the path users import them from, not the private module.
publish(__name__, globals(), __all__)
