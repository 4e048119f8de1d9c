"""The Widget example (examples/widgets/controller.py) on the simulated API server
(issue 32, "dogfood").

Its own ``reconcile`` runs in a real ``Manager`` wired as its ``main()`` wires it
(``controller("widgets", Widget).owns(ConfigMap)``), one replica or two leader-elected
ones, on ``kubemoon_testing.sim`` under trio's ``MockClock``. Three Widgets; a seeded
schedule of faults (pauses past the Lease, dropped and expired watches, compaction,
injected 409/429/500/503); and a user (client identity ``tenant``) who scales widgets,
changes their data, overwrites children by hand and deletes them.

Invariants (sim_checks.py): convergence within ``CONVERGENCE_BOUND`` virtual seconds after
the last fault -- each widget has exactly its ``spec.replicas`` children ``<name>-<i>``,
owned by it and holding its data, and a status that reports them Ready at its
generation --, quiescence after it, no write outside the Lease (leader-elected), nothing
refused by the simulator, every failed reconcile logged and counted.

The Widget CRD carries a CEL rule (a small widget has at most 10 replicas), which the
simulator does not evaluate (``resource_of_class`` refuses such a class). The Widget
resource is therefore declared to the simulator by hand, with the class so that every
object written still round-trips through it, and the user here only writes specs the rule
accepts (:func:`user_edits` asserts it): for those, kube-apiserver answers as the
simulator does. A spec the rule refuses is never sent.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from sim_checks import (
    EVENT_FLUSH,
    QUIET,
    Convergence,
    FailureLog,
    failure_log,
    faults_end,
    unreported_errors,
)

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource
from kubemoon_core.builtin import ConfigMap
from kubemoon_testing.sim import (
    FaultSchedule,
    SimulatedCluster,
    SimulationResult,
    TenantDelete,
    TenantPatch,
    custom,
    lease_violations,
    simulate,
)

# The example as users run it: its folder on sys.path (controller.py imports widget_api),
# controller.py loaded under a name of its own. Typed Any: mypy does not see examples/.
WIDGETS_DIR = Path(__file__).resolve().parents[2] / "examples" / "widgets"
if str(WIDGETS_DIR) not in sys.path:
    sys.path.insert(0, str(WIDGETS_DIR))
_spec = importlib.util.spec_from_file_location("widgets_controller", WIDGETS_DIR / "controller.py")
assert _spec is not None
assert _spec.loader is not None
widgets: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(widgets)
Widget: Any = importlib.import_module("widget_api").Widget

WIDGET_GVR = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
NAMESPACE = "default"
WIDGET_NAMES = ("alpha", "beta", "gamma")
LEASE = "default/widgets"

TOPOLOGIES: dict[str, tuple[str, ...]] = {"single": ("a",), "elected": ("a", "b")}

FAULT_WINDOW = 40.0
CONVERGENCE_BOUND = 60.0
"""Virtual seconds from the end of the last fault to convergence: a Lease taken over
(15 s duration + 2 s retry), a watch resumed after the reflector's capped backoff (30 s)
and the reconciles that follow all fit in it."""

SIM_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


def widget_resource() -> Any:
    """The Widget resource as its CRD declares it (status subresource, generation on spec
    changes), with the class every written object must round-trip through."""
    return replace(custom("examples.kubemoon.dev", "v1", "widgets", "Widget"), cls=Widget)


def replica(topology: str) -> Callable[[km.Client, str, random.Random], km.Manager]:
    def build(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
        election = (
            km.LeaderElectionConfig("widgets", NAMESPACE, identity=identity)
            if topology == "elected"
            else None
        )
        manager = km.Manager(
            client,
            name="examples.kubemoon.dev/widgets",
            leader_election=election,
            registry=CollectorRegistry(),
            rng=rng,
        )
        manager.controller("widgets", Widget).owns(ConfigMap).complete(widgets.reconcile)
        return manager

    return build


def widget_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "tier": "small", "data": {"k": "v"}},
    }


def user_edits(seed: int, count: int) -> tuple[TenantPatch | TenantDelete, ...]:
    """``count`` edits drawn from ``seed``: a widget scaled (0 to 5 replicas), its data
    changed, a child overwritten by hand, a child deleted."""
    rng = random.Random(f"widget-edits/{seed}")
    edits: list[TenantPatch | TenantDelete] = []
    for index in range(count):
        at = round(rng.uniform(0.0, FAULT_WINDOW), 3)
        name = rng.choice(WIDGET_NAMES)
        child = f"{name}-{rng.randrange(3)}"
        kind = rng.randrange(4)
        if kind == 0:
            spec: dict[str, Any] = {"replicas": rng.randint(0, 5)}
            # The CRD's CEL rule, which the simulator does not evaluate: never broken here.
            assert spec["replicas"] <= 10  # every widget stays tier small
            edits.append(TenantPatch(at, WIDGET_GVR, NAMESPACE, name, {"spec": spec}))
        elif kind == 1:
            patch = {"spec": {"data": {"k": f"v{index}"}}}
            edits.append(TenantPatch(at, WIDGET_GVR, NAMESPACE, name, patch))
        elif kind == 2:
            edits.append(TenantPatch(at, CONFIGMAPS, NAMESPACE, child, {"data": {"k": "hand"}}))
        else:
            edits.append(TenantDelete(at, CONFIGMAPS, NAMESPACE, child))
    return tuple(edits)


def widget_failures(result: SimulationResult) -> list[str]:
    """Why the widgets have not converged (empty when they have), read from the server."""
    server = result.cluster.server
    children = server.list(server.resource(CONFIGMAPS), NAMESPACE)["items"]
    found = []
    for name in WIDGET_NAMES:
        widget = server.get(server.resource(WIDGET_GVR), NAMESPACE, name)
        meta, spec = widget["metadata"], widget["spec"]
        wanted = {f"{name}-{i}" for i in range(spec["replicas"])}
        owned = {
            child["metadata"]["name"]: child
            for child in children
            if any(
                ref.get("uid") == meta["uid"]
                for ref in child["metadata"].get("ownerReferences", ())
            )
        }
        if set(owned) != wanted:
            found.append(f"{name}: children {sorted(owned)}, wanted {sorted(wanted)}")
        found += [
            f"{name}: {child} holds {owned[child].get('data')}, not {spec['data']}"
            for child in sorted(wanted & set(owned))
            if (owned[child].get("data") or {}) != spec["data"]
        ]
        status = widget.get("status") or {}
        reported = (
            status.get("observedGeneration"),
            status.get("replicas"),
            status.get("readyReplicas"),
        )
        if reported != (meta["generation"], len(wanted), len(wanted)):
            found.append(
                f"{name}: status (observedGeneration, replicas, readyReplicas) {reported} at "
                f"generation {meta['generation']} with {len(wanted)} wanted"
            )
        ready = [
            c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"
        ]
        if ready != ["True"]:
            found.append(f"{name}: Ready is {ready}")
    return found


@dataclass
class Run:
    result: SimulationResult
    schedule: FaultSchedule
    convergence: Convergence
    log: FailureLog


def widget_run(topology: str, seed: int, faults: int, edits: int) -> Run:
    replicas = TOPOLOGIES[topology]
    drawn = FaultSchedule.generate(seed, replicas, steps=faults, duration=FAULT_WINDOW).steps
    schedule = FaultSchedule(
        tuple(sorted((*drawn, *user_edits(seed, edits)), key=lambda step: step.at))
    )
    convergence = Convergence(widget_failures, faults_end(schedule))

    async def main() -> SimulationResult:
        cluster = SimulatedCluster([widget_resource()], seed=seed)
        async with cluster.client(identity="setup") as setup:
            for name in WIDGET_NAMES:
                await setup.create(WIDGET_GVR, widget_body(name), namespace=NAMESPACE)
        convergence.start = cluster.now()
        return await simulate(
            cluster,
            dict.fromkeys(replicas, replica(topology)),
            schedule,
            duration=convergence.faults_end + CONVERGENCE_BOUND + EVENT_FLUSH + QUIET,
            seed=seed,
            until=convergence.until,
        )

    with failure_log() as log:
        result: SimulationResult = trio.run(
            main, clock=trio.testing.MockClock(autojump_threshold=0)
        )
    return Run(result, schedule, convergence, log)


def check_run(run: Run, topology: str) -> list[str]:
    result = run.result
    replicas = TOPOLOGIES[topology]
    found: list[str] = []
    try:
        result.cluster.check()
    except Exception as exc:  # the simulator refused a request: report it with the rest
        found.append(f"refused: {exc}")
    found += run.convergence.check(result, replicas, CONVERGENCE_BOUND)
    if topology == "elected":
        violations = lease_violations(result.trace, result.cluster.lease_history, LEASE, replicas)
        found += map(str, violations)
    found += unreported_errors(result, run.log)
    return found


def assert_holds(topology: str, seed: int, faults: int, edits: int) -> None:
    run = widget_run(topology, seed, faults, edits)
    failures = check_run(run, topology)
    replay = f"widget_run({topology!r}, {seed}, {faults}, {edits})"
    assert failures == [], "\n".join([replay, repr(run.schedule), *failures])


draws = {"seed": st.integers(0, 2**16), "faults": st.integers(0, 6), "edits": st.integers(0, 6)}


@SIM_SETTINGS
@given(**draws)
def test_a_single_widget_controller_converges_and_quiesces(
    seed: int, faults: int, edits: int
) -> None:
    assert_holds("single", seed, faults, edits)


@SIM_SETTINGS
@given(**draws)
def test_leader_elected_widget_controllers_converge_with_one_writer(
    seed: int, faults: int, edits: int
) -> None:
    assert_holds("elected", seed, faults, edits)


def test_the_checks_see_a_child_missing() -> None:
    # Not vacuous: a child deleted behind the simulation's back is reported.
    run = widget_run("single", 0, 0, 0)
    assert run.convergence.at is not None
    server = run.result.cluster.server
    server.delete(server.resource(CONFIGMAPS), NAMESPACE, "alpha-1", now=1_000.0)
    assert any("alpha: children" in failure for failure in widget_failures(run.result))
