"""The Widget operator: each Widget keeps ``spec.replicas`` ConfigMaps ``<widget>-<i>``.

A typed controller: the reconcile reads a :class:`Widget` (``widget_api.py``) and writes
typed ``ConfigMap`` objects (generated built-in kinds); ``mypy --strict`` checks it.

Usage: ``python examples/widgets/controller.py [--loop trio|asyncio] [--leader-elect NS]``

``rbac.yaml`` is generated from :func:`rbac_manager`, which builds what ``main`` runs with
``--leader-elect widgets-system`` (the ServiceAccount's namespace): its Lease rule is
there. Electing in another namespace, regenerate it with that one (``LEASE_NAMESPACE``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import TYPE_CHECKING

from widget_api import Widget, WidgetStatus

from kubemoon_core import Outcome, Reconciled, RequeueAfter
from kubemoon_core.builtin import ConfigMap
from kubemoon_core.kubeconfig import ClientConfig

if TYPE_CHECKING:
    from kubemoon_trio import ReconcileContext


async def reconcile(ctx: ReconcileContext[Widget]) -> Outcome:
    """Make the Widget's ConfigMaps match its spec, then report them in its status."""
    widget = ctx.obj
    if widget is None:
        return Reconciled()  # deleted: its ConfigMaps go by garbage collection
    data = widget.spec.data
    wanted = [f"{ctx.name}-{i}" for i in range(widget.spec.replicas)]
    for name in wanted:
        await ctx.ensure(ConfigMap(metadata={"name": name}, data=data))
    for child in ctx.owned(ConfigMap):
        if child.metadata.name not in wanted:
            await ctx.delete(child)
    owned = ctx.owned(ConfigMap)
    ready = sum(1 for c in owned if c.metadata.name in wanted and (c.data or {}) == data)
    done = ready == len(wanted)
    conditions = ctx.condition("Ready", done, "Scaled" if done else "Scaling")
    status = WidgetStatus(
        replicas=len(owned),
        ready_replicas=ready,
        observed_generation=widget.metadata.generation,
        conditions=conditions,
    )
    if await ctx.update_status(status) and done:
        ctx.events.record(widget, "Normal", "Scaled", f"{ready} ConfigMap(s) ready")
    return RequeueAfter(300.0)


#: The namespace of the Lease ``rbac.yaml`` grants (``main --leader-elect widgets-system``).
LEASE_NAMESPACE = "widgets-system"


def rbac_manager() -> object:
    """The operator's Manager, built without connecting, for ``kubemoon rbac generate``:
    as ``main --leader-elect widgets-system`` runs it, so its Lease is granted too."""
    import kubemoon_trio as km  # noqa: PLC0415 - only the RBAC tooling needs it

    manager = km.Manager(
        km.Client(ClientConfig(server="https://127.0.0.1:6443")),
        name="examples.kubemoon.dev/widgets",
        leader_election=km.LeaderElectionConfig("widgets", LEASE_NAMESPACE),
    )
    manager.controller("widgets", Widget).owns(ConfigMap).complete(reconcile)
    return manager


def main(argv: list[str] | None = None) -> None:
    """Run the operator until SIGTERM (exits non-zero if it loses its Lease)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loop", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--leader-elect", metavar="NAMESPACE", help="elect a leader there")
    parser.add_argument("--probe-port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    km = importlib.import_module(f"kubemoon_{args.loop}")
    election = km.LeaderElectionConfig("widgets", args.leader_elect) if args.leader_elect else None
    # What rbac_manager builds (keep them alike: rbac.yaml is derived from that one).
    manager = km.Manager(
        km.Client.from_environment(),
        name="examples.kubemoon.dev/widgets",
        leader_election=election,
        probe_address=("127.0.0.1", args.probe_port),
    )
    manager.controller("widgets", Widget).owns(ConfigMap).complete(reconcile)
    manager.run_forever()


if __name__ == "__main__":
    main()
