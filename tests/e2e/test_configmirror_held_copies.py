"""Regression test for attack defect 5 (fixed; once failing on main).

A tenant that RECEIVES a copy holds another tenant's ConfigMirror hostage.

The tenant owning a target namespace may write ConfigMaps there (it has to: that is why the
webhook's access review lets a mirror target it). It adds a finalizer of its own to the
copy the operator made, or plants ConfigMaps annotated with the mirror's UID (which the
copy shows it) and holds them with a finalizer. When the mirror's author deletes the
mirror, the operator's DELETE of each such ConfigMap only sets its deletionTimestamp; the
cleanup waits for them to be *gone*, which the other tenant never lets happen:

- the mirror (and with it the author's namespace, if being deleted) never goes away;
- the operator re-sends one DELETE per held ConfigMap every second, forever: with N
  planted ConfigMaps the other tenant makes the operator send N requests a second on its
  own client, paid for by the operator.

Expected: a copy already being deleted is the operator's work done (its DELETE was
accepted); the finalizer goes, and no DELETE is repeated for an object that has a
deletionTimestamp.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS, OWNER_UID_ANNOTATION
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

HOLD = "tenant.example/hold"
PLANTED = 20


async def _gone(client: Client, name: str, namespace: str) -> bool:
    try:
        await client.get(CONFIGMIRRORS, name, namespace=namespace)
    except NotFound:
        return True
    return False


async def _release(client: Client, namespace: str) -> None:
    async for cm in client.list(CONFIGMAPS, namespace=namespace):
        if HOLD in (cm["metadata"].get("finalizers") or []):
            cm["metadata"]["finalizers"] = [f for f in cm["metadata"]["finalizers"] if f != HOLD]
            try:
                await client.replace(CONFIGMAPS, cm, namespace=namespace)
            except NotFound:
                pass


async def test_a_receiving_tenant_cannot_hold_a_mirror_deletion_forever(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    home = configmirror_api.create_namespace(prefix="atk-home")
    evil = configmirror_api.create_namespace(prefix="atk-evil")
    accept_mirrors(configmirror_api, evil)
    source: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"a": "1"},
    }
    await client.create(CONFIGMAPS, source, namespace=home)
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": [evil]},
    }
    created = await client.create(CONFIGMIRRORS, mirror, namespace=home)
    uid = created["metadata"]["uid"]
    running = await start_operator(namespaces=(home,))

    async def copied() -> dict[str, Any] | None:
        try:
            return await client.get(CONFIGMAPS, "settings", namespace=evil)
        except NotFound:
            return None

    copy = await eventually(copied, what="the copy in the receiving tenant's namespace")
    try:
        # The receiving tenant (writes in its own namespace only) holds the copy and plants
        # more ConfigMaps carrying the UID it read from the copy's annotation.
        copy["metadata"]["finalizers"] = [HOLD]
        await client.replace(CONFIGMAPS, copy, namespace=evil)
        for i in range(PLANTED):
            planted = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"planted-{i}",
                    "annotations": {OWNER_UID_ANNOTATION: uid},
                    "finalizers": [HOLD],
                },
            }
            await client.create(CONFIGMAPS, planted, namespace=evil)

        await client.delete(CONFIGMIRRORS, "m", namespace=home)
        # Give the cleanup ample time, then count what the operator keeps sending.
        with trio.move_on_after(20):
            while not await _gone(client, "m", home):
                await trio.sleep(0.2)
        before = running.operator.writes
        await trio.sleep(5)
        repeated = running.operator.writes - before
        assert await _gone(client, "m", home), (
            "the mirror's deletion is held forever by finalizers another tenant put on "
            f"ConfigMaps in its own namespace; the operator sent {repeated} DELETEs in 5 s "
            "for objects already being deleted"
        )
    finally:
        await _release(client, evil)
    await eventually(lambda: _gone(client, "m", home), what="mirror gone after release")
