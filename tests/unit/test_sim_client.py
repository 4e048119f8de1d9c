"""A real ``kubemoon_trio.Client`` and ``Informer`` against the simulated cluster, over
in-memory HTTP on trio's virtual clock (issue 32). No sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from kubemoon_core import ApiError, GroupVersionResource, ListOptions, ObjectKey, PatchType, Request
from kubemoon_core.errors import AlreadyExists, Conflict, Expired, NotFound
from kubemoon_testing.sim import NotModelled, RequestFault, SimulatedCluster, custom
from kubemoon_trio import Informer

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
WIDGETS = custom("example.com", "v1", "widgets", "Widget")


def cm(name: str, value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": value},
    }


async def test_crud_through_a_real_client(autojump_clock: trio.testing.MockClock) -> None:
    cluster = SimulatedCluster([WIDGETS])
    async with cluster.client() as client:
        created = await client.create(CONFIGMAPS, cm("a"), namespace="default")
        assert created["metadata"]["namespace"] == "default"
        with pytest.raises(AlreadyExists):
            await client.create(CONFIGMAPS, cm("a"), namespace="default")
        got = await client.get(CONFIGMAPS, "a", namespace="default")
        got["data"] = {"k": "2"}
        updated = await client.replace(CONFIGMAPS, got, namespace="default")
        with pytest.raises(Conflict):
            await client.replace(CONFIGMAPS, {**created, "data": {"k": "3"}}, namespace="default")
        patched = await client.patch(
            CONFIGMAPS, "a", {"data": {"p": "1"}}, namespace="default", patch_type=PatchType.MERGE
        )
        assert patched["data"] == {"k": "2", "p": "1"}
        assert int(patched["metadata"]["resourceVersion"]) > int(
            updated["metadata"]["resourceVersion"]
        )
        await client.delete(CONFIGMAPS, "a", namespace="default")
        with pytest.raises(NotFound):
            await client.get(CONFIGMAPS, "a", namespace="default")
    assert cluster.refusals == [] and cluster.open_connections == 0


async def test_paged_list_through_a_real_client(autojump_clock: trio.testing.MockClock) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        for index in range(7):
            await client.create(CONFIGMAPS, cm(f"m{index}"), namespace="default")
        items = client.list(CONFIGMAPS, namespace="default", options=ListOptions(limit=3))
        seen = [item["metadata"]["name"] async for item in items]
        assert seen == [f"m{index}" for index in range(7)]
        assert items.resource_version == str(cluster.server.resource_version)
    assert cluster.requests == 7 + 3  # three pages


async def test_watch_streams_events_bookmarks_and_ends_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        await client.create(CONFIGMAPS, cm("a"), namespace="default")
        rv = str(cluster.server.resource_version)
        seen: list[tuple[float, str]] = []

        async def writer() -> None:
            await trio.sleep(5)
            await client.patch(
                CONFIGMAPS,
                "a",
                {"data": {"k": "w"}},
                namespace="default",
                patch_type=PatchType.MERGE,
            )
            await trio.sleep(5)
            await client.delete(CONFIGMAPS, "a", namespace="default")

        options = ListOptions(resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=90)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            async with client.watch(CONFIGMAPS, namespace="default", options=options) as events:
                async for event in events:
                    seen.append((trio.current_time() - start, event.type))
        assert seen == [
            (5.0, "MODIFIED"),
            (10.0, "DELETED"),
            (60.0, "BOOKMARK"),
            (88.0, "BOOKMARK"),
        ]
        assert trio.current_time() - start == 90.0
    assert cluster.open_connections == 0


async def test_watch_from_a_compacted_version_raises_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        await client.create(CONFIGMAPS, cm("a"), namespace="default")
        old = str(cluster.server.resource_version)
        await client.create(CONFIGMAPS, cm("b"), namespace="default")
        cluster.server.compact()
        options = ListOptions(resource_version=old, timeout_seconds=30)

        async def drain() -> None:
            async with client.watch(CONFIGMAPS, namespace="default", options=options) as events:
                async for _ in events:
                    pass

        with pytest.raises(Expired):
            await drain()


async def test_not_modelled_answers_501_and_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        with pytest.raises(ApiError) as caught:
            await client.get(GroupVersionResource("", "v1", "pods"), "p", namespace="default")
        assert caught.value.status.code == 501
    assert len(cluster.refusals) == 1
    with pytest.raises(NotModelled, match="pods"):
        cluster.check()


async def test_an_informer_syncs_and_follows(autojump_clock: trio.testing.MockClock) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        for index in range(3):
            await client.create(CONFIGMAPS, cm(f"m{index}"), namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default", page_size=2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(informer.run)
            await informer.wait_synced()
            assert sorted(map(str, informer.store.keys())) == [
                "default/m0",
                "default/m1",
                "default/m2",
            ]
            await client.delete(CONFIGMAPS, "m1", namespace="default")
            await client.create(CONFIGMAPS, cm("m3"), namespace="default")
            await trio.sleep(1)
            assert sorted(map(str, informer.store.keys())) == [
                "default/m0",
                "default/m2",
                "default/m3",
            ]
            # Past a whole watch timeout (at most 600 s) the informer watches again.
            await trio.sleep(1200)
            await client.patch(
                CONFIGMAPS,
                "m0",
                {"data": {"k": "late"}},
                namespace="default",
                patch_type=PatchType.MERGE,
            )
            await trio.sleep(1)
            late = informer.store.get(ObjectKey("default", "m0"))
            assert late is not None and late["data"] == {"k": "late"}
            nursery.cancel_scope.cancel()
    assert cluster.refusals == []


async def test_a_manager_with_leader_election_reconciles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import kubemoon_trio as km
    from kubemoon_core import Reconciled
    from kubemoon_testing import running_manager

    cluster = SimulatedCluster()
    seen: set[str] = set()

    async def reconcile(ctx: Any) -> Reconciled:
        seen.add(ctx.name)
        return Reconciled()

    async with cluster.client() as client:
        await client.create(CONFIGMAPS, cm("before"), namespace="default")
        # The simulator models no authorization (SelfSubjectAccessReviews are refused as
        # not modelled, which this test counts): the start-up RBAC check stays off.
        manager = km.Manager(
            client,
            leader_election=km.LeaderElectionConfig("sim", "default"),
            check_permissions=False,
        )
        manager.controller("cms", CONFIGMAPS, namespace="default").complete(reconcile)
        async with running_manager(manager, timeout=30):
            await client.create(CONFIGMAPS, cm("during"), namespace="default")
            with trio.fail_after(60):
                while not {"before", "during"} <= seen:
                    await trio.sleep(0.05)
            assert manager.is_leader
            lease = await client.get(
                GroupVersionResource("coordination.k8s.io", "v1", "leases"),
                "sim",
                namespace="default",
            )
            assert lease["spec"]["holderIdentity"] == manager.identity
            await trio.sleep(120)  # renewals on virtual time
            renewed = await client.get(
                GroupVersionResource("coordination.k8s.io", "v1", "leases"),
                "sim",
                namespace="default",
            )
            assert int(renewed["metadata"]["resourceVersion"]) > int(
                lease["metadata"]["resourceVersion"]
            )
    assert cluster.refusals == []


async def test_an_object_nested_10000_levels_is_stored_and_served_as_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # kube-apiserver stores up to 10,000 levels; Python decodes ~1,000: the model keeps the
    # deep member as its text and serves it verbatim; past 10,000 it refuses (NotModelled).
    cluster = SimulatedCluster([WIDGETS])
    path = "/apis/example.com/v1/namespaces/default/widgets"

    def body(name: str, depth: int) -> bytes:
        head = '{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"%s"},"spec":'
        return (head % name + '{"a":' * depth + "{}" + "}" * (depth + 1)).encode()

    async with cluster.client() as client:
        deep = body("d", 9_990)
        created = await client.send(Request("POST", path, body=deep))
        assert created.status_code == 201
        got = await client.send(Request("GET", path + "/d"))
        spec = b'"spec":' + b'{"a":' * 9_990
        assert got.status_code == 200 and spec in got.body
        assert got.body.endswith(b"{}" + b"}" * 9_991)
        listed = await client.send(Request("GET", path))
        assert spec in listed.body
        too_deep = await client.send(Request("POST", path, body=body("e", 10_000)))
        assert too_deep.status_code == 501
        assert json.loads(too_deep.body)["reason"] == "NotModelled"
    with pytest.raises(NotModelled, match="10000"):
        cluster.check()


async def test_injected_failures_are_worded_as_kube_apiserver_words_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    cluster.fail_requests(RequestFault(429, count=1, identity="x", retry_after=3))
    cluster.fail_requests(RequestFault(409, count=1, method="PUT"))
    async with cluster.client(identity="x") as client:
        created = await client.create(CONFIGMAPS, cm("a"), namespace="default")  # retried
        with pytest.raises(Conflict):
            await client.replace(CONFIGMAPS, created, namespace="default")
    assert [(e.time, e.code) for e in cluster.trace] == [(0.0, 429), (3.0, 201), (3.0, 409)]
    assert [e.identity for e in cluster.trace] == ["x", "x", "x"]
    assert cluster.faults[0].count == 0


async def test_a_dropped_or_expired_watch_is_resumed_by_the_informer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        await client.create(CONFIGMAPS, cm("m0"), namespace="default")
        informer = Informer(client, CONFIGMAPS, namespace="default")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(informer.run)
            await informer.wait_synced()
            for index, fault in enumerate((cluster.drop_watches, cluster.expire_watches), 1):
                await trio.sleep(1)
                assert fault() == 1
                await client.create(CONFIGMAPS, cm(f"m{index}"), namespace="default")
                await trio.sleep(30)
                assert ObjectKey("default", f"m{index}") in informer.store
            nursery.cancel_scope.cancel()
    assert informer.reflector.stats.relists >= 1  # the 410 made it list again
    assert cluster.refusals == []


async def test_a_paused_client_sends_nothing_until_it_resumes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client(identity="p") as client:
        cluster.pause("p", 25.0)
        start = trio.current_time()
        await client.create(CONFIGMAPS, cm("a"), namespace="default")
        assert trio.current_time() - start == 25.0
    assert [(e.time - start, e.method) for e in cluster.trace] == [(25.0, "POST")]
    assert cluster.pauses == [("p", start, start + 25.0)]


async def test_a_pause_on_write_is_recorded_when_the_write_goes_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client(identity="p") as client:
        start = trio.current_time()
        cluster.pause_on_write("p", 10.0)
        await trio.sleep(5)
        assert cluster.pauses == []  # armed, not yet in effect
        await client.create(CONFIGMAPS, cm("a"), namespace="default")
    assert cluster.pauses == [("p", start + 5.0, start + 15.0)]


async def test_access_reviews_are_allowed_as_with_always_allow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The simulator authorizes every request (kube-apiserver with AlwaysAllow), so a
    # Manager's start-up permission check passes on it.
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        reviews = GroupVersionResource("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
        spec = {"resourceAttributes": {"verb": "list", "resource": "configmaps"}}
        answer = await client.create(reviews, {"spec": spec})
        assert answer["status"]["allowed"] is True
        with pytest.raises(ApiError) as caught:  # no attributes: not modelled (501)
            await client.create(reviews, {"spec": {}})
        assert caught.value.status.code == 501
    assert len(cluster.refusals) == 1
