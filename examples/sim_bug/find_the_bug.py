"""Search for schedules of faults that break the App operator (app_operator.py), on the
simulated API server; print the smallest one found, as a replayable call.

Usage: ``python examples/sim_bug/find_the_bug.py`` -- searches the buggy reconcile and
prints what ``found.txt`` holds, then searches the fixed one and prints that it found
nothing (each search's wall time on stderr).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import kubemoon_trio as km
from kubemoon_testing.sim import (
    DropWatches,
    FailRequests,
    FaultSchedule,
    Pause,
    SimulatedCluster,
    TenantCreate,
    custom,
    simulate,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This folder is the operator's project.
from app_operator import (
    APPS,
    CONFIGMAPS,
    reconcile,
    reconcile_with_generated_names,
    replica_factory,
)

NAMESPACE = "default"
APPS_CREATED = {"a": 1.0, "b": 10.0, "c": 20.0}  # App name: when a user creates it


def app(name: str) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "App", "metadata": {"name": name}}


def problems(cluster: SimulatedCluster) -> list[str]:
    """What is wrong with the cluster at the end of a run (nothing, if the operator works):
    every App has exactly one ConfigMap, and its status names it."""
    server = cluster.server
    found = [f"refused by the simulator: {refusal}" for refusal in cluster.refusals]
    for name in APPS_CREATED:
        stored = server.get(server.resource(APPS), NAMESPACE, name)
        children = sorted(
            item["metadata"]["name"]
            for item in server.list(
                server.resource(CONFIGMAPS), NAMESPACE, label_selector=f"app={name}"
            )["items"]
        )
        named = (stored.get("status") or {}).get("configMap")
        if len(children) != 1:
            found.append(f"App {name} has {len(children)} ConfigMaps: {', '.join(children)}")
        elif named != children[0]:
            found.append(f"App {name}'s status names {named!r}, its ConfigMap is {children[0]}")
    return found


def check(reconcile_fn: km.ReconcileFunction, seed: int, faults: FaultSchedule) -> list[str]:
    """One run: the operator (one replica, "op") from the start, the Apps created as
    ``APPS_CREATED`` says, ``faults`` on top; 90 virtual seconds, then :func:`problems`."""
    creates = [TenantCreate(at, APPS, NAMESPACE, app(name)) for name, at in APPS_CREATED.items()]
    schedule = FaultSchedule((*creates, *faults.steps))

    async def main() -> SimulatedCluster:
        cluster = SimulatedCluster([custom("example.com", "v1", "apps", "App")], seed=seed)
        await simulate(
            cluster, {"op": replica_factory(reconcile_fn)}, schedule, duration=90.0, seed=seed
        )
        return cluster

    return problems(trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)))


# Faults on the operator's own requests, in the first 30 virtual seconds (whole seconds:
# they shrink in fewer steps than floats).
at = st.integers(0, 30).map(float)
step = st.one_of(
    st.builds(DropWatches, at=at, replica=st.just("op")),
    st.builds(Pause, at=at, replica=st.just("op"), seconds=st.integers(1, 30).map(float)),
    st.builds(
        FailRequests,
        at=at,
        code=st.sampled_from((500, 503)),
        count=st.integers(1, 3),
        replica=st.just("op"),
        method=st.sampled_from(("GET", "POST", "PATCH")),
    ),
)
schedules = st.lists(step, max_size=6).map(
    lambda steps: FaultSchedule(tuple(sorted(steps, key=lambda s: s.at)))
)


def search(reconcile_fn: km.ReconcileFunction, examples: int = 50) -> str | None:
    """Run up to ``examples`` drawn (seed, faults) pairs; when one breaks the operator,
    Hypothesis shrinks it, and this returns the smallest as a replayable call with what
    went wrong. None when every example passed."""
    failing: list[str] = []

    @settings(
        max_examples=examples,
        derandomize=True,  # the same search every time
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        # No "explain" phase: its line tracing slows every shrinking run several times.
        phases=[Phase.generate, Phase.shrink],
    )
    @given(seed=st.integers(0, 2**16), faults=schedules)
    def run(seed: int, faults: FaultSchedule) -> None:
        found = check(reconcile_fn, seed, faults)
        if found:
            # Hypothesis calls the smallest failing example last.
            failing[:] = [
                *found,
                f"replay: check({reconcile_fn.__name__}, seed={seed}, faults={faults!r})",
            ]
            raise AssertionError(found)

    try:
        run()
    except AssertionError:
        return "\n".join(failing)
    return None


def main() -> None:
    # The injected failures make reconciles fail (and be retried): the runtime logs each.
    logging.disable(logging.ERROR)
    for reconcile_fn in (reconcile_with_generated_names, reconcile):
        start = time.perf_counter()
        found = search(reconcile_fn)
        print(found or f"{reconcile_fn.__name__}: no failing schedule found")
        print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
