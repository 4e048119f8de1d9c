"""The simulated API server (preview): a deterministic, virtual-time kube-apiserver.

:class:`SimApiServer` is the pure model (objects, resourceVersions, watches, garbage
collection); :class:`SimulatedCluster` serves it to a real ``kubemoon_trio.Client`` over
in-memory HTTP/1.1. What is not modelled is refused with :class:`NotModelled`.
"""

from ._errors import NotModelled, StatusError
from ._kinds import BUILTIN_RESOURCES, Generation, SimResource, custom, resource_of_class
from ._rest import handle_request
from ._store import DEFAULT_EPOCH, SimApiServer, SimWatch, WatchLine
from ._trio import SIM_SERVER_URL, SimNetworkBackend, SimulatedCluster

__all__ = [
    "BUILTIN_RESOURCES",
    "DEFAULT_EPOCH",
    "SIM_SERVER_URL",
    "Generation",
    "NotModelled",
    "SimApiServer",
    "SimNetworkBackend",
    "SimResource",
    "SimWatch",
    "SimulatedCluster",
    "StatusError",
    "WatchLine",
    "custom",
    "handle_request",
    "resource_of_class",
]
