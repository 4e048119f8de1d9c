"""The runtime's readers over write floors (no server: the caches are filled by hand and the
writes recorded as the client would report them): every read path sees a write at once,
a delete hides the object, selective and metadata-only caches stay what they are, and
the private switch turns it all off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kubemoon_core import (
    GroupVersionResource,
    ObjectKey,
    PatchType,
    _store_codec,
    create_request,
    delete_request,
    patch_request,
)
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.lowlevel import Store, WriteFloors, label_indexer
from kubemoon_trio import Client, SharedInformers, _cache

CM = GroupVersionResource("", "v1", "configmaps")
SECRETS = GroupVersionResource("", "v1", "secrets")


def cm(name: str, rv: str, namespace: str = "ns", **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "resourceVersion": rv,
        "uid": f"uid-{name}",
        "labels": labels,
        "managedFields": [{"manager": "x"}],
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def rvs(objects: list[Mapping[str, Any]]) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects}


def informers(*, compact: bool = False) -> SharedInformers:
    return SharedInformers(Client(ClientConfig(server="https://127.0.0.1:6443")), compact=compact)


def update(name: str, rv: str, **labels: str) -> tuple[Any, dict[str, Any]]:
    request = patch_request(CM, name, {}, patch_type=PatchType.MERGE, namespace="ns")
    return request, cm(name, rv, **labels)


@pytest.mark.parametrize("compact", [False, True], ids=["dicts", "compact"])
async def test_every_read_sees_a_write_the_cache_has_not(compact: bool) -> None:
    # compact: every read decodes a fresh copy, so written objects are swapped in by key.
    shared = informers(compact=compact)
    informer = shared.get(CM, indexers={"app": label_indexer("app")})
    reader = shared.reader(informer)
    informer.store.upsert(cm("a", "5", app="x"))
    informer.store.upsert(cm("b", "5", app="x"))
    shared.record_write(*update("a", "7", app="y"))  # moved out of app=x
    shared.record_write(create_request(CM, cm("c", "")), cm("c", "8", app="x"))
    assert reader.get("a", "ns") == {
        **cm("a", "7", app="y"),
        "metadata": {
            k: v for k, v in cm("a", "7", app="y")["metadata"].items() if k != "managedFields"
        },
    }
    assert reader.get(ObjectKey("ns", "c"))["metadata"]["resourceVersion"] == "8"  # type: ignore[index]
    assert rvs(reader.objects()) == {"a": "7", "b": "5", "c": "8"}
    assert rvs(reader.objects("ns")) == {"a": "7", "b": "5", "c": "8"}
    assert reader.objects("other") == []
    assert rvs(reader.by_index("app", "x")) == {"b": "5", "c": "8"}
    assert rvs(reader.by_index("app", "y")) == {"a": "7"}
    assert reader.keys_by_index("app", "x") == [ObjectKey("ns", "b"), ObjectKey("ns", "c")]
    assert len(reader) == 2 and list(reader) == [ObjectKey("ns", "a"), ObjectKey("ns", "b")]
    assert shared.stale_reads_avoided()[CM] > 0
    # The cache catches up: its own objects are read again and the floors go.
    informer.store.upsert(cm("a", "9", app="y"))
    informer.store.upsert(cm("c", "8", app="x"))
    assert rvs(reader.objects()) == {"a": "9", "b": "5", "c": "8"}
    assert shared._floors[(CM, None, None, None, False, None)].written_keys() == []


async def test_a_delete_hides_the_object_from_every_read() -> None:
    shared = informers()
    informer = shared.get(CM, indexers={"app": label_indexer("app")})
    reader = shared.reader(informer)
    informer.store.upsert(cm("a", "5", app="x"))
    status = {"kind": "Status", "status": "Success", "details": {"uid": "uid-a"}}
    shared.record_write(delete_request(CM, "a", namespace="ns"), status)
    assert reader.get("a", "ns") is None
    assert reader.objects() == []
    assert reader.by_index("app", "x") == []
    assert reader.keys_by_index("app", "x") == []


async def test_selective_and_namespaced_caches_are_refreshed_not_widened() -> None:
    shared = informers()
    selected = shared.get(CM, label_selector="app=x")
    elsewhere = shared.get(CM, namespace="other")
    reader = shared.reader(selected)
    selected.store.upsert(cm("a", "5", app="x"))
    shared.record_write(*update("a", "7", app="x"))
    shared.record_write(create_request(CM, cm("new", "")), cm("new", "8", app="x"))
    # The held key is refreshed; an object it lacks is the server's to add.
    assert rvs(reader.objects()) == {"a": "7"}
    assert reader.get("new", "ns") is None
    # ... and leaves no floor behind: the cache would never catch up with it (an object
    # outside its selectors), and every read would walk it until it expired.
    assert shared._floors[(CM, None, "app=x", None, False, None)].written_keys() == [
        ObjectKey("ns", "a")
    ]
    # A cache of another namespace records nothing of ns.
    assert len(shared._floors[(CM, "other", None, None, False, None)]) == 0
    assert shared.reader(elsewhere).objects() == []


async def test_a_metadata_only_cache_reads_the_written_metadata() -> None:
    shared = informers()
    informer = shared.get(CM, metadata_only=True)
    reader = shared.reader(informer)
    shared.record_write(*update("a", "7", app="y"))
    got = reader.get("a", "ns")
    assert got is not None
    assert got["kind"] == "PartialObjectMetadata" and got["apiVersion"] == "meta.k8s.io/v1"
    assert got["metadata"]["resourceVersion"] == "7"
    assert "managedFields" not in got["metadata"]


async def test_writes_of_other_resources_and_unknown_readers_are_left_alone() -> None:
    shared = informers()
    informer = shared.get(CM)
    shared.record_write(
        create_request(SECRETS, {"metadata": {"name": "s", "namespace": "ns"}}),
        {"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "3"}},
    )
    shared.record_write(create_request(CM, cm("x", "")), cm("x", "not-a-version"))
    assert shared.reader(informer).objects() == []
    assert SECRETS not in shared.stale_reads_avoided()
    # A reader of an informer the runtime does not share reads the cache alone.
    stranger = _cache.CacheReader(informer)
    shared.record_write(*update("a", "7"))
    assert stranger.get("a", "ns") is None


async def test_the_private_switch_turns_the_layer_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "_READ_YOUR_WRITES", False)
    shared = informers()
    informer = shared.get(CM)
    informer.store.upsert(cm("a", "5"))
    shared.record_write(*update("a", "7"))
    assert shared.reader(informer).get("a", "ns")["metadata"]["resourceVersion"] == "5"  # type: ignore[index]


async def test_a_compact_cache_hands_out_its_bytes_only_when_no_write_is_ahead() -> None:
    import json

    plain = informers()
    plain_informer = plain.get(CM)
    plain_informer.store.upsert(cm("a", "5"))
    assert plain.reader(plain_informer).json("a", "ns") is None  # a plain cache keeps none
    shared = informers(compact=True)
    informer = shared.get(CM)
    reader = shared.reader(informer)
    informer.store.upsert(cm("a", "5"))
    document = reader.json("a", "ns")
    assert document is not None and json.loads(document) == reader.get("a", "ns")
    assert reader.json("b", "ns") is None
    shared.record_write(*update("a", "7"))
    assert reader.json("a", "ns") is None  # our write is ahead: read get() instead
    assert reader.get("a", "ns")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]


class _Counts:
    """How many objects a cache decoded and how many floors the reader judged."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
        self.decodes = 0
        self.judged = 0
        codec = store._codec
        if codec is not None:

            def load(blob: bytes) -> Any:
                self.decodes += 1
                return codec.load(blob)

            store._codec = _store_codec._Codec(codec.name, codec.encode, codec.decode, load)
        judge = WriteFloors.fresher

        def fresher(floors: WriteFloors, *args: Any) -> Any:
            self.judged += 1
            return judge(floors, *args)

        monkeypatch.setattr(WriteFloors, "fresher", fresher)

    def reset(self) -> None:
        self.decodes = self.judged = 0


