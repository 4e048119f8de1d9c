"""``running_manager``: a Manager runs for a test's duration on the real apiserver, inside a
pytest-trio test, a pytest-asyncio test, and (``running_manager_in_thread``) a plain one.

Each manager elects itself leader in the test's namespace and reconciles its ConfigMaps;
entering returns once it leads and its caches synced (a ConfigMap made before is already
seen), and leaving has released the Lease, which only a cleanly stopped Manager does.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import anyio
import pytest

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_testing import ApiServer, running_manager, running_manager_in_thread

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


def make_configmap(server: ApiServer, namespace: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    response = server.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body)
    assert response.status == 201, response.body[:300]


def lease_holder(server: ApiServer, namespace: str) -> str | None:
    response = server.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/test-manager"
    )
    assert response.status == 200, response.body[:300]
    return response.json()["spec"].get("holderIdentity") or None


async def exercise(loop: str, server: ApiServer, namespace: str) -> None:
    km: Any = importlib.import_module(f"kubemoon_{loop}")
    seen: set[str] = set()

    async def reconcile(ctx: Any) -> Reconciled:
        seen.add(ctx.name)
        return Reconciled()

    make_configmap(server, namespace, "before")
    async with km.Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        manager = km.Manager(
            client,
            leader_election=km.LeaderElectionConfig("test-manager", namespace),
        )
        manager.controller("cms", CONFIGMAPS, namespace=namespace).complete(reconcile)
        async with running_manager(manager, timeout=30) as running:
            assert running is manager
            assert manager.is_leader
            make_configmap(server, namespace, "during")
            with anyio.fail_after(30):
                while not {"before", "during"} <= seen:
                    await anyio.sleep(0.05)
            assert lease_holder(server, namespace) == manager.identity
        assert lease_holder(server, namespace) is None


async def test_a_manager_runs_for_a_trio_test(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    await exercise("trio", kube_apiserver, kube_namespace)


@pytest.mark.asyncio
async def test_a_manager_runs_for_a_pytest_asyncio_test(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    import asyncio

    asyncio.get_running_loop()  # raises unless pytest-asyncio runs this test
    await exercise("asyncio", kube_apiserver, kube_namespace)


def test_a_blocking_manager_runs_in_a_thread(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    import kubemoon_sync as km

    seen: set[str] = set()

    def reconcile(ctx: Any) -> Reconciled:
        seen.add(ctx.name)
        return Reconciled()

    make_configmap(kube_apiserver, kube_namespace, "before")
    with km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        manager = km.Manager(
            client, leader_election=km.LeaderElectionConfig("test-manager", kube_namespace)
        )
        manager.controller("cms", CONFIGMAPS, namespace=kube_namespace).complete(reconcile)
        with running_manager_in_thread(manager, timeout=30):
            make_configmap(kube_apiserver, kube_namespace, "during")
            deadline = time.monotonic() + 30
            while not {"before", "during"} <= seen:
                assert time.monotonic() < deadline, seen
                time.sleep(0.05)
        assert lease_holder(kube_apiserver, kube_namespace) is None


async def test_a_failing_manager_ends_the_test_with_its_own_error(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    import kubemoon_trio as km
    from kubemoon_core.errors import CacheSyncTimeout

    async with km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        manager = km.Manager(client)
        missing = GroupVersionResource("nothing.kubemoon.dev", "v1", "nothings")

        async def reconcile(ctx: Any) -> Reconciled:
            return Reconciled()

        manager.controller("none", missing, namespace=kube_namespace).complete(reconcile)
        with pytest.raises(CacheSyncTimeout):
            async with running_manager(manager, timeout=1):
                pytest.fail("a cache of a resource that does not exist never syncs")


async def test_a_failing_test_body_stops_the_manager_and_keeps_its_error(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    import kubemoon_trio as km

    async with km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        manager = km.Manager(
            client, leader_election=km.LeaderElectionConfig("test-manager", kube_namespace)
        )
        with pytest.raises(AssertionError, match="the test's own failure"):
            async with running_manager(manager):
                raise AssertionError("the test's own failure")
        assert lease_holder(kube_apiserver, kube_namespace) is None
