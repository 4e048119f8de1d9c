"""The controller core: changes in, work items out, reconcile outcomes back in.

Rules:

- A controller follows named :class:`Source`\\ s. Each maps a :class:`Change` to the keys of
  the primary objects to reconcile: the primary resource maps to its own key, a secondary
  resource to the owners named in its ``ownerReferences`` (group and kind of the primary;
  the key is the secondary's namespace and the owner's name) or through a mapping function.
  An optional predicate filters changes first; the predicates here pass every addition
  and deletion and judge only modifications.
- Keys go through a :class:`WorkQueue`, so a key is never reconciled by two workers at once
  and a key that changes while it is reconciled is reconciled exactly once more.
- Priorities (controller-runtime's default since v0.23): a change from an informer's first
  list (``Change.initial``) or a resync (a modification whose resourceVersion did not
  change) is queued at ``LOW_PRIORITY``, every other change at ``NORMAL_PRIORITY``, so after
  a restart with a large cache a new event is reconciled among the first. A retry keeps the
  priority its key was handed out at.
- ``next_work(now)`` hands out at most ``workers`` items at a time, each with a reconcile
  id; the adapter runs the user's reconcile and calls ``report(item, outcome, now)``.
  ``Reconciled`` forgets the key's backoff; ``RequeueAfter`` forgets it and adds the key
  back after the delay; ``Requeue`` and ``Failed`` add it back rate-limited;
  ``FailedTerminally`` forgets it and does not requeue (a new change will bring it back).
- Admission (sharded controllers): with :meth:`Controller.set_admission`, a key the
  admission function refuses is not queued, and one already queued is dropped when it
  comes out of the queue (forgotten, never reconciled, counted in
  :attr:`ControllerMetrics.dropped`).
- After ``shutdown`` no new work is handed out (a controller that lost its leadership must
  stop at once); ``is_drained`` tells when every running reconcile has been reported.
- Metrics are plain data (:meth:`Controller.metrics`) for adapters to export under
  controller-runtime's names; pass ``now`` to :meth:`Controller.receive` and
  :meth:`Controller.enqueue` so the queue can time how long keys wait.

Mapping functions and predicates are user code: what they raise propagates.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ._changes import Change, ChangeType
from ._errors import LocalProtocolError
from ._histogram import RECONCILE_TIME_BUCKETS, Histogram, _Recorder
from ._queue import LOW_PRIORITY, NORMAL_PRIORITY, WorkQueue, WorkQueueMetrics
from ._ratelimit import RateLimiter
from ._resources import GroupVersion, GroupVersionKind, ObjectKey, OwnerReference, Scope

__all__ = [
    "Controller",
    "ControllerMetrics",
    "Failed",
    "FailedTerminally",
    "Mapper",
    "Outcome",
    "Predicate",
    "ReconcileResult",
    "Reconciled",
    "Requeue",
    "RequeueAfter",
    "Source",
    "WorkItem",
    "all_of",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
    "negate",
]


class Mapper(Protocol):
    """A function mapping one change to the keys of the primary objects it concerns."""

    def __call__(self, change: Change, /) -> Iterable[ObjectKey]:
        """The keys to reconcile because of ``change``."""


class Predicate(Protocol):
    """A function deciding whether a change deserves a reconcile."""

    def __call__(self, change: Change, /) -> bool:
        """True when ``change`` should be mapped to keys and queued."""


# Upper bounds (seconds) of the reconcile duration histogram; the last bucket is +Inf.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


# --- predicates -------------------------------------------------------------------------


def _metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if obj is not None else None
    return metadata if isinstance(metadata, Mapping) else {}


def _modified_field_changed(change: Change, name: str) -> bool:
    if change.type is not ChangeType.MODIFIED or change.old is None or change.new is None:
        return True
    return _metadata(change.old).get(name) != _metadata(change.new).get(name)


def generation_changed(change: Change) -> bool:
    """Pass additions, deletions and modifications that changed ``metadata.generation``.

    The API server bumps the generation only when the spec changes, so this filters out
    status-only updates of resources that have a status subresource.
    """
    return _modified_field_changed(change, "generation")


def labels_changed(change: Change) -> bool:
    """Pass additions, deletions and modifications that changed ``metadata.labels``."""
    return _modified_field_changed(change, "labels")


def annotations_changed(change: Change) -> bool:
    """Pass additions, deletions and modifications that changed ``metadata.annotations``."""
    return _modified_field_changed(change, "annotations")


def any_of(*predicates: Predicate) -> Predicate:
    """A predicate that passes when any of ``predicates`` passes."""

    def either(change: Change) -> bool:
        return any(predicate(change) for predicate in predicates)

    return either


def all_of(*predicates: Predicate) -> Predicate:
    """A predicate that passes when all of ``predicates`` pass."""

    def both(change: Change) -> bool:
        return all(predicate(change) for predicate in predicates)

    return both


def negate(predicate: Predicate) -> Predicate:
    """A predicate that passes exactly when ``predicate`` does not."""

    def inverse(change: Change) -> bool:
        return not predicate(change)

    return inverse


# --- sources ----------------------------------------------------------------------------


def _background(change: Change) -> bool:
    """Work that may wait: the first list's changes and resyncs (an unchanged version)."""
    if change.initial:
        return True
    if change.type is not ChangeType.MODIFIED:
        return False
    old = _metadata(change.old).get("resourceVersion")
    return old is not None and old == _metadata(change.new).get("resourceVersion")


