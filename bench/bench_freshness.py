"""Read-your-own-writes: what the floors cost a cache read, on the blocking adapter's
``CacheReader`` (the same generated code as trio's and asyncio's).

A ``SharedInformers`` cache of 10,000 ConfigMaps is filled by hand (no server). Figures:
``get`` of one key through the plain reader (no floors) and through the runtime's reader
with no floor, with a floor on another key and with a floor on that key;
``objects()`` of the whole cache with no floor and with one floor pending; and the cost of
recording one write (``SharedInformers.record_write``: parsing the request path and the
answer, one floor per cache of the resource). Best of ``ROUNDS`` timeit runs.
Target: a read with no floor pending costs at most 1.2x the plain read.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubemoon_core import GroupVersionResource, ObjectKey, PatchType, patch_request
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_sync import CacheReader, Client, SharedInformers

OBJECTS = 10_000
ROUNDS = 5
TARGET = 1.2
CM = GroupVersionResource("", "v1", "configmaps")


def _cm(name: str, rv: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": name},
        "data": {"k": "v"},
    }


def _per_call(fn: Any, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=ROUNDS)) / number


def rows() -> list[Row]:
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    try:
        shared = SharedInformers(client)
        informer = shared.get(CM)
        for index in range(OBJECTS):
            informer.store.upsert(_cm(f"o{index}", "5"))
        plain, layered = CacheReader(informer), shared.reader(informer)
        key, other = ObjectKey("ns", "o5000"), ObjectKey("ns", "o1")
        request = patch_request(CM, "o5000", {}, patch_type=PatchType.MERGE, namespace="ns")
        plain_get = _per_call(lambda: plain.get(key), 200_000)
        empty_get = _per_call(lambda: layered.get(key), 200_000)
        plain_all = _per_call(plain.objects, 200)
        empty_all = _per_call(layered.objects, 200)
        record = _per_call(lambda: shared.record_write(request, _cm("o5000", "7")), 20_000)
        other_get = _per_call(lambda: layered.get(other), 200_000)
        hit_get = _per_call(lambda: layered.get(key), 200_000)
        pending_all = _per_call(layered.objects, 200)
    finally:
        client.close()
    inputs = f"{OBJECTS:,} cached ConfigMaps, blocking adapter, no server"
    ratio = empty_get / plain_get
    return [
        Row(
            "read-your-own-writes: get() with no floor pending vs the plain reader",
            inputs,
            f"{ratio:.2f}x ({empty_get * 1e9:.0f} vs {plain_get * 1e9:.0f} ns)",
            f"≤ {TARGET}x",
            ratio <= TARGET,
        ),
        Row(
            "read-your-own-writes: get() with a floor on another key / on that key",
            inputs,
            f"{other_get * 1e9:.0f} ns / {hit_get * 1e9:.0f} ns",
        ),
        Row(
            "read-your-own-writes: objects() with no floor / one floor pending",
            inputs,
            f"{empty_all * 1e3:.2f} ms / {pending_all * 1e3:.2f} ms "
            f"(plain reader {plain_all * 1e3:.2f} ms)",
        ),
        Row(
            "read-your-own-writes: recording one write (record_write)",
            "a merge patch's answer, one cache of the resource",
            f"{record * 1e6:.1f} µs",
        ),
    ]
