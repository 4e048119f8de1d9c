"""Tests of the backup controller against a real kube-apiserver (kubemoon's fixtures)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from backup_controller import CONFIGMAPS, LABEL, run

from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client


async def get(client: Client, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return await client.get(CONFIGMAPS, name, namespace=namespace)
    except NotFound:
        return None


async def wait_for(check: Any, timeout: float = 30.0) -> Any:
    with trio.fail_after(timeout):
        while not (result := await check()):
            await trio.sleep(0.1)
        return result


@pytest.mark.trio
async def test_a_backup_follows_its_original(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    kubeconfig = str(kube_apiserver.kubeconfig_path)
    async with Client.from_kubeconfig(kubeconfig) as client, trio.open_nursery() as nursery:
        nursery.start_soon(run, client, ns)
        plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}
        await client.create(CONFIGMAPS, plain, namespace=ns)
        original = await client.create(
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "app", "labels": {LABEL: "true"}},
                "data": {"k": "1"},
            },
            namespace=ns,
        )

        backup = await wait_for(lambda: get(client, "app-backup", ns))
        assert backup["data"] == {"k": "1"}
        assert backup["metadata"]["ownerReferences"][0]["uid"] == original["metadata"]["uid"]
        # Created earlier, but not labelled: never backed up.
        assert await get(client, "plain-backup", ns) is None

        await client.patch(CONFIGMAPS, "app", {"data": {"k": "2"}}, namespace=ns)

        async def updated() -> bool:
            current = await get(client, "app-backup", ns)
            return current is not None and current["data"] == {"k": "2"}

        await wait_for(updated)

        # The controller deletes nothing: the garbage collector (kube-controller-manager,
        # started by the fixture) removes the backup with its owner.
        await client.delete(CONFIGMAPS, "app", namespace=ns)

        async def backup_gone() -> bool:
            return await get(client, "app-backup", ns) is None

        await wait_for(backup_gone)
        nursery.cancel_scope.cancel()