def _own_key(change: Change) -> tuple[ObjectKey, ...]:
    return (change.key,)


@dataclass(frozen=True, slots=True)
class Source:
    """A named stream of changes and how its changes map to primary keys.

    Build one with :meth:`primary`, :meth:`owned` or :meth:`mapped`; ``name`` is what the
    adapter passes to :meth:`Controller.receive`.
    """

    name: str
    map: Mapper
    predicate: Predicate | None = None

    @classmethod
    def primary(cls, name: str = "primary", *, predicate: Predicate | None = None) -> Source:
        """The primary resource: each change maps to its own key."""
        return cls(name, _own_key, predicate)

    @classmethod
    def owned(
        cls,
        name: str,
        owner: GroupVersionKind,
        *,
        controller_only: bool = True,
        owner_scope: Scope = Scope.NAMESPACED,
        predicate: Predicate | None = None,
    ) -> Source:
        """A secondary resource mapped to its owners of the primary's group and kind.

        Owner references of both the old and the new state count, so an object that
        changes owner wakes both. The version in a reference's ``apiVersion`` is ignored:
        every version of a group serves the same objects. With ``controller_only`` (the
        default) only the reference marked ``controller: true`` counts. The key takes the
        secondary's namespace, or ``""`` when ``owner_scope`` is cluster.
        """

        def owners(change: Change) -> list[ObjectKey]:
            namespace = change.key.namespace if owner_scope is Scope.NAMESPACED else ""
            keys: list[ObjectKey] = []
            for obj in (change.old, change.new):
                if obj is None:
                    continue
                for ref in OwnerReference.all_of(obj):
                    if controller_only and not ref.controller:
                        continue
                    if ref.kind != owner.kind or _group_of(ref.api_version) != owner.group:
                        continue
                    key = ObjectKey(namespace, ref.name)
                    if key not in keys:
                        keys.append(key)
            return keys

        return cls(name, owners, predicate)

    @classmethod
    def mapped(cls, name: str, mapper: Mapper, *, predicate: Predicate | None = None) -> Source:
        """Any resource, mapped to primary keys by ``mapper``."""
        return cls(name, mapper, predicate)


def _group_of(api_version: str) -> str | None:
    try:
        return GroupVersion.parse(api_version).group
    except LocalProtocolError:
        return None  # a malformed apiVersion matches no group


# --- work and outcomes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One reconcile to run: the key, its id, when it started and its retries so far."""

    key: ObjectKey
    reconcile_id: int
    started: float
    requeues: int


