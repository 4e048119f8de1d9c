"""Whole-system properties on the simulated API server (issue 32): the real
``kubemoon_trio`` Manager (informers, work queue, leader election, write gate) on
``kubemoon_testing.sim`` under trio's ``MockClock``, driven by seeded fault schedules.

One property per fault class the outside probes found (issue 31's hardening):

(a) a replica frozen past its Lease never writes outside its leadership (checked against
    the Lease history the server stored);
(b) one custom resource nested 10,000 levels does not stop the informer: every other
    object reconciles;
(c) a tenant's flood of updates does not starve the first reconciles of the others;
(d) ConfigMaps whose page is past the client's body cap do not stop a restart (the LIST
    page shrinks until it fits);
(a') a member of three sharded replicas frozen past its membership Lease never writes
    outside its claimed range.

Each property has a checker that returns what it found wrong (empty when it holds), and a
``..._catches_the_reverted_fix`` test that switches the hardening fix off with a monkeypatch
and asserts the checker reports the failure:

(a), (a') the write gate's check (``WriteGate.check``) does nothing;
(b) the kept-out path: ``_jsonsplit.DEEP`` (the depth from which an undecodable object is
    too deep, kept out, rather than malformed) set past any depth, so the deep object's
    watch line fails the watch as before the fix;
(c) the queue's aging: every ``WorkQueue`` built with ``max_overtakes`` past any count, so
    the oldest key's turn never comes (priority order alone, as before the fix);
(d) the adaptive page size: the reflector's ``next_page_limit`` answers None (no smaller
    page to ask for), so a page past the body cap fails the LIST as before the fix.

All four are clean reverts: each fix is reached through one module attribute or
constructor default that the monkeypatch replaces for the test only.

(c) is judged on the order of the requests the server received, not on virtual time: the
simulated server answers in zero virtual time, so a whole flood happens at one virtual
instant and any bound in virtual seconds would hold with or without aging. The bound is
the queue's own (its module docstring): a key queued behind Q others is among the next
(max_overtakes + 1) * (Q + 1) keys handed out, and each hand-out of the flooded key sends
at most one write of its copy.

And the simulation itself: the same seed gives the same trace.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource, Reconciled, _jsonsplit, _reflector
from kubemoon_core._queue import DEFAULT_MAX_OVERTAKES, WorkQueue
from kubemoon_core._ratelimit import RateLimiter
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


def unconverged(result: SimulationResult, values: dict[str, str]) -> list[str]:
    """The copies that are absent or differ from their source's value (``name -> value``)."""
    store = result.cluster.server
    res = store.resource(CONFIGMAPS)
    found = []
    for name, value in values.items():
        try:
            copy = store.get(res, "default", f"{name}-copy")
        except StatusError:
            found.append(f"{name}-copy is absent")
            continue
        if copy.get("data") != {"k": value}:
            found.append(f"{name}-copy holds {str(copy.get('data'))[:60]}, not its source's value")
    return found


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
    assert unconverged(result, dict.fromkeys(SOURCES, "v")) == []


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
FLOODED = "flood"


def flood_run(updates: int, at: float, seed: int) -> SimulationResult:
    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=seed)
        async with cluster.client(identity="setup") as setup:
            for name in OTHERS:
                await setup.create(CONFIGMAPS, source(name), namespace="default")
            await setup.create(CONFIGMAPS, source("flood", "0"), namespace="default")
        schedule = FaultSchedule((TenantFlood(at, "default", "flood", updates),))
        return await simulate(cluster, {"a": elected_copier}, schedule, duration=20.0, seed=seed)

    result: SimulationResult = run_sim(main)
    result.cluster.check()
    return result


def starved(result: SimulationResult, replica: str = "a") -> list[str]:
    """The others whose first copy write came later than the queue's bound allows: after
    more than (max_overtakes + 1) * (len(OTHERS) + 1) writes of the flooded key's copy (one
    per hand-out at most), or never."""
    bound = (DEFAULT_MAX_OVERTAKES + 1) * (len(OTHERS) + 1)
    writes = [e for e in result.trace if e.identity == replica and e.is_write]
    found = []
    for name in OTHERS:
        first = next((e for e in writes if e.name == f"{name}-copy"), None)
        if first is None:
            found.append(f"{name}: never reconciled")
            continue
        ahead = sum(1 for e in writes if e.name == f"{FLOODED}-copy" and e.seq < first.seq)
        if ahead > bound:
            found.append(
                f"{name}: first reconciled at {first.time:.3f} s after {ahead} reconciles of "
                f"the flooded {FLOODED!r} (bound {bound})"
            )
    return found


def check_flood(result: SimulationResult, updates: int) -> list[str]:
    tenant_writes = sum(1 for e in result.trace if e.identity == "tenant" and e.is_write)
    # The flood ran (a create, then its updates), the others were not starved meanwhile,
    # and every copy converged once it stopped.
    ran = [] if tenant_writes == updates + 1 else [f"the tenant sent {tenant_writes} writes"]
    return ran + starved(result) + unconverged(result, dict.fromkeys(OTHERS, "v"))


