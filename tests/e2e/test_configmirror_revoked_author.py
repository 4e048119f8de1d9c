"""Regression (found by an attack): the access review was made once, at admission; the
operator wrote forever after.

The validating webhook lets a mirror target a namespace only if its author may create
ConfigMaps there (DESIGN.md: "a tenant never gets the operator to act with rights the
tenant lacks"). But the review happens only when the mirror's reach widens: once stored,
the mirror keeps the operator writing into that namespace with the operator's own rights,
and the author keeps choosing what is written (by editing the source in its own namespace,
which no webhook sees) after its right to write there is gone -- a revoked RoleBinding,
or a namespace deleted and re-created under the same name by another tenant (who then
receives the first tenant's copies and cannot get rid of them except by opting out of
every mirror).

Expected: a mirror whose author may no longer create ConfigMaps in a target does not get
new content written there (the target is refused, as a namespace that does not accept
copies is). Observed: the copy is updated with what the tenant wrote after revocation.
"""

from __future__ import annotations

import time

import pytest
import trio
from conftest import StartOperator, eventually
from test_configmirror_webhooks import (  # fixtures and helpers of the webhook tier
    RBAC,
    Served,
    Tenant,
    grant,
    home,
    mirror,
    served,
    tenant,
)

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration
__all__ = ["home", "served", "tenant"]  # fixtures, imported to be found


def _revoke(server: ApiServer, namespace: str, name: str) -> None:
    answer = server.request("DELETE", f"{RBAC}/namespaces/{namespace}/rolebindings/{name}")
    assert answer.status == 200, answer.body[:300]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "limited",
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "create",
                "group": "",
                "resource": "configmaps",
            },
        },
    }
    for _ in range(200):
        answer = server.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
        )
        if not answer.json().get("status", {}).get("allowed"):
            return
        time.sleep(0.05)
    raise AssertionError("RBAC never revoked")


async def test_a_tenant_whose_right_was_revoked_no_longer_writes_there(
    configmirror_api: ApiServer,
    served: Served,
    tenant: Tenant,
    client: Client,
    start_operator: StartOperator,
) -> None:
    server = configmirror_api
    home = tenant.home
    # tenant.other accepts copies; the tenant may write ConfigMaps there, for now.
    target = tenant.other
    own = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]}]
    await trio.to_thread.run_sync(lambda: grant(server, home, "own-configmaps", own))
    # create and update: what the operator's writes there need (so what is tested is the
    # revocation, not a right that was never granted).
    create = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update"]}]
    await trio.to_thread.run_sync(lambda: grant(server, target, "write-copies", create))
    await tenant.user.create(CONFIGMIRRORS, mirror("m", [target]), namespace=home)
    await start_operator(namespaces=(home,))

    async def copy_data() -> dict[str, str] | None:
        try:
            found = await client.get(CONFIGMAPS, "settings", namespace=target)
        except NotFound:
            return None
        data: dict[str, str] = found.get("data") or {}
        return data

    assert await eventually(copy_data, what="the copy") == {"k": "secret"}

    # The tenant's right in the target is revoked (or the namespace changed hands).
    await trio.to_thread.run_sync(lambda: _revoke(server, target, "write-copies"))
    # The tenant then edits its own source, which no webhook reviews.
    source = await tenant.user.get(CONFIGMAPS, "settings", namespace=home)
    source["data"] = {"k": "written-after-revocation"}
    await tenant.user.replace(CONFIGMAPS, source, namespace=home)

    with trio.move_on_after(10):
        while await copy_data() != {"k": "written-after-revocation"}:
            await trio.sleep(0.2)
    assert await copy_data() != {"k": "written-after-revocation"}, (
        f"the operator wrote the tenant's new content into {target!r}, where the tenant "
        "may no longer create (or change) ConfigMaps"
    )

    async def refused() -> str | None:
        stored = await client.get(CONFIGMIRRORS, "m", namespace=home)
        for condition in (stored.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "Ready" and condition.get("reason") == "AuthorNotAllowed":
                message: str = condition.get("message", "")
                return message
        return None

    assert target in await eventually(refused, what="the status naming the refused target")


async def test_a_copy_is_not_created_again_where_the_author_lost_the_right(
    configmirror_api: ApiServer,
    served: Served,
    tenant: Tenant,
    client: Client,
    start_operator: StartOperator,
) -> None:
    """The create path, as in a namespace re-created under the same name by someone else:
    the copy is gone and the author may not create ConfigMaps there, so none is created."""
    server = configmirror_api
    home, target = tenant.home, tenant.other
    own = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]}]
    await trio.to_thread.run_sync(lambda: grant(server, home, "own-configmaps", own))
    write = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update"]}]
    await trio.to_thread.run_sync(lambda: grant(server, target, "write-copies", write))
    await tenant.user.create(CONFIGMIRRORS, mirror("m", [target]), namespace=home)
    await start_operator(namespaces=(home,))

    async def copied() -> bool:
        try:
            await client.get(CONFIGMAPS, "settings", namespace=target)
        except NotFound:
            return False
        return True

    assert await eventually(copied, what="the copy")
    await trio.to_thread.run_sync(lambda: _revoke(server, target, "write-copies"))
    await client.delete(CONFIGMAPS, "settings", namespace=target)  # the new owner's doing

    async def refused() -> str | None:
        stored = await client.get(CONFIGMIRRORS, "m", namespace=home)
        for condition in (stored.get("status") or {}).get("conditions") or ():
            if condition.get("reason") == "AuthorNotAllowed":
                message: str = condition.get("message", "")
                return message
        return None

    assert target in await eventually(refused, what="the status naming the refused target")
    assert not await copied(), f"a copy was created in {target!r} for an author without rights"
