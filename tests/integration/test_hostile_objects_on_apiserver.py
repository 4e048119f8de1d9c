"""Hostile objects on the real kube-apiserver: one custom resource nested ~10,000 levels
(what the apiserver stores; every JSON backend stops near 1,000) and pages pushed past the
client's body cap by a tenant's 1 MB ConfigMaps, and a tenant's numbers beyond 64 bits.
Regressions for issue 31, defects 1, 2 and 11.

Defect 1: the deep object is kept out of the cache and out of reconciles, with a
/readyz?verbose note naming it (readiness does not fail) and ``kubemoon_reflector_kept_out_objects`` = 1, while the 10 others sync
and reconcile: over a LIST, a watch (the deep object created after the sync) and a
streaming list, for every JSON backend and both stores.

Defect 11: a custom resource whose spec holds ``1e20`` and integers beyond 64 bits reaches
a reconcile, a ``get`` and a write-back exactly as the standard library reads the served
bytes, on every backend and both stores (orjson read them as floats).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import trio
from adapter_driver import ADAPTERS, Adapter
from prometheus_client import generate_latest

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core._json import use_fast_json, use_msgspec_json, use_standard_json
from kubemoon_core.errors import NotFound, ResourceNotServed
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Informer, Manager, ReconcileContext

pytestmark = pytest.mark.integration

CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
GROUP = f"g{random.getrandbits(24)}.hostile.kubemoon.dev"
BLOBS = GroupVersionResource(GROUP, "v1", "blobs")
# The whole object nests SPEC_DEPTH + 2 levels (object, spec); the apiserver's JSON limit is
# 10,000 levels for the request body.
SPEC_DEPTH = 9_990


@pytest.fixture(params=["json", "orjson", "msgspec"])
def json_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "orjson":
        assert use_fast_json()
    elif request.param == "msgspec":
        assert use_msgspec_json()
    try:
        yield request.param
    finally:
        use_standard_json()


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


async def ensure_crd(client: Client, namespace: str) -> None:
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"blobs.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Blob", "plural": "blobs", "singular": "blob"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": loose}}
                    },
                }
            ],
        },
    }
    try:
        await client.create(CRDS, crd)
    except Exception as exc:  # already there from an earlier test of this module
        if "AlreadyExists" not in repr(exc) and "409" not in repr(exc):
            raise
    with trio.fail_after(60):
        while True:
            try:
                await client.get(BLOBS, "absent", namespace=namespace)
            except ResourceNotServed:
                await trio.sleep(0.2)  # the CRD is not served yet
            except NotFound:
                return


async def create_normal(client: Client, namespace: str, count: int = 10) -> None:
    for i in range(count):
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Blob",
            "metadata": {"name": f"b{i}"},
            "spec": {"n": i},
        }
        await client.create(BLOBS, body, namespace=namespace)


def create_deep(server: ApiServer, namespace: str) -> None:
    spec = '{"d":' * SPEC_DEPTH + "1" + "}" * SPEC_DEPTH
    body = (
        f'{{"apiVersion":"{GROUP}/v1","kind":"Blob","metadata":{{"name":"deep"}},"spec":{spec}}}'
    ).encode()
    resp = server.request(
        "POST", f"/apis/{GROUP}/v1/namespaces/{namespace}/blobs", body=body, timeout=120
    )
    assert resp.status == 201, resp.body[:300]


async def wait_for(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


def kept_out_metric(manager: Manager) -> list[str]:
    text = generate_latest(manager.registry).decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith("kubemoon_reflector_kept_out_objects{")
    ]


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
@pytest.mark.parametrize("when", ["list", "watch"])
async def test_one_deep_object_is_kept_out_and_the_others_reconcile(
    client: Client,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    json_backend: str,
    compact: bool,
    when: str,
) -> None:
    ns = kube_namespace
    await ensure_crd(client, ns)
    await create_normal(client, ns)
    if when == "list":
        create_deep(kube_apiserver, ns)
    reconciled: set[str] = set()
    manager = Manager(client, compact_cache=compact, close_client=False)

    async def reconcile(ctx: ReconcileContext[Any]) -> Reconciled:
        reconciled.add(ctx.key.name)
        return Reconciled()

    manager.controller("blobs", BLOBS, kind="Blob", namespace=ns).complete(reconcile)
    deep = ObjectKey(ns, "deep")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await wait_for(lambda: reconciled >= {f"b{i}" for i in range(10)})
        if when == "watch":
            await trio.to_thread.run_sync(create_deep, kube_apiserver, ns)
        (informer,) = list(manager.informers)
        # The watch carries on past the deep object: a later change reaches the cache.
        await client.patch(BLOBS, "b0", {"spec": {"n": 100}}, namespace=ns)
        await wait_for(
            lambda: (informer.store.get(ObjectKey(ns, "b0")) or {}).get("spec") == {"n": 100}
        )
        await wait_for(lambda: bool(informer.kept_out))
        reasons = manager.readiness_problems()
        notes = manager.readiness_notes()
        metric = kept_out_metric(manager)
        manager.stop()
    assert len(informer.store) == 10 and deep not in informer.store
    assert "deep" not in reconciled
    assert [str(r.key) for r in informer.kept_out] == [f"{ns}/deep"]
    # Named in /readyz?verbose, without failing readiness (one tenant's object must not
    # take the replica out of its Service).
    assert any(f"{ns}/deep" in note and "kept out" in note for note in notes), notes
    assert not any("kept out" in reason for reason in reasons), reasons
    assert metric == [f'kubemoon_reflector_kept_out_objects{{name="blobs.{GROUP} in {ns}"}} 1.0']


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
async def test_a_streaming_list_keeps_the_deep_object_out(
    client: Client,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    json_backend: str,
    compact: bool,
) -> None:
    ns = kube_namespace
    await ensure_crd(client, ns)
    await create_normal(client, ns)
    create_deep(kube_apiserver, ns)
    informer = Informer(
        client, BLOBS, namespace=ns, streaming_list=True, compact=compact, rng=random.Random(1)
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(informer.run)
        await informer.wait_synced(120)
        nursery.cancel_scope.cancel()
    assert informer.reflector.streaming_list  # the server streamed: no LIST fallback
    assert informer.reflector.stats.relists == 0
    assert sorted(k.name for k in informer.store) == [f"b{i}" for i in range(10)]
    assert [str(r.key) for r in informer.kept_out] == [f"{ns}/deep"]


# -- defect 11: a tenant's huge numbers reach a reconcile and a write-back unchanged --------

# As the tenant sends them (raw bytes: 1e20 is a JSON number with an exponent). The
# apiserver keeps numbers beyond int64 as doubles and serves those below 1e21 as integer
# literals (1e20 as 100000000000000000000, -(2**64)-1 as -18446744073709552000): what a
# reconcile must get is what the standard library reads from the served bytes.
HUGE_SPEC = '{"e20":1e20,"big":1180591620717411303424,"neg":-18446744073709551617,"small":7}'


def typed(value: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    return {key: (type(item), item) for key, item in value.items()}


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
async def test_huge_integers_reach_a_reconcile_and_a_write_back_exactly(
    client: Client,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    json_backend: str,
    compact: bool,
) -> None:
    ns = kube_namespace
    await ensure_crd(client, ns)
    body = (
        f'{{"apiVersion":"{GROUP}/v1","kind":"Blob","metadata":{{"name":"huge"}},'
        f'"spec":{HUGE_SPEC}}}'
    ).encode()
    resp = kube_apiserver.request("POST", f"/apis/{GROUP}/v1/namespaces/{ns}/blobs", body=body)
    assert resp.status == 201, resp.body[:300]
    assert b'"e20":100000000000000000000' in resp.body  # served as an integer literal
    served = json.loads(resp.body)["spec"]  # the standard library, whatever the backend
    assert typed(served)["e20"] == (int, 10**20) and typed(served)["small"] == (int, 7)
    seen: list[Any] = []
    manager = Manager(client, compact_cache=compact, close_client=False)

    async def reconcile(ctx: ReconcileContext[Any]) -> Reconciled:
        seen.append(dict(ctx.raw["spec"]))
        return Reconciled()

    manager.controller("blobs", BLOBS, kind="Blob", namespace=ns).complete(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await wait_for(lambda: bool(seen))
        manager.stop()
    assert typed(seen[0]) == typed(served)
    # A write-back of what was read (get, then replace) leaves the numbers as they were.
    got = await client.get(BLOBS, "huge", namespace=ns)
    assert typed(got["spec"]) == typed(served)
    got["metadata"].setdefault("labels", {})["touched"] = "yes"
    await client.replace(BLOBS, got, namespace=ns)
    after = kube_apiserver.request("GET", f"/apis/{GROUP}/v1/namespaces/{ns}/blobs/huge")
    assert typed(json.loads(after.body)["spec"]) == typed(served)


# -- defect 2: a tenant's 1 MB ConfigMaps push a 500-item page past the body cap -----------

CM = GroupVersionResource("", "v1", "configmaps")
BIG = 150  # x ~1 MB: a page of 500 (the default) is ~150 MB, over the 128 MiB body cap
BIG_DATA = "x" * 1_000_000


@pytest.fixture(scope="module")
def big_namespace(kube_apiserver: ApiServer) -> str:
    """A namespace holding 150 ConfigMaps of 1 MB each, made once for the module."""
    name = kube_apiserver.create_namespace(prefix="big")
    for i in range(BIG):
        body = {"metadata": {"name": f"big-{i:03d}"}, "data": {"blob": BIG_DATA}}
        response = kube_apiserver.request(
            "POST", f"/api/v1/namespaces/{name}/configmaps", body=body, timeout=120
        )
        assert response.status == 201, response.body[:200]
    return name


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


async def test_an_informer_syncs_past_a_page_over_the_body_cap(
    adapter: Adapter, kube_apiserver: ApiServer, big_namespace: str
) -> None:
    # The production default: 500 per page and a 128 MiB body cap.
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    informer = adapter.module.Informer(client, CM, namespace=big_namespace, compact=True)
    give_up = time.monotonic() + 300
    try:
        await adapter.call(
            informer.run, until=lambda: informer.has_synced or time.monotonic() > give_up
        )
        assert informer.has_synced, informer.reflector.last_error
        assert len(informer.store) == BIG
        stats = informer.reflector.stats
        assert stats.page_shrinks >= 1  # 500 was too large: asked again in halves
        assert stats.failures == 0
    finally:
        await adapter.close(client)


async def test_client_list_gets_every_object_past_a_page_over_the_body_cap(
    adapter: Adapter, kube_apiserver: ApiServer, big_namespace: str
) -> None:
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        pages = client.list(CM, namespace=big_namespace)
        names = [item["metadata"]["name"] for item in await adapter.collect(pages)]
        assert names == [f"big-{i:03d}" for i in range(BIG)]
        assert pages.page_shrinks >= 1
    finally:
        await adapter.close(client)
