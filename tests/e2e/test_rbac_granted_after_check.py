"""Regression (attacker's pass, round five): a replica whose rights arrive after its
start-up check, on the real kube-apiserver.

A check that goes unanswered is made again every 30 s (``RECHECK_INTERVAL``) until it
passes. A check that *was* answered with a missing rule is never made again: the replica
stays unready, never campaigns and never reconciles, until someone restarts it -- and
nothing restarts it (``/healthz`` stays healthy). RBAC that lands a little after the pod
(a GitOps sync wave, a Role applied after the Deployment, an aggregated ClusterRole the
controller manager fills in a moment later, an admin fixing the rule the ERROR named)
leaves the Deployment stuck with a replica that now could work.

Expected: the check is made again (as an unanswered one is), and once the rights are
there the replica works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from kubemoon_core import Reconciled
from kubemoon_core.builtin import ConfigMap
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext
from kubemoon_trio import _permissions as permissions

pytestmark = pytest.mark.integration


@pytest.fixture
async def limited(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    path = str(kube_apiserver.kubeconfig_path)
    async with Client.from_kubeconfig(path, context="limited") as client:
        yield client


async def _reconcile(ctx: ReconcileContext[ConfigMap]) -> Reconciled:
    return Reconciled()


async def test_rights_granted_after_a_failed_check_let_the_replica_work(
    kube_apiserver: ApiServer, limited: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(permissions, "RECHECK_INTERVAL", 1.0)  # what the unanswered case waits
    server = kube_apiserver
    namespace = server.create_namespace(prefix="late-rbac")
    server.grant_namespace_access(namespace, verbs=("get", "list", "watch"))  # no writes yet
    manager = Manager(limited, name="kubemoon.dev/late-rbac")
    manager.controller("configmaps", ConfigMap, namespace=namespace).complete(_reconcile)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            with trio.fail_after(30):
                while manager.permission_problem is None:
                    await trio.sleep(0.05)
            assert "missing RBAC permissions" in manager.permission_problem
            # The admin applies the rules the ERROR named.
            role = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "late"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
                    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
                ],
            }
            base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
            assert server.request("POST", f"{base}/roles", body=role).status == 201
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "late"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "late",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "limited"}
                ],
            }
            assert server.request("POST", f"{base}/rolebindings", body=binding).status == 201
            with trio.move_on_after(20):
                while manager.permission_problem is not None or not manager.reconciling:
                    await trio.sleep(0.1)
            assert manager.permission_problem is None, (
                f"20 s after the missing rules were granted: {manager.permission_problem}"
            )
            assert manager.reconciling
        finally:
            manager.stop()