# The flood starts at 0: the first list is queued then (the server answers in zero virtual
# time, so a later flood finds every first reconcile done and tests nothing).
@settings(SIM_SETTINGS, max_examples=5)
@given(updates=st.integers(200, 1_000), seed=st.integers(0, 2**16))
def test_a_tenant_flood_does_not_starve_the_others(updates: int, seed: int) -> None:
    failures = check_flood(flood_run(updates, 0.0, seed), updates)
    assert failures == [], "\n".join(failures)


def test_a_tenant_flood_catches_the_reverted_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # Aging switched off: the oldest key's turn never comes, so the flooded key (an ordinary
    # add, above the first list's low priority) is handed out until the flood stops.
    aging = WorkQueue.__init__

    def without_aging(
        self: WorkQueue[Any], rate_limiter: RateLimiter | None = None, *, max_overtakes: int = 0
    ) -> None:
        aging(self, rate_limiter, max_overtakes=sys.maxsize)

    monkeypatch.setattr(WorkQueue, "__init__", without_aging)
    failures = check_flood(flood_run(500, 0.0, 0), 500)
    assert failures, "the property must detect the others waiting out the flood"
    assert all("reconciles of the flooded" in failure for failure in failures), failures
    print(*failures, sep="\n")


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


def check_huge(result: SimulationResult, count: int, size: int) -> list[str]:
    """What went wrong in a run of :func:`huge_run` (empty when the property holds)."""
    found = []
    runs = result.managers["a"]
    if len(runs) < 2:
        found.append(f"replica a started {len(runs)} time(s), no restart: {result.endings}")
    for run, manager in enumerate(runs):  # each start's LIST shrank its pages to fit
        for informer in manager.informers:
            stats = informer.reflector.stats
            if stats.page_shrinks == 0 or stats.syncs == 0:
                found.append(
                    f"start {run}: {stats.page_shrinks} page shrinks, {stats.syncs} syncs, "
                    f"{stats.failures} failures"
                )
    values = {f"huge{index:02d}": "x" * size for index in range(count)}
    values.update(dict.fromkeys((f"late{index}" for index in range(3)), "v"))
    return found + unconverged(result, values)


@settings(SIM_SETTINGS, max_examples=4)
@given(count=st.integers(6, 12), size=st.integers(60_000, 120_000), seed=st.integers(0, 2**8))
def test_huge_configmaps_do_not_stop_a_restart(count: int, size: int, seed: int) -> None:
    failures = check_huge(huge_run(count, size, seed), count, size)
    assert failures == [], "\n".join(failures)


def test_huge_configmaps_catch_the_reverted_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # No adaptive page size: a page past the body cap is not asked for again smaller, so
    # the LIST fails for good and nothing is copied.
    monkeypatch.setattr(_reflector, "next_page_limit", lambda limit: None)
    failures = check_huge(huge_run(8, 80_000, 0), 8, 80_000)
    assert failures, "the property must detect the LIST that never fits"
    assert any("-copy is absent" in failure for failure in failures), failures
    print(*failures, sep="\n")


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


def check_deep(result: SimulationResult, others: int) -> list[str]:
    """What went wrong in a run of :func:`deep_run` (empty when the property holds): blobs
    never reconciled, the deep one reconciled, or not exactly it kept out of the cache."""
    store = result.cluster.server
    names = {
        item["metadata"]["name"]
        for item in store.list(store.resource(CONFIGMAPS), "default")["items"]
    }
    found = [
        f"b{index} was never reconciled" for index in range(others) if f"b{index}-seen" not in names
    ]
    if "deep-seen" in names:
        found.append("the deep blob was reconciled (it cannot be decoded)")
    runs = result.managers["a"]
    if len(runs) != 1:
        found.append(f"replica a started {len(runs)} times: {result.endings}")
    for manager in runs:
        stats = [informer.reflector.stats for informer in manager.informers]
        if [s.kept_out for s in stats] != [1]:
            found.append(
                f"kept out {[s.kept_out for s in stats]} (not [1]); watch restarts "
                f"{[s.watch_restarts for s in stats]}, failures {[s.failures for s in stats]}"
            )
    return found


@settings(SIM_SETTINGS, max_examples=4)
@given(others=st.integers(2, 10), at=st.floats(0.0, 5.0), seed=st.integers(0, 2**8))
def test_one_deeply_nested_object_does_not_stop_the_informer(
    others: int, at: float, seed: int
) -> None:
    failures = check_deep(deep_run(others, at, seed), others)
    assert failures == [], "\n".join(failures)


def test_one_deeply_nested_object_catches_the_reverted_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No kept-out path: an object that fails to decode is malformed at any depth, so the
    # deep blob's watch line fails the watch, again at every resume, and the blobs created
    # after it are never seen.
    monkeypatch.setattr(_jsonsplit, "DEEP", sys.maxsize)
    failures = check_deep(deep_run(6, 1.0, 0), 6)
    assert failures, "the property must detect the informer stopped by one object"
    assert any("was never reconciled" in failure for failure in failures), failures
    print(*failures, sep="\n")


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
    assert unconverged(result, dict.fromkeys(SHARD_SOURCES, "v")) == []


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
