"""The core and the trio adapter against the real kube-apiserver (issue 8, part 3).

Each test works in its own namespace. Nothing here is mocked: discovery documents, Status
errors, watch streams and their 410s all come from the real server.
"""

from __future__ import annotations

import json
import random
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from kubemoon_core import (
    APIResource,
    GroupVersionKind,
    GroupVersionResource,
    ListOptions,
    ObjectKey,
    PatchType,
    WriteOptions,
    list_request,
)
from kubemoon_core._backoff import Backoff
from kubemoon_core._client_config import ClientConfig
from kubemoon_core.errors import Conflict, Expired, Forbidden, NoMatchError, NotFound, Unauthorized
from kubemoon_core.lowlevel import (
    Discovery,
    DiscoveryState,
    RefreshNeeded,
    RESTMapper,
    decode_aggregated_discovery,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)
from kubemoon_testing import NOBODY_USER, ApiServer
from kubemoon_trio import Client
from kubemoon_trio._informer import Informer

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
WIDGETS = GroupVersionResource("example.kubemoon.dev", "v1", "widgets")


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def discover(client: Client, *, aggregated: bool) -> Discovery:
    walk = Discovery(aggregated=aggregated)
    while walk.state is DiscoveryState.RUNNING:
        for request in walk.next_requests():
            walk.receive_response(request, await client.send(request))
    return walk


@pytest.mark.parametrize("aggregated", [True, False])
async def test_discovery_and_the_restmapper(
    client: Client, kube_apiserver: ApiServer, aggregated: bool
) -> None:
    walk = await discover(client, aggregated=aggregated)
    assert walk.failed_group_versions == {}
    mapper = RESTMapper()
    mapper.load(walk.resources, trio.current_time())
    now = trio.current_time()
    configmaps = mapper.resolve("cm", now)
    assert isinstance(configmaps, APIResource)
    assert configmaps.gvr == CM
    assert configmaps.namespaced
    lease = mapper.resolve_kind(GroupVersionKind("coordination.k8s.io", "v1", "Lease"), now)
    assert isinstance(lease, APIResource)
    assert lease.gvr.resource == "leases"
    namespaces = mapper.resolve("ns", now)
    assert isinstance(namespaces, APIResource)
    assert set(namespaces.subresources) >= {"status", "finalize"}
    deployments = mapper.resolve("deploy", now)
    assert isinstance(deployments, APIResource)
    assert "scale" in deployments.subresources

    # A CRD is unknown until discovery runs again: the mapper asks for exactly that.
    suffix = random.getrandbits(24)
    group = f"g{suffix}.kubemoon.dev"
    await client.create(CRDS, widget_crd(group))
    assert isinstance(mapper.resolve(f"widgets.{group}", now), RefreshNeeded)
    # Right after the load, the same miss is a verdict: the mapper refreshed once already.
    walk = await discover(client, aggregated=aggregated)
    mapper.load(walk.resources, trio.current_time())
    found = None
    try:
        found = mapper.resolve(f"widgets.{group}", trio.current_time())
    except NoMatchError:
        pass  # the CRD was not served yet; discovery catches up within moments
    impatient = RESTMapper(retry_interval=0)  # asks for a refresh on every miss
    with trio.fail_after(30):
        while not isinstance(found, APIResource):
            await trio.sleep(0.2)
            walk = await discover(client, aggregated=aggregated)
            impatient.load(walk.resources, trio.current_time())
            found = impatient.resolve(f"widgets.{group}", trio.current_time())
    assert found.kind == "Widget"
    assert found.subresources == ("status",)


async def test_raw_discovery_documents_decode(client: Client) -> None:
    assert "v1" in decode_api_versions((await client.send(_get("/api"))).body).versions
    groups = decode_api_group_list((await client.send(_get("/apis"))).body).groups
    assert "apps" in [g.name for g in groups]
    core = decode_api_resource_list((await client.send(_get("/api/v1"))).body)
    assert "configmaps" in [r.gvr.resource for r in core.resources]
    aggregated = await client.send(
        next(r for r in Discovery().next_requests() if r.path == "/apis")
    )
    doc = decode_aggregated_discovery(aggregated.body)
    assert "coordination.k8s.io" in [g.name for g in doc.groups]


def _get(path: str) -> Any:
    from kubemoon_core import Request

    return Request("GET", path)


def widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_configmap_crud(client: Client, kube_namespace: str) -> None:
    ns = kube_namespace
    created = await client.create(CM, cm("a", k="1"), namespace=ns)
    assert created["metadata"]["resourceVersion"]
    fetched = await client.get(CM, "a", namespace=ns)
    assert fetched["data"] == {"k": "1"}
    fetched["data"] = {"k": "2"}
    replaced = await client.replace(CM, fetched, namespace=ns)
    assert replaced["data"] == {"k": "2"}
    # The old resourceVersion no longer matches: optimistic concurrency says 409.
    with pytest.raises(Conflict):
        await client.replace(CM, {**fetched, "data": {"k": "3"}}, namespace=ns)
    await client.delete(CM, "a", namespace=ns)
    with pytest.raises(NotFound) as info:
        await client.get(CM, "a", namespace=ns)
    assert info.value.status.details["name"] == "a"


