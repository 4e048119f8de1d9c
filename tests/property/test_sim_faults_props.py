"""Whole-system properties on the simulated API server (issue 32): the real
``kubemoon_trio`` Manager (informers, work queue, leader election, write gate) on
``kubemoon_testing.sim`` under trio's ``MockClock``, driven by seeded fault schedules.

One property per fault class the outside probes found (issue 31's hardening):

(a) a replica frozen past its Lease never writes outside its leadership (checked against
    the Lease history the server stored), with ``..._catches_the_reverted_fix`` showing
    the property fails once the write gate's check is switched off;
(b) one custom resource nested 10,000 levels does not stop the informer: every other
    object reconciles;
(c) a tenant's flood of updates does not starve the first reconciles of the others;
(d) ConfigMaps whose page is past the client's body cap do not stop a restart (the LIST
    page shrinks until it fits);
(a') a member of three sharded replicas frozen past its membership Lease never writes
    outside its claimed range (with its own ``..._catches_the_reverted_fix``).

And the simulation itself: the same seed gives the same trace.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import AlreadyExists, NotFound
from kubemoon_core.lowlevel import WriteGate
from kubemoon_core.sharding import shard_hash
from kubemoon_testing.sim import (
    FaultSchedule,
    Pause,
    PauseOnWrite,
    SimulatedCluster,
    SimulationResult,
    StatusError,
    TenantCreate,
    TenantFlood,
    TraceEntry,
    custom,
    lease_violations,
    shard_violations,
    simulate,
)

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
LEASE = "default/mirror"
REPLICAS = ("a", "b")
SOURCES = tuple(f"src{index}" for index in range(3))

# Each example is a whole trio run on a MockClock: a handful of examples keeps a property at
# seconds; `make fuzz` style exploration raises max_examples.
SIM_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


def run_sim(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """One simulation: a fresh trio run on virtual time (autojump)."""
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def source(name: str, value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"role": "source"}},
        "data": {"k": value},
    }


async def copy_reconcile(ctx: km.ReconcileContext[Any]) -> Reconciled:
    """A plausible small controller: keep ``<name>-copy`` equal to each source's data."""
    obj = ctx.raw
    if obj is None:
        return Reconciled()
    client = ctx.client
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{ctx.name}-copy"},
        "data": dict(obj.get("data") or {}),
    }
    try:
        current = await client.get(CONFIGMAPS, f"{ctx.name}-copy", namespace=ctx.namespace)
    except NotFound:
        await client.create(CONFIGMAPS, body, namespace=ctx.namespace)
        return Reconciled()
    if current.get("data") != body["data"]:
        current["data"] = body["data"]
        await client.replace(CONFIGMAPS, current, namespace=ctx.namespace)
    return Reconciled()


def elected_copier(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
    manager = km.Manager(
        client,
        leader_election=km.LeaderElectionConfig("mirror", "default", identity=identity),
        registry=CollectorRegistry(),
        rng=rng,
        grace_period=1.0,
        # The schedules were drawn against a replica that campaigns at once; the start-up
        # access reviews (answered by the simulator) would shift every instant of them.
        check_permissions=False,
    )
    manager.controller(
        "copier", CONFIGMAPS, namespace="default", label_selector="role=source"
    ).complete(copy_reconcile)
    return manager


def converged(result: SimulationResult, values: dict[str, str]) -> bool:
    store = result.cluster.server
    res = store.resource(CONFIGMAPS)
    for name, value in values.items():
        try:
            copy = store.get(res, "default", f"{name}-copy")
        except StatusError:  # absent: not converged
            return False
        if copy.get("data") != {"k": value}:
            return False
    return True


# -- (a) a replica paused past its Lease ----------------------------------------------------


def paused_leader_run(
    pause_seconds: float, paused: str, fault_seed: int, *, faults: int
) -> SimulationResult:
    schedule = FaultSchedule(
        (
            *(
                TenantCreate(1.0 + i, CONFIGMAPS, "default", source(n))
                for i, n in enumerate(SOURCES)
            ),
            PauseOnWrite(0.0, paused, pause_seconds),
            *FaultSchedule.generate(fault_seed, REPLICAS, steps=faults, duration=60.0).steps,
        )
    )

    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=fault_seed)
        return await simulate(
            cluster,
            dict.fromkeys(REPLICAS, elected_copier),
            schedule,
            duration=180.0,
            seed=fault_seed,
        )

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    return result


@SIM_SETTINGS
@given(
    pause_seconds=st.floats(5.0, 60.0),
    paused=st.sampled_from(REPLICAS),
    fault_seed=st.integers(0, 2**16),
    faults=st.integers(0, 4),
)
def test_a_paused_replica_never_writes_outside_its_lease(
    pause_seconds: float, paused: str, fault_seed: int, faults: int
) -> None:
    result = paused_leader_run(pause_seconds, paused, fault_seed, faults=faults)
    violations = lease_violations(result.trace, result.cluster.lease_history, LEASE, REPLICAS)
    assert violations == [], "\n".join(map(str, violations))
    # And the copies converge once the faults stop.
    assert converged(result, dict.fromkeys(SOURCES, "v"))


