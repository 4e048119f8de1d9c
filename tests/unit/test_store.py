"""Store: keys, indexes, replay-safety, epochs that never expose a partial list, transforms."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from kubemoon_core import ObjectKey
from kubemoon_core._changes import ChangeType
from kubemoon_core._store import Store, label_indexer, namespace_indexer
from kubemoon_core.errors import DecodeError, LocalProtocolError


def cm(name: str, rv: str, namespace: str = "ns", **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def key(name: str, namespace: str = "ns") -> ObjectKey:
    return ObjectKey(namespace, name)


def epoch_open(store: Store) -> bool:
    """Read through a call, so that mypy does not narrow the property between steps."""
    return store.epoch_open


def names(objects: list[Mapping[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def test_upsert_adds_then_modifies_and_reading_works() -> None:
    store = Store()
    added = store.upsert(cm("a", "1"))
    assert added is not None
    assert (added.type, added.key, added.old, added.new) == (
        ChangeType.ADDED,
        key("a"),
        None,
        cm("a", "1"),
    )
    modified = store.upsert(cm("a", "2"))
    assert modified is not None
    assert modified.type is ChangeType.MODIFIED
    assert modified.old == cm("a", "1")
    assert modified.new == cm("a", "2")
    store.upsert(cm("b", "3", namespace=""))
    assert len(store) == 2
    assert key("a") in store
    assert ObjectKey("", "b") in store
    assert "a" not in store
    assert store.get(key("a")) == cm("a", "2")
    assert store.get(key("zz")) is None
    assert store.keys() == [key("a"), ObjectKey("", "b")]
    assert list(store) == store.keys()
    assert names(store.objects()) == ["a", "b"]
    assert [k for k, _ in store.items()] == store.keys()


def test_a_replayed_resource_version_changes_nothing() -> None:
    store = Store()
    store.upsert(cm("a", "1"))
    assert store.upsert(cm("a", "1")) is None
    assert store.delete(cm("zz", "9")) is None  # deleting what is not there


def test_objects_without_a_resource_version_always_count_as_changes() -> None:
    store = Store()
    bare = {"metadata": {"name": "a", "namespace": "ns"}}
    store.upsert(bare)
    change = store.upsert(dict(bare))
    assert change is not None
    assert change.type is ChangeType.MODIFIED


def test_delete_reports_the_final_state() -> None:
    store = Store()
    store.upsert(cm("a", "1"))
    change = store.delete(cm("a", "2"))
    assert change is not None
    assert (change.type, change.old, change.new) == (ChangeType.DELETED, cm("a", "2"), None)
    assert change.object == cm("a", "2")
    assert len(store) == 0


def test_metadata_may_be_any_mapping() -> None:
    store = Store()
    obj = {"metadata": MappingProxyType({"name": "a", "resourceVersion": "1"})}
    store.upsert(obj)
    assert store.get(ObjectKey("", "a")) is obj
    assert store.upsert(dict(obj)) is None


def test_a_transform_that_drops_metadata_makes_every_event_a_change() -> None:
    store = Store(transform=lambda obj: {"data": obj.get("data")})
    store.upsert(cm("a", "1"))
    assert store.get(key("a")) == {"data": None}
    assert store.upsert(cm("a", "1")) is not None


def test_objects_without_a_name_are_refused() -> None:
    store = Store()
    with pytest.raises(DecodeError):
        store.upsert({"metadata": {}})
    with pytest.raises(DecodeError):
        store.delete({"metadata": {"name": ""}})


class TestIndexes:
    def make(self) -> Store:
        return Store(
            indexers={
                "namespace": namespace_indexer,
                "app": label_indexer("app"),
                "tags": lambda o: o.get("tags", []),
            }
        )

    def test_lookups_follow_adds_modifications_and_deletes(self) -> None:
        store = self.make()
        store.upsert(cm("a", "1", app="web"))
        store.upsert(cm("b", "1", app="web"))
        store.upsert(cm("c", "1", namespace="other", app="db"))
        store.upsert(cm("d", "1", namespace=""))
        assert store.index_names == ["namespace", "app", "tags"]
        assert names(store.by_index("namespace", "ns")) == ["a", "b"]
        assert names(store.by_index("namespace", "")) == ["d"]
        assert store.keys_by_index("app", "web") == [key("a"), key("b")]
        assert sorted(store.index_values("app")) == ["db", "web"]
        store.upsert(cm("b", "2", app="db"))
        assert names(store.by_index("app", "web")) == ["a"]
        assert names(store.by_index("app", "db")) == ["c", "b"]
        store.delete(cm("a", "3"))
        assert store.by_index("app", "web") == []
        assert "web" not in store.index_values("app")
        assert store.by_index("app", "nothing") == []

    def test_an_unknown_index_is_an_error(self) -> None:
        with pytest.raises(LocalProtocolError, match="no index named 'nope'"):
            self.make().by_index("nope", "x")

    def test_custom_functions_may_return_several_values_even_twice(self) -> None:
        store = self.make()
        store.upsert({**cm("a", "1"), "tags": ["x", "y", "x"]})
        assert names(store.by_index("tags", "x")) == ["a"]
        assert names(store.by_index("tags", "y")) == ["a"]
        store.delete(cm("a", "2"))
        assert store.index_values("tags") == []

    def test_odd_metadata_is_not_indexed(self) -> None:
        store = self.make()
        store.upsert({"metadata": {"name": "a", "labels": "x"}})
        store.upsert({"metadata": {"name": "b", "labels": {"app": 1}}})
        assert store.index_values("app") == []
        assert namespace_indexer({"metadata": {"namespace": 5}}) == ()
        assert namespace_indexer({}) == ("",)
        assert label_indexer("app")({}) == ()

    def test_a_failing_index_function_leaves_the_store_as_it_was(self) -> None:
        def picky(obj: Mapping[str, Any]) -> list[str]:
            if obj["metadata"]["resourceVersion"] == "2":
                raise RuntimeError("boom")
            return ["v"]

        store = Store(indexers={"picky": picky})
        store.upsert(cm("a", "1"))
        with pytest.raises(RuntimeError):
            store.upsert(cm("a", "2"))
        assert store.get(key("a")) == cm("a", "1")
        assert names(store.by_index("picky", "v")) == ["a"]


class TestEpochs:
    def test_readers_see_the_old_state_until_the_commit(self) -> None:
        store = Store(indexers={"app": label_indexer("app")})
        store.upsert(cm("keep", "1", app="x"))
        store.upsert(cm("change", "1", app="x"))
        store.upsert(cm("gone", "1", app="x"))
        store.begin_epoch()
        assert store.staged == 0
        store.stage(cm("keep", "1", app="x"))
        store.stage(cm("change", "2", app="y"))
        store.stage(cm("new", "5", app="y"))
        assert store.staged == 3
        # Nothing is visible yet.
        assert names(store.objects()) == ["keep", "change", "gone"]
        assert names(store.by_index("app", "x")) == ["keep", "change", "gone"]
        assert epoch_open(store)
        changes = store.commit_epoch()
        assert store.staged == 0
        assert not epoch_open(store)
        assert [(c.type, c.key.name) for c in changes] == [
            (ChangeType.MODIFIED, "change"),
            (ChangeType.ADDED, "new"),
            (ChangeType.DELETED, "gone"),
        ]
        assert changes[2].old == cm("gone", "1", app="x")
        assert changes[2].new is None
        assert sorted(names(store.objects())) == ["change", "keep", "new"]
        assert names(store.by_index("app", "x")) == ["keep"]
        assert sorted(names(store.by_index("app", "y"))) == ["change", "new"]

    def test_an_unchanged_relist_keeps_the_stored_copies_and_changes_nothing(self) -> None:
        store = Store()
        original = cm("a", "1")
        store.upsert(original)
        store.begin_epoch()
        store.stage(cm("a", "1"))  # an equal copy, from the new list
        assert store.commit_epoch() == []
        assert store.get(key("a")) is original

    def test_a_later_mark_of_a_key_wins_and_unstage_takes_it_back(self) -> None:
        store = Store()
        store.begin_epoch()
        store.stage(cm("a", "1"))
        store.stage(cm("a", "2"))
        store.stage(cm("b", "3"))
        store.unstage(cm("b", "4"))
        store.unstage(cm("never-staged", "4"))
        changes = store.commit_epoch()
        assert [(c.type, c.key.name, c.object["metadata"]["resourceVersion"]) for c in changes] == [
            (ChangeType.ADDED, "a", "2")
        ]

    def test_an_empty_list_deletes_everything(self) -> None:
        store = Store()
        store.upsert(cm("a", "1"))
        store.begin_epoch()
        assert [c.type for c in store.commit_epoch()] == [ChangeType.DELETED]
        assert len(store) == 0

    def test_abort_drops_the_epoch(self) -> None:
        store = Store()
        store.upsert(cm("a", "1"))
        store.begin_epoch()
        store.stage(cm("b", "1"))
        store.abort_epoch()
        assert store.keys() == [key("a")]
        assert store.upsert(cm("a", "2")) is not None

    def test_misuse_is_refused(self) -> None:
        store = Store()
        for call in (store.commit_epoch, store.abort_epoch):
            with pytest.raises(LocalProtocolError, match="needs an open epoch"):
                call()
        with pytest.raises(LocalProtocolError, match="needs an open epoch"):
            store.stage(cm("a", "1"))
        with pytest.raises(LocalProtocolError, match="needs an open epoch"):
            store.unstage(cm("a", "1"))
        store.begin_epoch()
        with pytest.raises(LocalProtocolError, match="while an epoch is open"):
            store.begin_epoch()
        with pytest.raises(LocalProtocolError, match="while an epoch is open"):
            store.upsert(cm("a", "1"))
        with pytest.raises(LocalProtocolError, match="while an epoch is open"):
            store.delete(cm("a", "1"))


class TestTransform:
    @staticmethod
    def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"].pop("managedFields", None)
        return obj

    def test_it_runs_before_storing_events_and_list_items(self) -> None:
        calls: list[str] = []

        def transform(obj: dict[str, Any]) -> dict[str, Any]:
            calls.append(obj["metadata"]["name"])
            return self.drop_managed_fields(obj)

        store = Store(transform=transform)
        with_fields = cm("a", "1")
        with_fields["metadata"]["managedFields"] = [{"manager": "kubectl"}]
        change = store.upsert(with_fields)
        assert change is not None
        assert "managedFields" not in change.object["metadata"]
        store.begin_epoch()
        store.stage(cm("a", "1"))  # unchanged: not transformed again
        store.stage(cm("b", "1"))
        store.commit_epoch()
        deleted = store.delete(cm("b", "2"))
        assert deleted is not None
        assert calls == ["a", "b", "b"]
        assert "managedFields" not in store.objects()[0]["metadata"]


def test_indexes_added_later_cover_stored_objects_and_refuse_reuse() -> None:
    store = Store()
    store.upsert(
        {
            "metadata": {
                "name": "a",
                "namespace": "n",
                "resourceVersion": "1",
                "labels": {"app": "x"},
            }
        }
    )
    store.add_indexers({"app": label_indexer("app")})
    assert store.keys_by_index("app", "x") == [ObjectKey("n", "a")]
    store.upsert(
        {
            "metadata": {
                "name": "b",
                "namespace": "n",
                "resourceVersion": "2",
                "labels": {"app": "x"},
            }
        }
    )
    assert len(store.by_index("app", "x")) == 2
    with pytest.raises(LocalProtocolError, match="already named 'app'"):
        store.add_indexers({"app": label_indexer("other")})

    def broken(obj: Any) -> tuple[str, ...]:
        raise RuntimeError("index function failed")

    with pytest.raises(RuntimeError):
        store.add_indexers({"broken": broken})
    assert "broken" not in store.index_names
