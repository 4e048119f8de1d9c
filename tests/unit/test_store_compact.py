"""Store(compact=True): objects kept as JSON bytes, decoded on read; raw bytes checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubemoon_core import ObjectKey, _store_codec
from kubemoon_core import _store as store_module
from kubemoon_core._changes import ChangeType
from kubemoon_core._store import label_indexer, namespace_indexer
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import Store


def cm(name: str, rv: str, namespace: str = "ns", **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def key(name: str, namespace: str = "ns") -> ObjectKey:
    return ObjectKey(namespace, name)


def stored_blob(store: Store, k: ObjectKey) -> bytes:
    """The one bytes object a compact store holds for ``k`` (white-box)."""
    entry = store._objects[(k.namespace, k.name)]
    assert isinstance(entry[0], bytes)
    return entry[0]


def stored_bytes(store: Store, k: ObjectKey) -> bytes:
    """The JSON document a compact store holds for ``k`` (white-box: proves what is kept)."""
    blob = stored_blob(store, k)
    return blob[_store_codec._blob_start(blob) :]


@pytest.fixture(params=["fast", "standard"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with the fastest codec installed and with the standard library's."""
    if request.param == "standard":
        saved = store_module._codec
        store_module._codec = _store_codec._standard_codec
        yield "json"
        store_module._codec = saved
    else:
        yield _store_codec._fast_codec().name


def test_the_fast_codec_uses_the_installed_extras() -> None:
    assert _store_codec._fast_codec().name == "orjson+msgspec"
    assert Store(compact=True).compact
    assert not Store().compact


def test_reads_return_equal_fresh_dicts_the_store_does_not_share(codec: str) -> None:
    store = Store(compact=True, indexers={"app": label_indexer("app")})
    obj = cm("a", "1", app="web")
    change = store.upsert(obj)
    assert change is not None
    assert change.new is obj  # changes carry the dict, as in a plain store
    got = store.get(key("a"))
    assert got == obj
    assert got is not obj
    assert isinstance(got, dict)
    # Mutating what a read returned (or the dict that was stored) changes nothing.
    got["data"]["k"] = "changed"
    got["metadata"]["name"] = "evil"
    obj["data"]["k"] = "changed too"
    for listed in store.objects():
        listed.clear()  # type: ignore[attr-defined]
    for _, item in store.items():
        item["kind"] = "Secret"  # type: ignore[index]
    for found in store.by_index("app", "web"):
        found["metadata"]["labels"]["app"] = "db"
    assert store.get(key("a")) == cm("a", "1", app="web")
    assert store.keys_by_index("app", "web") == [key("a")]
    assert store.get(key("nothing")) is None


def test_resource_version_without_decoding(codec: str) -> None:
    long_rv = "9" * 254  # the longest kept in a compact store's blob
    for store in (Store(), Store(compact=True)):
        store.upsert(cm("a", "7"))
        store.upsert(cm("long", long_rv))
        store.upsert(cm("é", "révision-é"))
        assert store.resource_version(key("long")) == long_rv
        assert store.upsert(cm("long", long_rv)) is None  # a replay
        assert store.resource_version(key("é")) == "révision-é"
        store.upsert({"metadata": {"name": "bare", "namespace": "ns"}})
        store.upsert({"metadata": {"name": "odd", "namespace": "ns", "resourceVersion": 5}})
        assert store.resource_version(key("a")) == "7"
        assert store.resource_version(key("bare")) is None
        assert store.resource_version(key("odd")) is None  # not a string: none
        assert store.resource_version(key("missing")) is None


def test_updates_deletes_and_replays_behave_as_in_a_plain_store(codec: str) -> None:
    plain, compact = Store(), Store(compact=True)
    for store in (plain, compact):
        assert store.upsert(cm("a", "1")) is not None
        assert store.upsert(cm("a", "1")) is None  # a replay
        modified = store.upsert(cm("a", "2"))
        assert modified is not None
        assert modified.type is ChangeType.MODIFIED
        assert modified.old == cm("a", "1")  # decoded from the stored bytes
        deleted = store.delete(cm("a", "3"))
        assert deleted is not None
        assert (deleted.type, deleted.old, deleted.new) == (ChangeType.DELETED, cm("a", "3"), None)
        assert store.delete(cm("a", "3")) is None
        assert len(store) == 0


