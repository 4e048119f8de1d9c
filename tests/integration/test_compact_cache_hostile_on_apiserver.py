"""Attack on compact caches (the Manager's default) on the real kube-apiserver, as a tenant
who writes custom resources of a CRD that accepts any JSON.

Defect: an object nested a few hundred levels under the decoders' limit (~1,000 levels) was
decoded by the watch (from a shallow stack) and stored; every later read of a compact
store decodes it again, from the reader's stack, so a reconcile a few frames deeper got a
bare ``RecursionError`` from ``ctx.raw`` and from every list of the cache that held the
object (other tenants' reconciles too), where a plain cache hands out the dict it holds.
Now a compact store's reads decode such objects whatever the reader's stack depth.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core.errors import NotFound, ResourceNotServed
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext

pytestmark = pytest.mark.integration

CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
GROUP = f"g{random.getrandbits(24)}.compacthostile.kubemoon.dev"
BLOBS = GroupVersionResource(GROUP, "v1", "blobs")
# Deep enough that a read from a stack ~150 frames deeper than the watch's fails with
# the decoders' recursion limit, shallow enough that the watch decodes it.
SPEC_DEPTH = 900
# How many frames deeper than the reconcile itself the reconcile reads the cache (a
# reconcile's own helpers, a library, a retry wrapper).
READ_FRAMES = 150


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


def deep_spec(depth: int) -> Any:
    spec: Any = {"bottom": True}
    for _ in range(depth):
        spec = {"d": spec}
    return spec


def at_depth(frames: int, read: Callable[[], Any]) -> Any:
    return read() if frames == 0 else at_depth(frames - 1, read)


async def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
@pytest.mark.parametrize("when", ["list", "watch"])
async def test_a_deep_object_reads_from_a_deep_stack_as_a_plain_cache_does(
    client: Client, kube_apiserver: ApiServer, kube_namespace: str, compact: bool, when: str
) -> None:
    ns = kube_namespace
    await ensure_crd(client, ns)
    for i in range(5):
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Blob", "metadata": {"name": f"b{i}"}}
        await client.create(BLOBS, {**body, "spec": {"n": i}}, namespace=ns)
    deep_body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Blob",
        "metadata": {"name": "deep"},
        "spec": deep_spec(SPEC_DEPTH),
    }
    if when == "list":
        await client.create(BLOBS, deep_body, namespace=ns)
    seen: dict[str, Any] = {}
    errors: list[str] = []
    manager = Manager(client, compact_cache=compact, close_client=False)

    async def reconcile(ctx: ReconcileContext[Any]) -> Reconciled:
        try:
            raw = at_depth(READ_FRAMES, lambda: ctx.raw)
            listed = at_depth(READ_FRAMES, lambda: ctx.cache(BLOBS).objects())
        except Exception as exc:
            errors.append(f"{ctx.key.name}: {type(exc).__name__}: {exc}")
            raise
        seen[ctx.key.name] = (raw, len(listed))
        return Reconciled()

    manager.controller("blobs", BLOBS, kind="Blob", namespace=ns).complete(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await wait_for(lambda: seen.keys() >= {f"b{i}" for i in range(5)} or bool(errors))
        if when == "watch":
            await client.create(BLOBS, deep_body, namespace=ns)
            await client.patch(BLOBS, "b0", {"spec": {"n": 100}}, namespace=ns)
        await wait_for(lambda: "deep" in seen or bool(errors))
        (informer,) = list(manager.informers)
        manager.stop()
    assert errors == []
    got = seen["deep"][0]
    server = await client.get(BLOBS, "deep", namespace=ns)
    # What the apiserver holds (the Manager's caches drop managedFields).
    server = {**server, "metadata": dict(server["metadata"])}
    del server["metadata"]["managedFields"]
    assert got == server
    assert seen["deep"][1] == 6
    assert ObjectKey(ns, "deep") in informer.store and not informer.kept_out


def raw_blob(name: str, spec_json: str) -> bytes:
    return (
        f'{{"apiVersion":"{GROUP}/v1","kind":"Blob","metadata":{{"name":"{name}"}},'
        f'"spec":{spec_json}}}'
    ).encode()


# What a tenant writes as bytes (so that nothing on our side normalises it first).
ODD_SPECS = {
    "ints": '{"a":18446744073709551616,"b":-18446744073709551617,"c":'
    + "123456789012345678901234567890"
    + ',"d":-9223372036854775809,"e":1e20}',
    "floats": '{"a":1e308,"b":-0.0,"c":1.0,"d":1,"e":5e-324,"f":-1.7976931348623157e308}',
    "text": '{"nul":"a\\u0000b","emoji":"\\ud83d\\ude00","lone":"\\ud800x","ls":"\\u2028",'
    '"esc":"\\"\\\\\\/\\b\\f\\n\\r\\t"}',
    "order": '{"z":1,"a":{"y":2,"b":3},"m":[3,1,2],"a2":{"":0}}',
    "dup": '{"k":1,"k":2}',
    "long": '{"s":"' + "x" * (1024 * 1024) + '"}',
}


def server_view(obj: dict[str, Any]) -> dict[str, Any]:
    """A GET's object as the Manager's caches keep it (without managedFields)."""
    metadata = dict(obj["metadata"])
    metadata.pop("managedFields", None)
    return {**obj, "metadata": metadata}


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
async def test_odd_values_reach_reconciles_as_the_apiserver_holds_them(
    client: Client, kube_apiserver: ApiServer, kube_namespace: str, compact: bool
) -> None:
    """Attack: integers beyond 64 bits, extreme and signed-zero floats, NUL, emoji, a lone
    surrogate escape, key orders, duplicate keys and a 1 MiB string: each reconcile sees
    exactly what a GET returns, and the informer keeps going."""
    ns = kube_namespace
    await ensure_crd(client, ns)
    accepted: list[str] = []
    for name, spec in ODD_SPECS.items():
        post = functools.partial(
            kube_apiserver.request,
            "POST",
            f"/apis/{GROUP}/v1/namespaces/{ns}/blobs",
            body=raw_blob(name, spec),
            timeout=60,
        )
        resp = await trio.to_thread.run_sync(post)
        if resp.status == 201:
            accepted.append(name)
        else:
            print("REFUSED", name, resp.status, resp.body[:300])
    assert {"ints", "floats", "text", "order", "long"} <= set(accepted)
    seen: dict[str, Any] = {}
    manager = Manager(client, compact_cache=compact, close_client=False)

    async def reconcile(ctx: ReconcileContext[Any]) -> Reconciled:
        seen[ctx.key.name] = ctx.raw
        return Reconciled()

    manager.controller("blobs", BLOBS, kind="Blob", namespace=ns).complete(reconcile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await wait_for(lambda: seen.keys() >= set(accepted))
        await client.patch(BLOBS, "order", {"spec": {"late": 2**80}}, namespace=ns)
        await wait_for(lambda: (seen.get("order") or {}).get("spec", {}).get("late") == 2**80)
        (informer,) = list(manager.informers)
        manager.stop()
    assert not informer.kept_out
    for name in accepted:
        server = server_view(await client.get(BLOBS, name, namespace=ns))
        assert seen[name] == server, name
        # Same types too (an int stays an int, -0.0 stays a negative zero float).
        assert repr(seen[name]["spec"]) == repr(server["spec"]), name
