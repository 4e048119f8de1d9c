"""Sharded list and watch on the real kube-apiserver (issue 25, item 1).

A module-scoped apiserver runs with ``--feature-gates=ShardedListAndWatch=true``; the
session one has the gate off. On both, the partition KubeMoon computes client-side (FNV-1a
64 of each uid) must equal what each shard receives: from the server itself when the gate
is on, from the client filter when it is off.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import trio

from kubemoon_core import (
    GroupVersionResource,
    ListOptions,
    ObjectKey,
    Reconciled,
    delete_collection_request,
)
from kubemoon_core.errors import LocalProtocolError, ShardSelectorError
from kubemoon_core.lowlevel import ReflectorState
from kubemoon_core.sharding import (
    CLAIMS_ANNOTATION,
    HASH_SPACE,
    LEAVING_ANNOTATION,
    MemberState,
    ShardRange,
    ShardSelector,
    assign_ranges,
    shard_hash,
)
from kubemoon_testing import ApiServer
from kubemoon_trio import (
    Client,
    Informer,
    Manager,
    ReconcileContext,
    ShardMembership,
    detect_sharded_list_and_watch,
)

pytestmark = pytest.mark.integration
# Tests on the gated server: kube-apiserver < 1.36 has no such gate.
NEEDS_SHARDING = pytest.mark.needs_feature("ShardedListAndWatch")

CM = GroupVersionResource("", "v1", "configmaps")
SHARDS = [ShardSelector.equal_split(4, i) for i in range(4)]
GATED_OBJECTS = 1500
UNGATED_OBJECTS = 300


@pytest.fixture(scope="module")
def gated_apiserver() -> Iterator[ApiServer]:
    """A kube-apiserver with the ShardedListAndWatch gate on (no controller manager)."""
    with ApiServer(feature_gates={"ShardedListAndWatch": True}, controller_manager=False) as server:
        yield server


async def _client(server: ApiServer) -> Client:
    return Client.from_kubeconfig(str(server.kubeconfig_path), max_connections=24)


async def _create_many(client: Client, namespace: str, count: int) -> dict[str, str]:
    """Create ``count`` ConfigMaps concurrently; return name -> uid."""
    created: dict[str, str] = {}
    send, receive = trio.open_memory_channel[int](count)
    for n in range(count):
        send.send_nowait(n)
    send.close()

    async def worker() -> None:
        async for n in receive:
            obj = await client.create(
                CM,
                {"metadata": {"name": f"cm-{n:05d}"}, "data": {"n": str(n)}},
                namespace=namespace,
            )
            created[obj["metadata"]["name"]] = obj["metadata"]["uid"]

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(worker)
    return created


def _partition(uids: dict[str, str]) -> list[set[str]]:
    parts: list[set[str]] = [set() for _ in SHARDS]
    for name, uid in uids.items():
        (index,) = [i for i, s in enumerate(SHARDS) if s.contains({"metadata": {"uid": uid}})]
        parts[index].add(name)
    return parts


@pytest.fixture(scope="module")
def gated_namespace(gated_apiserver: ApiServer) -> str:
    return gated_apiserver.create_namespace(prefix="sharded")


@pytest.fixture(scope="module")
def gated_objects(gated_apiserver: ApiServer, gated_namespace: str) -> dict[str, str]:
    async def main() -> dict[str, str]:
        async with await _client(gated_apiserver) as client:
            return await _create_many(client, gated_namespace, GATED_OBJECTS)

    return trio.run(main)


@pytest.fixture
async def gated_client(gated_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with await _client(gated_apiserver) as client:
        yield client


@NEEDS_SHARDING
async def test_the_gate_is_detected_on_and_off(
    gated_client: Client, kube_apiserver: ApiServer
) -> None:
    assert await detect_sharded_list_and_watch(gated_client) is True
    async with await _client(kube_apiserver) as plain:
        assert await detect_sharded_list_and_watch(plain) is False


@NEEDS_SHARDING
async def test_paged_lists_of_each_shard_equal_the_client_side_partition(
    gated_client: Client, gated_namespace: str, gated_objects: dict[str, str]
) -> None:
    expected = _partition(gated_objects)
    assert all(expected), "every shard should hold some of 1,500 objects"
    for selector, names in zip(SHARDS, expected, strict=True):
        items = gated_client.list(
            CM, namespace=gated_namespace, options=ListOptions(limit=100, shard_selector=selector)
        )
        listed = {obj["metadata"]["name"]: obj["metadata"]["uid"] async for obj in items}
        assert set(listed) == names
        assert all(
            selector.contains_hash(shard_hash({"metadata": {"uid": u}})) for u in listed.values()
        )
    # A union of two ranges (`||`) returns both shards.
    union = ShardSelector(SHARDS[0].ranges + SHARDS[2].ranges)
    items = gated_client.list(
        CM, namespace=gated_namespace, options=ListOptions(limit=100, shard_selector=union)
    )
    assert {obj["metadata"]["name"] async for obj in items} == expected[0] | expected[2]


@NEEDS_SHARDING
async def test_built_in_lists_echo_the_shard_info(
    gated_apiserver: ApiServer, gated_namespace: str, gated_objects: dict[str, str]
) -> None:
    from urllib.parse import quote

    selector = SHARDS[1].render()
    path = (
        f"/api/v1/namespaces/{gated_namespace}/configmaps?limit=5&shardSelector={quote(selector)}"
    )
    answer = await trio.to_thread.run_sync(lambda: gated_apiserver.request("GET", path))
    assert answer.status == 200
    assert answer.json()["metadata"]["shardInfo"]["selector"] == selector


async def _watch_shard(
    client: Client, namespace: str, selector: ShardSelector, rv: str, want: set[str]
) -> set[str]:
    """Names of the MODIFIED events one shard's watch receives until it has ``want``."""
    seen: set[str] = set()
    options = ListOptions(resource_version=rv, timeout_seconds=60, shard_selector=selector)
    async with client.watch(CM, namespace=namespace, options=options) as events:
        async for event in events:
            if event.type == "MODIFIED":
                seen.add(event.object["metadata"]["name"])
            if seen >= want:
                break
    return seen


