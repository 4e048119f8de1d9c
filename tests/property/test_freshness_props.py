"""Properties of read-your-own-writes: the resourceVersion order is the integers' order on
well-formed versions and refuses everything else; and against a model of one key on an API
server whose watch lags behind the writes, a read through the floors is never older than
this process's last write, nor older than the cache."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import ChangeType, GroupVersionResource, ObjectKey
from kubemoon_core.lowlevel import Store, WriteFloors, WrittenObject, compare_resource_versions

WELL_FORMED = re.compile(r"[1-9][0-9]*")
CM = GroupVersionResource("", "v1", "configmaps")
KEY = ObjectKey("ns", "a")


@given(st.integers(min_value=1, max_value=10**40), st.integers(min_value=1, max_value=10**40))
def test_well_formed_versions_compare_as_integers(a: int, b: int) -> None:
    assert compare_resource_versions(str(a), str(b)) == (a > b) - (a < b)


@given(st.text(max_size=8), st.text(max_size=8))
def test_the_order_is_antisymmetric_and_refuses_what_is_not_well_formed(a: str, b: str) -> None:
    forward = compare_resource_versions(a, b)
    backward = compare_resource_versions(b, a)
    comparable = bool(WELL_FORMED.fullmatch(a) and a.isascii() and WELL_FORMED.fullmatch(b))
    comparable = comparable and b.isascii()
    assert (forward is not None) is comparable
    assert forward == (None if backward is None else -backward)


def cm(rv: int, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(rv), "uid": uid}}


@dataclass
class Model:
    """One key on a server, a cache that applies the server's events late, and the floors."""

    rv: int = 1
    current: dict[str, Any] | None = None  # the object on the server
    uids: int = 0
    events: list[tuple[ChangeType, dict[str, Any]]] = field(default_factory=list)
    store: Store = field(default_factory=Store)
    watermark: int = 1
    floors: WriteFloors = field(default_factory=WriteFloors)
    ours: int = 0  # the server's version after this process's last write
    ours_deleted: bool = False
    # uid -> the last version this process wrote of it; the uid of a delete answered with
    # a Status (no version) when that was our last write.
    ours_by_uid: dict[str, int] = field(default_factory=dict)
    status_deleted: str | None = None

    def write(self, *, mine: bool, delete: bool, status_answer: bool) -> None:
        self.rv += 1
        if delete:
            if self.current is None:
                self.rv -= 1
                return
            gone = cm(self.rv, self.current["metadata"]["uid"])
            self.events.append((ChangeType.DELETED, gone))
            uid = self.current["metadata"]["uid"]
            self.current = None
            written = (
                WrittenObject(CM, KEY, None, None, uid)
                if status_answer
                else WrittenObject(CM, KEY, None, str(self.rv), uid)
            )
        else:
            if self.current is None:
                self.uids += 1
                uid = f"u{self.uids}"
            else:
                uid = self.current["metadata"]["uid"]
            self.current = cm(self.rv, uid)
            self.events.append((ChangeType.MODIFIED, self.current))
            written = WrittenObject(CM, KEY, self.current, str(self.rv), uid)
        if mine:
            self.floors.record(written, now=0.0)
            self.ours, self.ours_deleted = self.rv, delete
            self.status_deleted = uid if delete and status_answer else None
            if not delete:
                self.ours_by_uid[uid] = self.rv

    def ambiguous(self, cached: Mapping[str, Any] | None) -> bool:
        """Our last write was a delete answered without a version, and the cache holds
        another incarnation newer than anything we wrote of the deleted one: it may have
        been created after the delete, so the cache wins (documented)."""
        if self.status_deleted is None or cached is None:
            return False
        uid = cached["metadata"]["uid"]
        bound = self.ours_by_uid.get(self.status_deleted, 0)
        return uid != self.status_deleted and rv_of(cached) > bound

    def deliver(self) -> None:
        if not self.events:
            return
        kind, obj = self.events.pop(0)
        change = self.store.delete(obj) if kind is ChangeType.DELETED else self.store.upsert(obj)
        self.watermark = int(obj["metadata"]["resourceVersion"])
        if change is not None:
            self.floors.observe(change)

    def read(self) -> Mapping[str, Any] | None:
        floor = self.floors.fresher(self.store, KEY, str(self.watermark), now=1.0)
        if floor is None:
            return self.store.get(KEY)
        return floor.obj


