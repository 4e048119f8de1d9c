"""Sharded controllers' pure parts: owner buckets, assign_ranges' bucket-aligned cuts,
key admission (ShardedKeys + Controller.set_admission) and the reflector's reselect."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource, KubeMoonError, ObjectKey, Reconciled, Response
from kubemoon_core._changes import Change, ChangeType
from kubemoon_core._controller import Controller, Source
from kubemoon_core._reflector import Reflector
from kubemoon_core._reflector_states import ReflectorState, RelistReason
from kubemoon_core.errors import LocalProtocolError, ShardSelectorError
from kubemoon_core.sharding import (
    HASH_SPACE,
    OWNER_BUCKET_LABEL,
    OWNER_BUCKETS,
    ShardedKeys,
    ShardRange,
    ShardSelector,
    assign_ranges,
    bucket_range,
    buckets_of,
    fnv1a_64,
    owner_bucket,
    owner_bucket_label,
    owner_bucket_selector,
)

CM = GroupVersionResource("", "v1", "configmaps")


# -- buckets ------------------------------------------------------------------------------


def test_an_owner_bucket_is_the_top_byte_of_the_uid_hash() -> None:
    uid = "4f1c2d9e-0000-4000-8000-000000000001"
    assert owner_bucket(uid) == fnv1a_64(uid.encode()) >> 56
    assert owner_bucket_label(uid) == f"{fnv1a_64(uid.encode()) >> 56:02x}"
    assert bucket_range(owner_bucket(uid)).contains_hash(fnv1a_64(uid.encode()))
    for bad in ("", None, 3, "\udc80"):
        with pytest.raises(ShardSelectorError):
            owner_bucket(bad)  # type: ignore[arg-type]
    for bad_bucket in (-1, OWNER_BUCKETS, True, "1"):
        with pytest.raises(ShardSelectorError):
            bucket_range(bad_bucket)  # type: ignore[arg-type]


@given(st.integers(min_value=1, max_value=300))
def test_assigned_ranges_are_exact_bucket_sets_covering_the_space_once(count: int) -> None:
    members = [f"m{i:03d}" for i in range(count)]
    ranges = assign_ranges(members)
    assert len(ranges) == min(count, OWNER_BUCKETS)
    seen: list[int] = []
    for r in ranges.values():
        seen += buckets_of([r])
        # Every hash of the range is in exactly the buckets buckets_of names.
        assert ShardRange(bucket_range(buckets_of([r])[0]).start, r.end) == r
    assert sorted(seen) == list(range(OWNER_BUCKETS))  # disjoint and complete
    sizes = [len(buckets_of([r])) for r in ranges.values()]
    assert max(sizes) - min(sizes) <= 1  # as equal as whole buckets allow


@given(st.text(min_size=1, max_size=40))
def test_an_owner_is_in_a_range_exactly_when_its_bucket_is_selected(uid: str) -> None:
    try:
        value = fnv1a_64(uid.encode("utf-8"))
    except UnicodeEncodeError:
        return
    for count in (1, 2, 3, 7):
        for r in assign_ranges([str(i) for i in range(count)]).values():
            assert r.contains_hash(value) == (owner_bucket(uid) in buckets_of([r]))


def test_the_bucket_selector_lists_the_buckets_or_none_for_the_whole_space() -> None:
    assert owner_bucket_selector([ShardRange(0, HASH_SPACE)]) is None
    first = assign_ranges(["a", "b", "c"])["a"]
    text = owner_bucket_selector([first])
    assert text is not None
    assert text.startswith(f"{OWNER_BUCKET_LABEL} in (00,01,")
    assert text.endswith(",54)")  # 85 buckets: 0x00 to 0x54
    with pytest.raises(ShardSelectorError, match="boundaries"):
        buckets_of([ShardRange(0, HASH_SPACE // 3)])  # the old unaligned cut
    with pytest.raises(ShardSelectorError):
        owner_bucket_selector([])
    with pytest.raises(ShardSelectorError):
        buckets_of(["0-1"])  # type: ignore[list-item]


# -- admission ----------------------------------------------------------------------------


def obj(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}


def change(kind: ChangeType, name: str, uid: str) -> Change:
    o = obj(name, uid)
    return Change(
        kind,
        ObjectKey("ns", name),
        None if kind is ChangeType.ADDED else o,
        None if kind is ChangeType.DELETED else o,
    )


def split(uids: list[str]) -> tuple[ShardRange, list[str], list[str]]:
    half = ShardRange(0, HASH_SPACE // 2)
    inside = [u for u in uids if half.contains_hash(fnv1a_64(u.encode()))]
    outside = [u for u in uids if u not in inside]
    assert len(inside) > 5 and len(outside) > 5
    return half, inside, outside


UIDS = [str(uuid.UUID(int=random.Random(n).getrandbits(128))) for n in range(40)]


def test_sharded_keys_admit_only_objects_hashing_into_the_ranges() -> None:
    keys = ShardedKeys()
    half, inside, outside = split(UIDS)
    for uid in UIDS:
        assert keys.observe(change(ChangeType.ADDED, uid, uid)) is False  # nothing admitted
    newly = keys.admit([half])  # the keys to queue again: seen while nothing was admitted
    assert sorted(newly) == sorted(ObjectKey("ns", u) for u in inside)
    assert keys.admit([half]) == []  # nothing new
    assert all(keys.admits(ObjectKey("ns", u)) for u in inside)
    assert not any(keys.admits(ObjectKey("ns", u)) for u in outside)
    assert not keys.admits(ObjectKey("ns", "never-seen"))
    # An object leaving the range (a relist with the new selector reports it deleted)
    # is forgotten, not a deletion to reconcile.
    assert keys.observe(change(ChangeType.DELETED, outside[0], outside[0])) is False
    assert keys.hash_of(ObjectKey("ns", outside[0])) is None
    # A deletion inside the range is reconciled (the key is still admitted).
    assert keys.observe(change(ChangeType.DELETED, inside[0], inside[0])) is True
    assert keys.admits(ObjectKey("ns", inside[0]))
    assert keys.keys_in(half, [ObjectKey("ns", u) for u in UIDS]) == [
        ObjectKey("ns", u) for u in inside
    ]
    with pytest.raises(ShardSelectorError):
        keys.admit(["x"])  # type: ignore[list-item]


def test_queued_keys_outside_the_active_ranges_are_dropped_never_reconciled() -> None:
    keys = ShardedKeys()
    controller = Controller([Source.primary()], workers=100)
    controller.set_admission(keys.admits)
    half, inside, outside = split(UIDS)
    keys.admit([ShardRange(0, HASH_SPACE)])
    for uid in UIDS:
        keys.observe(change(ChangeType.ADDED, uid, uid))
        controller.receive("primary", change(ChangeType.ADDED, uid, uid), 0.0)
    assert len(controller.queue) == len(UIDS)
    keys.admit([half])  # the other half was handed over while they waited
    handed = []
    while (item := controller.next_work(1.0)) is not None:
        handed.append(item.key.name)
        controller.report(item, Reconciled(), 1.0)
    assert sorted(handed) == sorted(inside)
    assert controller.metrics(1.0).dropped == len(outside)
    # New adds outside the ranges are not queued at all; enqueue is filtered too.
    controller.receive("primary", change(ChangeType.MODIFIED, outside[1], outside[1]), 2.0)
    controller.enqueue(ObjectKey("ns", outside[2]), 2.0)
    assert len(controller.queue) == 0
    controller.set_admission(None)
    controller.enqueue(ObjectKey("ns", outside[2]), 2.0)
    assert len(controller.queue) == 1


# -- reflector reselect -------------------------------------------------------------------


def state(r: Reflector) -> ReflectorState:
    """Read through a call, so mypy does not narrow the state between steps."""
    return r.state


def page(items: list[dict[str, Any]], rv: str) -> Response:
    body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
    body["items"] = items  # type: ignore[assignment]
    return Response(200, (), json.dumps(body).encode())


def test_reselect_relists_with_the_new_selectors_and_reports_leavers_as_deletions() -> None:
    half, inside, outside = split(UIDS)
    r = Reflector(CM, rng=random.Random(1), namespace="ns", shard_selector=ShardSelector((half,)))
    assert r.next_request(0.0) is not None  # a LIST in flight: cancel it first
    with pytest.raises(LocalProtocolError, match="LISTING"):
        r.reselect(0.0, shard_selector=None, label_selector=None)
    listed = [
        obj(u, u) | {"metadata": {**obj(u, u)["metadata"], "resourceVersion": "5"}} for u in UIDS
    ]
    r.receive_response(page(listed, "5"), 0.0)  # a server without the gate sends all
    assert {k.name for k in r.store} == set(inside)
    other = ShardRange(HASH_SPACE // 2, HASH_SPACE)
    r.reselect(1.0, shard_selector=ShardSelector((other,)), label_selector="a=b")
    assert state(r) is ReflectorState.SYNC_DUE
    assert r.stats.relist_reasons[RelistReason.RESELECTED] == 1
    req = r.next_request(1.0)
    assert req is not None and not req.stream
    query = dict(req.query)
    assert query["shardSelector"] == ShardSelector((other,)).render()
    assert query["labelSelector"] == "a=b"
    assert "resourceVersion" not in query  # the newest state
    changes = r.receive_response(page(listed, "6"), 1.0)
    gone = {c.key.name for c in changes if c.type is ChangeType.DELETED}
    added = {c.key.name for c in changes if c.type is ChangeType.ADDED}
    assert gone == set(inside) and added == set(outside)
    assert not any(c.initial for c in changes)
    assert {k.name for k in r.store} == set(outside)
    assert state(r) is ReflectorState.WATCH_DUE
    with pytest.raises(KubeMoonError):
        r.reselect(2.0, shard_selector="x", label_selector=None)  # type: ignore[arg-type]
    assert state(r) is ReflectorState.WATCH_DUE  # a refused reselect changes nothing
    assert r.next_request(2.0) is not None
    with pytest.raises(LocalProtocolError, match="WATCH_CONNECTING"):
        r.reselect(2.0, shard_selector=None, label_selector=None)


def test_a_key_leaving_while_its_reconcile_runs_keeps_its_hash_until_done() -> None:
    keys = ShardedKeys()
    half, _, outside = split(UIDS)
    keys.admit([ShardRange(0, HASH_SPACE)])
    keys.observe(change(ChangeType.ADDED, outside[0], outside[0]))
    keys.admit([half])  # its range moved away; the relist reports it deleted
    left = change(ChangeType.DELETED, outside[0], outside[0])
    assert keys.observe(left, busy=True) is False  # not queued as a deletion...
    other = ShardRange(HASH_SPACE // 2, HASH_SPACE)
    key = ObjectKey("ns", outside[0])
    assert keys.keys_in(other, [key]) == [key]  # ...but its range still counts it running
    keys.forget(key)
    assert keys.keys_in(other, [key]) == []


async def test_a_cancellable_runner_cancels_a_running_reconcile_as_a_requeue() -> None:
    import trio

    from kubemoon_trio import ControllerRunner

    controller = Controller([Source.primary()], workers=2)
    started = trio.Event()
    reported: list[str] = []

    async def reconcile(item: Any) -> Reconciled:
        if not started.is_set():
            started.set()
            await trio.sleep_forever()
        return Reconciled()  # the requeue of the cancelled one

    runner = ControllerRunner(
        controller,
        reconcile,
        on_report=lambda item: reported.append(item.key.name),
        cancellable=True,
    )
    controller.enqueue(ObjectKey("ns", "a"), 0.0)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.run)
            await started.wait()
            assert runner.cancel(controller.running) == 1
            while len(reported) < 2:
                await trio.sleep(0.01)
            runner.stop()
    assert reported == ["a", "a"]
    assert controller.metrics(1.0).reconciles  # reported, as a requeue
    from kubemoon_core._controller import ReconcileResult

    assert controller.metrics(1.0).reconciles[ReconcileResult.REQUEUE] == 1
    assert controller.metrics(1.0).reconciles[ReconcileResult.SUCCESS] == 1


def test_objects_without_a_usable_uid_are_never_admitted() -> None:
    keys = ShardedKeys()
    keys.admit([ShardRange(0, HASH_SPACE)])
    key = ObjectKey("ns", "odd")
    for metadata in ({}, {"uid": 7}, {"uid": "\udc80"}, "not an object"):
        odd = Change(ChangeType.ADDED, key, None, {"metadata": metadata})
        assert keys.observe(odd) is False
    assert len(keys) == 0 and keys.hash_of(key) is None
    assert keys.ranges == (ShardRange(0, HASH_SPACE),)
    assert repr(keys) == "<ShardedKeys ranges=1 keys=0>"
    # A key seen before keeps its admission when a later change carries no uid.
    keys.observe(change(ChangeType.ADDED, "odd", UIDS[0]))
    assert keys.observe(Change(ChangeType.MODIFIED, key, None, {"metadata": {}})) is True


def test_a_reflector_reports_its_label_selector() -> None:
    r = Reflector(CM, rng=random.Random(1), label_selector="a=b")
    assert r.label_selector == "a=b"


def test_a_selection_before_the_first_sync_is_no_relist() -> None:
    r = Reflector(CM, rng=random.Random(1), namespace="ns")
    r.reselect(0.0, shard_selector=ShardSelector.equal_split(2, 0), label_selector=None)
    assert r.stats.relists == 0
    first = r.next_request(0.0)
    assert first is not None
    r.request_failed(0.0)  # a page that failed: the list is retried after a backoff...
    r.reselect(0.5, shard_selector=ShardSelector.equal_split(2, 1), label_selector=None)
    again = r.next_request(0.5)  # ...or restarted at once with the new selector
    assert again is not None
    assert dict(again.query)["shardSelector"] == ShardSelector.equal_split(2, 1).render()
    assert r.stats.relists == 0
    r.receive_response(page([obj("a", UIDS[0])], "3"), 0.5)
    assert r.has_synced


def test_readyz_verbose_adds_the_notes_and_never_fails_on_them() -> None:
    from kubemoon_trio import ProbeServer

    problems: list[str] = []

    def notes() -> list[str]:
        return ["controller c: sharded as r, client-side"]

    server = ProbeServer(healthy=list, ready=lambda: problems, notes=notes)
    assert server.answer("GET", "/readyz") == (200, "text/plain", b"ok\n")
    for target in ("/readyz?verbose", "/readyz?verbose=1", "/readyz?x=1&verbose"):
        body = b"ok\ncontroller c: sharded as r, client-side\n"
        assert server.answer("GET", target) == (200, "text/plain", body)
    assert server.answer("GET", "/readyz?verbosely") == (200, "text/plain", b"ok\n")
    assert server.answer("GET", "/healthz?verbose")[2] == b"ok\n"  # readyz only
    problems.append("cache not synced")
    code, _, body = server.answer("GET", "/readyz?verbose")
    assert code == 503
    assert body == b"cache not synced\ncontroller c: sharded as r, client-side\n"

    def broken() -> list[str]:
        raise RuntimeError("user code")

    quiet = ProbeServer(healthy=list, ready=list, notes=broken)
    assert quiet.answer("GET", "/readyz?verbose") == (200, "text/plain", b"ok\n")


def test_the_collector_exports_the_shard_families() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from kubemoon_io import RuntimeCollector
    from kubemoon_trio import ShardStatus

    class Source:
        def controller_metrics(self) -> list[Any]:
            return []

        def informer_stats(self) -> list[Any]:
            return []

        def leader_status(self) -> None:
            return None

        def request_counts(self) -> dict[Any, int]:
            return {}

        def stale_reads_avoided(self) -> dict[str, int]:
            return {}

        def shard_status(self) -> list[ShardStatus]:
            first = assign_ranges(["a", "b"])["a"]
            return [ShardStatus("c", "a", False, (first,), 7)]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(Source()))
    text = generate_latest(registry).decode()
    assert 'kubemoon_shard_server_side{controller="c"} 0.0' in text
    assert 'kubemoon_shard_owned_ranges{controller="c",identity="a"} 1.0' in text
    assert 'kubemoon_shard_owned_fraction{controller="c",identity="a"} 0.5' in text
    assert 'kubemoon_shard_dropped_keys_total{controller="c"} 7.0' in text