def ns_update(namespace: str, name: str, rv: str, **labels: str) -> tuple[Any, dict[str, Any]]:
    request = patch_request(CM, name, {}, patch_type=PatchType.MERGE, namespace=namespace)
    return request, cm(name, rv, namespace, **labels)


@pytest.mark.parametrize("compact", [False, True], ids=["dicts", "compact"])
async def test_a_read_costs_the_floors_it_returns_not_all_pending(
    monkeypatch: pytest.MonkeyPatch, compact: bool
) -> None:
    # 10,000 writes ahead of the cache, all but one in one namespace (issue 31, defect 9): a read of
    # another namespace or another index value judged every one of them, and judging
    # decoded the cached copy (a compact cache: 10,000 decodes per read). Counted, not
    # timed: a read judges the floors it may return, and decodes only the cached objects
    # it returns (never one a written object replaces).
    shared = informers(compact=compact)
    informer = shared.get(CM, indexers={"app": label_indexer("app")})
    reader = shared.reader(informer)
    store = informer.store
    busy = 9_999  # and q0: 10,000 floors, the most one cache keeps
    for index in range(busy):
        store.upsert(cm(f"b{index}", "5", "busy", app="busy"))
    for index in range(3):
        store.upsert(cm(f"q{index}", "5", "quiet", app="quiet"))
    for index in range(busy):
        shared.record_write(*ns_update("busy", f"b{index}", "7", app="busy"))
    shared.record_write(*ns_update("quiet", "q0", "7", app="quiet"))
    counts = _Counts(monkeypatch, store)
    cached_returned = 2 if compact else 0  # q1 and q2, decoded by a compact cache only

    assert rvs(reader.objects("quiet")) == {"q0": "7", "q1": "5", "q2": "5"}
    assert (counts.judged, counts.decodes) == (1, cached_returned)
    counts.reset()
    assert rvs(reader.by_index("app", "quiet")) == {"q0": "7", "q1": "5", "q2": "5"}
    assert (counts.judged, counts.decodes) == (1, cached_returned)
    counts.reset()
    assert len(reader.keys_by_index("app", "quiet")) == 3
    assert (counts.judged, counts.decodes) == (1, 0)
    counts.reset()
    # Reads that return every floor judge every floor, and still decode no replaced copy.
    everything = reader.objects()
    assert len(everything) == busy + 3
    assert {o["metadata"]["resourceVersion"] for o in everything[:busy]} == {"7"}
    assert (counts.judged, counts.decodes) == (busy + 1, cached_returned)
    counts.reset()
    assert len(reader.by_index("app", "busy")) == busy
    assert (counts.judged, counts.decodes) == (busy, 0)
    assert shared.stale_reads_avoided()[CM] >= 2 * busy

    # Deletes answered with a Status leave tombstones without a version: a compact cache
    # reads a cached copy's uid once per cached version, then never again.
    status = {"kind": "Status", "status": "Success"}
    for index in range(busy):
        shared.record_write(
            delete_request(CM, f"b{index}", namespace="busy"),
            {**status, "details": {"uid": f"uid-b{index}"}},
        )
    counts.reset()
    assert rvs(reader.objects()) == {"q0": "7", "q1": "5", "q2": "5"}
    assert counts.decodes == ((busy + 2) if compact else 0)
    counts.reset()
    assert rvs(reader.objects()) == {"q0": "7", "q1": "5", "q2": "5"}
    assert rvs(reader.objects("quiet")) == {"q0": "7", "q1": "5", "q2": "5"}
    assert reader.by_index("app", "busy") == []
    assert counts.decodes == 2 * cached_returned