STEP = st.one_of(
    st.tuples(st.just("write"), st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("deliver"), st.just(False), st.just(False), st.just(False)),
    st.tuples(st.just("read"), st.just(False), st.just(False), st.just(False)),
)


def rv_of(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


@given(st.lists(STEP, max_size=60), st.booleans())
def test_a_read_is_never_older_than_our_write_nor_than_the_cache(
    steps: list[Any], compact: bool
) -> None:
    # compact: the cached uid a versionless tombstone is judged by is read once per
    # cached version and remembered; the cached version itself from the entry.
    model = Model(store=Store(compact=compact))
    for step, mine, delete, status_answer in steps:
        if step == "write":
            model.write(mine=mine, delete=delete, status_answer=status_answer)
        elif step == "deliver":
            model.deliver()
        got = model.read()
        cached = model.store.get(KEY)
        if got is not None and not model.ambiguous(cached):
            assert rv_of(got) >= model.ours, "older than our own write"
            if cached is not None:
                assert rv_of(got) >= rv_of(cached), "older than the cache"
        elif model.ours and not model.ours_deleted:
            # Gone despite our write: only if a later delete has reached the cache.
            assert model.watermark > model.ours and cached is None
        if got is None and cached is not None:
            assert model.ours_deleted and model.ours > rv_of(cached), "hid a newer object"
    while model.events:
        model.deliver()
    assert model.read() == model.store.get(KEY)
    # Caught up: no floor with a version is left (a versionless tombstone waits for a
    # delete of its uid, which a lagging model may have delivered before it was recorded).
    assert all(
        floor_key != KEY
        or model.floors.fresher(model.store, KEY, str(model.watermark), 1.0) is None
        or model.store.get(KEY) is None
        for floor_key in model.floors.written_keys()
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
SEGMENT = st.sampled_from(["api", "apis", "v1", "namespaces", "ns", "a", "status", "scale", ""])
METADATA = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["a", "b", "", 3]) | st.text(max_size=4),
        "namespace": st.sampled_from(["ns", "", None]),
        "resourceVersion": st.sampled_from(["7", "0", "07", "", "\u0661", 7]),
        "uid": st.sampled_from(["u", "", None]),
        "deletionTimestamp": st.sampled_from(["2026-12-01T00:00:00Z", ""]),
    },
)
ANSWER = JSON | st.fixed_dictionaries(
    {"metadata": METADATA | JSON},
    optional={
        "kind": st.sampled_from(["Status", "ConfigMap"]),
        "status": st.sampled_from(["Success", "Failure"]) | JSON,
        "details": st.fixed_dictionaries({}, optional={"uid": st.sampled_from(["u", "", 3])})
        | JSON,
    },
)


