"""Regression (attacker's pass, round five): the start-up permission check of an operator
with many namespaced controllers, on the real kube-apiserver.

The check asks one SelfSubjectAccessReview per verb of every derived rule and refuses to
ask more than 256 (``missing_permissions(limit=256)``, not settable from the Manager). A
plain multi-namespace operator -- one Deployment controller per team namespace, each
owning its ConfigMaps, Secrets and Services -- derives 21 permissions per namespace, so
13 namespaces (273 reviews) is past the bound: the Manager logs ``not starting
controllers: the permission check cannot be made``, never campaigns or reconciles, and is
never checked again, although its identity (here an admin) may do everything. The only
way out the message offers is turning the check off, for every replica.

Expected: an identity that has every derived permission passes the check and leads,
whatever the number of controllers (a SelfSubjectRulesReview per namespace, or more
reviews in the same bounded time, would answer it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from kubemoon_core import Reconciled
from kubemoon_core.builtin import ConfigMap, Deployment, Secret, Service
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext

pytestmark = pytest.mark.integration

NAMESPACES = 13


@pytest.fixture
async def admin(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        yield client


async def _reconcile(ctx: ReconcileContext[Deployment]) -> Reconciled:
    return Reconciled()


async def test_an_admin_with_thirteen_namespaced_controllers_passes_the_check(
    kube_apiserver: ApiServer, admin: Client
) -> None:
    namespaces = [kube_apiserver.create_namespace(prefix="many") for _ in range(NAMESPACES)]
    manager = Manager(admin, name="kubemoon.dev/many-namespaces")
    for i, namespace in enumerate(namespaces):
        controller = manager.controller(f"apps-{i}", Deployment, namespace=namespace)
        controller.owns(ConfigMap).owns(Secret).owns(Service).complete(_reconcile)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            with trio.fail_after(60):
                await manager.wait_leading(timeout=50)
            assert manager.permission_problem is None
        finally:
            manager.stop()
