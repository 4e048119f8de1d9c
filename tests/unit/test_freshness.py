"""Read-your-own-writes in the core: resourceVersion order (KEP-5504's rules, checked in
apimachinery v0.37.2's ``pkg/util/resourceversion``), what a write's answer leaves, and the
floor table: ordering, tombstones, expiry, bounds and versions that cannot be compared."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core import (
    Change,
    ChangeType,
    DeleteOptions,
    GroupVersionResource,
    ObjectKey,
    PatchType,
    Request,
    WriteOptions,
    create_request,
    delete_collection_request,
    delete_request,
    get_request,
    patch_request,
    replace_request,
)
from kubemoon_core._freshness import _cached_resource_version
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import (
    Store,
    WriteFloors,
    WrittenObject,
    compare_resource_versions,
    written_object,
)

CM = GroupVersionResource("", "v1", "configmaps")
WIDGETS = GroupVersionResource("example.com", "v1", "widgets")
KEY = ObjectKey("ns", "a")


def cm(rv: str, name: str = "a", uid: str = "u1", **extra: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": rv,
        "uid": uid,
        **extra,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def written(rv: str | None, *, obj: bool = True, uid: str | None = "u1") -> WrittenObject:
    return WrittenObject(CM, KEY, cm(rv or "1", uid=uid or "") if obj else None, rv, uid)


def store_with(*objects: dict[str, Any]) -> Store:
    store = Store()
    for obj in objects:
        store.upsert(obj)
    return store


# -- resourceVersion order ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("100", "200", -1),
        ("200", "100", 1),
        ("1", "1", 0),
        ("100", "100", 0),
        ("99", "100", -1),  # shorter is older, whatever the digits
        ("100", "99", 1),
        ("9" * 50, "1" + "0" * 50, -1),  # no limit on length
        ("1" + "0" * 50, "9" * 50, 1),
        ("12345678901234567890" * 3, "12345678901234567890" * 3, 0),
    ],
)
def test_comparable_versions_order_by_length_then_digits(a: str, b: str, expected: int) -> None:
    assert compare_resource_versions(a, b) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0", "1"),  # zero is the list/watch special value, never a live version
        ("1", "0"),
        ("0", "0"),
        ("0100", "100"),  # leading zero
        ("100", "0100"),
        ("", "100"),
        ("100", ""),
        ("100a", "100"),
        ("100", "100a"),
        ("-1", "1"),
        ("+1", "1"),
        (" 1", "1"),
        ("\u0661\u0662", "12"),  # Arabic-Indic digits are digits to str.isdigit, not to Go
        ("\uff11\uff12", "12"),  # full-width digits
    ],
)
def test_malformed_versions_are_not_comparable(a: str, b: str) -> None:
    assert compare_resource_versions(a, b) is None


# -- what a write's answer leaves --------------------------------------------------------


def test_a_create_leaves_the_object_named_by_its_answer() -> None:
    request = create_request(CM, {"metadata": {"generateName": "a-", "namespace": "ns"}})
    found = written_object(request, cm("7", name="a-xyz"))
    assert found == WrittenObject(CM, ObjectKey("ns", "a-xyz"), cm("7", name="a-xyz"), "7", "u1")
    assert not found.deleted


def test_replace_patch_apply_and_status_leave_the_object() -> None:
    requests: list[Request] = [
        replace_request(CM, cm("6")),
        patch_request(CM, "a", {"data": {"k": "v"}}, patch_type=PatchType.MERGE, namespace="ns"),
        patch_request(
            CM,
            "a",
            {"data": {}},
            namespace="ns",
            patch_type=PatchType.APPLY,
            options=WriteOptions(field_manager="m", force=True),
        ),
        replace_request(CM, cm("6"), subresource="status"),
    ]
    for request in requests:
        found = written_object(request, cm("8"))
        assert found is not None and found.key == KEY and found.resource_version == "8"


def test_a_cluster_scoped_write_has_an_empty_namespace() -> None:
    namespaces = GroupVersionResource("", "v1", "namespaces")
    answer = {"kind": "Namespace", "metadata": {"name": "team", "resourceVersion": "5"}}
    found = written_object(create_request(namespaces, {"metadata": {"name": "team"}}), answer)
    assert found is not None and found.key == ObjectKey("", "team")


@pytest.mark.parametrize(
    "request_",
    [
        get_request(CM, "a", namespace="ns"),
        create_request(CM, cm("1"), options=WriteOptions(dry_run=True)),
        patch_request(CM, "a", {}, patch_type=PatchType.MERGE, namespace="ns", subresource="scale"),
        delete_collection_request(CM, namespace="ns"),
        Request("POST", "/version"),
    ],
    ids=["read", "dry-run", "other-subresource", "collection-delete", "not-a-resource"],
)
def test_writes_whose_answer_is_not_the_stored_object_leave_nothing(request_: Request) -> None:
    assert written_object(request_, cm("9")) is None


@pytest.mark.parametrize(
    "answer",
    [
        cm("9", name="b"),  # another object than the path names
        {**cm("9"), "metadata": {**cm("9")["metadata"], "namespace": "other"}},
        cm("0"),  # not a comparable resourceVersion: no floor could ever be judged
        cm("abc"),
        {"kind": "Status", "status": "Success"},
        {"metadata": "nonsense"},
        ["not", "a", "mapping"],
        None,
    ],
)
def test_answers_that_do_not_name_a_comparable_version_leave_nothing(answer: Any) -> None:
    assert written_object(replace_request(CM, cm("8")), answer) is None


def test_a_delete_answered_with_a_status_leaves_a_tombstone_of_that_uid() -> None:
    status = {
        "kind": "Status",
        "status": "Success",
        "details": {"name": "a", "kind": "configmaps", "uid": "u1"},
    }
    found = written_object(delete_request(CM, "a", namespace="ns"), status)
    assert found == WrittenObject(CM, KEY, None, None, "u1")
    assert found.deleted
    assert (
        written_object(delete_request(CM, "a", namespace="ns"), {**status, "status": "Failure"})
        is None
    )
    # Without a uid (and no version) there is nothing to judge a tombstone by.
    assert (
        written_object(delete_request(CM, "a", namespace="ns"), {**status, "details": {}}) is None
    )


def test_a_delete_answered_with_the_object_is_a_tombstone_unless_finalizers_hold_it() -> None:
    request = delete_request(CM, "a", namespace="ns", options=DeleteOptions())
    gone = written_object(request, cm("9"))
    assert gone == WrittenObject(CM, KEY, None, "9", "u1")
    held = cm("9", deletionTimestamp="2026-12-01T00:00:00Z", finalizers=["x/y"])
    terminating = written_object(request, held)
    assert terminating is not None and terminating.obj == held and not terminating.deleted
    assert written_object(request, cm("9", name="b")) is None
    assert written_object(request, cm("09")) is None


# -- the floor table ---------------------------------------------------------------------


def test_a_lagging_cache_reads_the_written_object_until_it_catches_up() -> None:
    floors = WriteFloors()
    store = store_with(cm("5"))
    floors.record(written("7"), now=0.0)
    floor = floors.fresher(store, KEY, "5", now=1.0)
    assert floor is not None and floor.obj == cm("7") and floor.resource_version == "7"
    assert floors.stale_reads_avoided == 1
    store.upsert(cm("7"))
    assert floors.fresher(store, KEY, "6", now=1.0) is None  # same version: the cache wins
    assert len(floors) == 0
    assert floors.fresher(store, KEY, "6", now=1.0) is None


def test_a_newer_cached_version_drops_the_floor() -> None:
    floors = WriteFloors()
    floors.record(written("7"), now=0.0)
    assert floors.fresher(store_with(cm("12")), KEY, "5", now=1.0) is None
    assert len(floors) == 0 and floors.stale_reads_avoided == 0


def test_a_created_object_the_cache_lacks_is_read_from_the_floor() -> None:
    floors = WriteFloors()
    floors.record(written("7"), now=0.0)
    floor = floors.fresher(Store(), KEY, "5", now=1.0)
    assert floor is not None and floor.obj == cm("7")
    assert floors.stale_reads_avoided == 1
    assert floors.written_keys() == [KEY]
    assert KEY in floors and ObjectKey("ns", "b") not in floors
    keys = floors.live_keys()
    floors.record(WrittenObject(CM, ObjectKey("ns", "b"), cm("3", "b"), "3", None), now=0.0)
    assert ObjectKey("ns", "b") in keys  # live


def test_the_collection_version_passing_the_floor_drops_it_even_without_the_key() -> None:
    floors = WriteFloors()
    floors.record(written("7"), now=0.0)
    # The cache's list and watch reached 8 and it holds no such key: deleted since.
    assert floors.fresher(Store(), KEY, "8", now=1.0) is None
    assert len(floors) == 0
    floors.record(written("7"), now=0.0)
    assert floors.fresher(Store(), KEY, "7", now=1.0) is None


def test_an_incomparable_cached_version_is_never_taken_as_older() -> None:
    floors = WriteFloors()
    floors.record(written("7"), now=0.0)
    # The safe choice: the layer steps aside and the cache is read as without it.
    assert floors.fresher(store_with(cm("abc")), KEY, "", now=1.0) is None
    assert floors.incomparable == 1 and len(floors) == 0
    floors.record(written("7"), now=0.0)
    assert floors.fresher(store_with(cm("007")), KEY, "not-a-version", now=1.0) is None
    assert floors.incomparable == 2


def test_a_cached_object_without_a_version_is_not_comparable() -> None:
    floors = WriteFloors()
    floors.record(written("7"), now=0.0)
    store = store_with({"metadata": {"name": "a", "namespace": "ns"}})
    assert _cached_resource_version(store, KEY) is None
    assert floors.fresher(store, KEY, "", now=1.0) is None
    assert floors.incomparable == 1


def test_an_older_answer_does_not_lower_the_floor() -> None:
    floors = WriteFloors()
    floors.record(written("9"), now=0.0)
    floors.record(written("8"), now=0.1)  # a slower write that finished later
    floor = floors.fresher(store_with(cm("5")), KEY, "5", now=1.0)
    assert floor is not None and floor.resource_version == "9"
    floors.record(written("10"), now=0.2)
    floor = floors.fresher(store_with(cm("5")), KEY, "5", now=1.0)
    assert floor is not None and floor.resource_version == "10"


def test_a_tombstone_hides_the_deleted_object_until_the_cache_sees_the_delete() -> None:
    floors = WriteFloors()
    floors.record(written("9", obj=False), now=0.0)
    store = store_with(cm("5"))
    floor = floors.fresher(store, KEY, "5", now=1.0)
    assert floor is not None and floor.deleted
    assert floors.stale_reads_avoided == 1
    # Absent from the cache, not caught up yet: still a tombstone (an older ADDED may come).
    assert floors.fresher(Store(), KEY, "5", now=1.0) is floor
    floors.observe(Change(ChangeType.DELETED, KEY, cm("9"), None))
    assert len(floors) == 0


def test_a_versionless_tombstone_hides_its_own_incarnation_only() -> None:
    floors = WriteFloors()
    floors.record(written(None, obj=False, uid="u1"), now=0.0)
    assert floors.fresher(Store(), KEY, "99", now=1.0) is not None  # no version to pass
    assert floors.fresher(store_with(cm("5", uid="u1")), KEY, "5", now=1.0) is not None
    assert floors.stale_reads_avoided == 1
    # Another incarnation, and nothing says it is older than the delete: the cache is read,
    # and the tombstone stays for a late copy of the one it deleted.
    assert floors.fresher(store_with(cm("12", uid="u2")), KEY, "12", now=1.0) is None
    assert floors.fresher(store_with(cm("5", uid="u1")), KEY, "5", now=1.0) is not None
    floors.observe(Change(ChangeType.DELETED, KEY, cm("13", uid="u2"), None))
    assert len(floors) == 1  # the delete of another incarnation
    floors.observe(Change(ChangeType.MODIFIED, KEY, cm("4"), cm("5")))
    assert len(floors) == 1  # a change of the object is not its delete
    floors.observe(Change(ChangeType.DELETED, KEY, cm("6", uid="u1"), None))
    assert len(floors) == 0


def test_a_versionless_tombstone_hides_incarnations_older_than_our_own_write() -> None:
    floors = WriteFloors()
    floors.record(written("9", uid="u2"), now=0.0)  # we wrote u2 at 9, then deleted it
    floors.record(written(None, obj=False, uid="u2"), now=0.1)
    # u1 at 6 is older than our write of u2: deleted before u2 existed.
    floor = floors.fresher(store_with(cm("6", uid="u1")), KEY, "6", now=1.0)
    assert floor is not None and floor.deleted and floor.after == "9"
    # u3 at 12 may be newer than the delete: the cache is read.
    assert floors.fresher(store_with(cm("12", uid="u3")), KEY, "12", now=1.0) is None
    # Deleted again (a retried delete): the bound stays.
    floors.record(written(None, obj=False, uid="u2"), now=0.2)
    floor = floors.fresher(store_with(cm("6", uid="u1")), KEY, "6", now=1.0)
    assert floor is not None and floor.after == "9"


def test_a_tombstone_with_neither_version_nor_uid_is_not_kept() -> None:
    floors = WriteFloors()
    floors.record(written(None, obj=False, uid=None), now=0.0)
    assert len(floors) == 0


def test_a_versionless_tombstone_of_another_uid_has_no_bound() -> None:
    floors = WriteFloors()
    floors.record(written("9", uid="u1"), now=0.0)
    floors.record(written(None, obj=False, uid="u2"), now=0.1)  # u1 went, u2 came, we deleted
    floor = floors.fresher(Store(), KEY, "5", now=1.0)
    assert floor is not None and floor.deleted and floor.after is None
    # u1 is not u2, and with no bound it may be newer than the delete: the cache is read.
    assert floors.fresher(store_with(cm("9", uid="u1")), KEY, "9", now=1.0) is None


def test_observed_changes_drop_floors_they_reach_only() -> None:
    floors = WriteFloors()
    floors.record(written("9"), now=0.0)
    floors.observe(Change(ChangeType.MODIFIED, ObjectKey("ns", "other"), cm("1"), cm("99")))
    floors.observe(Change(ChangeType.MODIFIED, KEY, cm("5"), cm("8")))
    assert len(floors) == 1
    floors.observe(Change(ChangeType.MODIFIED, KEY, cm("8"), {"metadata": {}}))
    assert len(floors) == 1  # no version: not comparable, not caught up
    floors.observe(Change(ChangeType.ADDED, KEY, None, cm("9")))
    assert len(floors) == 0
    floors.record(written("9"), now=0.0)
    floors.observe(Change(ChangeType.DELETED, KEY, cm("10"), None))
    assert len(floors) == 0


def test_floors_expire_after_max_age() -> None:
    floors = WriteFloors(max_age=300.0)
    floors.record(written("7"), now=0.0)
    assert floors.fresher(Store(), KEY, "1", now=299.0) is not None
    assert floors.fresher(Store(), KEY, "1", now=300.0) is None
    assert len(floors) == 0
    floors.record(WrittenObject(CM, ObjectKey("ns", "old"), cm("1", "old"), "1", None), 0.0)
    floors.record(written("7"), now=400.0)  # recording expires the old ones too
    assert floors.written_keys() == [KEY]


def test_the_table_is_bounded_and_forgets_the_oldest() -> None:
    floors = WriteFloors(max_entries=2)
    for index, name in enumerate("abc"):
        floors.record(WrittenObject(CM, ObjectKey("ns", name), cm("5", name), "5", None), index)
    assert floors.written_keys() == [ObjectKey("ns", "b"), ObjectKey("ns", "c")]
    assert floors.evicted == 1
    # A new record of a key makes it the youngest.
    floors.record(WrittenObject(CM, ObjectKey("ns", "b"), cm("6", "b"), "6", None), 3.0)
    floors.record(WrittenObject(CM, ObjectKey("ns", "d"), cm("6", "d"), "6", None), 4.0)
    assert floors.written_keys() == [ObjectKey("ns", "b"), ObjectKey("ns", "d")]


def test_the_transform_shapes_the_written_object_as_the_cache_stores_it() -> None:
    floors = WriteFloors(transform=lambda obj: {"metadata": obj["metadata"]})
    floors.record(written("7"), now=0.0)
    floor = floors.fresher(Store(), KEY, "1", now=0.0)
    assert floor is not None and floor.obj == {"metadata": cm("7")["metadata"]}
    assert "WriteFloors floors=1" in repr(floors)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_entries": 0},
        {"max_entries": True},
        {"max_entries": 1.5},
        {"max_age": 0},
        {"max_age": -1.0},
        {"max_age": float("inf")},
        {"max_age": float("nan")},
        {"max_age": True},
        {"max_age": "300"},
    ],
)
def test_bad_bounds_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError):
        WriteFloors(**kwargs)


@pytest.mark.parametrize("compact", [False, True], ids=["dicts", "compact"])
def test_a_store_tells_a_cached_uid_and_version(compact: bool) -> None:
    store = Store(compact=compact)
    store.upsert(cm("5", uid="u9"))
    store.upsert({"metadata": {"name": "b", "namespace": "ns", "uid": 3}})
    assert store.uid(KEY) == "u9" and store.resource_version(KEY) == "5"
    assert store.uid(ObjectKey("ns", "b")) is None  # not a string: none
    assert store.uid(ObjectKey("ns", "absent")) is None
