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

from kubemoon_core import (
    OWNER_BUCKET_LABEL,
    GroupVersionResource,
    ObjectKey,
    Reconciled,
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
    with ApiServer(
        extra_args=["--feature-gates=ShardedListAndWatch=true"], controller_manager=False
    ) as server:
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
            active = self.sharding.membership.active()
            if not any(r.contains_hash(value) for r in active):
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


@pytest.mark.parametrize("gate", ["on", "off"])
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
