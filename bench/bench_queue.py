"""WorkQueue throughput: add/get/done cycles against a plain deque in the same process.

1,000,000 cycles over 10,000 keys: each round adds every key (plus a duplicate add of a
queued key, which de-duplication absorbs), then a worker gets and finishes every key. The
baseline is the least any queue can do: ``deque.append`` and ``popleft`` for as many items.
Also measured: delayed adds through the deadline heap, and rate-limited adds with
client-go's default limiter.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable

from _table import Row

from kubemoon_core._queue import WorkQueue

CYCLES = 1_000_000
KEYS = 10_000
DELAYED = 200_000


def _time(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _best(run: Callable[[], None], repeat: int) -> float:
    return min(_time(run) for _ in range(repeat))


def _queue_cycles() -> None:
    q: WorkQueue[str] = WorkQueue()
    keys = [f"ns/obj-{i}" for i in range(KEYS)]
    add, get, done = q.add, q.get, q.done
    for _ in range(CYCLES // KEYS):
        for key in keys:
            add(key)
        add(keys[0])  # a duplicate: absorbed
        for _ in range(KEYS):
            item = get(0.0)
            assert item is not None
            done(item)


def _timed_queue_cycles() -> None:
    # As an adapter drives it: every add and done passes ``now``, so the queue records
    # queue and work durations for its metrics.
    q: WorkQueue[str] = WorkQueue()
    keys = [f"ns/obj-{i}" for i in range(KEYS)]
    add, get, done = q.add, q.get, q.done
    now = 0.0
    for _ in range(CYCLES // KEYS):
        for key in keys:
            add(key, now)
        add(keys[0], now)
        for _ in range(KEYS):
            now += 1e-6
            item = get(now)
            assert item is not None
            done(item, now)
    q.metrics(now)


def _deque_cycles() -> None:
    d: deque[str] = deque()
    keys = [f"ns/obj-{i}" for i in range(KEYS)]
    append, popleft = d.append, d.popleft
    for _ in range(CYCLES // KEYS):
        for key in keys:
            append(key)
        for _ in range(KEYS):
            popleft()


def _delayed_adds() -> None:
    rng = random.Random(1)
    q: WorkQueue[int] = WorkQueue()
    delays = [rng.uniform(0.0, 10.0) for _ in range(DELAYED)]
    for i, delay in enumerate(delays):
        q.add_after(i % KEYS, delay, 0.0)
    now = 0.0
    while (deadline := q.next_deadline()) is not None:
        now = deadline
        while (key := q.get(now)) is not None:
            q.done(key)


def _rate_limited_adds() -> None:
    q: WorkQueue[int] = WorkQueue()
    now = 0.0
    for i in range(DELAYED):
        q.add_rate_limited(i % KEYS, now)
        now += 0.0001


def rows() -> list[Row]:
    """The benchmark rows for bench/run.py."""
    # Alternate the two loops so a noisy neighbour slows both alike; keep the best of each.
    triples = [
        (_time(_queue_cycles), _time(_deque_cycles), _time(_timed_queue_cycles)) for _ in range(5)
    ]
    queue_s = min(q for q, _, _ in triples)
    deque_s = min(d for _, d, _ in triples)
    timed_s = min(t for _, _, t in triples)
    delayed_s = _best(_delayed_adds, repeat=2)
    limited_s = _best(_rate_limited_adds, repeat=2)
    ratio = queue_s / deque_s
    return [
        Row(
            "WorkQueue add/get/done",
            f"{CYCLES:,} cycles, {KEYS:,} keys",
            f"{CYCLES / queue_s:,.0f} cycles/s",
        ),
        Row(
            "deque append/popleft (baseline)",
            f"{CYCLES:,} items",
            f"{CYCLES / deque_s:,.0f} items/s",
        ),
        Row(
            "WorkQueue vs deque",
            "same process, best of 5, interleaved",
            f"{ratio:.1f}x the baseline's time",
        ),
        Row(
            "WorkQueue add/get/done, timed (metrics)",
            f"{CYCLES:,} cycles, now= on add and done",
            f"{CYCLES / timed_s:,.0f} cycles/s ({timed_s / queue_s:.2f}x untimed)",
        ),
        Row(
            "WorkQueue add_after + drain",
            f"{DELAYED:,} delayed adds, {KEYS:,} keys",
            f"{DELAYED / delayed_s:,.0f} adds/s",
        ),
        Row(
            "WorkQueue add_rate_limited",
            f"{DELAYED:,} adds, default limiter",
            f"{DELAYED / limited_s:,.0f} adds/s",
        ),
    ]


if __name__ == "__main__":
    for row in rows():
        print(row)
