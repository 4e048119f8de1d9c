"""A de-duplicating work queue with delayed and rate-limited adds, as a pure data structure.

Rules (client-go's workqueue semantics, without threads or clocks):

- A key is *dirty* from an add until it is handed out by ``get``; adding a dirty key again
  does nothing, so a key waits in the queue at most once.
- A key handed out is *processing* until ``done``; it is never handed out again before
  that. An add during processing marks it dirty, and ``done`` re-queues it exactly once.
- ``add_after`` keeps one deadline per key, the earliest; a deadline that has passed by the
  ``now`` of a later call counts as an add at that call. Deadlines live in a min-heap with
  lazy deletion, compacted when stale entries outnumber live ones (bounded memory).
- ``add_rate_limited`` delays by what the queue's :class:`RateLimiter` says; ``forget``
  and ``num_requeues`` reach that limiter.
- Priorities: every add takes a ``priority`` (an int, higher first; default
  :data:`NORMAL_PRIORITY`). ``get`` hands out the highest priority first and, within one
  priority, in the order keys were queued. Adding a queued key again with a higher priority
  raises it (its place is that of the new add); a lower one changes nothing. A key added
  while processing, or waiting for a delay, keeps the highest priority it was given and is
  queued with it. A controller adds the objects of an informer's first list and resyncs at
  :data:`LOW_PRIORITY`, so changes that arrive later are worked on first (controller-runtime's
  default since v0.23).
- Waiting keys age, so no key starves: of the keys queued, the *oldest* is the one queued
  first (a raise keeps a key's age; a key queued again after ``done`` starts a new wait).
  A hand-out of any other key *overtakes* the oldest, and at most ``max_overtakes``
  (default :data:`DEFAULT_MAX_OVERTAKES`, 3) hand-outs in a row may do so: the next one
  hands out the oldest key whatever its priority. Hence the bound, for any arrival pattern,
  any priorities and any number of workers: **a key queued while Q other keys are queued
  is among the next (max_overtakes + 1) * (Q + 1) keys handed out** (every
  max_overtakes + 1 hand-outs include one of the oldest, and only the Q keys queued before
  it are ever older than it). Under a flood of ordinary adds, the first list thus still
  gets one hand-out in four; a new object behind any first list is handed out first or,
  when the oldest's turn is due, second. ``max_overtakes=0`` is first in, first out.
- After ``shutdown`` every add is silently ignored (client-go does the same, so late events
  racing a shutdown are harmless) and delayed keys are dropped; keys already queued are
  still handed out, and ``is_drained`` tells when none is queued or processing.
- Time comes in only as ``now`` (monotonic seconds). ``get(now)`` returns None when
  nothing is ready: the adapter then waits for ``next_deadline()`` or a new add.
- Metrics (client-go's workqueue set, see :meth:`WorkQueue.metrics`): an ``add`` given
  ``now`` stamps the key, and ``get`` observes the time it waited (a delayed key counts
  from its deadline); ``get`` to a ``done`` given ``now`` is the work duration. Adds and
  dones without ``now`` are simply not timed.

add, get and done are O(1) (an insertion-ordered dict per priority and one of all queued keys
by age, a few dicts) plus O(P) when a priority gains its first or loses its last queued key,
P being the number of distinct priorities queued (few: a controller uses two); delayed adds
are O(log n). Memory is one entry per queued key in each order: no stale entries.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import LocalProtocolError
from ._histogram import QUEUE_DURATION_BUCKETS, Histogram, _Recorder
from ._ratelimit import RateLimiter, default_rate_limiter

__all__ = [
    "DEFAULT_MAX_OVERTAKES",
    "LOW_PRIORITY",
    "NORMAL_PRIORITY",
    "WorkQueue",
    "WorkQueueMetrics",
]

NORMAL_PRIORITY = 0
"""The priority of an ordinary add: a watch event, a mapped change, a retry."""
LOW_PRIORITY = -100
"""The priority of work from an informer's first list or a resync (controller-runtime's
``LowPriority``): served after every ordinary add, except when its key is the oldest
queued and its turn has come (see :data:`DEFAULT_MAX_OVERTAKES`)."""
DEFAULT_MAX_OVERTAKES = 3
"""How many hand-outs in a row may pass over the oldest queued key before it is handed out
whatever its priority: a key queued behind Q others is among the next 4 * (Q + 1)."""

K = TypeVar("K", bound=Hashable)

# Durations are buffered and folded into their histograms at this many, or at a snapshot.
_FOLD_AT = 1024

# Rebuild the deadline heap when it holds more than twice the live entries plus this.
_COMPACT_SLACK = 64


@dataclass(frozen=True, slots=True)
class WorkQueueMetrics:
    """A snapshot of a work queue's metrics, named after client-go's ``workqueue_*`` series.

    ``queue_duration`` is the time keys waited between add and get, ``work_duration`` the
    time between get and done; ``unfinished_work_seconds`` sums how long the keys being
    processed have run so far and ``longest_running_processor_seconds`` is the longest.
    """

    depth: int
    adds: int
    retries: int
    waiting: int
    processing: int
    queue_duration: Histogram
    work_duration: Histogram
    unfinished_work_seconds: float
    longest_running_processor_seconds: float


class WorkQueue(Generic[K]):
    """A de-duplicating queue of keys; see the module rules.

    ``rate_limiter`` decides the delays of :meth:`add_rate_limited`; the default is
    :func:`default_rate_limiter` (client-go's controller default). ``max_overtakes`` (an
    int >= 0, default :data:`DEFAULT_MAX_OVERTAKES`) is how many hand-outs in a row may pass
    over the oldest queued key; a key queued behind Q others is handed out within
    ``(max_overtakes + 1) * (Q + 1)`` hand-outs.
    """

    __slots__ = (
        "_adds",
        "_dirty",
        "_handed",
        "_heap",
        "_latency",
        "_latency_pending",
        "_levels",
        "_limiter",
        "_max_overtakes",
        "_overtaken",
        "_priority",
        "_processing",
        "_queued",
        "_queues",
        "_retries",
        "_sequence",
        "_shutting_down",
        "_waiting",
        "_waiting_priority",
        "_work",
        "_work_pending",
    )

    def __init__(
        self,
        rate_limiter: RateLimiter | None = None,
        *,
        max_overtakes: int = DEFAULT_MAX_OVERTAKES,
    ) -> None:
        if max_overtakes.__class__ is not int or max_overtakes < 0:
            raise LocalProtocolError(
                f"max_overtakes must be a non-negative int, got {max_overtakes!r}"
            )
        self._limiter = rate_limiter if rate_limiter is not None else default_rate_limiter()
        self._max_overtakes = max_overtakes
        self._overtaken = 0  # hand-outs in a row that passed over the oldest queued key
        # One FIFO of keys per priority with a queued key; emptied ones are dropped.
        self._queues: dict[int, OrderedDict[K, None]] = {}
        self._levels: list[int] = []  # the priorities of _queues, ascending (highest last)
        # Queued key -> its priority, oldest first (the order keys were queued in).
        self._queued: OrderedDict[K, int] = OrderedDict()
        self._dirty: dict[K, float | None] = {}  # dirty key -> when it was added, if known
        self._priority: dict[K, int] = {}  # dirty key -> the highest priority it was added at
        self._processing: dict[K, float] = {}  # key -> when get handed it out
        self._handed: dict[K, int] = {}  # processing key -> the priority it was handed out at
        self._waiting: dict[K, float] = {}  # key -> its one live deadline
        self._waiting_priority: dict[K, int] = {}  # waiting key -> its highest priority
        self._heap: list[tuple[float, int, K]] = []  # (deadline, sequence, key); may be stale
        self._sequence = itertools.count()  # tie-breaker: keys are never compared
        self._shutting_down = False
        self._adds = 0
        self._retries = 0
        self._latency = _Recorder(QUEUE_DURATION_BUCKETS)
        self._work = _Recorder(QUEUE_DURATION_BUCKETS)
        self._latency_pending: list[float] = []
        self._work_pending: list[float] = []

    @property
    def rate_limiter(self) -> RateLimiter:
        """The limiter behind :meth:`add_rate_limited`."""
        return self._limiter

    def add(self, key: K, now: float | None = None, *, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``key`` unless it is already queued; mark it dirty if it is processing.

        ``now`` (optional) starts the clock of the key's queue duration. A queued key added
        again with a higher ``priority`` moves up to it.
        """
        if priority.__class__ is not int:
            raise LocalProtocolError(f"priority must be an int, got {priority!r}")
        if self._shutting_down:
            return
        dirty = self._dirty
        if key in dirty:
            if priority > self._priority[key]:
                self._priority[key] = priority
                if key in self._queued:
                    self._enqueue(key, priority)
            return
        dirty[key] = now
        self._priority[key] = priority
        self._adds += 1
        if key not in self._processing:
            self._enqueue(key, priority)

    def _enqueue(self, key: K, priority: int) -> None:
        queued = self._queued
        current = queued.get(key)
        if current is not None:  # a raise: the key moves up and keeps its age
            self._unlevel(key, current)
        queued[key] = priority
        level = self._queues.get(priority)
        if level is None:
            level = self._queues[priority] = OrderedDict()
            bisect.insort(self._levels, priority)
        level[key] = None

    def _unlevel(self, key: K, priority: int) -> None:
        level = self._queues[priority]
        del level[key]
        if not level:
            del self._queues[priority]
            levels = self._levels
            del levels[bisect.bisect_left(levels, priority)]

    def _pop(self) -> K | None:
        queued = self._queued
        if not queued:
            return None
        if self._overtaken >= self._max_overtakes:  # the oldest's turn
            key, priority = queued.popitem(last=False)
            self._unlevel(key, priority)
            self._overtaken = 0
            return key
        top = self._levels[-1]
        level = self._queues[top]
        key, _ = level.popitem(last=False)
        if not level:
            del self._queues[top]
            self._levels.pop()
        if next(iter(queued)) == key:
            self._overtaken = 0
        else:
            self._overtaken += 1
        del queued[key]
        return key

    def get(self, now: float) -> K | None:
        """Hand out the next ready key (now processing), or None if none is ready.

        The highest priority goes first; within a priority, the first queued; but after
        ``max_overtakes`` hand-outs in a row that passed over the oldest queued key, that key.
        """
        found = self.get_with_priority(now)
        return None if found is None else found[0]

    def get_with_priority(self, now: float) -> tuple[K, int] | None:
        """As :meth:`get`, with the priority the key was handed out at."""
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        key = self._pop()
        if key is None:
            return None
        self._processing[key] = now
        priority = self._handed[key] = self._priority.pop(key)
        added = self._dirty.pop(key)
        if added is not None:
            pending = self._latency_pending
            pending.append(now - added)
            if len(pending) >= _FOLD_AT:
                self._latency.fold(pending)
        return key, priority

    def done(self, key: K, now: float | None = None) -> None:
        """Finish processing ``key``; re-queue it once if it was added meanwhile.

        ``now`` (optional) records the work duration since ``get`` handed the key out.
        """
        try:
            started = self._processing.pop(key)
        except KeyError:
            raise LocalProtocolError(f"done({key!r}) for a key that is not processing") from None
        del self._handed[key]
        if now is not None:
            pending = self._work_pending
            pending.append(now - started)
            if len(pending) >= _FOLD_AT:
                self._work.fold(pending)
        if key in self._dirty:
            self._enqueue(key, self._priority[key])

    def priority_of(self, key: K) -> int | None:
        """The priority ``key`` was handed out at while it is processing, else None."""
        return self._handed.get(key)

    def add_after(
        self, key: K, delay: float, now: float, *, priority: int = NORMAL_PRIORITY
    ) -> None:
        """Add ``key`` once ``delay`` seconds after ``now``; the earliest deadline wins, and
        the highest priority given."""
        if not math.isfinite(delay):
            raise LocalProtocolError(f"delay must be a finite number, got {delay!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise LocalProtocolError(f"priority must be an int, got {priority!r}")
        if self._shutting_down:
            return
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        if delay <= 0:
            self.add(key, now, priority=priority)
            return
        deadline = now + delay
        current = self._waiting.get(key)
        if current is not None:
            self._waiting_priority[key] = max(self._waiting_priority[key], priority)
            if current <= deadline:
                return
        else:
            self._waiting_priority[key] = priority
        self._waiting[key] = deadline
        heapq.heappush(heap, (deadline, next(self._sequence), key))
        if len(heap) > 2 * len(self._waiting) + _COMPACT_SLACK:
            self._heap = [(d, next(self._sequence), k) for k, d in self._waiting.items()]
            heapq.heapify(self._heap)

    def add_rate_limited(self, key: K, now: float, *, priority: int = NORMAL_PRIORITY) -> float:
        """Add ``key`` after the delay the rate limiter gives; return that delay."""
        if self._shutting_down:
            return 0.0
        delay = self._limiter.when(key, now)
        self._retries += 1
        self.add_after(key, delay, now, priority=priority)
        return delay

    def forget(self, key: K) -> None:
        """Reset the rate limiter's memory of ``key`` (after a success)."""
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited retries of ``key`` the limiter has counted."""
        return self._limiter.num_requeues(key)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a delayed key, or None."""
        heap, waiting = self._heap, self._waiting
        while heap and waiting.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def shutdown(self) -> None:
        """Refuse further adds (silently) and drop delayed keys; queued keys remain."""
        self._shutting_down = True
        self._waiting.clear()
        self._waiting_priority.clear()
        self._heap.clear()

    @property
    def is_shutdown(self) -> bool:
        """True once :meth:`shutdown` was called."""
        return self._shutting_down

    @property
    def is_drained(self) -> bool:
        """True when shut down and no key is queued or processing."""
        return self._shutting_down and not self._queued and not self._processing

    def __len__(self) -> int:
        """The number of keys ready to be handed out (the queue depth)."""
        return len(self._queued)

    @property
    def processing(self) -> int:
        """The number of keys handed out and not yet done."""
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """The number of keys with a pending delayed add."""
        return len(self._waiting)

    @property
    def adds(self) -> int:
        """Adds that changed the queue (a duplicate add of a dirty key is not counted)."""
        return self._adds

    @property
    def retries(self) -> int:
        """Calls of :meth:`add_rate_limited` accepted."""
        return self._retries

    def metrics(self, now: float) -> WorkQueueMetrics:
        """A snapshot of the metrics; ``now`` measures the keys being processed."""
        ages = [now - started for started in self._processing.values()]
        self._latency.fold(self._latency_pending)
        self._work.fold(self._work_pending)
        return WorkQueueMetrics(
            depth=len(self._queued),
            adds=self._adds,
            retries=self._retries,
            waiting=len(self._waiting),
            processing=len(self._processing),
            queue_duration=self._latency.snapshot(),
            work_duration=self._work.snapshot(),
            unfinished_work_seconds=sum(ages),
            longest_running_processor_seconds=max(ages, default=0.0),
        )

    def _promote(self, now: float) -> None:
        heap, waiting = self._heap, self._waiting
        while heap and heap[0][0] <= now:
            deadline, _, key = heapq.heappop(heap)
            if waiting.get(key) == deadline:
                del waiting[key]
                priority = self._waiting_priority.pop(key)
                self.add(key, deadline, priority=priority)  # due then, whenever looked at

    def __repr__(self) -> str:
        return (
            f"<WorkQueue depth={len(self._queued)} processing={len(self._processing)} "
            f"waiting={len(self._waiting)} shutdown={self._shutting_down}>"
        )
