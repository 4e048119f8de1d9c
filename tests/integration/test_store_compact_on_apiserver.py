"""Compact caches on the real kube-apiserver: informers over Store(compact=True) sync a few
hundred ConfigMaps and follow updates and deletes exactly as a plain informer does; a
Manager(compact_cache=True) gives controllers compact caches."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from kubemoon_core import Change, GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core.builtin import ConfigMap
from kubemoon_core.errors import LocalProtocolError, NotFound
from kubemoon_core.lowlevel import Store
from kubemoon_core.typed import decode
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Informer, Manager, ReconcileContext

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
COUNT = 300


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


def configmap(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:03d}", "labels": {"group": f"g{i % 3}"}},
        "data": {"text": f'é漢🙂 \\ " <&> {i}', "big": str(2**70 + i), "n": str(i)},
    }


def server_state(server: ApiServer, namespace: str) -> dict[str, dict[str, Any]]:
    listed = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps").json()
    return {item["metadata"]["name"]: item for item in listed["items"]}


def by_name(store: Store) -> dict[str, Any]:
    return {obj["metadata"]["name"]: obj for obj in store.objects()}


def summary(changes: list[Change]) -> list[tuple[str, ObjectKey, str | None, str | None]]:
    def rv(obj: Any) -> str | None:
        return None if obj is None else obj["metadata"]["resourceVersion"]

    return [(c.type.value, c.key, rv(c.old), rv(c.new)) for c in changes]


async def wait_for(check: Callable[[], bool], timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


async def test_compact_informers_see_exactly_what_a_plain_informer_sees(
    client: Client, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    for i in range(COUNT):
        await client.create(CM, configmap(i), namespace=ns)
    seen: dict[str, list[Change]] = {"plain": [], "compact": [], "streaming": []}
    informers = {
        "plain": Informer(client, CM, namespace=ns, rng=random.Random(1)),
        "compact": Informer(client, CM, namespace=ns, rng=random.Random(2), compact=True),
        # The streaming list stages watch events, not list items.
        "streaming": Informer(
            client, CM, namespace=ns, rng=random.Random(3), compact=True, streaming_list=True
        ),
    }
    for name, informer in informers.items():
        informer.add_handler(seen[name].append)
    assert informers["compact"].store.compact
    async with trio.open_nursery() as nursery:
        for informer in informers.values():
            nursery.start_soon(informer.run)
        await wait_for(lambda: all(i.has_synced for i in informers.values()))
        for informer in informers.values():
            assert len(informer.store) == COUNT
        # Updates, deletes and creations while every informer watches.
        for i in range(0, 60, 2):
            await client.patch(CM, f"cm-{i:03d}", {"data": {"n": f"patched {i}"}}, namespace=ns)
        for i in range(1, 60, 2):
            await client.delete(CM, f"cm-{i:03d}", namespace=ns)
        for i in range(COUNT, COUNT + 10):
            await client.create(CM, configmap(i), namespace=ns)
        state = await trio.to_thread.run_sync(lambda: server_state(kube_apiserver, ns))
        expected_rvs = {name: obj["metadata"]["resourceVersion"] for name, obj in state.items()}

        def converged() -> bool:
            return all(
                {k.name: i.store.resource_version(k) for k in i.store} == expected_rvs
                for i in informers.values()
            )

        await wait_for(converged)
        nursery.cancel_scope.cancel()
    plain = by_name(informers["plain"].store)
    assert len(plain) == COUNT - 30 + 10
    for name in ("compact", "streaming"):
        store = informers[name].store
        assert by_name(store) == plain
        assert store.keys() == informers["plain"].store.keys() or name == "streaming"
        assert {k: store.get(k) for k in store} == {
            k: informers["plain"].store.get(k) for k in informers["plain"].store
        }
        assert store.get(ObjectKey(ns, "cm-000"))["data"]["n"] == "patched 0"  # type: ignore[index]
        assert store.get(ObjectKey(ns, "cm-001")) is None
    # The same changes, in the same order, after the first list (whose order may differ).
    after_sync = {name: [c for c in changes if not c.initial] for name, changes in seen.items()}
    assert summary(after_sync["compact"]) == summary(after_sync["plain"])
    assert summary(after_sync["streaming"]) == summary(after_sync["plain"])
    assert after_sync["compact"] == after_sync["plain"]  # old and new, whole
    assert len(after_sync["plain"]) == 30 + 30 + 10
    # What the server holds, field for field (list items omit apiVersion and kind).
    assert plain == {n: {"apiVersion": "v1", "kind": "ConfigMap", **o} for n, o in state.items()}


async def test_a_manager_with_compact_caches(
    client: Client, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    for i in range(5):
        await client.create(CM, configmap(i), namespace=ns)
    manager = Manager(client, compact_cache=True, close_client=False)
    informer = manager.informers.get(CM, namespace=ns)
    assert informer.store.compact
    reader = manager.informers.reader(informer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(informer.run)
        await wait_for(lambda: informer.has_synced)
        nursery.cancel_scope.cancel()
    got = reader.get("cm-001", ns)
    assert got is not None
    assert "managedFields" not in got["metadata"]  # the runtime's transform still runs
    got["data"].clear()  # a copy: the cache is not changed through it
    again = reader.get("cm-001", ns)
    assert again is not None
    assert again["data"]["n"] == "1"
    assert sorted(o["metadata"]["name"] for o in reader.objects(ns)) == [
        f"cm-{i:03d}" for i in range(5)
    ]
    assert reader.objects("elsewhere") == []


async def test_a_typed_controller_reads_a_compact_cache_in_one_step(
    client: Client, kube_namespace: str
) -> None:
    """A typed controller over a compact cache: ``ctx.obj`` comes from the cached bytes
    (decode_json), equal to what the decoded mapping gives, and follows updates."""
    ns = kube_namespace
    await client.create(CM, configmap(1), namespace=ns)
    seen: list[tuple[Any, Any, bytes | None]] = []
    manager = Manager(client, compact_cache=True, close_client=False)

    async def reconcile(ctx: ReconcileContext[ConfigMap]) -> Reconciled:
        seen.append((ctx.obj, ctx.raw, ctx.primary.json(ctx.key)))
        return Reconciled()

    manager.controller("typed-compact", ConfigMap, namespace=ns).complete(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await wait_for(lambda: bool(seen))
        await client.patch(CM, "cm-001", {"data": {"n": "updated"}}, namespace=ns)
        await wait_for(lambda: any((o.data or {}).get("n") == "updated" for o, _, _ in seen))
        manager.stop()
    for obj, raw, document in seen:
        assert isinstance(obj, ConfigMap)
        assert document is not None  # read from the bytes, not through a mapping
        assert obj == decode(ConfigMap, raw)
        assert "managedFields" not in raw["metadata"]  # the runtime's transform ran first


async def test_compact_informers_make_their_own_store(client: Client) -> None:
    with pytest.raises(LocalProtocolError, match="compact=True makes the informer's own store"):
        Informer(client, CM, store=Store(), compact=True)
    informer = Informer(client, CM, store=Store(compact=True), compact=True)
    assert informer.store.compact


CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")


async def test_a_tenants_odd_objects_are_cached_compactly_as_sent(
    client: Client, kube_namespace: str
) -> None:
    """Attack: a tenant's custom object nested deeper than orjson writes (255 levels),
    with numbers of every JSON form, unicode and escapes, must not stop a compact
    informer; it holds what a plain one holds."""
    group = f"g{random.getrandbits(24)}.compact.kubemoon.dev"
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"blobs.{group}"},
        "spec": {
            "group": group,
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
    await client.create(CRDS, crd)
    blobs = GroupVersionResource(group, "v1", "blobs")
    deep: Any = {"bottom": True}
    for _ in range(300):
        deep = {"d": deep}
    spec = {
        "deep": deep,
        "numbers": [0, -1, 2**63 - 1, 1.5, -0.0, 1e300, 2**70],
        "text": 'é漢🙂 \\ " <&> \u2028 \x00',
        "flags": [True, False, None],
    }
    body = {"apiVersion": f"{group}/v1", "kind": "Blob", "metadata": {"name": "b"}, "spec": spec}
    with trio.fail_after(30):
        while True:
            try:
                await client.create(blobs, body, namespace=kube_namespace)
                break
            except NotFound:
                await trio.sleep(0.2)  # the CRD is not served yet
    plain = Informer(client, blobs, namespace=kube_namespace, rng=random.Random(1))
    compact = Informer(client, blobs, namespace=kube_namespace, rng=random.Random(2), compact=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(plain.run)
        nursery.start_soon(compact.run)
        await wait_for(lambda: plain.has_synced and compact.has_synced)
        await client.patch(blobs, "b", {"spec": {"text": "changed"}}, namespace=kube_namespace)
        await wait_for(
            lambda: (
                compact.store.resource_version(ObjectKey(kube_namespace, "b"))
                == plain.store.resource_version(ObjectKey(kube_namespace, "b"))
                and len(compact.store) == 1
                and compact.store.objects()[0]["spec"]["text"] == "changed"
            )
        )
        nursery.cancel_scope.cancel()
    assert compact.store.objects() == plain.store.objects()
    got = compact.store.objects()[0]["spec"]
    assert got["numbers"][:5] == [0, -1, 2**63 - 1, 1.5, -0.0]
    level = got["deep"]
    for _ in range(300):
        level = level["d"]
    assert level == {"bottom": True}
