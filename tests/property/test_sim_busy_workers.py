"""Whole-system simulations of two runaway-loop fault classes (issue 32).

1. Every worker busy while a requeue comes due: a controller with ``workers`` workers, as
   many keys whose reconcile waits on virtual time (a slow external call) and one key that
   asks to be looked at again every ``requeue`` seconds. Its requeue comes due while every
   worker is held. Before efb592f ``Controller.next_deadline`` still answered that past
   deadline, the runner's wait returned at once and it went round again: on trio's
   ``MockClock`` virtual time never moved and the run never ended (``make fuzz``'s
   test_widgets_long hung for 50 minutes). Pinned here with ``@example``: the run must end
   and every key must have been reconciled again and again.
2. The wall-clock bound of :func:`simulate`: a reconcile that spins (checkpoints, never
   waits) fails the run with :class:`SimulationStalled` within the bound, naming the
   virtual time reached, the requests served and the spinning task, instead of hanging.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource, RequeueAfter
from kubemoon_testing.sim import (
    FaultSchedule,
    SimulatedCluster,
    SimulationResult,
    SimulationStalled,
    TenantCreate,
    simulate,
)

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
NAMESPACE = "default"
DURATION = 40.0

# A run here takes well under a second of wall time; these bounds make a regression fail
# in seconds rather than after the defaults (60 s, 20 s).
WALL_LIMIT = 30.0
STALL_LIMIT = 3.0


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


def run(
    reconcile: Any,
    names: list[str],
    *,
    workers: int,
    seed: int = 0,
    wall_limit: float | None = WALL_LIMIT,
    stall_limit: float | None = STALL_LIMIT,
) -> SimulationResult:
    def replica(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
        manager = km.Manager(client, registry=CollectorRegistry(), rng=rng)
        builder = manager.controller("busy", CONFIGMAPS, namespace=NAMESPACE)
        builder.with_workers(workers).complete(reconcile)
        return manager

    # The first key is created first, the others a quarter of a second later: the first is
    # reconciled (and its requeue timed) before the others take the workers.
    schedule = FaultSchedule(
        tuple(
            TenantCreate(0.0 if i == 0 else 0.25, CONFIGMAPS, NAMESPACE, configmap(name))
            for i, name in enumerate(names)
        )
    )

    async def main() -> SimulationResult:
        cluster = SimulatedCluster(seed=seed)
        return await simulate(
            cluster,
            {"r": replica},
            schedule,
            duration=DURATION,
            seed=seed,
            wall_limit=wall_limit,
            stall_limit=stall_limit,
        )

    result: SimulationResult = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return result


@settings(max_examples=4, deadline=None, derandomize=True)
@given(
    workers=st.integers(1, 3),
    hold=st.sampled_from([2.0, 5.0, 7.5]),
    requeue=st.sampled_from([0.5, 1.0, 3.0]),
    seed=st.integers(0, 2**16),
)
@example(workers=1, hold=5.0, requeue=1.0, seed=0)  # one worker held as the other key comes due
@example(workers=2, hold=2.0, requeue=0.5, seed=1)
def test_a_requeue_due_while_every_worker_is_busy_neither_spins_nor_starves(
    workers: int, hold: float, requeue: float, seed: int
) -> None:
    slow = [f"slow-{i}" for i in range(workers)]
    done: Counter[str] = Counter()

    async def reconcile(ctx: km.ReconcileContext[Any]) -> RequeueAfter:
        if ctx.name in slow:
            await trio.sleep(hold)  # holds its worker, on virtual time
        done[ctx.name] += 1
        return RequeueAfter(requeue)

    start = time.monotonic()
    run(reconcile, ["fast", *slow], workers=workers, seed=seed)
    assert time.monotonic() - start < WALL_LIMIT
    # Every key came round again and again over the run: none was starved by the others.
    rounds = DURATION / (hold + requeue) / 2
    assert {name: done[name] >= rounds for name in [*slow, "fast"]} == dict.fromkeys(
        [*slow, "fast"], True
    ), (done, rounds)


def test_a_spinning_reconcile_fails_the_run_as_stalled_within_the_bound() -> None:
    async def reconcile(ctx: km.ReconcileContext[Any]) -> RequeueAfter:
        if ctx.name == "spin":
            while True:  # checkpoints, never waits: a MockClock never moves again
                await trio.lowlevel.checkpoint()
        return RequeueAfter(1.0)

    start = time.monotonic()
    with pytest.raises(SimulationStalled) as caught:
        run(reconcile, ["calm", "spin"], workers=2, wall_limit=20.0, stall_limit=1.0)
    elapsed = time.monotonic() - start
    error = caught.value
    assert elapsed < 10.0
    assert error.reason == "stall"
    assert error.stuck_seconds >= 1.0
    assert error.steps is not None and error.steps >= 1000
    assert 0.0 <= error.virtual_time < DURATION
    assert error.requests > 0
    assert error.busiest[0][0].endswith("ControllerRunner._run_one"), error.busiest
    message = str(error)
    assert "virtual time stood at" in message
    assert f"requests served: {error.requests}" in message
    assert any("reconcile (test_sim_busy_workers.py:" in task for task in error.tasks), message


def test_a_run_past_its_wall_clock_bound_fails_naming_where_it_was() -> None:
    async def reconcile(ctx: km.ReconcileContext[Any]) -> RequeueAfter:
        if ctx.name == "spin":
            while True:
                await trio.lowlevel.checkpoint()
        return RequeueAfter(1.0)

    start = time.monotonic()
    with pytest.raises(SimulationStalled) as caught:
        run(reconcile, ["calm", "spin"], workers=2, wall_limit=1.0, stall_limit=None)
    assert time.monotonic() - start < 10.0
    error = caught.value
    assert error.reason == "wall"
    assert error.wall_seconds >= 1.0
    assert "wall-clock bound" in str(error)
    assert error.tasks


def test_a_run_that_advances_is_not_stopped() -> None:
    # The bounds leave a run alone that moves virtual time, however many steps it runs.
    async def reconcile(ctx: km.ReconcileContext[Any]) -> RequeueAfter:
        return RequeueAfter(0.1)

    result = run(reconcile, ["a", "b"], workers=1, wall_limit=30.0, stall_limit=0.5)
    assert result.endings == [] or all(why == "stopped" for _, _, why in result.endings)
