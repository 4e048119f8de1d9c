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
- After ``shutdown`` every add is silently ignored (client-go does the same, so late events
  racing a shutdown are harmless) and delayed keys are dropped; keys already queued are
  still handed out, and ``is_drained`` tells when none is queued or processing.
- Time comes in only as ``now`` (monotonic seconds). ``get(now)`` returns None when
  nothing is ready: the adapter then waits for ``next_deadline()`` or a new add.
- Metrics (client-go's workqueue set, see :meth:`WorkQueue.metrics`): an ``add`` given
  ``now`` stamps the key, and ``get`` observes the time it waited (a delayed key counts
  from its deadline); ``get`` to a ``done`` given ``now`` is the work duration. Adds and
  dones without ``now`` are simply not timed.

add, get and done are O(1) (a deque and two dicts); delayed adds are O(log n).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import LocalProtocolError
from ._histogram import QUEUE_DURATION_BUCKETS, Histogram, _Recorder
from ._ratelimit import RateLimiter, default_rate_limiter

__all__ = ["WorkQueue", "WorkQueueMetrics"]

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
    :func:`default_rate_limiter` (client-go's controller default).
    """

    __slots__ = (
        "_adds",
        "_dirty",
        "_heap",
        "_latency",
        "_latency_pending",
        "_limiter",
        "_processing",
        "_queue",
        "_retries",
        "_sequence",
        "_shutting_down",
        "_waiting",
        "_work",
        "_work_pending",
    )

    def __init__(self, rate_limiter: RateLimiter | None = None) -> None:
        self._limiter = rate_limiter if rate_limiter is not None else default_rate_limiter()
        self._queue: deque[K] = deque()
        self._dirty: dict[K, float | None] = {}  # dirty key -> when it was added, if known
        self._processing: dict[K, float] = {}  # key -> when get handed it out
        self._waiting: dict[K, float] = {}  # key -> its one live deadline
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

    def add(self, key: K, now: float | None = None) -> None:
        """Queue ``key`` unless it is already queued; mark it dirty if it is processing.

        ``now`` (optional) starts the clock of the key's queue duration.
        """
        dirty = self._dirty
        if key in dirty or self._shutting_down:
            return
        dirty[key] = now
        self._adds += 1
        if key not in self._processing:
            self._queue.append(key)

    def get(self, now: float) -> K | None:
        """Hand out the next ready key (now processing), or None if none is ready."""
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        try:
            key = self._queue.popleft()
        except IndexError:
            return None
        self._processing[key] = now
        added = self._dirty.pop(key)
        if added is not None:
            pending = self._latency_pending
            pending.append(now - added)
            if len(pending) >= _FOLD_AT:
                self._latency.fold(pending)
        return key

    def done(self, key: K, now: float | None = None) -> None:
        """Finish processing ``key``; re-queue it once if it was added meanwhile.

        ``now`` (optional) records the work duration since ``get`` handed the key out.
        """
        try:
            started = self._processing.pop(key)
        except KeyError:
            raise LocalProtocolError(f"done({key!r}) for a key that is not processing") from None
        if now is not None:
            pending = self._work_pending
            pending.append(now - started)
            if len(pending) >= _FOLD_AT:
                self._work.fold(pending)
        if key in self._dirty:
            self._queue.append(key)

    def add_after(self, key: K, delay: float, now: float) -> None:
        """Add ``key`` once ``delay`` seconds after ``now``; the earliest deadline wins."""
        if not math.isfinite(delay):
            raise LocalProtocolError(f"delay must be a finite number, got {delay!r}")
        if self._shutting_down:
            return
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._promote(now)
        if delay <= 0:
            self.add(key, now)
            return
        deadline = now + delay
        current = self._waiting.get(key)
        if current is not None and current <= deadline:
            return
        self._waiting[key] = deadline
        heapq.heappush(heap, (deadline, next(self._sequence), key))
        if len(heap) > 2 * len(self._waiting) + _COMPACT_SLACK:
            self._heap = [(d, next(self._sequence), k) for k, d in self._waiting.items()]
            heapq.heapify(self._heap)

    def add_rate_limited(self, key: K, now: float) -> float:
        """Add ``key`` after the delay the rate limiter gives; return that delay."""
        if self._shutting_down:
            return 0.0
        delay = self._limiter.when(key, now)
        self._retries += 1
        self.add_after(key, delay, now)
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
        self._heap.clear()

    @property
    def is_shutdown(self) -> bool:
        """True once :meth:`shutdown` was called."""
        return self._shutting_down

    @property
    def is_drained(self) -> bool:
        """True when shut down and no key is queued or processing."""
        return self._shutting_down and not self._queue and not self._processing

    def __len__(self) -> int:
        """The number of keys ready to be handed out (the queue depth)."""
        return len(self._queue)

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
            depth=len(self._queue),
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
                self.add(key, deadline)  # it was due then, whenever the caller looked

    def __repr__(self) -> str:
        return (
            f"<WorkQueue depth={len(self._queue)} processing={len(self._processing)} "
            f"waiting={len(self._waiting)} shutdown={self._shutting_down}>"
        )