async def test_crd_with_a_status_subresource(client: Client, kube_namespace: str) -> None:
    group = f"g{random.getrandbits(24)}.kubemoon.dev"
    await client.create(CRDS, widget_crd(group))
    widgets = GroupVersionResource(group, "v1", "widgets")
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
    }
    with trio.fail_after(30):
        while True:
            try:
                created = await client.create(widgets, body, namespace=kube_namespace)
                break
            except NotFound:
                await trio.sleep(0.2)  # the CRD is not served yet
    created["status"] = {"phase": "Ready"}
    created["spec"] = {"size": 99}  # ignored by /status
    updated = await client.replace(widgets, created, namespace=kube_namespace, subresource="status")
    assert updated["status"] == {"phase": "Ready"}
    assert updated["spec"] == {"size": 1}


async def test_json_merge_and_strategic_patches(client: Client, kube_namespace: str) -> None:
    ns = kube_namespace
    await client.create(CM, cm("p", a="1"), namespace=ns)
    out = await client.patch(
        CM,
        "p",
        [{"op": "add", "path": "/data/b", "value": "2"}],
        patch_type=PatchType.JSON,
        namespace=ns,
    )
    assert out["data"] == {"a": "1", "b": "2"}
    out = await client.patch(
        CM, "p", {"data": {"a": None, "c": "3"}}, patch_type=PatchType.MERGE, namespace=ns
    )
    assert out["data"] == {"b": "2", "c": "3"}
    out = await client.patch(
        CM,
        "p",
        {"metadata": {"labels": {"x": "y"}}},
        patch_type=PatchType.STRATEGIC_MERGE,
        namespace=ns,
    )
    assert out["metadata"]["labels"] == {"x": "y"}


async def test_server_side_apply_and_conflicts(client: Client, kube_namespace: str) -> None:
    ns = kube_namespace
    applied = await client.apply(CM, cm("s", owner="first"), field_manager="first", namespace=ns)
    assert applied["data"] == {"owner": "first"}
    managers = [m["manager"] for m in applied["metadata"]["managedFields"]]
    assert "first" in managers
    with pytest.raises(Conflict) as info:
        await client.apply(CM, cm("s", owner="second"), field_manager="second", namespace=ns)
    assert info.value.code == 409
    assert info.value.causes, "the conflict names the contested fields"
    forced = await client.apply(
        CM, cm("s", owner="second"), field_manager="second", namespace=ns, force=True
    )
    assert forced["data"] == {"owner": "second"}


async def test_pagination_with_limit_2_over_5_objects(client: Client, kube_namespace: str) -> None:
    for i in range(5):
        await client.create(CM, cm(f"item-{i}", n=str(i)), namespace=kube_namespace)
    pages = 0
    request = list_request(CM, namespace=kube_namespace, options=ListOptions(limit=2))
    names: list[str] = []
    while True:
        body = json.loads((await client.send(request)).body)
        pages += 1
        names += [item["metadata"]["name"] for item in body["items"]]
        token = body["metadata"].get("continue")
        if not token:
            break
        request = list_request(
            CM, namespace=kube_namespace, options=ListOptions(limit=2, continue_token=token)
        )
    assert pages == 3
    assert names == [f"item-{i}" for i in range(5)]
    # The adapter's iterator follows continue tokens the same way.
    listed = [
        o["metadata"]["name"]
        async for o in client.list(CM, namespace=kube_namespace, options=ListOptions(limit=2))
    ]
    assert listed == names


async def test_an_expired_continue_token(kube_apiserver_nocache: ApiServer) -> None:
    server = kube_apiserver_nocache
    ns = server.create_namespace(prefix="continue")
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        for i in range(3):
            await client.create(CM, cm(f"c{i}"), namespace=ns)
        first = json.loads(
            (await client.send(list_request(CM, namespace=ns, options=ListOptions(limit=1)))).body
        )
        token = first["metadata"]["continue"]
        await client.create(CM, cm("later"), namespace=ns)
        await trio.to_thread.run_sync(server.compact)
        with pytest.raises(Expired) as info:
            await client.request(
                list_request(CM, namespace=ns, options=ListOptions(limit=1, continue_token=token))
            )
        assert info.value.code == 410


async def test_watch_with_bookmarks(client: Client, kube_namespace: str) -> None:
    created = await client.create(CM, cm("w0"), namespace=kube_namespace)
    rv = created["metadata"]["resourceVersion"]
    seen: list[tuple[str, str | None]] = []
    options = ListOptions(resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5)
    with trio.fail_after(20):
        async with client.watch(CM, namespace=kube_namespace, options=options) as events:
            await client.create(CM, cm("w1"), namespace=kube_namespace)
            async for event in events:
                seen.append((event.type, event.resource_version))
    types = [t for t, _ in seen]
    assert types[0] == "ADDED"
    assert "BOOKMARK" in types, "the watch cache sends a bookmark before the deadline"
    rvs = [int(v) for _, v in seen if v]
    assert rvs == sorted(rvs)


