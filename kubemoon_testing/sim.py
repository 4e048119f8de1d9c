"""The simulated API server (issue 32): a deterministic, virtual-time
kube-apiserver for tests of controllers.

- :class:`SimApiServer`: the pure model (no I/O; ``now`` passed in): objects of the
  modelled built-in resources and of custom resources, one global resourceVersion,
  optimistic concurrency, generation, the status subresource, finalizers, owner garbage
  collection, selectors, paged LIST, WATCH with bookmarks, compaction and 410.
- :func:`handle_request`: kube-apiserver's REST surface over it, core ``Request`` in.
- :class:`SimulatedCluster`: the model served in memory to a real
  ``kubemoon_trio.Client`` (``cluster.client()``; unframed, or over HTTP/1.1 through h11
  with ``framing=True``), on trio's clock (``MockClock`` for virtual time).

- :func:`simulate`: N replicas of an operator (their real ``Manager``) on one cluster
  under a seeded :class:`FaultSchedule` (pauses, dropped and expired watches, compactions,
  injected 409/429/5xx, a tenant's creates, merge patches, deletes and floods),
  deterministic per seed; the run's ``SimulatedCluster.trace`` and Lease history feed
  checks such as :func:`lease_violations`. A run is bounded in wall-clock time (60 s,
  ``wall_limit``) and fails with :class:`SimulationStalled` when virtual time stands still
  while tasks keep running (20 s, ``stall_limit``) instead of hanging.

Whatever is not modelled raises :class:`NotModelled` (answered 501 over HTTP and kept in
``SimulatedCluster.refusals``) instead of an answer that could differ from kube-apiserver.
See "Simulating your operator" in docs/testing.rst.
"""

from kubemoon_core._public import publish

from ._sim import (
    BUILTIN_RESOURCES,
    DEFAULT_EPOCH,
    SIM_SERVER_URL,
    CompactHistory,
    DropWatches,
    ExpireWatches,
    FailRequests,
    FaultSchedule,
    Generation,
    LeaseRecord,
    LeaseViolation,
    NotModelled,
    Pause,
    PauseOnWrite,
    ReplicaFactory,
    RequestFault,
    ShardViolation,
    SimApiServer,
    SimNetworkBackend,
    SimResource,
    SimulatedCluster,
    SimulationResult,
    SimulationStalled,
    SimWatch,
    StatusError,
    TenantCreate,
    TenantDelete,
    TenantFlood,
    TenantPatch,
    TraceEntry,
    VirtualTimeEventLoop,
    WatchLine,
    custom,
    handle_request,
    lease_violations,
    resource_of_class,
    run_virtual,
    seed_trio_scheduler,
    shard_violations,
    simulate,
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

# Objects report the path users import them from, not the private module.
publish(__name__, globals(), __all__)
