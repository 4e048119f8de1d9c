"""Shared pieces of the fault tier: an adapter driver and an exec credential plugin.

The scripted server runs in the test's trio loop. The trio adapter is awaited directly;
the blocking adapter runs in a worker thread (``trio.to_thread``), and the asyncio adapter
in an asyncio loop that runs on a thread of its own for the whole test: those threads
belong to the test harness, never to the adapter.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import textwrap
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import trio

import kubemoon_asyncio
import kubemoon_sync
import kubemoon_trio
from kubemoon_core import GroupVersionResource
from kubemoon_testing._scripted import RecordedRequest, Reply

PODS = GroupVersionResource("", "v1", "pods")


class Adapter:
    """One adapter, driven from a trio test."""

    MODULES: ClassVar[dict[str, Any]] = {
        "trio": kubemoon_trio,
        "asyncio": kubemoon_asyncio,
        "sync": kubemoon_sync,
    }

    def __init__(self, name: str) -> None:
        self.name = name
        self.module: Any = self.MODULES[name]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        if name == "asyncio":
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
            self._thread.start()

    def __repr__(self) -> str:
        return self.name

    def shutdown(self) -> None:
        """Stop the asyncio loop thread, if any."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def informer(self, client: Any, **kwargs: Any) -> Any:
        """An informer of pods in ``ns`` for this adapter."""
        return self.module.Informer(client, PODS, namespace="ns", **kwargs)

    def client(self, config: Any, **kwargs: Any) -> Any:
        """A client of this adapter (short timeouts: tests must not hang)."""
        kwargs.setdefault("timeout", 5.0)
        return self.module.Client(config, **kwargs)

    async def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine of the asyncio adapter on its loop and wait for the result."""
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return await trio.to_thread.run_sync(future.result)

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a client method: awaited for trio, on its loop for asyncio, else in a thread."""
        if self.name == "trio":
            return await function(*args, **kwargs)
        if self.name == "asyncio":
            result = function(*args, **kwargs)
            return await self.run(result) if inspect.iscoroutine(result) else result
        return await trio.to_thread.run_sync(functools.partial(function, *args, **kwargs))

    async def collect(self, iterable: Any) -> list[Any]:
        """Every item of an (async) iterator of this adapter."""
        if self.name == "trio":
            return [item async for item in iterable]
        if self.name == "asyncio":

            async def gather() -> list[Any]:
                return [item async for item in iterable]

            return list(await self.run(gather()))
        return list(await trio.to_thread.run_sync(lambda: list(iterable)))

    async def close(self, client: Any) -> None:
        """Close a client."""
        if self.name == "sync":
            await trio.to_thread.run_sync(client.close)
        else:
            await self.call(client.aclose)

    async def watch_all(self, client: Any, **kwargs: Any) -> list[Any]:
        """Every event of one watch of pods, until the stream ends (or raises)."""
        if self.name != "sync":

            async def run_async() -> list[Any]:
                async with client.watch(PODS, namespace="ns", **kwargs) as events:
                    return [event async for event in events]

            return list(await self.call(run_async))

        def run() -> list[Any]:
            with client.watch(PODS, namespace="ns", **kwargs) as events:
                return list(events)

        return await trio.to_thread.run_sync(run)

    async def watch_collect(self, client: Any, into: list[Any], **kwargs: Any) -> None:
        """Like :meth:`watch_all`, appending to ``into`` as events arrive (so a failure
        still shows what was delivered)."""
        if self.name != "sync":

            async def run_async() -> None:
                async with client.watch(PODS, namespace="ns", **kwargs) as events:
                    async for event in events:
                        into.append(event)

            await self.call(run_async)
            return

        def run() -> None:
            with client.watch(PODS, namespace="ns", **kwargs) as events:
                for event in events:
                    into.append(event)

        await trio.to_thread.run_sync(run)

    async def first_event(self, client: Any) -> Any:
        """Open a watch, take its first event and ``break`` out of the loop."""
        if self.name != "sync":

            async def run_async() -> Any:
                async with client.watch(PODS, namespace="ns") as events:
                    async for event in events:  # noqa: B007 - the first one is kept
                        break
                return event

            return await self.call(run_async)

        def run() -> Any:
            with client.watch(PODS, namespace="ns") as events:
                for event in events:  # noqa: B007 - the first one is kept
                    break
            return event

        return await trio.to_thread.run_sync(run)

    async def iterate_unentered(self, client: Any) -> None:
        """Iterate a watch without entering its block (which must be refused)."""
        if self.name != "sync":

            async def run_async() -> None:
                async for _ in client.watch(PODS, namespace="ns"):
                    break

            await self.call(run_async)
            return
        await trio.to_thread.run_sync(lambda: next(iter(client.watch(PODS, namespace="ns"))))


PLUGIN = textwrap.dedent(
    """
    import json, os, pathlib, sys
    counter = pathlib.Path(sys.argv[1])
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    pathlib.Path(sys.argv[1] + ".info").write_text(json.dumps(info))
    status = {"token": "exec-secret-%d" % runs}
    if len(sys.argv) > 2:
        status["expirationTimestamp"] = sys.argv[2]
    print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                      "status": status}))
    """
)


def plugin_runs(tmp_path: Path) -> int:
    """How many times the exec plugin ran."""
    counter = tmp_path / "runs"
    return int(counter.read_text()) if counter.exists() else 0


def pod(name: str, rv: str) -> dict[str, Any]:
    """A minimal Pod."""
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class Collection:
    """A pod collection as a scripted API server would serve it to an informer.

    LIST answers ``initial`` at ``list_rv``; a WATCH answers every event after the
    requested resourceVersion, shaped by the next entry of ``plan`` (keyword arguments for
    :meth:`Reply.watch`, or a whole :class:`Reply`); once the plan is used up, watches
    deliver their events and then stay open, silent.
    """

    def __init__(
        self,
        initial: list[dict[str, Any]],
        events: list[tuple[str, dict[str, Any]]],
        *,
        list_rv: str = "10",
        plan: list[Any] | None = None,
        list_plan: list[Any] | None = None,
    ) -> None:
        self.initial = initial
        self.events = events
        self.list_rv = list_rv
        self.plan = list(plan or [])
        self.list_plan = list(list_plan or [])
        self.watches: list[RecordedRequest] = []
        self.lists: list[RecordedRequest] = []

    def handler(self, request: RecordedRequest) -> Reply:
        if request.query.get("watch") == "1":
            self.watches.append(request)
            since = int(request.query.get("resourceVersion") or 0)
            pending = [
                (t, o) for t, o in self.events if int(o["metadata"]["resourceVersion"]) > since
            ]
            step = self.plan.pop(0) if self.plan else {"stall": True}
            if isinstance(step, Reply):
                return step
            step = dict(step)
            step.setdefault("chunk_size", 7)
            return Reply.watch(pending, **step)
        self.lists.append(request)
        if self.list_plan:
            return self.list_plan.pop(0)  # type: ignore[no-any-return]
        document = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": self.list_rv},
            "items": self.initial,
        }
        return Reply.json(document)


def summary(changes: list[Any]) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of each change."""
    return [(c.type.value, c.key.name, c.object["metadata"]["resourceVersion"]) for c in changes]


async def run_informer(
    adapter: Adapter, informer: Any, done: Callable[[], bool], limit: float = 10
) -> None:
    """Run an informer until ``done()`` holds (or ``limit`` seconds pass, then fail)."""
    give_up = time.monotonic() + limit

    def until() -> bool:
        return done() or time.monotonic() > give_up

    await adapter.call(informer.run, until=until)
    assert done(), "the informer did not reach the expected state in time"
