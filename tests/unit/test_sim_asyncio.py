"""The simulated cluster served to a real ``kubemoon_asyncio`` Client, Informer and Manager
on asyncio with virtual time (``run_virtual``): the asyncio twin of test_sim_client.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import kubemoon_asyncio as ka
from kubemoon_core import GroupVersionResource, ListOptions, ObjectKey, PatchType, Reconciled
from kubemoon_core.errors import Conflict, NotFound
from kubemoon_testing.sim import NotModelled, SimulatedCluster, run_virtual

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
LEASES = GroupVersionResource("coordination.k8s.io", "v1", "leases")


def cm(name: str, value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": value},
    }


def test_virtual_time_jumps_to_the_next_timer() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3600)
        return loop.time()

    assert run_virtual(main) == 3600.0


def test_a_loop_waiting_for_ever_is_refused() -> None:
    async def main() -> None:
        asyncio.get_running_loop().threads_may_call_back = False  # type: ignore[attr-defined]
        await asyncio.Event().wait()

    with pytest.raises(NotModelled, match="waits for ever"):
        run_virtual(main)


def test_crud_and_a_watch_on_asyncio() -> None:
    async def main() -> list[tuple[float, str]]:
        cluster = SimulatedCluster()
        loop = asyncio.get_running_loop()
        async with cluster.asyncio_client() as client:
            created = await client.create(CONFIGMAPS, cm("a"), namespace="default")
            await client.patch(
                CONFIGMAPS,
                "a",
                {"data": {"k": "2"}},
                namespace="default",
                patch_type=PatchType.MERGE,
            )
            with pytest.raises(Conflict):
                await client.replace(CONFIGMAPS, created, namespace="default")
            rv = str(cluster.server.resource_version)
            seen: list[tuple[float, str]] = []

            async def writer() -> None:
                await asyncio.sleep(5)
                await client.delete(CONFIGMAPS, "a", namespace="default")

            options = ListOptions(
                resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=90
            )
            start = loop.time()
            task = asyncio.create_task(writer())
            async with client.watch(CONFIGMAPS, namespace="default", options=options) as events:
                async for event in events:
                    seen.append((loop.time() - start, event.type))
            await task
            with pytest.raises(NotFound):
                await client.get(CONFIGMAPS, "a", namespace="default")
        assert cluster.refusals == [] and cluster.open_connections == 0
        return seen

    assert run_virtual(main) == [(5.0, "DELETED"), (60.0, "BOOKMARK"), (88.0, "BOOKMARK")]


def test_an_informer_and_a_leader_elected_manager_on_asyncio() -> None:
    async def main() -> None:
        cluster = SimulatedCluster()
        seen: set[str] = set()

        async def reconcile(ctx: Any) -> Reconciled:
            seen.add(ctx.name)
            return Reconciled()

        async with cluster.asyncio_client() as client:
            await client.create(CONFIGMAPS, cm("before"), namespace="default")
            informer = ka.Informer(client, CONFIGMAPS, namespace="default")
            manager = ka.Manager(
                client,
                leader_election=ka.LeaderElectionConfig("sim", "default", identity="one"),
                registry=CollectorRegistry(),
            )
            manager.controller("cms", CONFIGMAPS, namespace="default").complete(reconcile)
            run = asyncio.create_task(manager.run())
            watch = asyncio.create_task(informer.run())
            await client.create(CONFIGMAPS, cm("during"), namespace="default")
            async with asyncio.timeout(60):
                while not {"before", "during"} <= seen:
                    await asyncio.sleep(0.05)
            assert ObjectKey("default", "during") in informer.store
            lease = await client.get(LEASES, "sim", namespace="default")
            assert lease["spec"]["holderIdentity"] == "one"
            await asyncio.sleep(120)  # renewals on virtual time
            renewed = await client.get(LEASES, "sim", namespace="default")
            assert int(renewed["metadata"]["resourceVersion"]) > int(
                lease["metadata"]["resourceVersion"]
            )
            manager.stop()
            await run
            watch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await watch
        assert cluster.refusals == []

    run_virtual(main)
