"""How a user tests their own controller on the simulated API server (quoted in
docs/testing.rst, "Simulating your operator"): two leader-elected replicas of a small
controller, a seeded fault schedule drawn by Hypothesis, and three checks (no write outside
the Lease, convergence once the faults stop, nothing the simulator refused)."""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import AlreadyExists
from kubemoon_testing.sim import (
    FaultSchedule,
    SimulatedCluster,
    TenantCreate,
    lease_violations,
    simulate,
)

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


async def reconcile(ctx: km.ReconcileContext[Any]) -> Reconciled:
    """The controller under test: every ConfigMap labelled ``app=web`` gets a ``-ready``
    ConfigMap beside it."""
    if ctx.raw is None:
        return Reconciled()
    ready = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{ctx.name}-ready"}}
    try:
        await ctx.client.create(CONFIGMAPS, ready, namespace=ctx.namespace)
    except AlreadyExists:
        pass  # made by an earlier reconcile (the cache may lag our own writes)
    return Reconciled()


def replica(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
    """One replica of the operator, as its main() would build it."""
    manager = km.Manager(
        client,
        leader_election=km.LeaderElectionConfig("web", "default", identity=identity),
        registry=CollectorRegistry(),
        rng=rng,
    )
    manager.controller("web", CONFIGMAPS, namespace="default", label_selector="app=web").complete(
        reconcile
    )
    return manager


def app(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "web"}},
    }


@settings(max_examples=5, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_operator_survives_faults(seed: int) -> None:
    faults = FaultSchedule.generate(seed, ["r1", "r2"], steps=6, duration=60.0)
    tenant = [TenantCreate(5.0 * i, CONFIGMAPS, "default", app(f"web{i}")) for i in range(4)]
    schedule = FaultSchedule((*tenant, *faults.steps))

    async def main() -> SimulatedCluster:
        cluster = SimulatedCluster(seed=seed)
        await simulate(cluster, {"r1": replica, "r2": replica}, schedule, duration=150.0, seed=seed)
        return cluster

    cluster = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    cluster.check()  # nothing was refused as not modelled
    assert lease_violations(cluster.trace, cluster.lease_history, "default/web", ["r1", "r2"]) == []
    stored = cluster.server.list(cluster.server.resource(CONFIGMAPS), "default")["items"]
    names = {item["metadata"]["name"] for item in stored}
    assert {f"web{i}-ready" for i in range(4)} <= names, schedule
