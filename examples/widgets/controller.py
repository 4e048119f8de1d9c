"""The Widget operator: each Widget keeps ``spec.replicas`` ConfigMaps ``<widget>-<i>``.

Usage: ``python examples/widgets/controller.py [--loop trio|asyncio] [--leader-elect NS]``
"""

import argparse
import importlib
import logging
from typing import Any

from kubemoon_core import GroupVersionResource, Outcome, Reconciled, RequeueAfter

WIDGETS = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


async def reconcile(ctx: Any) -> Outcome:
    """Make the Widget's ConfigMaps match its spec, then report them in its status."""
    widget = ctx.obj
    if widget is None:
        return Reconciled()  # deleted: its ConfigMaps go by garbage collection
    spec = widget.get("spec") or {}
    data = spec.get("data") or {}
    wanted = [f"{ctx.name}-{i}" for i in range(spec.get("replicas", 1))]
    for name in wanted:
        await ctx.ensure(CONFIGMAPS, {"metadata": {"name": name}, "data": data})
    for child in ctx.owned(CONFIGMAPS):
        if child["metadata"]["name"] not in wanted:
            await ctx.delete(CONFIGMAPS, child)
    owned = ctx.owned(CONFIGMAPS)
    ready = sum(1 for c in owned if c["metadata"]["name"] in wanted and c.get("data") == data)
    done = ready == len(wanted)
    status = {
        "replicas": len(owned),
        "readyReplicas": ready,
        "observedGeneration": widget["metadata"].get("generation"),
        "conditions": ctx.condition("Ready", done, "Scaled" if done else "Scaling"),
    }
    if await ctx.update_status(status) and done:
        ctx.events.record(widget, "Normal", "Scaled", f"{ready} ConfigMap(s) ready")
    return RequeueAfter(300.0)


def main(argv: list[str] | None = None) -> None:
    """Run the operator until SIGTERM (exits non-zero if it loses its Lease)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--leader-elect", metavar="NAMESPACE", help="elect a leader there")
    parser.add_argument("--probe-port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    km = importlib.import_module(f"kubemoon_{args.loop}")
    election = km.LeaderElectionConfig("widgets", args.leader_elect) if args.leader_elect else None
    manager = km.Manager(
        km.Client.from_environment(),
        name="examples.kubemoon.dev/widgets",
        leader_election=election,
        probe_address=("127.0.0.1", args.probe_port),
    )
    manager.controller("widgets", WIDGETS, kind="Widget").owns(CONFIGMAPS).complete(reconcile)
    manager.run_forever()


if __name__ == "__main__":
    main()
