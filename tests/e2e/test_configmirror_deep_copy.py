"""Regression (attacker's pass, round four): a receiving tenant made the copy in its
namespace too deep to decode, and held another tenant's mirror.

A copy lives in the receiving tenant's namespace, which it may write. Its
``metadata.managedFields[].fieldsV1`` is free JSON the apiserver stores as sent; nested
9,000 levels (a PUT of the copy by anyone who may update it there), no JSON backend decodes
it. The informers keep it out of their caches (issue 31, defect 1), but:

- ``Client.list`` has no such keep-out: the cleanup LIST of a deleting mirror (every
  ConfigMap with the managed-by label, metadata only) fails with ``DecodeError`` at every
  attempt, so the finalizer stays and the mirror is never deleted (nor its namespace);
- the reconcile, not seeing the copy, creates it, gets AlreadyExists and requeues forever,
  so the status keeps saying ``Synced`` for a target that holds stale data.

Measured on kube-apiserver 1.37.2: 26 failed reconciles (DecodeError) and 20 AlreadyExists
requeues in 40 s, the mirror still there 30 s after its DELETE, ``Ready=True/Synced``
while the target held the old value.

Expected, and now so (DESIGN.md: "one object never stops the others: whatever the apiserver stores
... either decodes or is kept out ... with a loud, named reason"): ``Client.list`` keeps a
too-deep item out (an ERROR naming it, and a record of it on the iterator) and lists the
rest; the operator reports a copy it cannot read (not ``Synced``) and its cleanup does not
wait for it.
"""

from __future__ import annotations

import json

import pytest
import trio
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

DEPTH = 9_000


def _deepen(server: ApiServer, namespace: str, name: str) -> None:
    """What the receiving tenant may do to its copy: PUT it with deep managedFields."""
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    found = server.request("GET", path).json()  # still shallow
    meta = {k: v for k, v in found["metadata"].items() if k != "managedFields"}
    fields = '{"f:a":' * DEPTH + "{}" + "}" * DEPTH
    managed = (
        '[{"manager":"tenant","operation":"Update","apiVersion":"v1",'
        f'"fieldsType":"FieldsV1","fieldsV1":{fields}}}]'
    )
    body = (
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":'
        + json.dumps(meta)[:-1]
        + ',"managedFields":'
        + managed
        + '},"data":'
        + json.dumps(found.get("data") or {})
        + "}"
    ).encode()
    answer = server.request("PUT", path, body=body, timeout=120)
    assert answer.status == 200, answer.body[:300]


async def _spoiled_mirror(
    server: ApiServer, client: Client, start_operator: StartOperator
) -> tuple[str, str, str]:
    """A mirror of ``home/s`` into two targets, the copy in ``spoiled`` made too deep."""
    home = server.create_namespace(prefix="deepcopy-home")
    spoiled = server.create_namespace(prefix="deepcopy-spoiled")
    fine = server.create_namespace(prefix="deepcopy-fine")
    accept_mirrors(server, spoiled)
    accept_mirrors(server, fine)
    source = {"metadata": {"name": "s"}, "data": {"a": "1"}}
    await client.create(CONFIGMAPS, source, namespace=home)
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "s", "targetNamespaces": [spoiled, fine]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=home)
    await start_operator(namespaces=(home,))

    async def copied() -> bool:
        return await _data_in(client, spoiled) == {"a": "1"} and await _data_in(client, fine) == {
            "a": "1"
        }

    await eventually(copied, what="both copies")
    await trio.to_thread.run_sync(lambda: _deepen(server, spoiled, "s"))
    await trio.sleep(3)  # the informer keeps the spoiled copy out
    return home, spoiled, fine


async def _data_in(client: Client, namespace: str) -> dict[str, str] | None:
    try:
        found = await client.get(CONFIGMAPS, "s", namespace=namespace)
    except NotFound:
        return None
    data: dict[str, str] = found.get("data") or {}
    return data


async def test_a_copy_made_too_deep_by_its_receiver_is_not_reported_synced(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    home, spoiled, fine = await _spoiled_mirror(server, client, start_operator)
    try:
        found = await client.get(CONFIGMAPS, "s", namespace=home)
        found["data"] = {"a": "2"}
        await client.replace(CONFIGMAPS, found, namespace=home)

        async def updated() -> bool:
            return await _data_in(client, fine) == {"a": "2"}

        await eventually(updated, what="the other target updated")

        async def reported() -> bool:
            stored = await client.get(CONFIGMIRRORS, "m", namespace=home)
            targets = (stored.get("status") or {}).get("targets") or ()
            states = {t.get("namespace"): t.get("state") for t in targets}
            return states.get(spoiled) not in (None, "Synced") and states.get(fine) == "Synced"

        # The spoiled target still holds {"a": "1"}: it must not be reported in sync.
        await eventually(reported, timeout=30, what="the unreadable copy reported")
    finally:  # other tests of the session watch every ConfigMap too
        server.request("DELETE", f"/api/v1/namespaces/{spoiled}/configmaps/s")


async def test_a_copy_made_too_deep_by_its_receiver_does_not_hold_the_mirror(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    home, spoiled, _ = await _spoiled_mirror(server, client, start_operator)
    try:
        await client.delete(CONFIGMIRRORS, "m", namespace=home)

        async def gone() -> bool:
            try:
                await client.get(CONFIGMIRRORS, "m", namespace=home)
            except NotFound:
                return True
            return False

        await eventually(gone, timeout=30, what="the mirror's deletion finished")
    finally:
        server.request("DELETE", f"/api/v1/namespaces/{spoiled}/configmaps/s")