class ReconcileResult(enum.Enum):
    """The result label of a finished reconcile, for metrics."""

    SUCCESS = "success"
    REQUEUE = "requeue"
    REQUEUE_AFTER = "requeue_after"
    ERROR = "error"
    TERMINAL_ERROR = "terminal_error"


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The reconcile succeeded: forget the key's backoff, wait for the next change."""

    result: ClassVar[ReconcileResult] = ReconcileResult.SUCCESS


@dataclass(frozen=True, slots=True)
class Requeue:
    """Not an error, but try again soon: a rate-limited requeue."""

    result: ClassVar[ReconcileResult] = ReconcileResult.REQUEUE


@dataclass(frozen=True, slots=True)
class RequeueAfter:
    """Succeeded, but look again after ``delay`` seconds (the backoff is forgotten)."""

    delay: float
    result: ClassVar[ReconcileResult] = ReconcileResult.REQUEUE_AFTER

    def __post_init__(self) -> None:
        if not isinstance(self.delay, int | float) or not math.isfinite(self.delay):
            raise LocalProtocolError(f"delay must be a finite number, got {self.delay!r}")
        if self.delay < 0:
            raise LocalProtocolError(f"delay must not be negative, got {self.delay!r}")


@dataclass(frozen=True, slots=True)
class Failed:
    """The reconcile failed and may succeed later: a rate-limited requeue."""

    error: object = None
    result: ClassVar[ReconcileResult] = ReconcileResult.ERROR


@dataclass(frozen=True, slots=True)
class FailedTerminally:
    """The reconcile failed and retrying cannot help: no requeue until the next change."""

    error: object = None
    result: ClassVar[ReconcileResult] = ReconcileResult.TERMINAL_ERROR


Outcome = Reconciled | Requeue | RequeueAfter | Failed | FailedTerminally
"""What the adapter reports when a reconcile finishes."""


@dataclass(frozen=True, slots=True)
class ControllerMetrics:
    """A snapshot of a controller's metrics, as plain data.

    ``duration_buckets`` pairs each upper bound with the cumulative count of reconciles
    that took at most that long (the Prometheus layout; +Inf is ``duration_count``).

    For controller-runtime's series: ``queue`` holds the ``workqueue_*`` values,
    ``reconcile_time`` is ``controller_runtime_reconcile_time_seconds``, and
    :attr:`reconcile_total`, :attr:`reconcile_errors_total` and
    :attr:`terminal_reconcile_errors_total` are its counters;
    ``max_concurrent_reconciles`` is the number of workers.
    """

    queue_depth: int
    waiting: int
    active_workers: int
    adds: int
    retries: int
    reconciles: Mapping[ReconcileResult, int]
    duration_count: int
    duration_sum: float
    duration_max: float
    duration_buckets: tuple[tuple[float, int], ...]
    longest_running: float
    unfinished_work: float
    queue: WorkQueueMetrics
    reconcile_time: Histogram
    max_concurrent_reconciles: int
    dropped: int = 0
    """Keys the admission function refused (outside a sharded controller's ranges)."""

    @property
    def reconcile_total(self) -> Mapping[str, int]:
        """``controller_runtime_reconcile_total`` by its ``result`` label.

        The labels are ``success``, ``error``, ``requeue`` and ``requeue_after``; terminal
        failures count as ``error``, as in controller-runtime.
        """
        counts = self.reconciles
        return {
            "success": counts[ReconcileResult.SUCCESS],
            "error": self.errors,
            "requeue": counts[ReconcileResult.REQUEUE],
            "requeue_after": counts[ReconcileResult.REQUEUE_AFTER],
        }

    @property
    def reconcile_errors_total(self) -> int:
        """``controller_runtime_reconcile_errors_total``: failed reconciles of any kind."""
        return self.errors

    @property
    def terminal_reconcile_errors_total(self) -> int:
        """``controller_runtime_terminal_reconcile_errors_total``: terminal failures."""
        return self.reconciles[ReconcileResult.TERMINAL_ERROR]

    @property
    def errors(self) -> int:
        """Reconciles that failed, terminally or not."""
        return (
            self.reconciles[ReconcileResult.ERROR] + self.reconciles[ReconcileResult.TERMINAL_ERROR]
        )


# --- the controller ---------------------------------------------------------------------


