"""Sharded controllers on the real kube-apiserver (issue 25, "Sharded controllers").

Three Managers in one process run one controller sharded, with the ShardedListAndWatch
gate on (a module-scoped apiserver) and off (the session one, ranges applied client-side):
every object is reconciled, each replica only within its active ranges and never one
object by two replicas at once; owned Secrets carry their owner's bucket label and reach
the owning replica's cache only; a replica that stops hands its ranges over.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core.sharding import (
    OWNER_BUCKET_LABEL,
    assign_ranges,
    buckets_of,
    owner_bucket_label,
    shard_hash,
)
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext, ShardingConfig

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
SECRETS = GroupVersionResource("", "v1", "secrets")
OBJECTS = 240
TIMINGS: dict[str, Any] = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}


@pytest.fixture(scope="module")
def gated_apiserver() -> Iterator[ApiServer]:
    """A kube-apiserver with the ShardedListAndWatch gate on."""
    with ApiServer(feature_gates={"ShardedListAndWatch": True}, controller_manager=False) as server:
        yield server


def _uid_hash(obj: Any) -> int:
    return shard_hash(obj)


class Replica:
    """One Manager running the sharded controller, recording what it reconciles."""

    def __init__(
        self, client: Client, name: str, namespace: str, lease_ns: str, shared: dict[str, Any]
    ) -> None:
        self.name = name
        self.reconciled: set[str] = set()
        self.shared = shared
        self.manager = Manager(client, name=f"test/{name}")
        builder = self.manager.controller("mirror", CM, kind="ConfigMap", namespace=namespace)
        builder.sharded(
            ShardingConfig(identity=name, namespace=lease_ns, group="cms", **TIMINGS)
        ).owns(SECRETS).with_workers(4).complete(self.reconcile)
        self.controller = self.manager.controllers[0]
        assert self.controller.sharding is not None
        self.sharding = self.controller.sharding

    async def reconcile(self, ctx: ReconcileContext) -> Reconciled:
        obj = ctx.raw
        if obj is None:
            return Reconciled()
        running: dict[str, str] = self.shared["running"]
        key = str(ctx.key)
        if key in running:
            self.shared["overlaps"].append((key, running[key], self.name))
        running[key] = self.name
        try:
            value = _uid_hash(obj)
            # Handed out while its range was active; it may have started stopping since
            # (then it stays claimed until this reconcile ends): working, never beyond.
            working = self.sharding.membership.member.working(trio.current_time())
            if not any(r.contains_hash(value) for r in working):
                self.shared["outside"].append((key, self.name))
            await ctx.ensure(
                SECRETS,
                {"metadata": {"name": ctx.name}, "stringData": {"from": ctx.name}},
            )
            await trio.sleep(0.005)  # give a concurrent duplicate the chance to show
        finally:
            del running[key]
        self.reconciled.add(ctx.name)
        return Reconciled()

    def cached(self, resource: GroupVersionResource) -> dict[str, Any]:
        informer = next(i for i in self.manager.informers if i.resource == resource)
        return {key.name: obj for key, obj in informer.store.items()}


async def _create(client: Client, namespace: str, count: int, prefix: str = "cm") -> None:
    async def one(n: int) -> None:
        await client.create(
            CM,
            {"metadata": {"name": f"{prefix}-{n:04d}"}, "data": {"n": str(n)}},
            namespace=namespace,
        )

    async with trio.open_nursery() as nursery:
        for start in range(0, count, 20):
            for n in range(start, min(start + 20, count)):
                nursery.start_soon(one, n)
            await trio.sleep(0)


async def _wait(check: Any, what: str, shared: dict[str, Any]) -> None:
    while not check():
        assert not shared["overlaps"], shared["overlaps"][:3]
        assert not shared["outside"], shared["outside"][:3]
        await trio.sleep(0.1)


@pytest.mark.parametrize(
    "gate", [pytest.param("on", marks=pytest.mark.needs_feature("ShardedListAndWatch")), "off"]
)
async def test_three_replicas_split_a_controller_and_one_hands_its_ranges_over(
    gate: str, request: pytest.FixtureRequest
) -> None:
    server: ApiServer = request.getfixturevalue(
        "gated_apiserver" if gate == "on" else "kube_apiserver"
    )
    namespace = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="shctl"))
    lease_ns = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="members"))
    shared: dict[str, Any] = {"running": {}, "overlaps": [], "outside": []}
    path = str(server.kubeconfig_path)
    async with (
        Client.from_kubeconfig(path) as c0,
        Client.from_kubeconfig(path) as c1,
        Client.from_kubeconfig(path) as c2,
    ):
        await _create(c0, namespace, OBJECTS)
        names = [f"replica-{i}" for i in range(3)]
        replicas = [
            Replica(c, n, namespace, lease_ns, shared)
            for c, n in zip((c0, c1, c2), names, strict=True)
        ]
        owners = assign_ranges(names)
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for replica in replicas:
                    await nursery.start(replica.manager.run)
                everything = {f"cm-{n:04d}" for n in range(OBJECTS)}

                def settled() -> bool:
                    done = set().union(*(r.reconciled for r in replicas)) >= everything
                    ranges = all(
                        r.sharding.membership.active() == (owners[r.name],) for r in replicas
                    )
                    return done and ranges

                await _wait(settled, "every object reconciled, three ranges", shared)
                # Each replica's primary cache holds exactly its range (server-side with
                # the gate, client-side without).
                for replica in replicas:
                    cms = replica.cached(CM)
                    expected = {
                        n
                        for n, o in replica_objects(replicas).items()
                        if owners[replica.name].contains_hash(_uid_hash(o))
                    }
                    await _wait(
                        lambda r=replica, e=expected: set(r.cached(CM)) == e, "cache", shared
                    )
                    assert cms
                assert all(r.sharding.server_side is (gate == "on") for r in replicas)
                # With the gate the server sent each replica only its share.
                dropped = [r.controller.primary_informer.reflector.out_of_shard for r in replicas]
                assert (sum(dropped) == 0) is (gate == "on"), dropped
                # Owned Secrets carry their owner's bucket and reach its replica only.
                for replica in replicas:
                    buckets = {f"{b:02x}" for b in buckets_of([owners[replica.name]])}
                    mine = {n for n, o in replica.cached(CM).items() if n in everything}

                    def owned_in_cache(r: Replica = replica, m: set[str] = mine) -> bool:
                        return set(r.cached(SECRETS)) == m

                    await _wait(owned_in_cache, "owned secrets", shared)
                    for secret in replica.cached(SECRETS).values():
                        label = secret["metadata"]["labels"][OWNER_BUCKET_LABEL]
                        owner_uid = secret["metadata"]["ownerReferences"][0]["uid"]
                        assert label == owner_bucket_label(owner_uid)
                        assert label in buckets
                # The gate's state is explained in /readyz?verbose and the metrics.
                note = replicas[0].manager.readiness_notes()[0]
                assert ("server-side" in note) is (gate == "on"), note
                # Replica 2 stops: its ranges are handed over to the two left.
                replicas[2].manager.stop()
                left = replicas[:2]
                after = assign_ranges(names[:2])
                await _wait(
                    lambda: all(r.sharding.membership.active() == (after[r.name],) for r in left),
                    "two ranges",
                    shared,
                )
                for r in left:
                    r.reconciled.clear()
                await _create(c0, namespace, 30, prefix="new")
                fresh = {f"new-{n:04d}" for n in range(30)}
                await _wait(
                    lambda: set().union(*(r.reconciled for r in left)) >= fresh, "new", shared
                )
                union = set().union(*(set(r.cached(CM)) for r in left))
                assert union == everything | fresh
                for replica in left:
                    replica.manager.stop()
    assert not shared["overlaps"], shared["overlaps"][:3]
    assert not shared["outside"], shared["outside"][:3]
    await trio.to_thread.run_sync(lambda: server.delete_namespace(namespace))
    await trio.to_thread.run_sync(lambda: server.delete_namespace(lease_ns))


def replica_objects(replicas: list[Replica]) -> dict[str, Any]:
    """Every ConfigMap some replica caches, by name."""
    found: dict[str, Any] = {}
    for replica in replicas:
        found.update(replica.cached(CM))
    return found


_ = ObjectKey


def test_the_blocking_adapter_shards_a_controller(kube_apiserver: ApiServer) -> None:
    """The generated blocking twin: two Managers on threads split 60 ConfigMaps."""
    import threading
    import time

    from kubemoon_sync import Client as BlockingClient
    from kubemoon_sync import Manager as BlockingManager
    from kubemoon_sync import ShardingConfig as BlockingConfig

    namespace = kube_apiserver.create_namespace(prefix="shsync")
    path = str(kube_apiserver.kubeconfig_path)
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    lock = threading.Lock()
    with BlockingClient.from_kubeconfig(path) as ca, BlockingClient.from_kubeconfig(path) as cb:
        for n in range(60):
            ca.create(CM, {"metadata": {"name": f"cm-{n:02d}"}}, namespace=namespace)
        managers = []
        for client, name in ((ca, "a"), (cb, "b")):
            manager = BlockingManager(client)

            def reconcile(ctx: Any, who: str = name) -> Reconciled:
                if ctx.raw is not None:
                    with lock:
                        seen[who].add(ctx.name)
                return Reconciled()

            config = BlockingConfig(identity=name, namespace=namespace, **TIMINGS)
            manager.controller("copier", CM, kind="ConfigMap", namespace=namespace).sharded(
                config
            ).complete(reconcile)
            managers.append(manager)
        threads = [threading.Thread(target=m.run) for m in managers]
        for thread in threads:
            thread.start()
        owners = assign_ranges(["a", "b"])
        try:
            deadline = time.monotonic() + 60
            while True:
                sharding = [m.controllers[0].sharding for m in managers]
                split = all(
                    s is not None and s.membership.active() == (owners[n],)
                    for s, n in zip(sharding, "ab", strict=True)
                )
                with lock:
                    done = len(seen["a"] | seen["b"]) == 60
                caches = [set(m.controllers[0].primary) for m in managers]
                if split and done and sum(len(c) for c in caches) == 60:
                    break
                assert time.monotonic() < deadline, (split, done, [len(c) for c in caches])
                time.sleep(0.1)
            assert not caches[0] & caches[1]
            for manager in managers:
                for key in manager.controllers[0].primary:
                    obj = manager.controllers[0].primary.get(key)
                    assert obj is not None
                    identity = "a" if manager is managers[0] else "b"
                    assert owners[identity].contains_hash(_uid_hash(obj))
        finally:
            for manager in managers:
                manager.stop()
            for thread in threads:
                thread.join(30)
        assert not any(t.is_alive() for t in threads)
    kube_apiserver.delete_namespace(namespace)


@pytest.mark.asyncio
async def test_the_asyncio_adapter_shards_a_controller(kube_apiserver: ApiServer) -> None:
    """The generated asyncio twin: two Managers in one loop split 60 ConfigMaps."""
    import asyncio

    from kubemoon_asyncio import Client as AioClient
    from kubemoon_asyncio import Manager as AioManager
    from kubemoon_asyncio import ShardingConfig as AioConfig

    namespace = await asyncio.to_thread(kube_apiserver.create_namespace, prefix="shaio")
    path = str(kube_apiserver.kubeconfig_path)
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    owners = assign_ranges(["a", "b"])
    async with AioClient.from_kubeconfig(path) as ca, AioClient.from_kubeconfig(path) as cb:
        for n in range(60):
            await ca.create(CM, {"metadata": {"name": f"cm-{n:02d}"}}, namespace=namespace)
        managers = []
        for client, name in ((ca, "a"), (cb, "b")):
            manager = AioManager(client)

            async def reconcile(ctx: Any, who: str = name) -> Reconciled:
                if ctx.raw is not None:
                    seen[who].add(ctx.name)
                return Reconciled()

            config = AioConfig(identity=name, namespace=namespace, **TIMINGS)
            manager.controller("copier", CM, kind="ConfigMap", namespace=namespace).sharded(
                config
            ).complete(reconcile)
            managers.append(manager)
        tasks = [asyncio.create_task(m.run()) for m in managers]
        try:
            async with asyncio.timeout(60):
                while True:
                    split = all(
                        m.controllers[0].sharding is not None
                        and m.controllers[0].sharding.membership.active() == (owners[n],)
                        for m, n in zip(managers, "ab", strict=True)
                    )
                    caches = [set(m.controllers[0].primary) for m in managers]
                    done = len(seen["a"] | seen["b"]) == 60
                    if split and done and sum(len(c) for c in caches) == 60:
                        break
                    await asyncio.sleep(0.1)
            assert not caches[0] & caches[1]
        finally:
            for manager in managers:
                manager.stop()
            await asyncio.gather(*tasks)
    await asyncio.to_thread(kube_apiserver.delete_namespace, namespace)


async def test_an_owned_object_relabelled_into_another_bucket_is_healed_by_its_owner(
    kube_apiserver: ApiServer,
) -> None:
    """The attacker: someone moves an owned Secret's bucket label to another replica's
    bucket (or removes it). The owning replica stops seeing it, and must not loop on
    AlreadyExists: its ensure() finds the object, sees it is its own and writes the label
    back; the other replica never reconciles the primary (not in its ranges)."""
    server = kube_apiserver
    namespace = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="shatk"))
    shared: dict[str, Any] = {"running": {}, "overlaps": [], "outside": []}
    path = str(server.kubeconfig_path)
    async with Client.from_kubeconfig(path) as c0, Client.from_kubeconfig(path) as c1:
        await _create(c0, namespace, 30)
        names = ["replica-0", "replica-1"]
        replicas = [
            Replica(c, n, namespace, namespace, shared)
            for c, n in zip((c0, c1), names, strict=True)
        ]
        owners = assign_ranges(names)
        everything = {f"cm-{n:04d}" for n in range(30)}
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for replica in replicas:
                    await nursery.start(replica.manager.run)

                def settled() -> bool:
                    cached = set().union(*(set(r.cached(SECRETS)) for r in replicas))
                    ranges = all(
                        r.sharding.membership.active() == (owners[r.name],) for r in replicas
                    )
                    return ranges and cached == everything

                await _wait(settled, "settled", shared)
                victim_name = next(iter(sorted(replicas[0].cached(SECRETS))))
                other_bucket = f"{buckets_of([owners['replica-1']])[0]:02x}"
                for label in (other_bucket, None):
                    await c1.patch(
                        SECRETS,
                        victim_name,
                        {"metadata": {"labels": {OWNER_BUCKET_LABEL: label}}},
                        namespace=namespace,
                    )

                    async def healed(v: str = victim_name) -> bool:
                        secret = await c0.get(SECRETS, v, namespace=namespace)
                        uid = secret["metadata"]["ownerReferences"][0]["uid"]
                        labels = secret["metadata"].get("labels") or {}
                        return bool(labels.get(OWNER_BUCKET_LABEL) == owner_bucket_label(uid))

                    while not await healed():
                        await trio.sleep(0.1)
                    await _wait(
                        lambda v=victim_name: v in replicas[0].cached(SECRETS), "back", shared
                    )
                assert replicas[0].controller.controller.metrics(0).reconcile_errors_total == 0
                for replica in replicas:
                    replica.manager.stop()
    assert not shared["overlaps"] and not shared["outside"]
    await trio.to_thread.run_sync(lambda: server.delete_namespace(namespace))


async def test_a_member_never_takes_over_a_lease_of_its_name_held_by_another_group(
    kube_apiserver: ApiServer,
) -> None:
    """The attacker (or a naming accident): ``<group>-<identity>`` of group ``cms-a`` and
    identity ``x`` is also group ``cms``'s identity ``a-x``. Overwriting that Lease would
    hide its holder's claims from its group; the member refuses and never joins."""
    from kubemoon_core import LEASES
    from kubemoon_core.sharding import GROUP_LABEL, MemberState
    from kubemoon_trio import ShardMembership

    server = kube_apiserver
    namespace = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="shlease"))
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        foreign = await client.create(
            LEASES,
            {
                "metadata": {"name": "cms-a-x", "labels": {GROUP_LABEL: "cms"}},
                "spec": {"holderIdentity": "a-x"},
            },
            namespace=namespace,
        )
        membership = ShardMembership(
            client, group="cms-a", identity="x", namespace=namespace, **TIMINGS
        )
        with trio.move_on_after(3):
            await membership.run()
        assert membership.member.state is MemberState.JOINING
        assert membership.active() == ()
        after = await client.get(LEASES, "cms-a-x", namespace=namespace)
        assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    await trio.to_thread.run_sync(lambda: server.delete_namespace(namespace))


