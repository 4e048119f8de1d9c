"""The CRUD connection pool when a connection it handed out turns out unusable.

httpcore's HTTP/1.1 connection checks its state only after two lock acquisitions (the
connection's, then its state's), each of which yields on trio and asyncio even when the
lock is free -- after the pool took the connection off its idle stack. Whatever another
task does in that window (``Client.aclose`` by a Manager's creator while a webhook resync
applies, say) is seen by the check: a closed connection raises
``httpcore.ConnectionNotAvailable``. The race itself is run on the two loops; the hooked
tests run the other task's action at exactly that point (the start of the state check)
on every adapter, threads included, against the same real server over real TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpcore
import pytest
import trio
from fault_support import PODS, Adapter

from kubemoon_core import Request
from kubemoon_core.errors import LocalProtocolError
from kubemoon_io import TransportError
from kubemoon_testing._scripted import Reply, ScriptedServer

pytestmark = pytest.mark.fault


def pod(name: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


@contextlib.contextmanager
def run_first(
    adapter: Adapter, where: tuple[str, str], action: Callable[[Any], Any]
) -> Iterator[list[int]]:
    """Run ``action(connection)`` once, for the next request, at the start of httpcore's
    method ``where`` (the HTTP/1.1 connection's ``handle_async_request``: right before
    it checks that it can take the request, where its state lock yields to other tasks).
    Yields a list that holds a 1 once the action ran."""
    ran: list[int] = []
    owner, method = where
    if adapter.name == "sync":
        cls: Any = getattr(httpcore, owner)
        name = method.replace("handle_async_request", "handle_request")
        original = getattr(cls, name)

        def blocking(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not ran:
                ran.append(1)
                action(self)
            return original(self, *args, **kwargs)

        replacement: Any = blocking
    else:
        cls = getattr(httpcore, f"Async{owner}")
        name = method
        original = getattr(cls, name)

        async def asynchronous(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not ran:
                ran.append(1)
                await action(self)
            return await original(self, *args, **kwargs)

        replacement = asynchronous
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(cls, name, replacement)
        yield ran


STATE_CHECK = ("HTTP11Connection", "handle_async_request")
CONNECTING = ("HTTPConnection", "_connect")


def close_client(adapter: Adapter, client: Any) -> Callable[[Any], Any]:
    """The action of another task closing the client."""
    return (
        (lambda connection: client.close())
        if adapter.name == "sync"
        else (lambda connection: client.aclose())
    )


def close_connection(adapter: Adapter) -> Callable[[Any], Any]:
    """The action of something closing just that connection (the pool stays open)."""
    return (
        (lambda connection: connection.close())
        if adapter.name == "sync"
        else (lambda connection: connection.aclose())
    )


async def test_a_request_racing_client_close_is_a_transport_error(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a")), Reply.json(pod("b")))
        client = adapter.client(server.client_config())
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")  # one idle connection
            with (
                run_first(adapter, STATE_CHECK, close_client(adapter, client)) as ran,
                pytest.raises(TransportError, match="client was closed") as info,
            ):
                await adapter.call(
                    client.apply, PODS, pod("b"), field_manager="test", namespace="ns"
                )
            assert ran == [1]
            assert str(server.url) in str(info.value)
            assert client.connection_count == 0
            assert len(server.requests) == 1  # nothing was sent on the closed connection
        finally:
            await adapter.close(client)


async def test_a_connection_closed_once_taken_is_replaced_by_a_new_one(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a")), Reply.json(pod("b")))
        client = adapter.client(server.client_config())
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
            with run_first(adapter, STATE_CHECK, close_connection(adapter)) as ran:
                answer = await adapter.call(
                    client.apply, PODS, pod("b"), field_manager="test", namespace="ns"
                )
            assert ran == [1]
            assert answer["metadata"]["name"] == "b"
            assert [r.method for r in server.requests] == ["GET", "PATCH"]
            assert server.connections_opened == 2
            assert client.connection_count == 1  # the new one, idle; the closed one dropped
        finally:
            await adapter.close(client)


async def test_a_request_started_before_client_close_leaves_no_connection_open(
    adapter: Adapter,
) -> None:
    """A request whose new connection was still unopened when ``aclose`` ran (nothing to
    close yet) is answered, and its connection closed when given back, not kept."""
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a")))
        client = adapter.client(server.client_config())
        try:
            with run_first(adapter, CONNECTING, close_client(adapter, client)) as ran:
                answer = await adapter.call(client.get, PODS, "a", namespace="ns")
            assert ran == [1]
            assert answer["metadata"]["name"] == "a"
            assert client.connection_count == 0
            await server.wait(lambda: server.open_connections == 0)
        finally:
            await adapter.close(client)


async def test_a_task_closing_the_client_during_a_request_is_a_transport_error(
    adapter: Adapter,
) -> None:
    """The race itself, no hook: one task sends a request on the idle connection while
    another, one checkpoint later, closes the client. httpcore's two lock acquisitions
    (the connection's, then its HTTP/1.1 state's) each yield before the state check, so
    the close lands in that window whichever task the loop runs first."""
    if adapter.name == "sync":
        pytest.skip("threads interleave at no fixed point; the hooked tests cover this adapter")
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a")), Reply.json(pod("b")))
        client = adapter.client(server.client_config())
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")

            async def request() -> BaseException | None:
                try:
                    await client.apply(PODS, pod("b"), field_manager="test", namespace="ns")
                except BaseException as exc:  # the outcome is the test's to judge
                    return exc
                return None

            if adapter.name == "trio":

                async def race() -> BaseException | None:
                    outcome: list[BaseException | None] = []

                    async def send() -> None:
                        outcome.append(await request())

                    async def close() -> None:
                        await trio.lowlevel.checkpoint()
                        await client.aclose()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(send)
                        nursery.start_soon(close)
                    return outcome[0]

            else:

                async def race() -> BaseException | None:
                    async def close() -> None:
                        await asyncio.sleep(0)
                        await client.aclose()

                    outcome, _ = await asyncio.gather(request(), close())
                    return outcome

            failure = await adapter.call(race)
            assert isinstance(failure, TransportError), repr(failure)
            assert "client was closed" in str(failure)
            assert client.connection_count == 0
        finally:
            await adapter.close(client)


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (Request("GET", "/api/v1/namespaces/\u00e9t\u00e9"), "is not ASCII: percent-encode it"),
        (Request("GET", "/api", headers=(("X-Note", "\u20ac"),)), "X-Note header"),
        (Request("GET", "/api", headers=(("X-Note", "a\r\nX-Evil: 1"),)), "X-Note header"),
        (Request("GET", "/api", headers=(("X Note", "a"),)), "'X Note' is not a valid"),
    ],
    ids=["non-ascii-target", "non-latin1-value", "crlf-value", "bad-name"],
)
async def test_what_http_cannot_carry_is_a_local_protocol_error(
    adapter: Adapter, request_: Request, words: str
) -> None:
    """Never httpcore's TypeError, the codec's UnicodeEncodeError or a 'broken
    connection': the caller's request is refused before anything is sent."""
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config())
        try:
            with pytest.raises(LocalProtocolError, match=re.escape(words)) as info:
                await adapter.call(client.send, request_)
            assert "X-Evil" not in str(info.value)  # a value is never echoed
            assert server.requests == []
        finally:
            await adapter.close(client)
