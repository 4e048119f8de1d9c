"""Regression test for attack defect 3 (fixed; once failing on main).

The owner annotation turns "may update a ConfigMap" into "may delete it".

The planner treats every ConfigMap anywhere that carries ``kubemoon.dev/owner-uid: <uid>``
as a copy of that mirror, and deletes those it does not want (another name, a namespace
it does not target). The annotation is the only test: not the managed-by label, not
whether the operator created the object. A user who may update but NOT delete
ConfigMaps in a namespace (a CI bot, a config editor role) reads a mirror's UID off any
copy it can see, annotates the ConfigMap it wants gone, and the operator deletes it
with its own cluster-wide delete right.

Expected: the operator deletes only copies it made (the object it created, by name and
label as well as annotation), so a user's rights are not widened. Observed: the
annotated ConfigMap is deleted.
"""

from __future__ import annotations

import pytest
import trio
from conftest import StartOperator, eventually
from test_configmirror_webhooks import (  # fixtures and helpers of the webhook tier
    Tenant,
    grant,
    home,
    tenant,
)

from configmirror import CONFIGMAPS, CONFIGMIRRORS, OWNER_UID_ANNOTATION
from kubemoon_core import ApiError
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration
__all__ = ["home", "tenant"]  # fixtures, imported to be found


async def test_annotating_a_configmap_does_not_get_it_deleted(
    configmirror_api: ApiServer, tenant: Tenant, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    target = tenant.other  # accepts copies; the ``limited`` user may not delete there
    editor = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "update"]}]
    await trio.to_thread.run_sync(lambda: grant(server, target, "edit-configmaps", editor))
    await client.create(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "precious"}},
        namespace=target,
    )
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": [target]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=tenant.home)
    running = await start_operator(namespaces=(tenant.home,))

    async def copy_uid() -> str | None:
        try:
            found = await tenant.user.get(CONFIGMAPS, "settings", namespace=target)
        except NotFound:
            return None
        uid: str | None = found["metadata"].get("annotations", {}).get(OWNER_UID_ANNOTATION)
        return uid

    uid = await eventually(copy_uid, what="the copy, readable by the editor")
    with pytest.raises(ApiError) as info:  # the editor may not delete...
        await tenant.user.delete(CONFIGMAPS, "precious", namespace=target)
    assert info.value.code == 403
    precious = await tenant.user.get(CONFIGMAPS, "precious", namespace=target)
    precious["metadata"]["annotations"] = {OWNER_UID_ANNOTATION: uid}
    await tenant.user.replace(CONFIGMAPS, precious, namespace=target)  # ...but may annotate

    gone = False
    with trio.move_on_after(10):
        while not gone:
            try:
                await client.get(CONFIGMAPS, "precious", namespace=target)
                await trio.sleep(0.2)
            except NotFound:
                gone = True
    assert not gone, (
        "the operator deleted a ConfigMap that a user who may not delete it had only "
        "annotated with a mirror's UID"
    )

    # Left alone, and reported: logged once and counted once, however often it is seen.
    async def reported() -> bool:
        return running.operator.ignored_lookalikes == 1

    await eventually(reported, what="the look-alike counted")
    registry = running.operator.manager.registry
    metric = "kubemoon_configmirror_ignored_lookalikes_total"
    assert registry.get_sample_value(metric) == 1.0