@dataclass(slots=True)
class _Stats:
    reconciles: dict[ReconcileResult, int] = field(
        default_factory=lambda: dict.fromkeys(ReconcileResult, 0)
    )
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    count: int = 0
    total: float = 0.0
    longest: float = 0.0
    reconcile_time: _Recorder = field(default_factory=lambda: _Recorder(RECONCILE_TIME_BUCKETS))


class Controller:
    """Turns changes from its sources into reconciles run by at most ``workers`` workers.

    ``rate_limiter`` decides the delays of failed keys (default: client-go's controller
    limiter, see :func:`default_rate_limiter`). ``priority_queue=False`` queues every key
    at ``NORMAL_PRIORITY`` (one FIFO: a first list's keys go before later events, as
    before controller-runtime v0.23); the default serves first lists and resyncs last.
    """

    __slots__ = (
        "_admit",
        "_dropped",
        "_ids",
        "_priorities",
        "_queue",
        "_running",
        "_shutdown",
        "_sources",
        "_stats",
        "_workers",
    )

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        workers: int = 1,
        rate_limiter: RateLimiter | None = None,
        priority_queue: bool = True,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise LocalProtocolError(f"workers must be a positive integer, got {workers!r}")
        if not isinstance(priority_queue, bool):
            raise LocalProtocolError(f"priority_queue must be a bool, got {priority_queue!r}")
        self._priorities = priority_queue
        self._sources: dict[str, Source] = {}
        for source in sources:
            if source.name in self._sources:
                raise LocalProtocolError(f"two sources are named {source.name!r}")
            self._sources[source.name] = source
        if not self._sources:
            raise LocalProtocolError("a controller needs at least one source")
        self._workers = workers
        self._queue: WorkQueue[ObjectKey] = WorkQueue(rate_limiter)
        self._running: dict[int, WorkItem] = {}
        self._ids = 0
        self._shutdown = False
        self._stats = _Stats()
        self._admit: Callable[[ObjectKey], bool] | None = None
        self._dropped = 0

    def set_admission(self, admit: Callable[[ObjectKey], bool] | None) -> None:
        """Reconcile only keys for which ``admit(key)`` is True (None: every key).

        Refused keys are not queued; queued ones are dropped when they come out of the
        queue. The function is asked again for every add and every hand-out, so it may
        change its answers (a sharded controller's ranges change).
        """
        self._admit = admit

    @property
    def queue(self) -> WorkQueue[ObjectKey]:
        """The work queue (for inspection; feed changes through :meth:`receive`)."""
        return self._queue

    @property
    def workers(self) -> int:
        """The most reconciles that run at once."""
        return self._workers

    def receive(
        self, source: str, changes: Change | Iterable[Change], now: float | None = None
    ) -> int:
        """Take changes from the source named ``source``; return how many keys they mapped to.

        Each key is added to the queue, which de-duplicates (and ignores adds after
        shutdown); a key counts each time a change maps to it. ``now`` (optional) times
        how long the keys wait in the queue.
        """
        try:
            spec = self._sources[source]
        except KeyError:
            raise LocalProtocolError(f"no source named {source!r}") from None
        batch = (changes,) if isinstance(changes, Change) else changes
        added = 0
        add = self._queue.add
        admit = self._admit
        for change in batch:
            if spec.predicate is not None and not spec.predicate(change):
                continue
            priority = LOW_PRIORITY if self._priorities and _background(change) else NORMAL_PRIORITY
            for key in spec.map(change):
                if admit is not None and not admit(key):
                    self._dropped += 1
                    continue
                add(key, now, priority=priority)
                added += 1
        return added

    def enqueue(
        self, key: ObjectKey, now: float | None = None, *, priority: int = NORMAL_PRIORITY
    ) -> None:
        """Add ``key`` directly (an external trigger; a resync should pass
        ``priority=LOW_PRIORITY``); ``now`` as for receive. Without the priority queue
        every key goes in at ``NORMAL_PRIORITY``. A key the admission function refuses is
        not queued."""
        if self._admit is not None and not self._admit(key):
            self._dropped += 1
            return
        if not self._priorities:
            priority = NORMAL_PRIORITY
        self._queue.add(key, now, priority=priority)

    def next_work(self, now: float) -> WorkItem | None:
        """The next reconcile to run, or None (no free worker, nothing ready, shut down)."""
        if self._shutdown or len(self._running) >= self._workers:
            return None
        queue = self._queue
        key = queue.get(now)
        admit = self._admit
        while key is not None and admit is not None and not admit(key):
            queue.forget(key)
            queue.done(key, now)
            self._dropped += 1
            key = queue.get(now)
        if key is None:
            return None
        self._ids += 1
        item = WorkItem(key, self._ids, now, self._queue.num_requeues(key))
        self._running[item.reconcile_id] = item
        return item

    def report(self, item: WorkItem, outcome: Outcome, now: float) -> None:
        """Take the outcome of a finished reconcile and requeue the key as it says."""
        if self._running.get(item.reconcile_id) != item:
            raise LocalProtocolError(f"reconcile {item.reconcile_id} is not running")
        duration = now - item.started
        if duration < 0:
            raise LocalProtocolError("a reconcile cannot finish before it started")
        key, queue = item.key, self._queue
        priority = queue.priority_of(key)
        if priority is None:  # pragma: no cover - a running item's key is processing
            priority = NORMAL_PRIORITY
        if isinstance(outcome, Reconciled | FailedTerminally):
            queue.forget(key)
        elif isinstance(outcome, RequeueAfter):
            queue.forget(key)
            queue.add_after(key, outcome.delay, now, priority=priority)
        elif isinstance(outcome, Requeue | Failed):
            queue.add_rate_limited(key, now, priority=priority)
        else:
            raise LocalProtocolError(f"not a reconcile outcome: {outcome!r}")
        del self._running[item.reconcile_id]
        queue.done(key, now)
        stats = self._stats
        stats.reconciles[outcome.result] += 1
        stats.count += 1
        stats.total += duration
        stats.longest = max(stats.longest, duration)
        stats.reconcile_time.observe(duration)
        index = bisect.bisect_left(DURATION_BUCKETS, duration)
        if index < len(DURATION_BUCKETS):
            stats.buckets[index] += 1

    def next_deadline(self) -> float | None:
        """When a delayed key becomes ready, or None (shut down, or no worker free).

        With every worker busy nothing can be handed out before a reconcile reports, and
        the runner is woken then; a deadline already past would only make it spin.
        """
        if self._shutdown or len(self._running) >= self._workers:
            return None
        return self._queue.next_deadline()

    def shutdown(self) -> None:
        """Hand out no more work and accept no more keys; running reconciles may report."""
        self._shutdown = True
        self._queue.shutdown()

    @property
    def is_drained(self) -> bool:
        """True when shut down and no reconcile is running."""
        return self._shutdown and not self._running

    @property
    def running(self) -> tuple[WorkItem, ...]:
        """The reconciles handed out and not yet reported."""
        return tuple(self._running.values())

    def metrics(self, now: float) -> ControllerMetrics:
        """A snapshot of the metrics; ``now`` measures the running reconciles."""
        stats = self._stats
        cumulative: list[tuple[float, int]] = []
        total = 0
        for bound, count in zip(DURATION_BUCKETS, stats.buckets, strict=True):
            total += count
            cumulative.append((bound, total))
        ages = [now - item.started for item in self._running.values()]
        return ControllerMetrics(
            queue_depth=len(self._queue),
            waiting=self._queue.waiting,
            active_workers=len(self._running),
            adds=self._queue.adds,
            retries=self._queue.retries,
            reconciles=dict(stats.reconciles),
            duration_count=stats.count,
            duration_sum=stats.total,
            duration_max=stats.longest,
            duration_buckets=tuple(cumulative),
            longest_running=max(ages, default=0.0),
            unfinished_work=sum(ages),
            queue=self._queue.metrics(now),
            reconcile_time=stats.reconcile_time.snapshot(),
            max_concurrent_reconciles=self._workers,
            dropped=self._dropped,
        )
