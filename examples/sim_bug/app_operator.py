"""A small operator with a bug the simulator finds (docs/testing.rst, "Simulating your
operator"): every App (``example.com/v1``, namespaced, with a status subresource) gets one
ConfigMap of settings, and its status names it.

``reconcile_with_generated_names`` is how it is often first written: the ConfigMap gets a
server-generated name (``generateName``) and the App's status remembers which one it is.
It passes every test against a healthy cluster. ``reconcile`` is the fix.
"""

from __future__ import annotations

import random
from typing import Any

from prometheus_client import CollectorRegistry

import kubemoon_trio as km
from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_testing.sim import ReplicaFactory

APPS = GroupVersionResource("example.com", "v1", "apps")
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


def settings_for(app: str) -> dict[str, Any]:
    """The ConfigMap an App wants, without its name."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"labels": {"app": app}},
        "data": {"greeting": f"hello from {app}"},
    }


async def reconcile_with_generated_names(ctx: km.ReconcileContext[Any]) -> Reconciled:
    """The buggy version: create the ConfigMap once, remember its name in the status."""
    app = ctx.raw
    if app is None:
        return Reconciled()  # deleted: its ConfigMap goes by garbage collection
    if (app.get("status") or {}).get("configMap"):
        return Reconciled()  # made it already
    child = settings_for(ctx.name)
    child["metadata"] |= {
        "generateName": f"{ctx.name}-",
        "ownerReferences": [ctx.owner_reference()],
    }
    made = await ctx.client.create(CONFIGMAPS, child, namespace=ctx.namespace)
    # If this status write fails, the ConfigMap above is made but not remembered: the
    # retry makes another one.
    await ctx.update_status({"configMap": made["metadata"]["name"]})
    return Reconciled()


async def reconcile(ctx: km.ReconcileContext[Any]) -> Reconciled:
    """The fix: the ConfigMap's name follows from the App's, so a retry finds the one it
    made (``ensure`` compares with the cache, which sees this process's own writes, and
    creates only what is missing)."""
    if ctx.raw is None:
        return Reconciled()
    name = f"{ctx.name}-settings"
    child = settings_for(ctx.name)
    child["metadata"]["name"] = name
    await ctx.ensure(CONFIGMAPS, child)
    await ctx.update_status({"configMap": name})
    return Reconciled()


def replica_factory(reconcile_fn: km.ReconcileFunction) -> ReplicaFactory:
    """Build one replica's ``Manager`` as the operator's ``main()`` would, around
    ``reconcile_fn``."""

    def build(client: km.Client, identity: str, rng: random.Random) -> km.Manager:
        manager = km.Manager(client, registry=CollectorRegistry(), rng=rng)
        manager.controller("apps", APPS, kind="App").owns(CONFIGMAPS).complete(reconcile_fn)
        return manager

    return build
