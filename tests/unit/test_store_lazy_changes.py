"""A compact store's list commits report lazy changes: stored bytes, decoded on access."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import ObjectKey
from kubemoon_core._changes import Change, ChangeType, _LazyChange, _LazyChanges
from kubemoon_core._store import namespace_indexer
from kubemoon_core.errors import DecodeError
from kubemoon_core.lowlevel import Store, initial_change


def cm(name: str, rv: str, value: str = "v", namespace: str = "ns") -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "resourceVersion": rv}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": value}}


def listed(
    store: Store, objects: list[dict[str, Any]], *, initial: bool = False
) -> Sequence[Change]:
    store.begin_epoch()
    for obj in objects:
        store.stage(obj)
    return store.commit_epoch(initial=initial)


class CountingLoad:
    """Wraps a store's loader and counts the blobs it decodes."""

    def __init__(self, store: Store) -> None:
        assert store._codec is not None
        self.load = store._codec.load
        self.calls = 0
        store._codec.load = self

    def __call__(self, blob: bytes) -> Any:
        self.calls += 1
        return self.load(blob)


def test_a_commit_decodes_nothing_and_each_access_decodes_a_fresh_copy() -> None:
    store = Store(compact=True)
    counting = CountingLoad(store)
    changes = listed(store, [cm("a", "1"), cm("b", "1")])
    assert counting.calls == 0  # no change was read: none was decoded
    assert [c.type for c in changes] == [ChangeType.ADDED, ChangeType.ADDED]
    assert [c.key for c in changes] == [ObjectKey("ns", "a"), ObjectKey("ns", "b")]
    assert counting.calls == 0  # keys come without decoding
    first, second = changes[0].new, changes[0].new
    assert first == second == cm("a", "1") and first is not second
    assert counting.calls == 2
    assert changes[0].old is None and changes[0].object == cm("a", "1")
    first["data"]["k"] = "mutated"  # the reader's copy: neither change nor store moves
    assert changes[0].new == cm("a", "1") == store.get(ObjectKey("ns", "a"))


def test_modified_and_swept_changes_carry_the_stored_bytes_of_their_time() -> None:
    store = Store(compact=True)
    listed(store, [cm("a", "1"), cm("b", "1"), cm("c", "1")])
    changes = listed(store, [cm("a", "2", "x"), cm("b", "1")])
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.MODIFIED, "a"),
        (ChangeType.DELETED, "c"),
    ]
    assert changes[0].old == cm("a", "1") and changes[0].new == cm("a", "2", "x")
    assert changes[1].old == cm("c", "1") and changes[1].new is None
    store.upsert(cm("a", "3", "y"))  # later events do not reach the reported changes
    assert changes[0].new == cm("a", "2", "x")


def test_initial_changes_stay_lazy_and_equal_their_decoded_twins() -> None:
    store = Store(compact=True)
    counting = CountingLoad(store)
    changes = listed(store, [cm("a", "1")], initial=True)
    assert changes[0].initial and isinstance(changes[0], _LazyChange)
    again = initial_change(listed(Store(compact=True), [cm("a", "1")])[0])
    assert again.initial and isinstance(again, _LazyChange)
    assert counting.calls == 0
    plain = listed(Store(), [cm("a", "1")], initial=True)
    assert plain[0].initial and changes == plain
    copied = pickle.loads(pickle.dumps(changes[0]))
    assert copied == plain[0] and copied.initial and not isinstance(copied, _LazyChange)


def test_bytes_that_do_not_decode_raise_a_typed_error_naming_the_object() -> None:
    store = Store(compact=True)
    (change,) = listed(store, [cm("a", "1")])
    broken = _LazyChange(ChangeType.ADDED, ("ns", "a"), None, b"\x01" + b"1{not json", _boom)
    with pytest.raises(DecodeError, match="ns/a") as caught:
        _ = broken.new
    assert caught.value.path == "new"
    with pytest.raises(DecodeError, match="ns/a"):  # nothing lost: the bytes are still there
        _ = broken.object
    assert broken.old is None and broken.key == ObjectKey("ns", "a")
    not_object = _LazyChange(ChangeType.DELETED, ("", "a"), b"\xff[1]", None, _json_load)
    with pytest.raises(DecodeError, match="not a JSON object"):
        _ = not_object.old
    assert change.new == cm("a", "1")