@NEEDS_SHARDING
async def test_watches_of_each_shard_receive_exactly_the_client_side_partition(
    gated_client: Client, gated_namespace: str, gated_objects: dict[str, str]
) -> None:
    updated = dict(sorted(gated_objects.items())[:400])
    expected = _partition(updated)
    listing = gated_client.list(CM, namespace=gated_namespace, options=ListOptions(limit=500))
    async for _ in listing:
        pass
    rv = listing.resource_version
    assert rv
    results: list[set[str]] = [set() for _ in SHARDS]

    async def watch(index: int) -> None:
        results[index] = await _watch_shard(
            gated_client, gated_namespace, SHARDS[index], rv, expected[index]
        )

    async def update(names: list[str]) -> None:
        for name in names:
            await gated_client.patch(
                CM, name, {"data": {"touched": "1"}}, namespace=gated_namespace
            )

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for index in range(len(SHARDS)):
                nursery.start_soon(watch, index)
            names = sorted(updated)
            for chunk in range(8):
                nursery.start_soon(update, names[chunk::8])
    # Each watch ended as soon as it had its share, and nothing outside it came.
    assert results == expected


async def _run_informers(client: Client, namespace: str) -> list[Informer]:
    informers = [
        Informer(
            client,
            CM,
            namespace=namespace,
            page_size=100,
            rng=random.Random(index),
            shard_selector=selector,
        )
        for index, selector in enumerate(SHARDS)
    ]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for informer in informers:
                # Each stops once synced, before its watch: cancelling a connection in its
                # TLS handshake leaks the socket (httpcore's trio backend closes it only on
                # an Exception, not on a cancellation).
                nursery.start_soon(functools.partial(informer.run, until=_synced(informer)))
    assert all(informer.has_synced for informer in informers)
    return informers


def _synced(informer: Informer) -> Callable[[], bool]:
    return lambda: informer.has_synced


# States in which an informer has no connection being set up: safe to cancel.
_QUIET = frozenset(
    {
        ReflectorState.SYNC_DUE,
        ReflectorState.PAGE_DUE,
        ReflectorState.WATCH_DUE,
        ReflectorState.WATCHING,
        ReflectorState.STREAMING,
    }
)


