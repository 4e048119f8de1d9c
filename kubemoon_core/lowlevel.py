"""The state machines and values the loop adapters drive: reflector, watch decoder, store,
queue, rate limiters, leader election, discovery, events, failures, metrics, and the
machines' transition tables. Most users never import this; the adapters do.
"""

from ._backoff import Backoff
from ._changes import initial_change
from ._controller import Controller, ControllerMetrics, Mapper, Source, WorkItem
from ._discovery import (
    AGGREGATED_DISCOVERY_ACCEPT,
    APIGroup,
    APIGroupDiscoveryList,
    APIGroupList,
    APIResourceList,
    APIVersions,
    Discovery,
    DiscoveryInput,
    DiscoveryState,
    decode_aggregated_discovery,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)
from ._events import EventOutcome, EventPlan, EventRecorder, EventWrite
from ._failures import FailureClass, FailureReport, FailureReporter, LogLevel, Problem, ReportKind
from ._freshness import (
    DEFAULT_FLOOR_MAX_AGE,
    DEFAULT_FLOOR_MAX_ENTRIES,
    Floor,
    WriteFloors,
    WrittenObject,
    compare_resource_versions,
    written_object,
)
from ._gate import DEFAULT_GATE_MARGIN, WriteGate
from ._histogram import QUEUE_DURATION_BUCKETS, RECONCILE_TIME_BUCKETS, Histogram
from ._kept_out import MAX_CACHED_LABEL_CHARS, KeptOut, check_label_size
from ._leader import (
    JITTER_FACTOR,
    LeaderElector,
    LeaderEvent,
    LeaderState,
    LeaseRecord,
    NewLeader,
    StartedLeading,
    StoppedLeading,
    takeover_bound,
)
from ._leader_states import LeaderInput
from ._public import publish
from ._queue import (
    DEFAULT_MAX_OVERTAKES,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    WorkQueue,
    WorkQueueMetrics,
)
from ._ratelimit import (
    BucketRateLimiter,
    ExponentialRateLimiter,
    FastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_rate_limiter,
)
from ._reflector import Reflector, ReflectorStats
from ._reflector_states import ReflectorInput, ReflectorState, RelistReason
from ._request import (
    METADATA_ONLY_ACCEPT,
    METADATA_ONLY_LIST_ACCEPT,
    PAGE_BODY_LIMIT,
    USER_AGENT,
)
from ._restmapper import RefreshNeeded, RESTMapper
from ._status import Disposition, decode_status, error_from_response, error_from_status, retry_delay
from ._store import Store, label_indexer, namespace_indexer
from ._transitions import Transition, TransitionTable
from ._watch import DEFAULT_MAX_LINE_LENGTH, GC_PAUSE_MIN, PULL_WINDOW, WatchDecoder
from ._watch_events import INITIAL_EVENTS_END_ANNOTATION, KeptOutEvent, WatchEvent

__all__ = [
    "AGGREGATED_DISCOVERY_ACCEPT",
    "APIGroup",
    "APIGroupDiscoveryList",
    "APIGroupList",
    "APIResourceList",
    "APIVersions",
    "Backoff",
    "BucketRateLimiter",
    "compare_resource_versions",
    "Controller",
    "ControllerMetrics",
    "decode_aggregated_discovery",
    "decode_api_group_list",
    "decode_api_resource_list",
    "decode_api_versions",
    "decode_status",
    "DEFAULT_FLOOR_MAX_AGE",
    "DEFAULT_FLOOR_MAX_ENTRIES",
    "DEFAULT_GATE_MARGIN",
    "DEFAULT_MAX_LINE_LENGTH",
    "DEFAULT_MAX_OVERTAKES",
    "default_rate_limiter",
    "Discovery",
    "DiscoveryInput",
    "DiscoveryState",
    "Disposition",
    "error_from_response",
    "error_from_status",
    "EventOutcome",
    "EventPlan",
    "EventRecorder",
    "EventWrite",
    "ExponentialRateLimiter",
    "FailureClass",
    "FailureReport",
    "FailureReporter",
    "FastSlowRateLimiter",
    "Floor",
    "GC_PAUSE_MIN",
    "Histogram",
    "initial_change",
    "INITIAL_EVENTS_END_ANNOTATION",
    "JITTER_FACTOR",
    "KeptOut",
    "KeptOutEvent",
    "MAX_CACHED_LABEL_CHARS",
    "PAGE_BODY_LIMIT",
    "check_label_size",
    "label_indexer",
    "LeaderElector",
    "LeaderEvent",
    "LeaderInput",
    "LeaderState",
    "LeaseRecord",
    "LogLevel",
    "LOW_PRIORITY",
    "Mapper",
    "MaxOfRateLimiter",
    "METADATA_ONLY_ACCEPT",
    "METADATA_ONLY_LIST_ACCEPT",
    "namespace_indexer",
    "NewLeader",
    "NORMAL_PRIORITY",
    "Problem",
    "PULL_WINDOW",
    "QUEUE_DURATION_BUCKETS",
    "RateLimiter",
    "RECONCILE_TIME_BUCKETS",
    "Reflector",
    "ReflectorInput",
    "ReflectorState",
    "ReflectorStats",
    "RefreshNeeded",
    "RelistReason",
    "ReportKind",
    "RESTMapper",
    "retry_delay",
    "Source",
    "StartedLeading",
    "StoppedLeading",
    "Store",
    "Transition",
    "TransitionTable",
    "takeover_bound",
    "USER_AGENT",
    "WatchDecoder",
    "WatchEvent",
    "WorkItem",
    "WorkQueue",
    "WorkQueueMetrics",
    "WriteFloors",
    "WriteGate",
    "written_object",
    "WrittenObject",
]

publish(__name__, globals(), __all__)