def test_unicode_large_numbers_and_floats_come_back_exactly(codec: str) -> None:
    obj = cm("ünï", "1", namespace="名前")
    obj["data"] = {
        "text": 'é漢🙂\\"\n\u0000\u2028',
        "big": 2**70,
        "negative": -(2**64) - 1,
        "float": 0.1,
        "tiny": 5e-324,
        "huge": 1.7976931348623157e308,
        "zero": -0.0,
        "list": [True, False, None, [], {}],
    }
    store = Store(compact=True)
    store.upsert(obj)
    got = store.get(key("ünï", "名前"))
    assert got == obj
    assert got is not None
    assert type(got["data"]["big"]) is int


def test_values_json_cannot_hold_are_refused_and_nothing_is_stored(codec: str) -> None:
    store = Store(compact=True)
    for value in (float("nan"), float("inf"), {1, 2}, b"bytes", "\ud800"):
        bad = cm("a", "1")
        bad["data"] = {"v": value}
        with pytest.raises(LocalProtocolError, match="ns/a: a compact store keeps JSON values"):
            store.upsert(bad)
        store.begin_epoch()
        with pytest.raises(LocalProtocolError, match="compact store keeps JSON values"):
            store.stage(bad)
        store.abort_epoch()
    assert len(store) == 0


def test_raw_bytes_are_kept_as_received(codec: str) -> None:
    obj = cm("a", "1")
    raw = b'{"kind": "ConfigMap", "apiVersion": "v1",\n "metadata": {"name": "a", ' + (
        b'"namespace": "ns", "resourceVersion": "1"}, "data": {"k": "\\u0076"}}'
    )
    store = Store(compact=True)
    store.upsert(obj, raw=raw)
    assert stored_bytes(store, key("a")) == raw
    assert store.get(key("a")) == obj


def test_a_list_item_without_kind_gets_it_written_in_front(codec: str) -> None:
    """A LIST item omits apiVersion and kind; the reflector adds them to the dict only."""
    item = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}, "data": {}}
    raw = b'  {"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"},"data":{}} '
    obj = dict(item, apiVersion="v1", kind="ConfigMap")
    store = Store(compact=True)
    store.begin_epoch()
    store.stage(obj, raw=raw)
    store.commit_epoch()
    assert store.get(key("a")) == obj
    assert stored_bytes(store, key("a")).startswith(b'{"apiVersion":"v1","kind":"ConfigMap",')
    # Only what obj adds is written: a raw that has kind keeps it.
    store.upsert(dict(obj, metadata=dict(item["metadata"], resourceVersion="2")), raw=None)
    with_kind = b'{"kind":"ConfigMap","metadata":{"name":"b","namespace":"ns"}}'
    store.upsert(
        {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "b", "namespace": "ns"}},
        raw=with_kind,
    )
    assert store.get(key("b")) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "b", "namespace": "ns"},
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"metadata":', "raw is not valid UTF-8 JSON"),
        (b'{"metadata":{"name":"a"}} trailing', "raw is not valid UTF-8 JSON"),
        (b"NaN", "raw is not valid UTF-8 JSON"),
        (b'{"metadata":{"name":"a","x":"\xff"}}', "raw is not valid UTF-8 JSON"),
        (b'{"metadata":{"name":"a","x":1e999}}', "raw is not valid UTF-8 JSON"),
        (b"[1, 2]", "raw is not a JSON object"),
        (b'{"metadata":{"name":"b","namespace":"ns","resourceVersion":"2"}}', "metadata.name"),
        (b'{"metadata":{"name":"a","namespace":"other","resourceVersion":"2"}}', "namespace"),
        (b'{"metadata":{"name":"a","resourceVersion":"2"}}', "metadata.namespace"),
        (b'{"metadata":{"name":"a","namespace":"ns","resourceVersion":"9"}}', "resourceVersion"),
        (b'{"metadata":"no"}', "metadata.name"),
        (
            b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns",'
            b'"resourceVersion":"2"},"data":{"k":"lie"}}',
            "differ at data",
        ),
        (
            b'{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns",'
            b'"resourceVersion":"2"},"data":{"k":"v"}}',
            "differ at apiVersion",
        ),
    ],
)
def test_raw_that_disagrees_with_the_object_is_refused(
    codec: str, raw: bytes, message: str
) -> None:
    store = Store(compact=True)
    store.upsert(cm("a", "1"))
    before = stored_blob(store, key("a"))
    with pytest.raises(LocalProtocolError, match=message) as caught:
        store.upsert(cm("a", "2"), raw=raw)
    assert str(caught.value).startswith("ns/a: ")
    store.begin_epoch()
    with pytest.raises(LocalProtocolError, match=message):
        store.stage(cm("a", "2"), raw=raw)
    assert store.staged == 0
    store.abort_epoch()
    assert stored_blob(store, key("a")) is before
    assert store.resource_version(key("a")) == "1"


