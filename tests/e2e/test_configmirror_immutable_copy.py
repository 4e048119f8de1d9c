"""Regression test for attack defect 7 (fixed; once failing on main).

A receiving tenant marks its copy ``immutable: true``; the mirror then reports
``Ready=True Synced`` forever while that copy keeps the old data.

A tenant that receives a copy may update ConfigMaps in its namespace, so it may set
``immutable: true`` on the copy. The operator's next PUT of that copy (the source
changed) is refused with 422 by the apiserver; the reconcile raises, and since the
status is written only after every copy write succeeded, the mirror's status stays what
it was -- ``Synced``, "mirrored to 2 namespace(s)" -- while one target holds stale
data, with no Event or condition naming it. The author is told the copy is in sync.

Expected: a copy the operator cannot update is reported (a target state other than
Synced, Ready not True) -- or replaced (deleted and created again, as it is the
operator's own copy). Observed: Ready stays True/Synced with a stale copy.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration


async def test_a_copy_made_immutable_is_not_reported_synced_while_stale(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    home = configmirror_api.create_namespace(prefix="imm-home")
    good = configmirror_api.create_namespace(prefix="imm-good")
    frozen = configmirror_api.create_namespace(prefix="imm-frozen")
    for target in (good, frozen):
        accept_mirrors(configmirror_api, target)
    source: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"v": "1"},
    }
    await client.create(CONFIGMAPS, source, namespace=home)
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": [good, frozen]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=home)
    await start_operator(namespaces=(home,))

    async def data(namespace: str) -> dict[str, str] | None:
        try:
            found = await client.get(CONFIGMAPS, "settings", namespace=namespace)
        except NotFound:
            return None
        result: dict[str, str] = found.get("data") or {}
        return result

    async def ready() -> tuple[str, str] | None:
        obj = await client.get(CONFIGMIRRORS, "m", namespace=home)
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready":
                return cond["status"], cond["reason"]
        return None

    await eventually(lambda: _is(data(frozen), {"v": "1"}), what="first copy")
    await eventually(lambda: _is(ready(), ("True", "Synced")), what="Ready")

    # The receiving tenant freezes its copy.
    copy = await client.get(CONFIGMAPS, "settings", namespace=frozen)
    copy["immutable"] = True
    await client.replace(CONFIGMAPS, copy, namespace=frozen)
    # The author updates the source.
    current = await client.get(CONFIGMAPS, "settings", namespace=home)
    current["data"] = {"v": "2"}
    await client.replace(CONFIGMAPS, current, namespace=home)
    await eventually(lambda: _is(data(good), {"v": "2"}), what="the other copy updated")
    await trio.sleep(5)
    stale = await data(frozen)
    reported = await ready()
    assert not (stale == {"v": "1"} and reported == ("True", "Synced")), (
        f"the copy in {frozen} holds {stale} (the source has {{'v': '2'}}), yet the mirror "
        f"reports Ready={reported}"
    )


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_an_immutable_copy_is_learned_from_the_refused_update(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    """Copies are cached as metadata only, which carries no ``immutable``. A copy frozen and
    a source changed while no operator runs: the next operator, knowing neither, updates
    the copy, gets 422, and replaces it (deleted, created again with the new data)."""
    home = configmirror_api.create_namespace(prefix="imm-home")
    frozen = configmirror_api.create_namespace(prefix="imm-frozen")
    accept_mirrors(configmirror_api, frozen)
    source: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"v": "1"},
    }
    await client.create(CONFIGMAPS, source, namespace=home)
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": [frozen]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=home)
    first = await start_operator(namespaces=(home,))

    async def copy() -> dict[str, Any] | None:
        try:
            return await client.get(CONFIGMAPS, "settings", namespace=frozen)
        except NotFound:
            return None

    async def holds(value: str) -> bool:
        found = await copy()
        return found is not None and found.get("data") == {"v": value}

    await eventually(lambda: holds("1"), what="first copy")
    await first.stop()
    before = await copy()
    assert before is not None
    before["immutable"] = True
    await client.replace(CONFIGMAPS, before, namespace=frozen)
    current = await client.get(CONFIGMAPS, "settings", namespace=home)
    current["data"] = {"v": "2"}
    await client.replace(CONFIGMAPS, current, namespace=home)
    await start_operator(namespaces=(home,))
    await eventually(lambda: holds("2"), timeout=30, what="the frozen copy replaced")
    after = await copy()
    assert after is not None and after["metadata"]["uid"] != before["metadata"]["uid"]