async def _quiet(informer: Informer) -> None:
    """Wait until ``informer`` sets up no connection (see ``_run_informers``)."""
    while informer.reflector.state not in _QUIET:
        await trio.sleep(0.01)


def _names(informer: Informer) -> set[str]:
    return {obj["metadata"]["name"] for obj in informer.store.objects()}


@NEEDS_SHARDING
async def test_sharded_informers_hold_exactly_their_share_with_the_gate_on(
    gated_client: Client,
    gated_namespace: str,
    gated_objects: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = _partition(gated_objects)
    informers = await _run_informers(gated_client, gated_namespace)
    assert [_names(i) for i in informers] == expected
    # The server filtered: nothing outside a shard reached any client, nothing to report.
    assert sum(i.reflector.stats.out_of_shard for i in informers) == 0
    assert not [r for r in caplog.records if "filtering client-side" in r.getMessage()]


@NEEDS_SHARDING
async def test_a_sharded_streaming_list_holds_exactly_its_share(
    gated_client: Client, gated_namespace: str, gated_objects: dict[str, str]
) -> None:
    expected = _partition(gated_objects)[2]
    informer = Informer(
        gated_client,
        CM,
        namespace=gated_namespace,
        streaming_list=True,
        rng=random.Random(5),
        shard_selector=SHARDS[2],
    )
    with trio.fail_after(60):
        await informer.run(until=_synced(informer))
    assert informer.reflector.streaming_list  # the server streamed; no LIST fallback
    assert informer.reflector.stats.relists == 0
    assert _names(informer) == expected
    assert informer.reflector.stats.out_of_shard == 0


@NEEDS_SHARDING
async def test_delete_collection_takes_a_shard_only_when_asked(
    gated_client: Client, gated_apiserver: ApiServer
) -> None:
    namespace = await trio.to_thread.run_sync(
        lambda: gated_apiserver.create_namespace(prefix="shard-delete")
    )
    created = await _create_many(gated_client, namespace, 40)
    doomed = _partition(created)[0]
    options = ListOptions(shard_selector=SHARDS[0])
    with pytest.raises(LocalProtocolError, match="allow_shard_selector"):
        delete_collection_request(CM, namespace=namespace, list_options=options)
    await gated_client.request(
        delete_collection_request(
            CM, namespace=namespace, list_options=options, allow_shard_selector=True
        )
    )
    left = {obj["metadata"]["name"] async for obj in gated_client.list(CM, namespace=namespace)}
    # The gated server honours the selector: exactly the shard is gone.
    assert left == set(created) - doomed
    await trio.to_thread.run_sync(lambda: gated_apiserver.delete_namespace(namespace))


async def test_with_the_gate_off_the_selector_is_ignored_and_the_client_filters(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with await _client(kube_apiserver) as client:
        created = await _create_many(client, kube_namespace, UNGATED_OBJECTS)
        expected = _partition(created)
        # The server ignores the selector: every object comes back.
        items = client.list(
            CM, namespace=kube_namespace, options=ListOptions(limit=100, shard_selector=SHARDS[0])
        )
        assert {obj["metadata"]["name"] async for obj in items} == set(created)
        informers = await _run_informers(client, kube_namespace)
    assert [_names(i) for i in informers] == expected
    assert sum(i.reflector.stats.out_of_shard for i in informers) == 3 * UNGATED_OBJECTS
    # Each informer says once that it filters client-side.
    warnings = [r for r in caplog.records if "filtering client-side" in r.getMessage()]
    assert sorted(r.getMessage().split(":")[0] for r in warnings) == sorted(
        i.name for i in informers
    )


@pytest.mark.parametrize(
    "selector",
    [
        "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
        "shardRange(object.metadata.uid, '0x00000000000000AB', '0x8000000000000000')",
        "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') ||",
        "nonsense",
    ],
)
@NEEDS_SHARDING
async def test_what_the_gated_server_refuses_the_client_refuses_first(
    gated_apiserver: ApiServer, selector: str
) -> None:
    """Differential: a malformed selector is the server's HTTP 500, and never leaves us."""
    from urllib.parse import quote

    path = f"/api/v1/namespaces/default/configmaps?limit=1&shardSelector={quote(selector)}"
    answer = await trio.to_thread.run_sync(lambda: gated_apiserver.request("GET", path))
    assert answer.status >= 400, answer.body[:200]
    with pytest.raises(ShardSelectorError):
        ShardSelector.parse(selector)


@NEEDS_SHARDING
def test_well_formed_selectors_parse_and_the_server_accepts_them(
    gated_apiserver: ApiServer,
) -> None:
    from urllib.parse import quote

    for selector in (SHARDS[3], ShardSelector(SHARDS[0].ranges + SHARDS[1].ranges)):
        text = selector.render()
        assert ShardSelector.parse(text) == selector
        path = f"/api/v1/namespaces/default/configmaps?limit=1&shardSelector={quote(text)}"
        answer = gated_apiserver.request("GET", path)
        assert answer.status == 200, answer.body[:200]


# -- membership: two replicas split a collection, then one leaves ------------------------


class ShardedReplica:
    """What a sharded controller does: an informer on the replica's active ranges, restarted
    when they change; the work of a stopping range stops before it is confirmed."""

    def __init__(self, client: Client, membership: ShardMembership, namespace: str) -> None:
        self.client = client
        self.membership = membership
        self.namespace = namespace
        self.informer: Informer | None = None
        self.selector: ShardSelector | None = None

    async def run(self) -> None:
        """Until the replica has left; then every task has ended (nothing is cancelled
        while it sets up a connection)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.membership.run)
            scope: trio.CancelScope | None = None
            while self.membership.member.state is not MemberState.LEFT:
                active = self.membership.active()
                wanted = ShardSelector(active) if active else None
                if wanted != self.selector or self.membership.stopping():
                    if scope is not None:
                        assert self.informer is not None
                        await _quiet(self.informer)
                        scope.cancel()  # the informer stops: no work on the old ranges
                        scope = None
                    self.informer = None
                    for shard in self.membership.stopping():
                        self.membership.stopped(shard)
                    self.selector = wanted
                    if wanted is not None:
                        self.informer = Informer(
                            self.client,
                            CM,
                            namespace=self.namespace,
                            page_size=500,
                            rng=random.Random(1),
                            shard_selector=wanted,
                        )
                        scope = trio.CancelScope()
                        nursery.start_soon(self._inform, self.informer, scope)
                with trio.move_on_after(0.5):
                    await self.membership.wait_changed()
            if scope is not None:
                assert self.informer is not None
                await _quiet(self.informer)
                scope.cancel()

    async def _inform(self, informer: Informer, scope: trio.CancelScope) -> None:
        with scope:
            await informer.run()

    def names(self) -> set[str] | None:
        if self.informer is None or not self.informer.has_synced:
            return None
        return _names(self.informer)


@NEEDS_SHARDING
async def test_two_replicas_split_a_collection_by_membership_leases_and_one_takes_over(
    gated_apiserver: ApiServer, gated_namespace: str, gated_objects: dict[str, str]
) -> None:
    lease_ns = await trio.to_thread.run_sync(
        lambda: gated_apiserver.create_namespace(prefix="members")
    )
    async with await _client(gated_apiserver) as ca, await _client(gated_apiserver) as cb:
        replicas = [
            ShardedReplica(
                client,
                ShardMembership(
                    client,
                    group="cms",
                    identity=name,
                    namespace=lease_ns,
                    lease_duration=6.0,
                    renew_deadline=4.0,
                    retry_period=0.5,
                ),
                gated_namespace,
            )
            for client, name in ((ca, "replica-a"), (cb, "replica-b"))
        ]
        owners = assign_ranges(["replica-a", "replica-b"])
        expected = [
            {
                n
                for n, uid in gated_objects.items()
                if owners[who].contains_hash(shard_hash({"metadata": {"uid": uid}}))
            }
            for who in ("replica-a", "replica-b")
        ]
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for replica in replicas:
                    nursery.start_soon(replica.run)
                while [r.names() for r in replicas] != expected:
                    # Never two replicas on one hash, whatever the moment.
                    a, b = (set(r.membership.member.working(trio.current_time())) for r in replicas)
                    assert not any(x.start < y.end and y.start < x.end for x in a for y in b)
                    await trio.sleep(0.1)
                assert (
                    sum(r.informer.reflector.stats.out_of_shard for r in replicas if r.informer)
                    == 0
                )
                # Replica b leaves: once it stopped, a takes over the whole collection.
                replicas[1].membership.leave()
                while replicas[0].names() != set(gated_objects):
                    a, b = (set(r.membership.member.working(trio.current_time())) for r in replicas)
                    assert not any(x.start < y.end and y.start < x.end for x in a for y in b)
                    await trio.sleep(0.1)
                while replicas[1].membership.member.state is not MemberState.LEFT:
                    await trio.sleep(0.1)
                replicas[0].membership.leave()  # both tasks end on their own
    await trio.to_thread.run_sync(lambda: gated_apiserver.delete_namespace(lease_ns))


@NEEDS_SHARDING
def test_the_blocking_adapter_detects_the_gate_joins_and_leaves(
    gated_apiserver: ApiServer,
) -> None:
    """The generated blocking twin: one replica claims the whole space, then leaves."""
    from kubemoon_sync import Client as BlockingClient
    from kubemoon_sync import ShardMembership as BlockingMembership
    from kubemoon_sync import detect_sharded_list_and_watch as blocking_detect

    namespace = gated_apiserver.create_namespace(prefix="blocking-members")
    seen: list[tuple[ShardRange, ...]] = []
    # Garbage in the group (a tenant's, say) claims nothing and joins nothing.
    for name, holder, claims in (("bad-claims", "intruder", "not-a-range"), ("no-holder", "", "")):
        answer = gated_apiserver.request(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "labels": {"shards.kubemoon.dev/group": "solo"},
                    "annotations": {CLAIMS_ANNOTATION: claims},
                },
                "spec": {"holderIdentity": holder} if holder else {},
            },
        )
        assert answer.status == 201, answer.body[:200]

    def on_change(membership: BlockingMembership) -> None:
        for shard in membership.stopping():
            membership.stopped(shard)
        active = membership.active()
        if active and not membership.member.leaving:
            seen.append(active)
            membership.leave()

    with BlockingClient.from_kubeconfig(str(gated_apiserver.kubeconfig_path)) as client:
        assert blocking_detect(client) is True
        membership = BlockingMembership(
            client,
            group="solo",
            identity="only",
            namespace=namespace,
            lease_duration=6.0,
            renew_deadline=4.0,
            retry_period=0.5,
            on_change=on_change,
        )
        membership.run()  # returns once the replica has left
    assert seen == [(ShardRange(0, HASH_SPACE),)]
    assert membership.member.state is MemberState.LEFT
    lease = gated_apiserver.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/solo-only"
    ).json()
    assert lease["metadata"]["annotations"][CLAIMS_ANNOTATION] == ""
    assert lease["metadata"]["annotations"][LEAVING_ANNOTATION] == "true"
    gated_apiserver.delete_namespace(namespace)


# -- the priority queue in the runtime ----------------------------------------------------


async def test_after_a_start_with_a_full_cache_the_runtime_reconciles_a_new_object_next(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    """300 cached ConfigMaps are queued at low priority (first list, enqueue_cached); one
    created while the first reconcile runs is the very next reconciled."""
    cached = 300
    async with await _client(kube_apiserver) as client:
        await _create_many(client, kube_namespace, cached)
        order: list[str] = []
        release = trio.Event()

        async def reconcile(ctx: ReconcileContext) -> Reconciled:
            order.append(ctx.key.name)
            if len(order) == 1:
                await release.wait()  # hold the only worker while the new object arrives
            return Reconciled()

        manager = Manager(client)
        manager.controller("prio", CM, kind="ConfigMap", namespace=kube_namespace).complete(
            reconcile
        )
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                while not order:
                    await trio.sleep(0.01)
                await client.create(CM, {"metadata": {"name": "zz-new"}}, namespace=kube_namespace)
                informer = manager.controllers[0].primary_informer
                while ObjectKey(kube_namespace, "zz-new") not in informer.store:
                    await trio.sleep(0.01)  # its change is queued when the cache has it
                assert len(manager.controllers[0].controller.queue) == cached  # 299 + new
                release.set()
                while len(order) < 3:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert order[1] == "zz-new", order[:5]