def test_raw_of_the_wrong_type_is_refused(codec: str) -> None:
    store = Store(compact=True)
    for raw in ("{}", bytearray(b"{}"), memoryview(b"{}")):
        with pytest.raises(LocalProtocolError, match="raw must be bytes"):
            store.upsert(cm("a", "1"), raw=raw)  # type: ignore[arg-type]
    assert len(store) == 0


def test_cluster_scoped_objects_are_named_without_a_slash(codec: str) -> None:
    store = Store(compact=True)
    with pytest.raises(LocalProtocolError, match="^node: raw is not a JSON object"):
        store.upsert({"metadata": {"name": "node"}}, raw=b"1")


def test_with_a_transform_the_transformed_object_is_encoded_and_raw_unused(codec: str) -> None:
    def drop_data(obj: dict[str, Any]) -> dict[str, Any]:
        obj.pop("data", None)
        return obj

    store = Store(compact=True, transform=drop_data)
    raw = json.dumps(cm("a", "1")).encode()
    change = store.upsert(cm("a", "1"), raw=raw)
    assert change is not None
    assert change.new == {k: v for k, v in cm("a", "1").items() if k != "data"}
    assert store.get(key("a")) == change.new
    assert b'"data"' not in stored_bytes(store, key("a"))


def test_a_plain_store_ignores_raw() -> None:
    store = Store()
    obj = cm("a", "1")
    store.upsert(obj, raw=b"not even json")
    assert store.get(key("a")) is obj
    store.begin_epoch()
    store.stage(cm("a", "2"), raw=b"{")
    store.commit_epoch()
    assert store.delete(cm("a", "3"), raw=b"x") is not None


