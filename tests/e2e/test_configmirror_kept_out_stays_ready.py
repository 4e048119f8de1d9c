"""One tenant's ConfigMap with deep ``managedFields`` must not make a replica unready
(found by the attacker's pass on issue 31, high severity).

A ConfigMap holds only strings, but its ``metadata.managedFields[].fieldsV1`` is free JSON
that the apiserver stores as sent: ``{"f:a": {"f:a": ...}}`` nested 9,000 levels is
accepted (201) for a ConfigMap created by any user who may create ConfigMaps in some
namespace. The operator watches every ConfigMap of the cluster; issue 31's fix keeps that
object out of the cache -- and lists it among the ``/readyz`` *failures*, so the process
answers 503 for as long as the tenant keeps the object.

Deployed (deploy/base/deployment.yaml), ``/readyz`` is the readiness probe and the webhook
Service publishes ready pods only: every replica leaves the Service at once, and with
``failurePolicy: Fail`` no ConfigMirror of any tenant can be created or updated, and every
v1alpha1 read or write fails (the conversion webhook is unreachable); a rollout never
becomes ready. One object of one tenant stops the others (DESIGN.md's trust boundaries).

Expected: an object of a tenant's that the operator keeps out (and does not need) is
reported (ERROR log, metric, ``/readyz?verbose`` note) without failing readiness; the
operator stays ready and keeps serving. Observed before the fix: ``/readyz`` answered 503
naming it.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
import trio
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

DEPTH = 9_000


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _create_deep(server: ApiServer, namespace: str) -> None:
    fields = '{"f:a":' * DEPTH + "{}" + "}" * DEPTH
    body = (
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep","managedFields":'
        '[{"manager":"tenant","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1",'
        f'"fieldsV1":{fields}}}]}},"data":{{"a":"1"}}}}'
    ).encode()
    answer = server.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body, timeout=120
    )
    assert answer.status == 201, answer.body[:300]


async def test_one_tenants_deep_configmap_does_not_make_the_operator_unready(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    home = configmirror_api.create_namespace(prefix="deep-home")
    target = configmirror_api.create_namespace(prefix="deep-target")
    other_tenant = configmirror_api.create_namespace(prefix="deep-tenant")
    accept_mirrors(configmirror_api, target)
    await client.create(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"a": "1"}},
        namespace=home,
    )
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "s", "targetNamespaces": [target]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=home)
    running = await start_operator(namespaces=(home,), probe_address=("127.0.0.1", 0))
    port = running.operator.manager.probe_port
    assert port is not None

    async def copied() -> bool:
        try:
            await client.get(CONFIGMAPS, "s", namespace=target)
        except NotFound:
            return False
        return True

    await eventually(copied, what="the copy")
    await eventually(lambda: trio.to_thread.run_sync(lambda: _readyz(port)[0] == 200), what="ready")

    # Another tenant, in its own namespace, with nothing but ConfigMap create rights.
    await trio.to_thread.run_sync(lambda: _create_deep(configmirror_api, other_tenant))
    try:
        await trio.sleep(5)  # the watch event reaches the informer
        code, body = await trio.to_thread.run_sync(lambda: _readyz(port))
    finally:  # other tests of the session watch every ConfigMap too
        await client.delete(CONFIGMAPS, "deep", namespace=other_tenant)
    assert code == 200, (
        f"/readyz answers {code} because of one other tenant's ConfigMap "
        f"(every replica leaves the webhook Service): {body.strip()[:300]}"
    )
