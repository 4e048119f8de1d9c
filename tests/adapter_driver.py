"""Drive any adapter from a trio test: the trio adapter is awaited directly, the blocking
adapter runs in a worker thread (``trio.to_thread``), and the asyncio adapter in an asyncio
loop on a thread of its own for the whole test. Those threads belong to the test harness,
never to the adapter.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

import trio

import kubemoon_asyncio
import kubemoon_sync
import kubemoon_trio
from kubemoon_core import GroupVersionResource

PODS = GroupVersionResource("", "v1", "pods")
ADAPTERS = ("trio", "asyncio", "sync")


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


class Background:
    """A long-running call (``Manager.run``, ``Informer.run``) started on an adapter."""

    def __init__(self, adapter: Adapter, done: Callable[[], Any]) -> None:
        self.adapter = adapter
        self._done = done

    async def wait(self, timeout: float = 30.0) -> Any:
        """Wait for the call to return (or raise)."""
        with trio.fail_after(timeout):
            return await self._done()


async def start_background(
    adapter: Adapter, nursery: trio.Nursery, function: Callable[..., Any], **kwargs: Any
) -> Background:
    """Start ``function(**kwargs)`` on ``adapter``'s loop without waiting for it."""
    if adapter.name == "trio":
        finished = trio.Event()
        box: list[Any] = []

        async def run() -> None:
            try:
                box.append(await function(**kwargs))
            finally:
                finished.set()

        nursery.start_soon(run)

        async def done_trio() -> Any:
            await finished.wait()
            return box[0] if box else None

        return Background(adapter, done_trio)
    if adapter.name == "asyncio":
        assert adapter._loop is not None
        future = asyncio.run_coroutine_threadsafe(function(**kwargs), adapter._loop)
        return Background(adapter, lambda: trio.to_thread.run_sync(future.result))
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(function(**kwargs))
        except BaseException as exc:  # reported by wait()
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    async def done_sync() -> Any:
        await trio.to_thread.run_sync(thread.join)
        if errors:
            raise errors[0]
        return result[0] if result else None

    return Background(adapter, done_sync)


def call_soon(adapter: Adapter, function: Callable[[], Any]) -> None:
    """Call a plain function where the adapter's objects live (its loop for asyncio)."""
    if adapter.name == "asyncio":
        assert adapter._loop is not None
        adapter._loop.call_soon_threadsafe(function)
    else:
        function()
