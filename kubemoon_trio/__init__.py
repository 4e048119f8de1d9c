"""kubemoon_trio: the trio adapter of KubeMoon.

Performs the core's requests over real TLS with ``httpcore``: a :class:`Client` with CRUD,
paginated LIST and WATCH (each watch on a connection of its own), informers, leader
election and the controller runner. The three adapters (trio, asyncio, blocking) offer the
same surface: the asyncio and blocking packages are generated from the trio source by
``scripts/unasync.py``, and only ``_backend.py`` is written by hand for each loop.
Configuration loading, TLS and the transport errors come from ``kubemoon_io``, which every
adapter shares.
"""

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

from ._client import Client, StreamResponse, Watch
from ._controller import ControllerRunner, Reconcile
from ._informer import Informer
from ._leader import LeaderElection

__all__ = [
    "Client",
    "ControllerRunner",
    "Informer",
    "InsecureTLSWarning",
    "LeaderElection",
    "Reconcile",
    "ResponseTooLarge",
    "StreamResponse",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "Watch",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
]