@given(
    st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "WATCH"]),
    st.one_of(
        st.lists(SEGMENT, max_size=9).map(lambda parts: "/" + "/".join(parts)),
        st.tuples(
            st.sampled_from(["/api/v1", "/apis/g/v1"]),
            st.sampled_from(["", "/namespaces/ns", "/namespaces/other"]),
            st.sampled_from(["/configmaps", "/namespaces"]),
            st.sampled_from(["", "/a", "/b"]),
            st.sampled_from(["", "/status", "/scale", "/finalize"]),
        ).map("".join),
    ),
    st.lists(st.tuples(st.sampled_from(["dryRun", "force"]), st.just("All")), max_size=1),
    ANSWER,
)
def test_whatever_a_server_answers_a_write_never_raises(
    method: str, path: str, query: list[tuple[str, str]], answer: Any
) -> None:
    """The answers are the API server's bytes: outside input. Anything recorded names a
    key and holds a comparable version, or is a tombstone with a uid."""
    from kubemoon_core import Request
    from kubemoon_core.lowlevel import written_object

    found = written_object(Request(method, path, tuple(query)), answer)
    if found is not None:
        assert method in {"POST", "PUT", "PATCH", "DELETE"}
        assert ("dryRun", "All") not in query
        assert (
            found.resource_version is None
            or compare_resource_versions(found.resource_version, found.resource_version) == 0
        )
        assert found.resource_version is not None or (found.deleted and found.uid)
        floors = WriteFloors()
        floors.record(found, now=0.0)
        assert len(floors) == 1


def app(obj: Mapping[str, Any]) -> list[str]:
    """An index function that fails on some objects (the caller's code may)."""
    labels = obj["metadata"].get("labels", {})
    if labels.get("app") == "boom":
        raise KeyError("boom")
    return [labels["app"]] if "app" in labels else []


FLOOR_STEP = st.tuples(
    st.sampled_from(["write", "delete", "status-delete", "catch-up", "expire"]),
    st.sampled_from(["ns", "other"]),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["x", "y", "boom", None]),
    st.integers(min_value=1, max_value=9),
)


@given(st.lists(FLOOR_STEP, max_size=40), st.integers(min_value=1, max_value=5))
def test_the_lookups_find_exactly_the_floors_a_search_would(
    steps: list[Any], max_entries: int
) -> None:
    """What a read looks up (the floors of a namespace, the floors under an index value)
    is what searching every floor finds, through records, drops, expiry and eviction."""
    floors = WriteFloors(max_entries=max_entries, max_age=5.0, indexers={"app": app})
    store = Store()
    now = 0.0
    for step, namespace, name, value, rv in steps:
        now += 1.0
        key = ObjectKey(namespace, name)
        labels = {} if value is None else {"app": value}
        obj = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": str(rv),
                "uid": f"u-{name}",
                "labels": labels,
            }
        }
        if step == "write":
            floors.record(WrittenObject(CM, key, obj, str(rv), f"u-{name}"), now)
        elif step == "delete":
            floors.record(WrittenObject(CM, key, None, str(rv), f"u-{name}"), now)
        elif step == "status-delete":
            floors.record(WrittenObject(CM, key, None, None, f"u-{name}"), now)
        elif step == "catch-up":
            floors.fresher(store, key, str(rv), now)  # drops a floor the watermark passed
        else:
            floors.expire(now)
        every = {k: floors._floors[k] for k in floors.written_keys()}
        for ns in ("ns", "other"):
            assert sorted(floors.written_keys(ns)) == sorted(k for k in every if k.namespace == ns)
        for wanted in ("x", "y", "boom"):
            expected = set()
            for k, floor in every.items():
                if floor.obj is None:
                    continue
                try:
                    if wanted in app(floor.obj):
                        expected.add(k)
                except KeyError:
                    expected.add(k)  # the function failed: judged by the reader
            assert set(floors.indexed_keys("app", wanted)) == expected
        assert floors.indexed_keys("unknown", "x") == []
        # Nothing is kept for a floor that is gone (single-threaded, nothing stale).
        live = floors._floors
        tables = [*floors._by_namespace.values(), *floors._unindexed.values()]
        tables += [bucket for by_value in floors._by_value.values() for bucket in by_value.values()]
        assert all(bucket for bucket in floors._by_namespace.values())
        assert all(live.get(k) is f for bucket in tables for k, f in bucket.items())
        assert all(live.get(k) is made[0] for k, made in floors._made.items())
        assert all(bucket for by_value in floors._by_value.values() for bucket in by_value.values())