def test_a_failing_transform_or_index_leaves_a_compact_store_as_it_was(codec: str) -> None:
    def picky_transform(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"].get("labels", {}).get("boom"):
            raise ValueError("boom")
        return obj

    def picky_index(obj: Any) -> list[str]:
        if obj["metadata"].get("labels", {}).get("crash"):
            raise KeyError("crash")
        return ["v"]

    store = Store(compact=True, transform=picky_transform, indexers={"i": picky_index})
    store.upsert(cm("a", "1"))
    with pytest.raises(ValueError, match="boom"):
        store.upsert(cm("a", "2", boom="1"))
    with pytest.raises(KeyError):
        store.upsert(cm("a", "2", crash="1"))
    assert store.get(key("a")) == cm("a", "1")
    assert store.keys_by_index("i", "v") == [key("a")]
    assert store.resource_version(key("a")) == "1"


def test_indexes_follow_a_compact_store(codec: str) -> None:
    store = Store(compact=True, indexers={"ns": namespace_indexer, "app": label_indexer("app")})
    store.upsert(cm("a", "1", app="web"))
    store.upsert(cm("b", "1", namespace="other", app="web"))
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["a", "b"]
    store.upsert(cm("a", "2", app="db"))
    assert store.keys_by_index("app", "web") == [key("b", "other")]
    assert store.keys_by_index("app", "db") == [key("a")]
    store.delete(cm("b", "3", namespace="other"))
    assert store.index_values("app") == ["db"]
    assert store.index_values("ns") == ["ns"]
    store.add_indexers({"name": lambda o: [o["metadata"]["name"]]})
    assert store.by_index("name", "a") == [cm("a", "2", app="db")]
    with pytest.raises(LocalProtocolError, match="already named"):
        store.add_indexers({"name": lambda o: []})


def test_epochs_keep_one_copy_and_hold_the_stored_keys(codec: str) -> None:
    store = Store(compact=True, indexers={"app": label_indexer("app")})
    for name in ("keep", "change", "gone"):
        store.upsert(cm(name, "1", app="x"))
    kept = stored_blob(store, key("keep"))
    stored_key = next(k for k in store._objects if k[1] == "keep")
    store.begin_epoch()
    store.stage(cm("keep", "1", app="x"))
    store.stage(cm("change", "2", app="y"))
    store.stage(cm("new", "1", app="y"))
    store.stage(cm("drop", "1"))
    store.unstage(cm("drop", "1"))
    assert store.staged == 3
    epoch = store._epoch
    assert epoch is not None
    assert next(k for k in epoch if k[1] == "keep") is stored_key  # no second key tuple
    assert store.get(key("change")) == cm("change", "1", app="x")  # readers: old state
    with pytest.raises(LocalProtocolError, match="upsert is not allowed"):
        store.upsert(cm("x", "1"))
    changes = store.commit_epoch()
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.MODIFIED, "change"),
        (ChangeType.ADDED, "new"),
        (ChangeType.DELETED, "gone"),
    ]
    assert changes[0].old == cm("change", "1", app="x")
    assert changes[0].new == cm("change", "2", app="y")
    assert changes[2].old == cm("gone", "1", app="x")
    assert stored_blob(store, key("keep")) is kept
    assert sorted(store.keys_by_index("app", "y"), key=str) == [key("change"), key("new")]
    assert store.keys_by_index("app", "x") == [key("keep")]
    # An aborted epoch changes nothing.
    store.begin_epoch()
    store.stage(cm("keep", "9"))
    store.abort_epoch()
    assert store.resource_version(key("keep")) == "1"
    assert len(store) == 3


def test_a_relist_can_bring_back_a_changed_and_then_unchanged_mark(codec: str) -> None:
    """Later marks of a key win, whether the first was a change or not."""
    store = Store(compact=True)
    store.upsert(cm("a", "1"))
    store.begin_epoch()
    store.stage(cm("a", "2"))
    store.stage(cm("a", "1"))
    assert store.commit_epoch() == []
    assert store.resource_version(key("a")) == "1"


def test_odd_resource_versions_are_not_kept_and_always_count_as_changes(codec: str) -> None:
    """A resourceVersion a blob cannot hold (not a string, 255 bytes or more) is not kept:
    every event of such an object is a change, and reads work. A lone surrogate cannot be
    stored at all."""
    store = Store(compact=True)
    for rv in (5, "9" * 255, "\ud800"):
        obj = cm("odd", "1")
        obj["metadata"]["resourceVersion"] = rv
        if rv == "\ud800":
            with pytest.raises(LocalProtocolError, match="JSON values"):
                store.upsert(obj)  # no UTF-8 encoder writes it
            raw = json.dumps(obj).encode()  # JSON can escape it, UTF-8 cannot hold it
            with pytest.raises(LocalProtocolError, match="raw is not valid|JSON values"):
                store.upsert(obj, raw=raw)
            continue
        assert store.upsert(obj) is not None
        assert store.upsert(obj) is not None
        assert store.resource_version(key("odd")) is None
        assert store.get(key("odd")) == obj


