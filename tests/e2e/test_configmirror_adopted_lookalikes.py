"""Regression (attacker's pass, round four): a copy's marks are forgeable, so they must
not be what turns "may update a ConfigMap" into "may delete it".

A copy is recognised by its name, the managed-by label and the mirror's UID in
``kubemoon.dev/owner-uid``; since the previous round, outside the targets only a copy
whose UID the mirror's status records is deleted. All three marks can be put on any
ConfigMap by whoever may update it, and the status can be written by a tenant allowed
``configmirrors/status`` (as many namespace-admin roles are). Two ways to get a ConfigMap
deleted by a user who may update but not delete it:

1. In a target: the user (create and update there, no delete) targets the namespace
   where ``settings`` already exists (a Conflict), marks it as a copy of the mirror; the
   operator adopts it (writes the source's data, within the user's update right) and
   records its UID; dropping the target (or deleting the mirror) then deletes it.
2. Anywhere, through the status: the user marks a ConfigMap in a namespace the mirror
   does not target (and that accepts no copies) and writes its UID into
   ``status.targets[].uid``; the operator deletes it as a recorded copy.

Expected (DESIGN.md: "a tenant never gets the operator to act with rights the tenant
lacks"): the operator deletes a copy only if it created it itself, or if the mirror's
author may delete ConfigMaps there. Observed: both ConfigMaps are deleted.
"""

from __future__ import annotations

import pytest
import trio
from conftest import StartOperator, eventually
from test_configmirror_webhooks import (  # fixtures and helpers of the webhook tier
    Served,
    Tenant,
    grant,
    home,
    mirror,
    served,
    tenant,
)

from configmirror import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    CONFIGMIRRORS_V1BETA1,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_UID_ANNOTATION,
)
from kubemoon_core import ApiError
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration
__all__ = ["home", "served", "tenant"]  # fixtures, imported to be found

NO_DELETE = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}]


async def _mark(user: Client, namespace: str, uid: str) -> None:
    """What the user may do without the delete right: mark ``settings`` as a copy."""
    found = await user.get(CONFIGMAPS, "settings", namespace=namespace)
    found["metadata"].setdefault("labels", {})[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    found["metadata"].setdefault("annotations", {})[OWNER_UID_ANNOTATION] = uid
    await user.replace(CONFIGMAPS, found, namespace=namespace)


async def _survives(client: Client, namespace: str, uid: str, seconds: float = 10) -> bool:
    """Whether the ConfigMap ``settings`` of ``uid`` is still there after ``seconds``."""
    with trio.move_on_after(seconds):
        while True:
            try:
                found = await client.get(CONFIGMAPS, "settings", namespace=namespace)
            except NotFound:
                return False
            if found["metadata"]["uid"] != uid:
                return False
            await trio.sleep(0.2)
    return True


def _own_source(server: ApiServer, tenant: Tenant) -> None:
    """The tenant may read its own source (what admission asks of an author)."""
    own = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]}]
    grant(server, tenant.home, "own-configmaps", own)


async def _cannot_delete(user: Client, namespace: str) -> None:
    with pytest.raises(ApiError) as info:
        await user.delete(CONFIGMAPS, "settings", namespace=namespace)
    assert info.value.code == 403


