"""Read-your-own-writes on the real kube-apiserver (issue 25).

Each test holds the informers' watch bytes back (:class:`HeldWatch`: the caches cannot
change while it holds), so a read right after a write is deterministically one the cache
cannot have caught up with. Every test runs with the layer on and with it off (the private
switch ``_cache._READ_YOUR_WRITES``): off, the same reconcile reads the stale version, gets
a 409 or creates twice, which shows the test fails without the layer.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import kubemoon_asyncio
import kubemoon_sync
from kubemoon_core import (
    ApiError,
    GroupVersionResource,
    Outcome,
    PatchType,
    Reconciled,
    Requeue,
)
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext, _cache
from kubemoon_trio._informer import Informer

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
WIDGETS = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
FINALIZER = "examples.kubemoon.dev/hold"


class HeldWatch:
    """Stands in for an informer's reflector and keeps its watch bytes while ``held``.

    Lists still go through (the first sync completes); watch events wait, in order, and
    are fed with the next chunk after :meth:`release`."""

    def __init__(
        self, informer: Informer | kubemoon_sync.Informer | kubemoon_asyncio.Informer
    ) -> None:
        self._real = informer.reflector
        self._buffer = bytearray()
        self.held = True
        informer.reflector = self  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def receive_watch_data(self, data: bytes, now: float) -> Any:
        if self.held:
            self._buffer += data
            return []
        if self._buffer:
            data, self._buffer = bytes(self._buffer) + data, bytearray()
        return self._real.receive_watch_data(data, now)

    def release(self) -> None:
        self.held = False


@pytest.fixture(params=[True, False], ids=["layer", "without-layer"])
def layer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    enabled: bool = request.param
    for module in (_cache, kubemoon_sync._cache, kubemoon_asyncio._cache):
        monkeypatch.setattr(module, "_READ_YOUR_WRITES", enabled)
    return enabled


def widget(name: str, namespace: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"replicas": 1, "data": {"v": "0"}},
    }


def rv(obj: Any) -> str | None:
    return None if obj is None else str(obj["metadata"]["resourceVersion"])


Reconcile = Callable[[ReconcileContext[Any]], Awaitable[Outcome]]


async def run_controller(
    server: ApiServer,
    namespace: str,
    reconcile: Reconcile,
    done: trio.Event,
    *,
    primaries: list[dict[str, Any]] | None = None,
) -> Manager:
    """Create the primaries, run a Widget controller owning ConfigMaps with every watch
    held until ``done``; return the manager (stopped)."""
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        for obj in primaries if primaries is not None else [widget("subject", namespace)]:
            await client.create(WIDGETS, obj)
        manager = Manager(client)
        manager.controller("ryow", WIDGETS, kind="Widget", namespace=namespace).owns(
            CONFIGMAPS
        ).complete(reconcile)
        held = [HeldWatch(informer) for informer in manager.informers]
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await done.wait()
                for hold in held:
                    hold.release()
                manager.stop()
        # The runtime stopped recording the client's writes when it ended.
        assert client._write_observers == []
        return manager


async def write_then_read(
    server: ApiServer,
    namespace: str,
    write: Callable[[ReconcileContext[Any]], Awaitable[Any]],
) -> tuple[str | None, str | None, str | None, Manager]:
    """(cached rv before, rv the write left, rv read right after) for one reconcile."""
    seen: list[str | None] = []
    done = trio.Event()

    async def reconcile(ctx: ReconcileContext[Any]) -> Outcome:
        if done.is_set():
            return Reconciled()
        seen.append(rv(ctx.raw))
        seen.append(await write(ctx))
        # Read at once, through the context's primary, the cache and a listing.
        seen.append(rv(ctx.raw))
        seen.append(rv(ctx.cache(WIDGETS).get(ctx.name, ctx.namespace)))
        listed = [o for o in ctx.cache(WIDGETS).objects(ctx.namespace) if o is not None]
        seen.append(rv(listed[0]) if listed else None)
        done.set()
        return Reconciled()

    manager = await run_controller(server, namespace, reconcile, done)
    before, written, after, through_cache, through_list = seen
    assert through_cache == after and through_list == after
    return before, written, after, manager


async def replace(ctx: ReconcileContext[Any]) -> str | None:
    raw = ctx.raw
    assert raw is not None
    body = {**raw, "spec": {**raw["spec"], "data": {"v": "1"}}}
    return rv(await ctx.client.replace(WIDGETS, body))


async def patch(ctx: ReconcileContext[Any]) -> str | None:
    answer = await ctx.client.patch(
        WIDGETS, ctx.name, {"spec": {"data": {"v": "2"}}}, namespace=ctx.namespace
    )
    return rv(answer)


async def json_patch(ctx: ReconcileContext[Any]) -> str | None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"patched": "yes"}}]
    answer = await ctx.client.patch(
        WIDGETS, ctx.name, ops, patch_type=PatchType.JSON, namespace=ctx.namespace
    )
    return rv(answer)


async def apply(ctx: ReconcileContext[Any]) -> str | None:
    body = {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": ctx.name, "namespace": ctx.namespace},
        "spec": {"tier": "medium"},
    }
    return rv(await ctx.client.apply(WIDGETS, body, field_manager="ryow-test", force=True))


async def update_status(ctx: ReconcileContext[Any]) -> str | None:
    assert await ctx.update_status({"replicas": 3, "observedGeneration": 1})
    # The context's helper returns no object: the written version is the server's.
    answer = await ctx.client.get(WIDGETS, ctx.name, namespace=ctx.namespace)
    return rv(answer)


async def ensure_spec(ctx: ReconcileContext[Any]) -> str | None:
    desired = widget(ctx.name, ctx.namespace)
    desired["spec"] = {"data": {"v": "ensured"}}
    assert await ctx.ensure(WIDGETS, desired, owned=False)
    return rv(await ctx.client.get(WIDGETS, ctx.name, namespace=ctx.namespace))


WRITES = {
    "replace": replace,
    "merge-patch": patch,
    "json-patch": json_patch,
    "apply": apply,
    "update-status": update_status,
    "ensure": ensure_spec,
}


@pytest.mark.parametrize("verb", list(WRITES))
async def test_a_reconcile_reads_its_own_write_at_once(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool, verb: str
) -> None:
    before, written, after, manager = await write_then_read(
        kube_apiserver, kube_namespace, WRITES[verb]
    )
    assert before is not None and written is not None and written != before
    avoided = manager.stale_reads_avoided().get("widgets.examples.kubemoon.dev", 0)
    if layer:
        assert after == written
        assert avoided >= 2
    else:
        assert after == before  # the held cache's stale version: what the layer prevents
        assert avoided == 0


async def test_a_deleted_object_is_not_resurrected_by_the_cache(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    async def delete(ctx: ReconcileContext[Any]) -> str | None:
        assert ctx.raw is not None
        assert await ctx.delete(WIDGETS, ctx.raw)
        return "deleted"

    before, _, after, _ = await write_then_read(kube_apiserver, kube_namespace, delete)
    assert before is not None
    assert after == (None if layer else before)


async def test_a_delete_held_by_a_finalizer_reads_the_terminating_object(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    subject = widget("subject", kube_namespace, finalizers=[FINALIZER])
    seen: list[Any] = []
    done = trio.Event()

    async def reconcile(ctx: ReconcileContext[Any]) -> Outcome:
        if not done.is_set():
            answer = await ctx.client.delete(WIDGETS, ctx.name, namespace=ctx.namespace)
            seen.append(answer)
            seen.append(ctx.raw)
            done.set()
        return Reconciled()

    await run_controller(kube_apiserver, kube_namespace, reconcile, done, primaries=[subject])
    answer, read = seen
    assert answer["metadata"]["deletionTimestamp"]  # finalizers hold it: still there
    assert read is not None
    if layer:
        assert rv(read) == rv(answer) and read["metadata"]["deletionTimestamp"]
    else:
        assert rv(read) != rv(answer) and "deletionTimestamp" not in read["metadata"]
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        await client.patch(
            WIDGETS, "subject", {"metadata": {"finalizers": None}}, namespace=kube_namespace
        )


async def test_a_rerun_right_after_creating_a_child_does_not_create_it_again(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    outcomes: list[str] = []
    owned: list[int] = []
    done = trio.Event()

    async def reconcile(ctx: ReconcileContext[Any]) -> Outcome:
        if done.is_set():
            return Reconciled()
        child = {"metadata": {"name": "child"}, "data": {"k": "v"}}
        try:
            wrote = await ctx.ensure(CONFIGMAPS, child)
            outcomes.append("created" if wrote else "unchanged")
        except ApiError as exc:
            outcomes.append(f"{exc.code} {exc.reason}")
        owned.append(len(ctx.owned(CONFIGMAPS)))
        if len(outcomes) < 2:
            return Requeue()  # re-run at once, the watch still held
        done.set()
        return Reconciled()

    await run_controller(kube_apiserver, kube_namespace, reconcile, done)
    if layer:
        assert outcomes == ["created", "unchanged"]
        assert owned == [1, 1]
    else:
        assert outcomes == ["created", "409 AlreadyExists"]
        assert owned == [0, 0]


async def test_an_update_right_after_an_update_gets_no_conflict(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    outcomes: list[str] = []
    done = trio.Event()

    async def reconcile(ctx: ReconcileContext[Any]) -> Outcome:
        if done.is_set():
            return Reconciled()
        # ensure() patches with the cached resourceVersion as a precondition.
        desired = widget(ctx.name, ctx.namespace)
        desired["spec"] = {"data": {"v": str(len(outcomes) + 1)}}
        try:
            await ctx.ensure(WIDGETS, desired, owned=False)
            outcomes.append("ok")
        except ApiError as exc:
            outcomes.append(f"{exc.code} {exc.reason}")
        if len(outcomes) < 2:
            return Requeue()
        done.set()
        return Reconciled()

    await run_controller(kube_apiserver, kube_namespace, reconcile, done)
    assert outcomes == (["ok", "ok"] if layer else ["ok", "409 Conflict"])


async def test_the_metric_counts_stale_reads_avoided(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    _, _, _, manager = await write_then_read(kube_apiserver, kube_namespace, patch)
    from prometheus_client import generate_latest

    text = generate_latest(manager.registry).decode()
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("kubemoon_cache_stale_reads_avoided_total{")
        and 'resource="widgets.examples.kubemoon.dev"' in line
    )
    assert float(line.rsplit(" ", 1)[1]) >= 2


def test_the_blocking_adapter_reads_its_own_write(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    """The generated twin, with its informer and reconciles on threads of their own."""
    seen: list[str | None] = []
    with kubemoon_sync.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        client.create(WIDGETS, widget("subject", kube_namespace))
        manager = kubemoon_sync.Manager(client)

        def reconcile(ctx: Any) -> Outcome:
            if not seen:
                seen.append(rv(ctx.raw))
                answer = ctx.client.patch(
                    WIDGETS, ctx.name, {"spec": {"data": {"v": "9"}}}, namespace=ctx.namespace
                )
                seen.extend([rv(answer), rv(ctx.raw)])
                manager.stop()
            return Reconciled()

        manager.controller("ryow", WIDGETS, kind="Widget", namespace=kube_namespace).complete(
            reconcile
        )
        held = [HeldWatch(informer) for informer in manager.informers]
        guard = threading.Timer(30, manager.stop)  # never hang the session
        guard.start()
        try:
            manager.run()
        finally:
            guard.cancel()
        for hold in held:
            hold.release()
    before, written, after = seen
    assert written != before
    assert after == (written if layer else before)


async def test_a_failing_write_observer_is_logged_and_the_write_stands(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: Any, answer: Any) -> None:
        raise RuntimeError("bookkeeping bug")

    seen: list[tuple[str, Any]] = []
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        client.add_write_observer(broken)
        client.add_write_observer(lambda request, answer: seen.append((request.method, answer)))
        created = await client.create(WIDGETS, widget("observed", kube_namespace))
        await client.get(WIDGETS, "observed", namespace=kube_namespace)  # reads are not told
        client.remove_write_observer(broken)
        client.remove_write_observer(broken)  # absent is fine
        await client.delete(WIDGETS, "observed", namespace=kube_namespace)
    assert created["metadata"]["name"] == "observed"
    assert seen[0] == ("POST", created) and [m for m, _ in seen] == ["POST", "DELETE"]
    failures = [r for r in caplog.records if "write observer failed" in r.getMessage()]
    assert len(failures) == 1 and "POST" in failures[0].getMessage()


async def test_a_dry_run_answer_is_never_read_back(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    """A dry run answers with the current resourceVersion (measured: unchanged) and the
    content the write would have stored: recorded, it would pass for the object."""

    async def patch_then_dry_run(ctx: ReconcileContext[Any]) -> str | None:
        written = await patch(ctx)
        body = widget(ctx.name, ctx.namespace)
        body["spec"] = {"tier": "large"}
        answer = await ctx.client.apply(
            WIDGETS, body, field_manager="ryow-test", force=True, dry_run=True
        )
        assert answer["spec"]["tier"] == "large" and rv(answer) == written
        return written

    seen: list[Any] = []

    async def check(ctx: ReconcileContext[Any]) -> str | None:
        written = await patch_then_dry_run(ctx)
        seen.append(ctx.raw)
        return written

    _, written, after, _ = await write_then_read(kube_apiserver, kube_namespace, check)
    assert after == written
    assert seen[0]["spec"]["tier"] == "small" and seen[0]["spec"]["data"] == {"v": "2"}


def test_the_asyncio_adapter_reads_its_own_write(
    kube_apiserver: ApiServer, kube_namespace: str, layer: bool
) -> None:
    """The generated asyncio twin, on a loop of its own."""
    import asyncio

    seen: list[str | None] = []

    async def main() -> None:
        config = str(kube_apiserver.kubeconfig_path)
        async with kubemoon_asyncio.Client.from_kubeconfig(config) as client:
            await client.create(WIDGETS, widget("subject", kube_namespace))
            manager = kubemoon_asyncio.Manager(client)

            async def reconcile(ctx: Any) -> Outcome:
                if not seen:
                    seen.append(rv(ctx.raw))
                    answer = await ctx.client.patch(
                        WIDGETS, ctx.name, {"spec": {"data": {"v": "8"}}}, namespace=ctx.namespace
                    )
                    seen.extend([rv(answer), rv(ctx.raw)])
                    manager.stop()
                return Reconciled()

            manager.controller("ryow", WIDGETS, kind="Widget", namespace=kube_namespace).complete(
                reconcile
            )
            held = [HeldWatch(informer) for informer in manager.informers]
            await asyncio.wait_for(manager.run(), 30)
            for hold in held:
                hold.release()

    asyncio.run(main())
    before, written, after = seen
    assert written != before
    assert after == (written if layer else before)
