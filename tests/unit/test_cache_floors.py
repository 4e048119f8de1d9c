"""The runtime's readers over write floors (no server: the caches are filled by hand and the
writes recorded as the client would report them): every read path sees a write at once,
a delete hides the object, selective and metadata-only caches stay what they are, and
the private switch turns it all off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kubemoon_core import (
    ClientConfig,
    GroupVersionResource,
    ObjectKey,
    PatchType,
    create_request,
    delete_request,
    label_indexer,
    patch_request,
)
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
