"""Reflector sync cost: time and memory against holding the same objects in a plain dict.

A recorded paginated LIST of 100,000 ConfigMaps (pages of 500, as the API server sends
them: items without apiVersion/kind, a continue token on every page but the last) is fed
to a reflector, page after page, as an adapter would. The reference decodes the same
pages and keeps the items in a plain dict keyed by (namespace, name): the least any
cache must hold. Memory is the tracemalloc peak of each phase; the recording itself is
made before tracing starts, so it is in neither figure. Then a relist of the same set
(after a watch 410): the store holds its copy while the new list is collected, which
must not double the memory. The last rows repeat the sync and the relist over a
``Store(compact=True)`` (objects kept as JSON bytes, the Manager's default cache form):
the initial sync's peak, with the first list's changes held (lazy: they keep the stored
bytes and decode on access), must stay within 1.1x the store it leaves, the relist's
within 1.2x; the last row is what a reader pays for the compact form.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubemoon_core import GroupVersionResource, Response
from kubemoon_core._reflector import Reflector
from kubemoon_core.lowlevel import Store

T = TypeVar("T")
OBJECTS = 100_000
PAGE = 500
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
EXPIRED_EVENT = (
    b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,'
    b'"reason":"Expired","message":"too old resource version"}}\n'
)


def recorded_list(count: int, rv: str = "5000000") -> list[Response]:
    """The pages of a LIST of ``count`` ConfigMaps of about 600 bytes each."""
    pages = []
    for start in range(0, count, PAGE):
        items = []
        for i in range(start, min(start + PAGE, count)):
            items.append(
                {
                    "metadata": {
                        "name": f"settings-{i:06d}",
                        "namespace": f"team-{i % 50:02d}",
                        "uid": f"6f1c2a0e-8f1b-4c1e-9a55-{i:012d}",
                        "resourceVersion": str(1_000_000 + i),
                        "creationTimestamp": "2025-01-01T00:00:00Z",
                        "labels": {"app.kubernetes.io/name": "demo"},
                    },
                    "data": {f"key-{j}": f"value {i} {j} " + "x" * 60 for j in range(4)},
                }
            )
        metadata = {"resourceVersion": rv}
        if start + PAGE < count:
            metadata["continue"] = f"token-{start + PAGE}"
        body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata, "items": items}
        pages.append(
            Response(200, (("Content-Type", "application/json"),), json.dumps(body).encode())
        )
    return pages


def hold_in_dict(pages: list[Response]) -> dict[tuple[str, str], dict[str, object]]:
    """The reference: decode each page, keep the items by (namespace, name)."""
    held: dict[tuple[str, str], dict[str, object]] = {}
    for page in pages:
        for item in json.loads(page.body)["items"]:
            metadata = item["metadata"]
            held[(metadata["namespace"], metadata["name"])] = item
    return held


def sync(reflector: Reflector, pages: list[Response], now: float = 0.0) -> int:
    """Feed one complete LIST to ``reflector``; return the number of changes."""
    changes = 0
    for page in pages:
        request = reflector.next_request(now)
        assert request is not None
        assert not request.stream
        changes += len(reflector.receive_response(page, now))
    return changes


def relist_due(reflector: Reflector) -> float:
    """Open the watch, answer it with 410; return when the reflector lists again."""
    request = reflector.next_request(0.0)
    assert request is not None
    assert request.stream
    reflector.receive_watch_head(200, (), 0.0)
    reflector.receive_watch_data(EXPIRED_EVENT, 0.0)
    reflector.watch_ended(0.0)
    due = reflector.next_deadline()
    assert due is not None
    return due


def traced(function: Callable[[], T]) -> tuple[float, T]:
    """Run ``function()`` under tracemalloc; (peak bytes above the start, its result)."""
    gc.collect()
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    result = function()
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    return peak, result


def rows() -> list[Row]:
    """Measure and return the table rows."""
    pages = recorded_list(OBJECTS)
    inputs = f"{OBJECTS:,} ConfigMaps, {len(pages)} pages of {PAGE}"

    # Wall time, without tracing: best of 3.
    dict_time = sync_time = relist_time = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        held = hold_in_dict(pages)
        dict_time = min(dict_time, time.perf_counter() - start)
        del held
        reflector = Reflector(CONFIGMAPS, rng=random.Random(0))
        start = time.perf_counter()
        assert sync(reflector, pages) == OBJECTS
        sync_time = min(sync_time, time.perf_counter() - start)
        due = relist_due(reflector)
        start = time.perf_counter()
        assert sync(reflector, pages, due) == 0  # the same set: no change
        relist_time = min(relist_time, time.perf_counter() - start)
        del reflector
        gc.collect()

    dict_peak, held = traced(lambda: hold_in_dict(pages))
    del held
    reflector = Reflector(CONFIGMAPS, rng=random.Random(0))
    sync_peak, changes = traced(lambda: sync(reflector, pages))
    assert changes == OBJECTS
    assert len(reflector.store) == OBJECTS

    # The relist: the store already holds everything; trace only what the relist adds.
    due = relist_due(reflector)
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    assert sync(reflector, pages, due) == 0
    relist_extra = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    assert reflector.stats.relists == 1
    # Peak while relisting = the store (what the initial sync left) + the relist's extra.
    store_size = _store_size(pages)
    relist_peak = store_size + relist_extra

    sync_ratio = sync_peak / dict_peak
    relist_ratio = relist_peak / dict_peak
    mib = 1024 * 1024
    return [
        Row(
            "reflector: initial sync, wall time",
            inputs,
            f"{sync_time:.2f} s ({OBJECTS / sync_time:,.0f} objects/s); "
            f"plain dict {dict_time:.2f} s ({sync_time / dict_time:.2f}x)",
        ),
        Row(
            "reflector: initial sync, tracemalloc peak",
            inputs,
            f"{sync_peak / mib:.0f} MiB vs plain dict {dict_peak / mib:.0f} MiB: {sync_ratio:.3f}x",
            "≤ 1.3x",
            sync_ratio <= 1.3,
        ),
        Row(
            "reflector: relist of the same set, peak",
            inputs,
            f"{relist_peak / mib:.0f} MiB (store {store_size / mib:.0f} + relist "
            f"{relist_extra / mib:.1f}) vs {dict_peak / mib:.0f} MiB: {relist_ratio:.3f}x; "
            f"wall time {relist_time:.2f} s",
            "≤ 1.3x",
            relist_ratio <= 1.3,
        ),
        *_compact_rows(pages, inputs, dict_peak),
        _read_row(pages, inputs),
    ]


def _compact_rows(pages: list[Response], inputs: str, dict_peak: float) -> list[Row]:
    """The initial sync and the relist of the same set over a compact store."""

    def compact_reflector() -> Reflector:
        return Reflector(CONFIGMAPS, rng=random.Random(0), store=Store(compact=True))

    sync_time = relist_time = float("inf")
    for _ in range(3):
        timed = compact_reflector()
        start = time.perf_counter()
        assert sync(timed, pages) == OBJECTS
        sync_time = min(sync_time, time.perf_counter() - start)
        due = relist_due(timed)
        start = time.perf_counter()
        assert sync(timed, pages, due) == 0
        relist_time = min(relist_time, time.perf_counter() - start)
        del timed
        gc.collect()

    def peaks() -> tuple[float, float]:
        reflector = compact_reflector()
        sync_peak, changes = traced(lambda: sync(reflector, pages))
        assert changes == OBJECTS
        due = relist_due(reflector)
        gc.collect()
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        assert sync(reflector, pages, due) == 0
        relist_extra = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        return sync_peak, relist_extra

    sync_peak, relist_extra = peaks()
    gc.collect()
    store_size = _store_size(pages, compact=True)
    relist_ratio = (store_size + relist_extra) / store_size
    mib = 1024 * 1024
    compact_inputs = inputs + ", Store(compact=True)"
    sync_ratio = sync_peak / store_size
    return [
        Row(
            "reflector: initial sync into a compact store, wall time",
            compact_inputs,
            f"{sync_time:.2f} s ({OBJECTS / sync_time:,.0f} objects/s)",
        ),
        Row(
            "reflector: initial sync into a compact store, tracemalloc peak",
            compact_inputs + ", the first list's changes held (lazy: decoded on access)",
            f"{sync_peak / mib:.1f} MiB vs the store after it {store_size / mib:.1f} MiB: "
            f"{sync_ratio:.3f}x ({sync_peak / dict_peak:.3f}x the plain dict's peak)",
            "≤ 1.1x the store",
            sync_ratio <= 1.1,
        ),
        Row(
            "reflector: relist of the same set into a compact store, peak",
            compact_inputs,
            f"{(store_size + relist_extra) / mib:.0f} MiB (store {store_size / mib:.0f} + relist "
            f"{relist_extra / mib:.1f}): {relist_ratio:.3f}x the store; wall time "
            f"{relist_time:.2f} s",
            "≤ 1.2x the store",
            relist_ratio <= 1.2,
        ),
    ]


def _read_row(pages: list[Response], inputs: str) -> Row:
    """What the compact form (the Manager's default cache) costs a reader: a get() decodes
    a fresh copy, a plain store hands its own dict; a first-list change decodes on access."""
    costs: dict[bool, float] = {}
    change_cost = float("inf")
    for compact in (False, True):
        reflector = Reflector(CONFIGMAPS, rng=random.Random(0), store=Store(compact=compact))
        changes = []
        for page in pages:
            request = reflector.next_request(0.0)
            assert request is not None
            changes.extend(reflector.receive_response(page, 0.0))
        store = reflector.store
        keys = store.keys()
        get = store.get
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for key in keys:
                get(key)
            best = min(best, time.perf_counter() - start)
        costs[compact] = best / len(keys)
        if compact:
            start = time.perf_counter()
            for change in changes:
                _ = change.object
            change_cost = (time.perf_counter() - start) / len(changes)
        del reflector, store, changes
        gc.collect()
    us = 1e6
    return Row(
        "reflector: reading a compact store (the Manager's default cache form)",
        inputs + ", get() of every key, best of 3; each first-list change's object once",
        f"get() {costs[True] * us:.2f} µs/object (a decoded copy) vs plain "
        f"{costs[False] * us:.2f} µs (its own dict); a lazy change's object "
        f"{change_cost * us:.2f} µs",
    )


def _store_size(pages: list[Response], *, compact: bool = False) -> float:
    """Traced size of a store after a sync (current memory, not the peak)."""
    gc.collect()
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    reflector = Reflector(CONFIGMAPS, rng=random.Random(0), store=Store(compact=compact))
    sync(reflector, pages)
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    del reflector
    return float(size)


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_reflector alone"))
