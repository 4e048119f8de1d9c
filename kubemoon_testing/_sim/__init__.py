"""The simulated API server (preview): a deterministic, virtual-time kube-apiserver.

:class:`SimApiServer` is the pure model (objects, resourceVersions, watches, garbage
collection); :class:`SimulatedCluster` serves it to a real ``kubemoon_trio.Client`` over
in-memory HTTP/1.1. What is not modelled is refused with :class:`NotModelled`.
"""

from ._asyncio import VirtualTimeEventLoop, run_virtual
from ._errors import NotModelled, StatusError
from ._kinds import BUILTIN_RESOURCES, Generation, SimResource, custom, resource_of_class
from ._rest import handle_request
from ._scenario import (
    CompactHistory,
    DropWatches,
    ExpireWatches,
    FailRequests,
    FaultSchedule,
    LeaseViolation,
    Pause,
    PauseOnWrite,
    ReplicaFactory,
    ShardViolation,
    SimulationResult,
    SimulationStalled,
    TenantCreate,
    TenantDelete,
    TenantFlood,
    TenantPatch,
    lease_violations,
    seed_trio_scheduler,
    shard_violations,
    simulate,
)
from ._store import DEFAULT_EPOCH, SimApiServer, SimWatch, WatchLine
from ._trio import (
    SIM_SERVER_URL,
    LeaseRecord,
    RequestFault,
    SimNetworkBackend,
    SimulatedCluster,
    TraceEntry,
)

__all__ = [
    "BUILTIN_RESOURCES",
    "CompactHistory",
    "DEFAULT_EPOCH",
    "DropWatches",
    "ExpireWatches",
    "FailRequests",
    "FaultSchedule",
    "Generation",
    "LeaseRecord",
    "LeaseViolation",
    "NotModelled",
    "Pause",
    "PauseOnWrite",
    "ReplicaFactory",
    "RequestFault",
    "SIM_SERVER_URL",
    "ShardViolation",
    "SimApiServer",
    "SimNetworkBackend",
    "SimResource",
    "SimWatch",
    "SimulatedCluster",
    "SimulationResult",
    "SimulationStalled",
    "StatusError",
    "TenantCreate",
    "TenantDelete",
    "TenantFlood",
    "TenantPatch",
    "TraceEntry",
    "VirtualTimeEventLoop",
    "WatchLine",
    "custom",
    "handle_request",
    "lease_violations",
    "resource_of_class",
    "run_virtual",
    "seed_trio_scheduler",
    "shard_violations",
    "simulate",
]
