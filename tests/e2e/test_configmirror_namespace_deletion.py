"""ConfigMirror when namespaces are really deleted (the namespace controller runs).

A deleted target namespace takes its copy with it and the mirror keeps serving the other
targets; a deleted home namespace deletes the ConfigMirror, whose finalizer first removes
the copies it made elsewhere, and only then the namespace is gone.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

NAMESPACES = GroupVersionResource("", "v1", "namespaces")


def _source(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": data}


def _mirror(targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": targets},
    }


async def _get(client: Client, resource: Any, name: str, ns: str | None) -> Any:
    try:
        return await client.get(resource, name, namespace=ns)
    except NotFound:
        return None


async def _copy_data(client: Client, ns: str) -> Any:
    copy = await _get(client, CONFIGMAPS, "settings", ns)
    return None if copy is None else copy.get("data")


async def _gone(client: Client, ns: str) -> bool:
    return await _get(client, NAMESPACES, ns, None) is None


async def test_a_deleted_target_namespace_loses_its_copy_and_the_rest_stays_in_sync(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    home = server.create_namespace(prefix="cm-home")
    kept, doomed = (server.create_namespace(prefix="cm-target") for _ in range(2))
    for ns in (kept, doomed):
        accept_mirrors(server, ns)  # targets opt in to receiving copies
    await client.create(CONFIGMAPS, _source({"a": "1"}), namespace=home)
    await client.create(CONFIGMIRRORS, _mirror([kept, doomed]), namespace=home)
    await start_operator(namespaces=(home,))
    for ns in (kept, doomed):
        await eventually(lambda ns=ns: _copy_data(client, ns), what=f"the copy in {ns}")

    await client.delete(NAMESPACES, doomed)
    await eventually(lambda: _gone(client, doomed), timeout=60, what="the namespace to go")

    # The operator cannot (and must not) bring the namespace back, and the remaining
    # target still follows the source.
    source = await client.get(CONFIGMAPS, "settings", namespace=home)
    source["data"] = {"a": "2"}
    await client.replace(CONFIGMAPS, source, namespace=home)

    async def kept_updated() -> bool:
        return await _copy_data(client, kept) == {"a": "2"}

    await eventually(kept_updated, what="the update in the remaining target")
    assert await _gone(client, doomed)

    # Dropping the deleted namespace from the spec makes the mirror whole again.
    await client.patch(CONFIGMIRRORS, "m", {"spec": {"targetNamespaces": [kept]}}, namespace=home)

    async def ready() -> bool:
        mirror = await client.get(CONFIGMIRRORS, "m", namespace=home)
        conditions = (mirror.get("status") or {}).get("conditions") or []
        return any(
            c["type"] == "Ready" and (c["status"], c["reason"]) == ("True", "Synced")
            for c in conditions
        )

    await eventually(ready, timeout=30, what="Ready=True after the spec change")


async def test_a_deleted_home_namespace_cleans_up_the_copies_before_it_goes(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    home = server.create_namespace(prefix="cm-home")
    target = server.create_namespace(prefix="cm-target")
    accept_mirrors(server, target)  # targets opt in to receiving copies
    await client.create(CONFIGMAPS, _source({"a": "1"}), namespace=home)
    await client.create(CONFIGMIRRORS, _mirror([target]), namespace=home)
    await start_operator(namespaces=(home,))
    await eventually(lambda: _copy_data(client, target), what="the copy")

    await client.delete(NAMESPACES, home)

    # The namespace controller deletes the ConfigMirror; its finalizer holds the namespace
    # until the operator has removed the copy in the other namespace.
    await eventually(lambda: _gone(client, home), timeout=60, what="the home namespace to go")
    assert await _copy_data(client, target) is None
