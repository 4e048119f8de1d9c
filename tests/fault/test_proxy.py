"""``proxy-url`` on every adapter: an HTTP CONNECT proxy (with credentials) and a SOCKS5
proxy, both small servers on 127.0.0.1 that record what they were asked and pipe bytes."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest
import trio
from fault_support import PODS, Adapter

from kubemoon_io import TransportError
from kubemoon_testing import Reply, ScriptedServer

pytestmark = pytest.mark.fault


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await sink.aclose()


async def _splice(client: trio.SocketStream, host: str, port: int) -> None:
    upstream = await trio.open_tcp_stream(host, port)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pipe, client, upstream)
        nursery.start_soon(_pipe, upstream, client)


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT), as a proxy for HTTPS must."""

    def __init__(self, refusal: bytes | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.port = 0
        self.refusal = refusal  # a status line to answer every CONNECT with, then close

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
        method, target, _ = lines[0].split(" ")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        self.requests.append((f"{method} {target}", headers))
        host, port = target.rsplit(":", 1)
        if self.refusal is not None:
            await stream.send_all(self.refusal + b"\r\nContent-Length: 0\r\n\r\n")
            await stream.aclose()
            return
        await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _splice(stream, host, int(port))


class Socks5Proxy:
    """A SOCKS5 proxy without authentication, for IPv4 targets."""

    def __init__(self, greeting_reply: bytes = b"\x05\x00") -> None:
        self.targets: list[tuple[str, int]] = []
        self.port = 0
        self.greeting_reply = greeting_reply  # what the greeting is answered with

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _read(self, stream: trio.SocketStream, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = await stream.receive_some(size - len(data))
            if not chunk:
                raise trio.BrokenResourceError
            data += chunk
        return data

    async def _handle(self, stream: trio.SocketStream) -> None:
        _, count = await self._read(stream, 2)
        await self._read(stream, count)
        await stream.send_all(self.greeting_reply)  # by default: no authentication
        if self.greeting_reply != b"\x05\x00":
            await stream.aclose()
            return
        _, command, _, kind = await self._read(stream, 4)
        assert command == 1 and kind == 1, "CONNECT to an IPv4 address"
        address = ".".join(str(b) for b in await self._read(stream, 4))
        (port,) = struct.unpack("!H", await self._read(stream, 2))
        self.targets.append((address, port))
        await stream.send_all(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        await _splice(stream, address, port)


async def test_an_http_proxy_tunnels_with_its_credentials(
    adapter: Adapter, nursery: trio.Nursery
) -> None:
    proxy = ConnectProxy()
    await nursery.start(proxy.serve)
    async with ScriptedServer() as server:
        server.add(Reply.json({"kind": "Pod", "metadata": {"name": "a"}}))
        config = server.client_config(
            token="api-token", proxy_url=f"http://user:p%40ss@127.0.0.1:{proxy.port}"
        )
        client = adapter.client(config)
        try:
            pod = await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
    assert pod["metadata"]["name"] == "a"
    ((line, headers),) = proxy.requests
    assert line == f"CONNECT 127.0.0.1:{server.port}"
    expected = base64.b64encode(b"user:p@ss").decode()
    assert headers.get("Proxy-Authorization") == f"Basic {expected}"
    # The API token travelled inside the TLS tunnel: the proxy never saw it.
    assert "api-token" not in repr(headers)
    assert server.requests[0].header("authorization") == "Bearer api-token"
    assert "p@ss" not in repr(client) and "p%40ss" not in repr(config)


async def test_a_socks5_proxy_carries_requests_and_watches(
    adapter: Adapter, nursery: trio.Nursery
) -> None:
    proxy = Socks5Proxy()
    await nursery.start(proxy.serve)
    async with ScriptedServer() as server:
        server.add(
            Reply.json({"kind": "Pod", "metadata": {"name": "a"}}),
            Reply.watch([("ADDED", {"metadata": {"name": "a", "resourceVersion": "1"}})]),
        )
        client = adapter.client(server.client_config(proxy_url=f"socks5://127.0.0.1:{proxy.port}"))
        try:
            pod = await adapter.call(client.get, PODS, "a", namespace="ns")
            events = await adapter.watch_all(client)
        finally:
            await adapter.close(client)
    assert pod["metadata"]["name"] == "a"
    assert [e.type for e in events] == ["ADDED"]
    assert proxy.targets == [("127.0.0.1", server.port)] * 2


async def test_a_proxy_refusing_the_tunnel_is_a_transport_error(
    adapter: Adapter, nursery: trio.Nursery
) -> None:
    """httpcore raises its ``ProxyError`` for a CONNECT answered with an error status:
    CRUD requests and watches alike raise a TransportError naming the API server and the
    proxy's answer."""
    proxy = ConnectProxy(refusal=b"HTTP/1.1 407 Proxy Authentication Required")
    await nursery.start(proxy.serve)
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(proxy_url=f"http://127.0.0.1:{proxy.port}"))
        try:
            with pytest.raises(TransportError, match="proxy refused") as crud:
                await adapter.call(client.get, PODS, "a", namespace="ns")
            with pytest.raises(TransportError, match="proxy refused") as watch:
                await adapter.watch_all(client)
        finally:
            await adapter.close(client)
    for info in (crud, watch):
        assert "407 Proxy Authentication Required" in str(info.value)
        assert server.url in str(info.value)
    assert server.requests == []
    assert len(proxy.requests) == 2


@pytest.mark.parametrize(
    ("greeting_reply", "words"),
    [
        (b"\x04\x5a", "SOCKS proxy"),  # a SOCKS4 answer: malformed for SOCKS5
        (b"\x05\xff", "proxy refused"),  # no acceptable authentication method
    ],
    ids=["malformed", "refused"],
)
async def test_a_socks_proxy_answering_badly_is_a_transport_error(
    adapter: Adapter, nursery: trio.Nursery, greeting_reply: bytes, words: str
) -> None:
    """socksio's ProtocolError for a malformed reply, httpcore's ProxyError for a refusal:
    both are a TransportError naming the API server."""
    proxy = Socks5Proxy(greeting_reply)
    await nursery.start(proxy.serve)
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(proxy_url=f"socks5://127.0.0.1:{proxy.port}"))
        try:
            with pytest.raises(TransportError, match=words) as crud:
                await adapter.call(client.get, PODS, "a", namespace="ns")
            with pytest.raises(TransportError, match=words) as watch:
                await adapter.watch_all(client)
        finally:
            await adapter.close(client)
    for info in (crud, watch):
        assert server.url in str(info.value)
    assert server.requests == []