async def test_a_missing_lease_namespace_is_a_readiness_reason_naming_it(
    kube_apiserver: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = kube_apiserver
    namespace = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="shmiss"))
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        manager = Manager(client)
        config = ShardingConfig(identity="lonely", namespace="no-such-namespace", **TIMINGS)
        manager.controller("c", CM, kind="ConfigMap", namespace=namespace).sharded(config).complete(
            lambda ctx: Reconciled()
        )  # type: ignore[arg-type,return-value]
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                while not any("cannot join" in p for p in manager.readiness_problems()):
                    await trio.sleep(0.1)
                manager.stop()
    (problem,) = [p for p in manager.readiness_problems() if "cannot join" in p]
    assert "controller c: cannot join its shard group" in problem
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("'no-such-namespace' exist" in e for e in errors), errors
    await trio.to_thread.run_sync(lambda: server.delete_namespace(namespace))


async def test_a_range_moves_only_after_its_running_reconcile_finished(
    kube_apiserver: ApiServer,
) -> None:
    """Replica a holds everything and is stuck reconciling one object of what becomes
    b's half when b joins: a's range stays claimed (stopping) and b does not start that
    half until the reconcile ends; then b takes it over and reconciles the object."""
    server = kube_apiserver
    namespace = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="shmove"))
    shared: dict[str, Any] = {"running": {}, "overlaps": [], "outside": []}
    path = str(server.kubeconfig_path)
    owners = assign_ranges(["replica-a", "replica-b"])
    async with Client.from_kubeconfig(path) as ca, Client.from_kubeconfig(path) as cb:
        await _create(ca, namespace, 20)
        objects = {o["metadata"]["name"]: o async for o in ca.list(CM, namespace=namespace)}
        stuck = next(
            n for n, o in sorted(objects.items()) if owners["replica-b"].contains_hash(_uid_hash(o))
        )
        release = trio.Event()
        a = Replica(ca, "replica-a", namespace, namespace, shared)
        plain = a.reconcile

        async def slow(ctx: ReconcileContext) -> Reconciled:
            if ctx.name == stuck and not release.is_set():
                shared["stuck"] = True
                await release.wait()
            return await plain(ctx)

        a.controller._reconcile = slow  # the test's hook: one slow reconcile
        b = Replica(cb, "replica-b", namespace, namespace, shared)
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                await nursery.start(a.manager.run)
                await _wait(lambda: "stuck" in shared, "a stuck on its object", shared)
                await nursery.start(b.manager.run)
                await _wait(lambda: bool(a.sharding.membership.stopping()), "a stopping", shared)
                for _ in range(30):  # three seconds: six retry periods
                    assert a.sharding.membership.stopping()
                    assert b.sharding.membership.active() == ()
                    await trio.sleep(0.1)
                release.set()
                await _wait(
                    lambda: (
                        b.sharding.membership.active() == (owners["replica-b"],)
                        and stuck in b.reconciled
                    ),
                    "b took over and reconciled the object",
                    shared,
                )
                a.manager.stop()
                b.manager.stop()
    assert not shared["overlaps"] and not shared["outside"]
    await trio.to_thread.run_sync(lambda: server.delete_namespace(namespace))