def _boom(blob: bytes) -> Any:
    raise ValueError("truncated document")


def _json_load(blob: bytes) -> Any:
    import json

    return json.loads(blob[1:])


def test_indexes_of_a_compact_list_match_a_plain_store() -> None:
    from kubemoon_core._store import namespace_indexer

    stores = [
        Store(compact=compact, indexers={"ns": namespace_indexer}) for compact in (True, False)
    ]
    for store in stores:
        listed(store, [cm("a", "1", namespace="x"), cm("b", "1", namespace="y")])
        listed(store, [cm("a", "2", namespace="x"), cm("c", "1", namespace="y")])
    compact, plain = stores
    assert compact.index_values("ns") == plain.index_values("ns")
    assert compact.keys_by_index("ns", "y") == plain.keys_by_index("ns", "y")


names = st.sampled_from(["a", "b", "c", "d"])
lists = st.lists(st.tuples(names, st.sampled_from(["1", "2"]), st.text(max_size=3)), max_size=6)


@given(st.lists(lists, min_size=1, max_size=4), st.booleans())
def test_lazy_changes_equal_a_plain_stores_changes(rounds: list[Any], initial: bool) -> None:
    compact, plain = Store(compact=True), Store()
    for objects in rounds:
        made = [cm(name, rv, value) for name, rv, value in objects]
        got = listed(compact, made, initial=initial)
        want = listed(plain, made, initial=initial)
        assert got == want
        assert [c.initial for c in got] == [c.initial for c in want]
        assert [(c.old, c.new) for c in got] == [(c.old, c.new) for c in want]


def test_a_committed_list_is_a_sequence_of_records_not_of_decoded_objects() -> None:
    store = Store(compact=True)
    counting = CountingLoad(store)
    changes = listed(store, [cm("a", "1"), cm("b", "1"), cm("c", "1")])
    assert isinstance(changes, _LazyChanges) and len(changes) == 3
    # An addition's record is the store's own entry: the list holds nothing else.
    assert all(record is store._objects[record[1]] for record in changes._records)
    assert changes[1].key == ObjectKey("ns", "b") and changes[-1].key.name == "c"
    assert [c.key.name for c in changes[1:]] == ["b", "c"]
    assert changes[0] is not changes[0] and changes[0] == changes[0]
    assert counting.calls == 2  # the == above read two changes' objects, nothing else did
    plain = listed(Store(), [cm("a", "1"), cm("b", "1"), cm("c", "1")])
    assert changes == plain and plain == changes and changes == list(changes)
    assert changes != plain[:2] and changes != "abc"
    assert "3 lazy changes" in repr(changes)


def test_the_first_list_becomes_the_store_in_list_order() -> None:
    store = Store(compact=True, indexers={"ns": namespace_indexer})
    store.begin_epoch()
    for obj in (cm("b", "1", namespace="y"), cm("a", "1", namespace="x"), cm("b", "2")):
        store.stage(obj)
    store.unstage(cm("b", "1", namespace="y"))
    changes = store.commit_epoch()
    assert [c.key for c in changes] == [ObjectKey("x", "a"), ObjectKey("ns", "b")]
    assert store.keys() == [ObjectKey("x", "a"), ObjectKey("ns", "b")]
    assert store.index_values("ns") == ["x", "ns"]
    assert store.by_index("ns", "ns") == [cm("b", "2")]
    assert not store.epoch_open and store.staged == 0
    store.upsert(cm("c", "1"))  # the store goes on as any other
    assert len(store) == 3