def test_a_paused_replica_catches_the_reverted_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # The write gate's check switched off: the frozen reconcile's write goes out on stale
    # leadership once it thaws, and the property sees it.
    monkeypatch.setattr(WriteGate, "check", lambda self, now, what="a write": None)
    result = paused_leader_run(40.0, "a", 0, faults=0)
    violations = lease_violations(result.trace, result.cluster.lease_history, LEASE, REPLICAS)
    assert violations, "the property must detect a write on stale leadership"
    print(*violations, sep="\n")


def test_the_same_seed_gives_the_same_trace() -> None:
    first = paused_leader_run(30.0, "b", 7, faults=4)
    second = paused_leader_run(30.0, "b", 7, faults=4)
    assert first.trace == second.trace
    assert len(first.trace) > 50


# -- (c) a tenant's update flood ------------------------------------------------------------

OTHERS = tuple(f"other{index:02d}" for index in range(20))


def flood_run(updates: int, at: float, seed: int) -> SimulationResult:
    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=seed)
        async with cluster.client(identity="setup") as setup:
            for name in OTHERS:
                await setup.create(CONFIGMAPS, source(name), namespace="default")
            await setup.create(CONFIGMAPS, source("flood", "0"), namespace="default")
        schedule = FaultSchedule((TenantFlood(at, "default", "flood", updates),))
        # Bounded: the first reconciles of all others within 20 virtual seconds of start.
        return await simulate(cluster, {"a": elected_copier}, schedule, duration=20.0, seed=seed)

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    return result


@settings(SIM_SETTINGS, max_examples=5)
@given(updates=st.integers(200, 1_000), at=st.floats(0.0, 3.0), seed=st.integers(0, 2**16))
def test_a_tenant_flood_does_not_starve_the_others(updates: int, at: float, seed: int) -> None:
    result = flood_run(updates, at, seed)
    tenant_writes = sum(1 for e in result.trace if e.identity == "tenant" and e.is_write)
    assert tenant_writes == updates + 1  # the flood ran (a create, then its updates)
    assert converged(result, dict.fromkeys(OTHERS, "v"))


# -- (d) ConfigMaps past the client's body cap, across a restart ----------------------------

BODY_CAP = 256 * 1024


def huge_run(count: int, size: int, seed: int) -> SimulationResult:
    late = tuple(f"late{index}" for index in range(3))

    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=seed)
        async with cluster.client(identity="setup") as setup:
            for index in range(count):
                await setup.create(
                    CONFIGMAPS, source(f"huge{index:02d}", "x" * size), namespace="default"
                )
        schedule = FaultSchedule(
            (
                # Frozen past its Lease: it restarts with a cold cache (a fresh LIST).
                Pause(10.0, "a", 30.0),
                *(TenantCreate(20.0, CONFIGMAPS, "default", source(name)) for name in late),
            )
        )
        return await simulate(
            cluster,
            {"a": elected_copier},
            schedule,
            duration=90.0,
            seed=seed,
            client_options={"max_body_size": BODY_CAP},
        )

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    return result


@settings(SIM_SETTINGS, max_examples=4)
@given(count=st.integers(6, 12), size=st.integers(60_000, 120_000), seed=st.integers(0, 2**8))
def test_huge_configmaps_do_not_stop_a_restart(count: int, size: int, seed: int) -> None:
    result = huge_run(count, size, seed)
    assert len(result.managers["a"]) >= 2, result.endings  # it did restart
    for manager in result.managers["a"]:  # and each start's LIST shrank its pages to fit
        assert all(informer.reflector.stats.page_shrinks > 0 for informer in manager.informers)
    values = {f"huge{index:02d}": "x" * size for index in range(count)}
    values.update(dict.fromkeys((f"late{index}" for index in range(3)), "v"))
    assert converged(result, values)


# -- (b) one object nested 10,000 levels ----------------------------------------------------

BLOBS = custom("example.com", "v1", "blobs", "Blob")
BLOB_GVR = GroupVersionResource("example.com", "v1", "blobs")


def deep_blob(name: str, depth: int) -> bytes:
    head = '{"apiVersion":"example.com/v1","kind":"Blob","metadata":{"name":"' + name + '"},"spec":'
    return (head + '{"a":' * depth + "{}" + "}" * (depth + 1)).encode()


async def seen_reconcile(ctx: km.ReconcileContext[Any]) -> Reconciled:
    if ctx.raw is None:
        return Reconciled()
    seen = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{ctx.name}-seen"}}
    try:
        await ctx.client.create(CONFIGMAPS, seen, namespace=ctx.namespace)
    except AlreadyExists:
        pass
    return Reconciled()