def test_namespaces_are_shared_between_keys(codec: str) -> None:
    store = Store(compact=True)
    for i in range(3):
        obj = cm(f"n{i}", "1", namespace="".join(["team", "-a"]))  # distinct str objects
        store.upsert(obj)
    namespaces = {id(k[0]) for k in store._objects}
    assert len(namespaces) == 1


def test_nan_is_refused_even_beside_an_integer_beyond_64_bits(codec: str) -> None:
    """orjson refuses the big integer, the fallback encoder would write NaN as null."""
    bad = cm("a", "1")
    bad["data"] = {"big": 2**70, "nan": float("nan")}
    with pytest.raises(LocalProtocolError, match="ns/a: a compact store keeps JSON values"):
        Store(compact=True).upsert(bad)


def test_an_added_kind_that_json_cannot_hold_is_refused(codec: str) -> None:
    raw = b'{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}}'
    obj = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}
    store = Store(compact=True)
    with pytest.raises(LocalProtocolError, match="ns/a: a compact store keeps JSON values"):
        store.upsert({**obj, "kind": {"not", "json"}}, raw=raw)
    assert len(store) == 0


@pytest.mark.parametrize(
    ("in_raw", "in_obj"),
    [("true", 1), ("1", True), ("1.0", 1), ("1", 1.0), ("-0.0", 0.0), ("0", False)],
)
def test_raw_whose_numbers_differ_only_in_type_is_refused(
    codec: str, in_raw: str, in_obj: object
) -> None:
    """Python's == would let these through; the stored JSON would then be a lie."""
    obj = cm("a", "1")
    obj["data"] = {"v": in_obj}
    raw = json.dumps({**obj, "data": {"v": None}}).replace("null", in_raw).encode()
    store = Store(compact=True)
    with pytest.raises(LocalProtocolError, match="differs in type"):
        store.upsert(obj, raw=raw)
    assert len(store) == 0


def test_raw_in_another_key_order_is_accepted(codec: str) -> None:
    obj = cm("a", "1")
    obj["data"] = {"x": 1, "y": [1.5, True, {"z": -0.0}]}
    shuffled = {"data": {"y": [1.5, True, {"z": -0.0}], "x": 1}, **dict(reversed(obj.items()))}
    raw = json.dumps(shuffled).encode()
    store = Store(compact=True)
    store.upsert(obj, raw=raw)
    assert stored_bytes(store, key("a")) == raw
    got = store.get(key("a"))
    assert got == obj
    assert got is not None
    assert str(got["data"]["y"][2]["z"]) == "-0.0"


def test_objects_nested_deeper_than_orjson_goes_are_stored(codec: str) -> None:
    """The core's decoders read about 990 levels; orjson writes 255. A tenant's object
    between the two must not make a compact informer fail (it would retry forever)."""
    deep: Any = "bottom"
    for _ in range(600):
        deep = [deep]
    obj = cm("deep", "1")
    obj["data"] = {"deep": deep}
    store = Store(compact=True)
    store.upsert(obj)
    assert store.get(key("deep")) == obj
    raw = json.dumps(obj).encode()
    obj2 = cm("deep", "2")
    obj2["data"] = {"deep": deep}
    store.upsert(obj2, raw=raw.replace(b'"1"', b'"2"'))
    assert store.get(key("deep")) == obj2


def test_non_string_keys_are_refused_not_bent(codec: str) -> None:
    """A transform's int key would come back as a string: refused where the codec can."""
    obj = cm("a", "1")
    obj["data"] = {1: "one"}
    store = Store(compact=True)
    if codec == "json":  # the standard library writes it as "1", as json.dumps does
        store.upsert(obj)
        assert store.get(key("a")) == {**obj, "data": {"1": "one"}}
        return
    with pytest.raises(LocalProtocolError, match="JSON values"):
        store.upsert(obj)