async def test_watch_from_rv_1_is_410(client: Client, kube_namespace: str) -> None:
    await client.create(CM, cm("x"), namespace=kube_namespace)
    options = ListOptions(resource_version="1", timeout_seconds=5)
    # The adapter's watch iterator raises the ERROR event's decoded Status.
    with trio.fail_after(20), pytest.raises(Expired) as info:
        async with client.watch(CM, namespace=kube_namespace, options=options) as events:
            await events.__anext__()
    assert info.value.code == 410
    assert "too old resource version" in str(info.value)


async def run_informer_until(informer: Informer, check: Any, timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(informer.run)
            while not check():
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()


def names_in(informer: Informer) -> set[str]:
    return {key.name for key in informer.store}


async def test_reflector_relists_after_410_and_converges(kube_apiserver_nocache: ApiServer) -> None:
    server = kube_apiserver_nocache
    ns = server.create_namespace(prefix="relist")
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        await client.create(CM, cm("before"), namespace=ns)
        informer = Informer(
            client,
            CM,
            namespace=ns,
            rng=random.Random(1),
            backoff=Backoff(random.Random(1), initial=0.05, cap=0.2),
        )
        await run_informer_until(informer, lambda: names_in(informer) == {"before"})
        # While no watch runs, the past is compacted away: resuming from the old RV is 410.
        await client.create(CM, cm("during"), namespace=ns)
        await client.delete(CM, "before", namespace=ns)
        await trio.to_thread.run_sync(server.compact)
        await run_informer_until(informer, lambda: names_in(informer) == {"during"})
        assert informer.reflector.stats.relists >= 1


async def test_streaming_list_ends_with_the_initial_events_bookmark(
    client: Client, kube_namespace: str
) -> None:
    for i in range(3):
        await client.create(CM, cm(f"s{i}"), namespace=kube_namespace)
    options = ListOptions(
        resource_version="",
        resource_version_match="NotOlderThan",
        send_initial_events=True,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    )
    added = []
    with trio.fail_after(20):
        async with client.watch(CM, namespace=kube_namespace, options=options) as events:
            async for event in events:
                if event.initial_events_end:
                    break
                added.append(event.object["metadata"]["name"])
    assert sorted(added) == ["s0", "s1", "s2"]
    informer = Informer(
        client, CM, namespace=kube_namespace, streaming_list=True, rng=random.Random(2)
    )
    await run_informer_until(informer, lambda: informer.has_synced)
    assert names_in(informer) == {"s0", "s1", "s2"}
    assert informer.reflector.streaming_list


async def test_401_and_403_carry_their_status(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    base = ClientConfig(
        server=kube_apiserver.url, ca_data=kube_apiserver.ca_pem.encode(), token="not-a-token"
    )
    async with Client(base) as bad:
        with pytest.raises(Unauthorized) as info:
            await bad.get(CM, "x", namespace=kube_namespace)
        assert info.value.reason == "Unauthorized"
    nobody = ClientConfig(
        server=kube_apiserver.url,
        ca_data=kube_apiserver.ca_pem.encode(),
        token=kube_apiserver.tokens[NOBODY_USER],
    )
    async with Client(nobody) as client:
        with pytest.raises(Forbidden) as denied:
            await client.get(CM, "x", namespace=kube_namespace)
        assert denied.value.reason == "Forbidden"
        assert NOBODY_USER in denied.value.status.message


async def test_a_wrong_ca_is_a_clear_tls_error(kube_apiserver: ApiServer) -> None:
    import trustme

    other_ca = trustme.CA().cert_pem.bytes()
    config = ClientConfig(
        server=kube_apiserver.url, ca_data=other_ca, token=kube_apiserver.admin_token
    )
    async with Client(config) as client:
        with pytest.raises(Exception) as info:
            await client.get(CM, "x", namespace="default")
    message = str(info.value)
    assert "127.0.0.1" in message
    assert (
        isinstance(info.value.__cause__ or info.value, ssl.SSLError)
        or "certificate" in message.lower()
    )


async def test_reflector_resumes_after_an_apiserver_restart(
    kube_apiserver_nocache: ApiServer,
) -> None:
    server = kube_apiserver_nocache
    ns = server.create_namespace(prefix="restart")
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        await client.create(CM, cm("r0"), namespace=ns)
        informer = Informer(client, CM, namespace=ns, rng=random.Random(3), stall_margin=5.0)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(informer.run)
                await informer.wait_synced()
                await trio.to_thread.run_sync(server.restart_apiserver)
                await client.create(CM, cm("r1"), namespace=ns)
                while names_in(informer) != {"r0", "r1"}:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        assert informer.store.get(ObjectKey(ns, "r1")) is not None
        stats = informer.reflector.stats
        assert stats.watch_restarts + stats.relists >= 1


async def test_write_options_dry_run_writes_nothing(client: Client, kube_namespace: str) -> None:
    out = await client.create(
        CM, cm("dry"), namespace=kube_namespace, options=WriteOptions(dry_run=True)
    )
    assert out["metadata"]["name"] == "dry"
    with pytest.raises(NotFound):
        await client.get(CM, "dry", namespace=kube_namespace)