async def test_an_adopted_look_alike_in_a_target_is_not_deleted_when_the_target_is_dropped(
    configmirror_api: ApiServer,
    served: Served,
    tenant: Tenant,
    client: Client,
    start_operator: StartOperator,
) -> None:
    server = configmirror_api
    target = tenant.other  # accepts copies
    await trio.to_thread.run_sync(lambda: _own_source(server, tenant))
    await trio.to_thread.run_sync(lambda: grant(server, target, "no-delete", NO_DELETE))
    precious = await client.create(
        CONFIGMAPS,
        {"metadata": {"name": "settings"}, "data": {"owner": "someone else"}},
        namespace=target,
    )
    await _cannot_delete(tenant.user, target)
    created = await tenant.user.create(CONFIGMIRRORS, mirror("m", [target]), namespace=tenant.home)
    running = await start_operator(namespaces=(tenant.home,))

    async def reason() -> str | None:
        stored = await client.get(CONFIGMIRRORS, "m", namespace=tenant.home)
        for condition in (stored.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "Ready":
                return str(condition.get("reason"))
        return None

    assert await eventually(reason, what="the mirror's status") == "TargetConflict"
    await _mark(tenant.user, target, created["metadata"]["uid"])

    async def adopted() -> bool:
        found = await client.get(CONFIGMAPS, "settings", namespace=target)
        return found.get("data") == {"k": "secret"}

    # Writing the source's data over it is within the user's update right.
    await eventually(adopted, what="the marked ConfigMap written as a copy")
    # The user drops the target (narrowing a mirror needs no review).
    for _ in range(10):
        stored = await tenant.user.get(CONFIGMIRRORS, "m", namespace=tenant.home)
        stored["spec"]["targetNamespaces"] = []
        try:
            await tenant.user.replace(CONFIGMIRRORS, stored, namespace=tenant.home)
            break
        except ApiError as exc:
            if exc.code != 409:
                raise

    async def settled() -> bool:
        stored = await client.get(CONFIGMIRRORS, "m", namespace=tenant.home)
        status = stored.get("status") or {}
        return status.get("observedGeneration") == stored["metadata"]["generation"]

    await eventually(settled, what="the narrowed mirror reconciled")
    assert await _survives(client, target, precious["metadata"]["uid"], seconds=2), (
        "the operator deleted a ConfigMap it never created, for a user who may only create "
        "and update ConfigMaps there"
    )
    assert running.reconciling


async def test_a_forged_status_uid_does_not_get_a_configmap_deleted(
    configmirror_api: ApiServer,
    served: Served,
    tenant: Tenant,
    client: Client,
    start_operator: StartOperator,
) -> None:
    server = configmirror_api
    target = tenant.other  # accepts copies; the mirror's one target
    await trio.to_thread.run_sync(lambda: _own_source(server, tenant))
    await trio.to_thread.run_sync(lambda: grant(server, target, "write-copies", NO_DELETE))
    elsewhere = await trio.to_thread.run_sync(
        lambda: server.create_namespace(prefix="cm-elsewhere")
    )  # accepts no copies, is no target
    await trio.to_thread.run_sync(lambda: grant(server, elsewhere, "no-delete", NO_DELETE))
    precious = await client.create(
        CONFIGMAPS,
        {"metadata": {"name": "settings"}, "data": {"owner": "someone else"}},
        namespace=elsewhere,
    )
    await _cannot_delete(tenant.user, elsewhere)
    created = await tenant.user.create(CONFIGMIRRORS, mirror("m", [target]), namespace=tenant.home)
    uid = created["metadata"]["uid"]
    await start_operator(namespaces=(tenant.home,))

    async def synced() -> dict | None:
        stored = await tenant.user.get(CONFIGMIRRORS_V1BETA1, "m", namespace=tenant.home)
        states = [t.get("state") for t in (stored.get("status") or {}).get("targets") or ()]
        return stored if states == ["Synced"] else None

    stored = await eventually(synced, what="the copy synced")
    await _mark(tenant.user, elsewhere, uid)
    # The status subresource is the tenant's to write too: record the marked ConfigMap.
    for _ in range(10):
        stored = await tenant.user.get(CONFIGMIRRORS_V1BETA1, "m", namespace=tenant.home)
        stored["status"]["targets"].append(
            {
                "namespace": elsewhere,
                "state": "Synced",
                "message": "",
                "uid": precious["metadata"]["uid"],
            }
        )
        try:
            await tenant.user.replace(
                CONFIGMIRRORS_V1BETA1, stored, namespace=tenant.home, subresource="status"
            )
            break
        except ApiError as exc:
            if exc.code != 409:
                raise
    else:
        raise AssertionError("the forged status could not be written")
    try:
        assert await _survives(client, elsewhere, precious["metadata"]["uid"]), (
            "the operator deleted a ConfigMap in a namespace its mirror does not target, "
            "because the mirror's (tenant-written) status recorded its UID"
        )
    finally:
        await trio.to_thread.run_sync(lambda: server.delete_namespace(elsewhere))
