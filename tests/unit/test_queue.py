"""WorkQueue: de-duplication, dirty re-queue, delayed adds, rate limiting, shutdown."""

from __future__ import annotations

import pytest

from kubemoon_core import ObjectKey
from kubemoon_core._queue import WorkQueue
from kubemoon_core._ratelimit import BucketRateLimiter, ExponentialRateLimiter, MaxOfRateLimiter
from kubemoon_core.errors import LocalProtocolError


def test_add_get_done_in_order_with_dedup() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert q.adds == 3
    assert [q.get(0.0), q.get(0.0), q.get(0.0), q.get(0.0)] == ["a", "b", "c", None]
    assert q.processing == 3
    for key in "abc":
        q.done(key)
    assert q.processing == 0
    assert q.get(0.0) is None


def test_add_while_processing_requeues_exactly_once_after_done() -> None:
    q: WorkQueue[ObjectKey] = WorkQueue()
    key = ObjectKey("ns", "web")
    q.add(key)
    assert q.get(0.0) == key
    q.add(key)
    q.add(key)  # still one dirty mark
    assert len(q) == 0
    assert q.get(0.0) is None  # never handed out twice at once
    q.done(key)
    assert len(q) == 1
    assert q.get(0.0) == key
    q.done(key)
    assert q.get(0.0) is None


def test_done_of_a_key_not_processing_is_an_error() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    with pytest.raises(LocalProtocolError, match="not processing"):
        q.done("a")


def test_add_after_keeps_the_earliest_deadline() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 10.0, now=0.0)
    q.add_after("a", 5.0, now=0.0)
    q.add_after("a", 7.0, now=0.0)  # later than 5: ignored
    assert q.waiting == 1
    assert q.next_deadline() == 5.0
    assert q.get(4.999) is None
    assert q.get(5.0) == "a"
    assert q.next_deadline() is None  # the stale 10.0 entry was lazily dropped
    q.done("a")
    assert q.get(100.0) is None  # only one add: the later deadlines were folded in


def test_stale_deadlines_are_skipped_when_they_come_due() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 10.0, now=0.0)
    q.add_after("a", 5.0, now=0.0)
    assert q.get(5.0) == "a"
    q.done("a")
    assert q.get(10.0) is None  # the stale 10.0 entry adds nothing


def test_delayed_keys_come_out_in_deadline_order() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("late", 3.0, now=0.0)
    q.add_after("early", 1.0, now=0.0)
    q.add("now")
    assert q.get(0.0) == "now"
    assert q.get(10.0) == "early"
    assert q.get(10.0) == "late"


def test_add_after_with_no_delay_adds_at_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.0, now=1.0)
    q.add_after("b", -1.0, now=1.0)
    assert len(q) == 2
    with pytest.raises(LocalProtocolError):
        q.add_after("c", float("nan"), now=1.0)
    with pytest.raises(LocalProtocolError):
        q.add_after("c", float("inf"), now=1.0)


def test_a_passed_deadline_counts_as_an_add_at_the_next_call() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 1.0, now=0.0)
    q.add_after("b", 1.0, now=0.5)
    # At 2.0 the deadline of "a" has passed: it becomes an add, so this new delayed add is
    # a separate one rather than folded into the old deadline.
    q.add_after("a", 5.0, now=2.0)
    assert len(q) == 2  # a and b promoted
    assert q.waiting == 1
    assert q.get(2.0) == "a"
    assert q.get(2.0) == "b"
    q.done("a")
    assert q.get(6.9) is None
    assert q.get(7.0) == "a"


def test_delayed_add_of_a_processing_key_requeues_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(0.0) == "a"
    q.add_after("a", 1.0, now=0.0)
    assert q.get(2.0) is None  # promoted, but "a" is still processing
    q.done("a")
    assert q.get(2.0) == "a"


def test_heap_is_compacted_when_stale_entries_pile_up() -> None:
    q: WorkQueue[int] = WorkQueue()
    deadline = 1000.0
    for _ in range(500):  # one key whose deadline keeps moving earlier
        deadline -= 1.0
        q.add_after(1, deadline, now=0.0)
    assert q.waiting == 1
    assert len(q._heap) <= 2 + 64  # internal: bounded memory
    assert q.next_deadline() == deadline
    assert q.get(deadline) == 1


def test_rate_limited_adds_back_off_and_forget_resets() -> None:
    q: WorkQueue[str] = WorkQueue(ExponentialRateLimiter(base=1.0, cap=60.0))
    assert q.add_rate_limited("a", now=0.0) == 1.0
    assert q.get(0.5) is None
    assert q.get(1.0) == "a"
    assert q.add_rate_limited("a", now=1.0) == 2.0
    q.done("a")
    assert q.num_requeues("a") == 2
    assert q.retries == 2
    assert q.next_deadline() == 3.0
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert isinstance(q.rate_limiter, ExponentialRateLimiter)


def test_default_rate_limiter() -> None:
    q: WorkQueue[str] = WorkQueue()
    assert isinstance(q.rate_limiter, MaxOfRateLimiter)
    assert q.add_rate_limited("a", now=0.0) == 0.005


def test_shutdown_ignores_adds_and_drains() -> None:
    q: WorkQueue[str] = WorkQueue(BucketRateLimiter())
    q.add("a")
    q.add("b")
    q.add_after("later", 1.0, now=0.0)
    assert q.get(0.0) == "a"
    q.add("a")  # dirty before the shutdown: honoured
    q.shutdown()
    assert q.is_shutdown
    q.add("c")
    q.add_after("d", 1.0, now=0.0)
    assert q.add_rate_limited("e", now=0.0) == 0.0
    assert q.waiting == 0
    assert q.next_deadline() is None  # the delayed key was dropped
    assert not q.is_drained
    assert q.get(5.0) == "b"  # queued keys are still handed out
    q.done("b")
    q.done("a")
    assert not q.is_drained  # "a" was re-queued: it was dirty
    assert q.get(5.0) == "a"
    q.done("a")
    assert q.get(5.0) is None
    assert drained(q)  # a helper: mypy would keep the narrowing of the property above
    assert "shutdown=True" in repr(q)


def drained(q: WorkQueue[str]) -> bool:
    return q.is_drained


def test_not_drained_before_shutdown() -> None:
    q: WorkQueue[str] = WorkQueue()
    assert not q.is_drained
    assert not q.is_shutdown