def blob_watcher(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
    manager = km.Manager(client, registry=CollectorRegistry(), rng=rng, check_permissions=False)
    manager.controller("blobs", BLOB_GVR, kind="Blob", namespace="default").complete(seen_reconcile)
    return manager


def deep_run(others: int, at: float, seed: int) -> SimulationResult:
    async def main() -> SimulationResult:
        cluster = SimulatedCluster([BLOBS], seed=seed)
        async with cluster.client(identity="setup") as setup:
            for index in range(others // 2):  # some before the first LIST, some after
                body = {"apiVersion": "example.com/v1", "kind": "Blob"}
                await setup.create(
                    BLOB_GVR, {**body, "metadata": {"name": f"b{index}"}}, namespace="default"
                )
        late = [
            TenantCreate(
                at + 1.0 + index,
                BLOB_GVR,
                "default",
                {"apiVersion": "example.com/v1", "kind": "Blob", "metadata": {"name": f"b{index}"}},
            )
            for index in range(others // 2, others)
        ]
        schedule = FaultSchedule(
            (TenantCreate(at, BLOB_GVR, "default", deep_blob("deep", 9_990)), *late)
        )
        return await simulate(cluster, {"a": blob_watcher}, schedule, duration=60.0, seed=seed)

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    return result


@settings(SIM_SETTINGS, max_examples=4)
@given(others=st.integers(2, 10), at=st.floats(0.0, 5.0), seed=st.integers(0, 2**8))
def test_one_deeply_nested_object_does_not_stop_the_informer(
    others: int, at: float, seed: int
) -> None:
    result = deep_run(others, at, seed)
    store = result.cluster.server
    names = {
        item["metadata"]["name"]
        for item in store.list(store.resource(CONFIGMAPS), "default")["items"]
    }
    assert {f"b{index}-seen" for index in range(others)} <= names
    assert "deep-seen" not in names  # kept out of the cache and of reconciles
    (manager,) = result.managers["a"]
    assert [informer.reflector.stats.kept_out for informer in manager.informers] == [1]


# -- (a) for shards: a member paused past its membership Lease ------------------------------

SHARDED = ("a", "b", "c")
SHARD_SOURCES = tuple(f"s{index}" for index in range(8))


def sharded_copier(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
    manager = km.Manager(
        client, registry=CollectorRegistry(), rng=rng, grace_period=1.0, check_permissions=False
    )
    manager.controller(
        "copier", CONFIGMAPS, namespace="default", label_selector="role=source"
    ).sharded(km.ShardingConfig(identity=identity)).complete(copy_reconcile)
    return manager


def paused_member_run(
    pause_seconds: float, paused: str, fault_seed: int, *, faults: int
) -> tuple[SimulationResult, list[Any]]:
    schedule = FaultSchedule(
        (
            *(
                TenantCreate(1.0 + i, CONFIGMAPS, "default", source(n))
                for i, n in enumerate(SHARD_SOURCES)
            ),
            PauseOnWrite(0.0, paused, pause_seconds),
            *FaultSchedule.generate(fault_seed, SHARDED, steps=faults, duration=60.0).steps,
        )
    )

    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=fault_seed)
        return await simulate(
            cluster,
            dict.fromkeys(SHARDED, sharded_copier),
            schedule,
            duration=180.0,
            seed=fault_seed,
        )

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    server = result.cluster.server
    uids = {
        item["metadata"]["name"]: item["metadata"]["uid"]
        for item in server.list(server.resource(CONFIGMAPS), "default")["items"]
    }

    def key_hash(write: TraceEntry) -> int | None:
        source_name = (write.name or "").removesuffix("-copy")
        uid = uids.get(source_name)
        return None if uid is None else shard_hash({"metadata": {"uid": uid}})

    violations = shard_violations(
        result.trace,
        result.cluster.lease_history,
        group="copier",
        namespace="default",
        identities=SHARDED,
        key_hash=key_hash,
    )
    return result, violations


@settings(SIM_SETTINGS, max_examples=5)
@given(
    pause_seconds=st.floats(5.0, 60.0),
    paused=st.sampled_from(SHARDED),
    fault_seed=st.integers(0, 2**16),
    faults=st.integers(0, 3),
)
def test_a_paused_shard_member_never_writes_outside_its_range(
    pause_seconds: float, paused: str, fault_seed: int, faults: int
) -> None:
    result, violations = paused_member_run(pause_seconds, paused, fault_seed, faults=faults)
    assert violations == [], "\n".join(map(str, violations))
    assert converged(result, dict.fromkeys(SHARD_SOURCES, "v"))


def test_a_paused_shard_member_catches_the_reverted_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WriteGate, "check", lambda self, now, what="a write": None)
    _, violations = paused_member_run(40.0, "a", 0, faults=0)
    assert violations, "the property must detect a write outside the member's range"
    print(*violations, sep="\n")


def test_a_sharded_run_is_deterministic_too() -> None:
    first, _ = paused_member_run(30.0, "b", 3, faults=3)
    second, _ = paused_member_run(30.0, "b", 3, faults=3)
    assert first.trace == second.trace


@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 12))
def test_a_drawn_schedule_prints_as_a_replayable_snippet(seed: int, steps: int) -> None:
    from kubemoon_testing import sim

    drawn = FaultSchedule.generate(seed, SHARDED, steps=steps)
    assert eval(repr(drawn), vars(sim)) == drawn  # the snippet a failure prints
    assert FaultSchedule.generate(seed, SHARDED, steps=steps) == drawn
