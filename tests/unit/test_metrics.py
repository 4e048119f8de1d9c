"""Metrics as plain data: work-queue timings and controller-runtime's counters."""

from __future__ import annotations

import pytest

from kubemoon_core import Failed, FailedTerminally, ObjectKey, Reconciled, Requeue, RequeueAfter
from kubemoon_core.lowlevel import (
    QUEUE_DURATION_BUCKETS,
    RECONCILE_TIME_BUCKETS,
    Controller,
    Histogram,
    Source,
    WorkQueue,
)


def test_bucket_bounds_are_controller_runtimes() -> None:
    assert QUEUE_DURATION_BUCKETS == (
        1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
    )  # fmt: skip
    assert len(RECONCILE_TIME_BUCKETS) == 40
    assert (RECONCILE_TIME_BUCKETS[0], RECONCILE_TIME_BUCKETS[-1]) == (0.005, 60.0)
    assert list(RECONCILE_TIME_BUCKETS) == sorted(set(RECONCILE_TIME_BUCKETS))


def _bucket(histogram: Histogram, bound: float) -> int:
    return dict(histogram.buckets)[bound]


def test_queue_times_the_wait_and_the_work() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("b")  # untimed
    q.add("a", 10.0)
    q.add("a", 11.0)  # a duplicate keeps the first stamp
    assert q.get(10.5) == "b"
    assert q.get(10.5) == "a"
    q.add("a", 12.0)  # dirty while processing: waits from now until handed out again
    q.done("a", 13.0)
    q.done("b")  # untimed
    assert q.get(14.0) == "a"
    m = q.metrics(20.0)
    assert (m.depth, m.adds, m.retries, m.waiting, m.processing) == (0, 3, 0, 0, 1)
    assert m.queue_duration.count == 2
    assert m.queue_duration.sum == pytest.approx(0.5 + 2.0)
    assert _bucket(m.queue_duration, 1.0) == 1
    assert _bucket(m.queue_duration, 10.0) == 2
    assert m.work_duration.count == 1
    assert m.work_duration.sum == pytest.approx(2.5)
    assert m.unfinished_work_seconds == pytest.approx(6.0)
    assert m.longest_running_processor_seconds == pytest.approx(6.0)
    q.done("a", 21.0)
    m = q.metrics(30.0)
    assert m.work_duration.count == 2
    assert (m.unfinished_work_seconds, m.longest_running_processor_seconds) == (0.0, 0.0)


def test_delayed_keys_wait_from_their_deadline() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 5.0, now=0.0)
    q.add_after("b", 0.0, now=1.0)  # due at once: stamped now
    assert q.get(2.0) == "b"
    assert q.get(8.0) == "a"  # due at 5.0, picked up at 8.0
    m = q.metrics(8.0)
    assert m.queue_duration.sum == pytest.approx(1.0 + 3.0)


def test_clock_going_backwards_counts_as_zero_and_histograms_fold_in_batches() -> None:
    q: WorkQueue[int] = WorkQueue()
    for i in range(1500):  # more than one batch
        q.add(i, 100.0)
        key = q.get(99.0 if i == 0 else 100.0 + 1e-9)
        assert key == i
        q.done(i, 100.0 + 2000.0 if i == 1 else 100.0)
    m = q.metrics(200.0)
    assert m.queue_duration.count == 1500
    assert m.queue_duration.sum == pytest.approx(1499e-9, rel=1e-3)
    assert _bucket(m.queue_duration, 1e-8) == 1500  # the backwards one counts as 0
    assert m.work_duration.count == 1500
    assert _bucket(m.work_duration, 1000.0) == 1499  # the 2000 s one is only in +Inf
    assert m.work_duration.sum == pytest.approx(2001.0)  # 1.0 from the first
    assert m.work_duration.cumulative == tuple(c for _, c in m.work_duration.buckets)


def test_controller_exports_controller_runtime_series() -> None:
    c = Controller([Source.primary()], workers=2)
    key = ObjectKey("ns", "a")
    c.enqueue(key, 0.0)
    outcomes = [Reconciled(), Failed(), FailedTerminally(), Requeue(), RequeueAfter(0.0)]
    now = 0.0
    for outcome in outcomes:
        c.enqueue(key, now)
        item = c.next_work(now + 1.0)
        assert item is not None
        now += 1.5
        c.report(item, outcome, now)
        c.queue.forget(key)
    m = c.metrics(now)
    assert m.reconcile_total == {"success": 1, "error": 2, "requeue": 1, "requeue_after": 1}
    assert m.reconcile_errors_total == 2
    assert m.terminal_reconcile_errors_total == 1
    assert m.max_concurrent_reconciles == 2
    assert m.reconcile_time.count == 5
    assert m.reconcile_time.sum == pytest.approx(2.5)
    assert _bucket(m.reconcile_time, 0.45) == 0
    assert _bucket(m.reconcile_time, 0.5) == 5
    assert m.queue.work_duration.count == 5
    assert m.queue.queue_duration.count == 5
    assert m.queue.queue_duration.sum == pytest.approx(5.0)


def test_receive_passes_now_to_the_queue() -> None:
    from kubemoon_core import Change, ChangeType

    c = Controller([Source.primary()])
    key = ObjectKey("ns", "a")
    assert c.receive("primary", Change(ChangeType.ADDED, key, None, {}), 3.0) == 1
    item = c.next_work(3.25)
    assert item is not None
    assert c.metrics(4.0).queue.queue_duration.sum == pytest.approx(0.25)
