"""Every adapter (trio, asyncio, blocking) against the real kube-apiserver: CRUD,
server-side apply conflicts, pagination, watch bookmarks, an informer over 1,000
ConfigMaps, and leader election between two candidates."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from adapter_driver import ADAPTERS, Adapter, call_soon, start_background

from kubemoon_core import GroupVersionResource, ListOptions
from kubemoon_core.errors import Conflict, LocalProtocolError, NotFound
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
NAMESPACES = GroupVersionResource("", "v1", "namespaces")
MANY = 1000


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


@pytest.fixture(scope="module")
def crowded_namespace(kube_apiserver: ApiServer) -> str:
    """A namespace holding 1,000 ConfigMaps, made once for the module."""
    name = kube_apiserver.create_namespace(prefix="crowded")
    for i in range(MANY):
        body = {"metadata": {"name": f"cm-{i:04d}"}, "data": {"i": str(i)}}
        response = kube_apiserver.request(
            "POST", f"/api/v1/namespaces/{name}/configmaps", body=body
        )
        assert response.status == 201, response.body[:200]
    return name


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_crud_apply_conflict_and_pagination(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        created = await adapter.call(client.create, CM, cm("a", k="1"), namespace=ns)
        assert created["metadata"]["namespace"] == ns
        # Without namespace=, the object's own namespace is used.
        placed = {**cm("b"), "metadata": {"name": "b", "namespace": ns}}
        assert (await adapter.call(client.create, CM, placed))["metadata"]["namespace"] == ns
        # A namespaced resource with no namespace anywhere is a clear local error.
        with pytest.raises(LocalProtocolError, match="namespaced; give namespace="):
            await adapter.call(client.create, CM, cm("nowhere"))
        got = await adapter.call(client.get, CM, "a", namespace=ns)
        assert got["data"] == {"k": "1"}
        patched = await adapter.call(client.patch, CM, "a", {"data": {"k": "2"}}, namespace=ns)
        assert patched["data"] == {"k": "2"}
        applied = await adapter.call(
            client.apply, CM, cm("s", owner="first"), field_manager="first", namespace=ns
        )
        assert applied["data"] == {"owner": "first"}
        with pytest.raises(Conflict):
            await adapter.call(
                client.apply, CM, cm("s", owner="second"), field_manager="second", namespace=ns
            )
        forced = await adapter.call(
            client.apply,
            CM,
            cm("s", owner="second"),
            field_manager="second",
            namespace=ns,
            force=True,
        )
        assert forced["data"] == {"owner": "second"}
        for i in range(5):
            await adapter.call(client.create, CM, cm(f"p{i}"), namespace=ns)
        pages = client.list(CM, namespace=ns, options=ListOptions(limit=2))
        names = [item["metadata"]["name"] for item in await adapter.collect(pages)]
        assert names == ["a", "b", "p0", "p1", "p2", "p3", "p4", "s"]
        await adapter.call(client.delete, CM, "a", namespace=ns)
        with pytest.raises(NotFound):
            await adapter.call(client.get, CM, "a", namespace=ns)
    finally:
        await adapter.close(client)


async def test_watch_with_bookmarks(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        created = await adapter.call(client.create, CM, cm("w"), namespace=kube_namespace)
        options = ListOptions(
            resource_version=created["metadata"]["resourceVersion"],
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        )

        async def watch_async() -> list[Any]:
            async with client.watch(CM, namespace=kube_namespace, options=options) as stream:
                return [event async for event in stream]

        def watch_sync() -> list[Any]:
            with client.watch(CM, namespace=kube_namespace, options=options) as stream:
                return list(stream)

        got: list[Any] = []

        async def watch() -> None:
            if adapter.name == "sync":
                got.extend(await trio.to_thread.run_sync(watch_sync))
            else:
                got.extend(await adapter.call(watch_async))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await trio.sleep(0.5)  # an event while watching: the cache bookmarks before the end
            path = f"/api/v1/namespaces/{kube_namespace}/configmaps"
            await trio.to_thread.run_sync(
                lambda: kube_apiserver.request("POST", path, body=cm("w1"))
            )
        types = [event.type for event in got]
        assert types[0] == "ADDED"
        assert "BOOKMARK" in types
    finally:
        await adapter.close(client)


async def test_an_informer_syncs_1000_configmaps_and_follows_changes(
    adapter: Adapter, kube_apiserver: ApiServer, crowded_namespace: str
) -> None:
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    informer = adapter.module.Informer(client, CM, namespace=crowded_namespace)
    give_up = time.monotonic() + 30
    try:
        await adapter.call(
            informer.run, until=lambda: informer.has_synced or time.monotonic() > give_up
        )
        assert informer.has_synced
        assert len(informer.store) >= MANY
        name = f"late-{adapter.name}"
        kube_apiserver.request(
            "POST", f"/api/v1/namespaces/{crowded_namespace}/configmaps", body=cm(name)
        )
        await adapter.call(
            informer.run,
            until=lambda: any(k.name == name for k in informer.store) or time.monotonic() > give_up,
        )
        assert any(k.name == name for k in informer.store)
    finally:
        await adapter.close(client)


async def test_leader_election_between_two_candidates(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str, nursery: trio.Nursery
) -> None:
    km = adapter.module
    config = {
        "name": "two",
        "namespace": kube_namespace,
        "lease_duration": 15.0,
        "renew_deadline": 10.0,
        "retry_period": 0.2,
    }
    clients = [km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) for _ in range(2)]
    managers = [
        km.Manager(c, leader_election=km.LeaderElectionConfig(identity=f"candidate-{i}", **config))
        for i, c in enumerate(clients)
    ]
    runs = [await start_background(adapter, nursery, m.run) for m in managers]
    try:
        with trio.fail_after(20):
            while sum(m.election.is_leader for m in managers) != 1:
                await trio.sleep(0.05)
        leader = next(m for m in managers if m.election.is_leader)
        other = next(m for m in managers if m is not leader)
        started = trio.current_time()
        call_soon(adapter, leader.stop)  # releases the Lease on the way out
        await runs[managers.index(leader)].wait()
        with trio.fail_after(10):
            while not other.election.is_leader:
                await trio.sleep(0.05)
        # Released, not expired: the successor did not wait out the 15 s lease.
        assert trio.current_time() - started < 5
        call_soon(adapter, other.stop)
        await runs[managers.index(other)].wait()
    finally:
        for c in clients:
            await adapter.close(c)


async def test_an_exec_plugin_may_authenticate_with_a_client_certificate(
    adapter: Adapter, kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    import base64
    import json
    import sys

    from kubemoon_core.kubeconfig import ClientConfig, ExecConfig

    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": kube_apiserver.client_cert_file.read_text(),
            "clientKeyData": kube_apiserver.client_key_file.read_text(),
        },
    }
    script = tmp_path / "plugin.py"
    encoded = base64.b64encode(json.dumps(credential).encode()).decode()
    script.write_text(f"import base64\nprint(base64.b64decode('{encoded}').decode())\n")
    config = ClientConfig(
        server=kube_apiserver.url,
        ca_file=str(kube_apiserver.ca_file),
        exec=ExecConfig(
            api_version="client.authentication.k8s.io/v1",
            command=sys.executable,
            args=(str(script),),
            interactive_mode="Never",
        ),
    )
    client = adapter.module.Client(config)
    try:
        # The admin certificate (O=system:masters) may read anything: no token is sent.
        namespace = await adapter.call(client.get, NAMESPACES, "default")
        assert namespace["metadata"]["name"] == "default"
    finally:
        await adapter.close(client)


class _InFlight:
    """The real client, counting how many of its requests are in flight at once."""

    def __init__(self, client: Any, threaded: bool) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.now = self.peak = 0
        if threaded:
            self.request = self._request_blocking
        else:
            self.request = self._request_async

    def _enter(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def _leave(self) -> None:
        with self._lock:
            self.now -= 1

    async def _request_async(self, request: Any) -> Any:
        self._enter()
        try:
            return await self._client.request(request)
        finally:
            self._leave()

    def _request_blocking(self, request: Any) -> Any:
        self._enter()
        try:
            return self._client.request(request)
        finally:
            self._leave()


async def test_write_all_sends_independent_writes_together_and_judges_each(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    from kubemoon_core import ObjectKey, create_request, delete_request
    from kubemoon_core.errors import AlreadyExists
    from kubemoon_core.lowlevel import WorkItem

    ns = kube_namespace
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        await adapter.call(client.create, CM, cm("taken", k="old"), namespace=ns)
        counting = _InFlight(client, threaded=adapter.name == "sync")
        ctx = adapter.module.ReconcileContext(
            controller="write-all",
            item=WorkItem(ObjectKey(ns, "x"), 1, 0.0, 0),
            client=counting,
            primary=None,
            primary_resource=CM,
            primary_kind=None,
            caches={},
            events=None,
        )
        requests = [create_request(CM, cm(f"w{i}", i=str(i)), namespace=ns) for i in range(6)]
        requests.insert(2, create_request(CM, cm("taken", k="new"), namespace=ns))
        requests.append(delete_request(CM, "never-was", namespace=ns))
        results = await adapter.call(ctx.write_all, requests, concurrency=3)
        assert [type(r).__name__ for r in results] == [
            "dict", "dict", "AlreadyExists", "dict", "dict", "dict", "dict", "NotFound",
        ]  # fmt: skip
        assert isinstance(results[2], AlreadyExists)
        assert [r["metadata"]["name"] for r in results if isinstance(r, dict)] == [
            f"w{i}" for i in range(6)
        ]
        assert ctx.writes == 6
        assert 2 <= counting.peak <= 3, counting.peak
        # What the server holds: every write that succeeded, and the refused one untouched.
        items = await adapter.collect(client.list(CM, namespace=ns))
        data = {item["metadata"]["name"]: item["data"] for item in items}
        assert data == {"taken": {"k": "old"}, **{f"w{i}": {"i": str(i)} for i in range(6)}}
        # One at a time when asked, and a bad bound is the caller's error.
        counting.peak = 0
        more = [create_request(CM, cm(f"s{i}"), namespace=ns) for i in range(3)]
        await adapter.call(ctx.write_all, more, concurrency=1)
        assert counting.peak == 1 and ctx.writes == 9
        with pytest.raises(LocalProtocolError, match="concurrency must be a positive int"):
            await adapter.call(ctx.write_all, more, concurrency=0)
    finally:
        await adapter.close(client)
