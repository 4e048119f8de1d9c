"""Reconcile rank of a new object after a restart, with and without the priority queue.

One ``kubemoon_testing.ApiServer(controller_manager=False)`` and one namespace holding
``CACHED`` ConfigMaps, created before anything is measured. Each round starts a fresh
``kubemoon_trio.Manager`` (cold cache: it lists all ``CACHED`` objects, exactly what a
restarted replica does) with one controller over the namespace's ConfigMaps, ``WORKERS``
workers, and a reconcile that does what a small real one does: one GET of its object from
the apiserver. When the first reconcile starts (the initial list is being worked on), a
new ConfigMap is created; the round ends once the new object has been reconciled.

**Measured**, per round: the new object's **rank**, its position among the reconciles in
the order they started (1 = first), and the time from its creation to its reconcile. For
context, the rank at which its change reached the work queue (``known at``: reconciles
started before the watch event arrived, which no queue can avoid) is reported too.
Rounds alternate between the priority queue on (the default) and off
(``ControllerBuilder.with_priority_queue(False)``: one FIFO), ``ROUNDS`` of each; the row
gives the median and the worst. The new object is deleted after each round, so every
round restarts over the same ``CACHED`` objects.

Target (issue 25): with the priority queue the new object is among the first reconciled,
not the last: rank ≤ 1 % of the cached objects in every round.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CACHED = 3000
WORKERS = 4
ROUNDS = 3
ROUND_TIMEOUT = 180.0
CREATORS = 16
NAMESPACE = "bench-priority"
TARGET_SHARE = 0.01  # rank ≤ 1 % of CACHED


@dataclass
class Round:
    """One restart: the new object's rank, when its change was queued, its latency."""

    priority_queue: bool
    rank: int = 0
    known_at: int = 0
    latency_s: float = 0.0
    reconciles: int = 0
    error: str | None = None


async def _create_cached(client: Any, cm: Any) -> None:
    import trio

    send, receive = trio.open_memory_channel[int](CACHED)
    for n in range(CACHED):
        send.send_nowait(n)
    send.close()

    async def creator() -> None:
        async for n in receive:
            await client.create(
                cm,
                {"metadata": {"name": f"cached-{n:05d}"}, "data": {"n": str(n)}},
                namespace=NAMESPACE,
            )

    async with trio.open_nursery() as nursery:
        for _ in range(CREATORS):
            nursery.start_soon(creator)


async def _one_round(client: Any, cm: Any, measured: Round, index: int) -> None:
    import trio

    from kubemoon_core import Change, ObjectKey, Reconciled
    from kubemoon_trio import Manager, ReconcileContext

    new = f"new-{index:02d}"
    order: list[str] = []
    started = trio.Event()
    done = trio.Event()
    created_at: list[float] = []

    async def reconcile(ctx: ReconcileContext[Any]) -> Reconciled:
        order.append(ctx.key.name)
        if len(order) == 1:
            started.set()
        if ctx.key.name == new:
            measured.latency_s = time.monotonic() - created_at[0]
            measured.rank = len(order)
            done.set()
        await client.get(cm, ctx.key.name, namespace=NAMESPACE)
        return Reconciled()

    manager = Manager(client, close_client=False, grace_period=10.0)
    controller = (
        manager.controller("priority", cm, kind="ConfigMap", namespace=NAMESPACE)
        .with_workers(WORKERS)
        .with_priority_queue(measured.priority_queue)
        .complete(reconcile)
    )

    def queued(change: Change) -> None:  # runs after the controller's own handler
        if change.key == ObjectKey(NAMESPACE, new) and not measured.known_at:
            measured.known_at = len(order)

    controller.primary_informer.add_handler(queued)
    try:
        with trio.fail_after(ROUND_TIMEOUT):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await started.wait()
                created_at.append(time.monotonic())
                await client.create(cm, {"metadata": {"name": new}}, namespace=NAMESPACE)
                await done.wait()
                manager.stop()
    except trio.TooSlowError:
        measured.error = f"the new object was not reconciled within {ROUND_TIMEOUT:.0f} s"
    finally:
        measured.reconciles = len(order)
        with trio.move_on_after(30):
            await client.delete(cm, new, namespace=NAMESPACE)


def measure() -> list[Round]:
    """Start the apiserver, create the cached objects, run the alternating rounds."""
    import trio

    from kubemoon_core import GroupVersionResource
    from kubemoon_testing import ApiServer
    from kubemoon_trio import Client

    cm = GroupVersionResource("", "v1", "configmaps")
    rounds = [Round(priority_queue=i % 2 == 0) for i in range(2 * ROUNDS)]

    async def main(server: ApiServer) -> None:
        async with Client.from_kubeconfig(str(server.kubeconfig_path), max_connections=24) as c:
            await c.create(
                GroupVersionResource("", "v1", "namespaces"), {"metadata": {"name": NAMESPACE}}
            )
            await _create_cached(c, cm)
            for index, measured in enumerate(rounds):
                await _one_round(c, cm, measured, index)

    with ApiServer(controller_manager=False) as server:
        trio.run(main, server)
    return rounds


def _summary(rounds: list[Round]) -> str:
    ranks = [r.rank for r in rounds]
    latencies = [r.latency_s for r in rounds]
    known = [r.known_at for r in rounds]
    return (
        f"rank median {statistics.median(ranks):.0f} of {CACHED + 1}, worst {max(ranks)} "
        f"(ranks {', '.join(map(str, ranks))}); its change was queued after "
        f"{', '.join(map(str, known))} reconciles had started; reconciled "
        f"{statistics.median(latencies) * 1e3:,.0f} ms after its creation (median, worst "
        f"{max(latencies) * 1e3:,.0f} ms)"
    )


def rows() -> list[Row]:
    """The rank of a new object after a restart, with and without the priority queue."""
    inputs = (
        f"{CACHED} ConfigMaps cached, fresh Manager (cold cache), {WORKERS} workers, one GET "
        f"per reconcile, 1 ConfigMap created when the first reconcile starts; real "
        f"kube-apiserver; {ROUNDS} rounds each, alternating"
    )
    target = f"rank ≤ {CACHED * TARGET_SHARE:.0f} (first 1 %) with the priority queue"
    try:
        rounds = measure()
    except Exception as exc:  # a failed run is a failed row, not a lost table
        from kubemoon_testing import MissingBinariesError

        if isinstance(exc, MissingBinariesError):
            reason = str(exc).splitlines()[0]
            return [Row("priority queue: reconcile rank after a restart", inputs,
                        f"not run: {reason}", target, None)]  # fmt: skip
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return [Row("priority queue: reconcile rank after a restart", inputs,
                    f"failed: {reason}", target, False)]  # fmt: skip
    failed = [r for r in rounds if r.error]
    if failed:
        why = "; ".join(sorted({r.error or "" for r in failed}))
        return [Row("priority queue: reconcile rank after a restart", inputs, f"failed: {why}",
                    target, False)]  # fmt: skip
    on = [r for r in rounds if r.priority_queue]
    off = [r for r in rounds if not r.priority_queue]
    limit = CACHED * TARGET_SHARE
    return [
        Row(
            "priority queue: reconcile rank of a new object after a restart, priority queue on",
            inputs,
            _summary(on),
            target,
            max(r.rank for r in on) <= limit,
        ),
        Row(
            "priority queue: reconcile rank of a new object after a restart, priority queue off",
            inputs + " (with_priority_queue(False): one FIFO)",
            _summary(off),
        ),
    ]


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_priority"))
