"""The scripted server itself: exact wire bytes, cuts, close_notify, recording, threads."""

from __future__ import annotations

import ssl
import threading

import pytest
import trio

from kubemoon_testing._scripted import Reply, ScriptedServer

pytestmark = pytest.mark.fault

GET = b"GET /api?x=1 HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer abc\r\n\r\n"


async def _raw(server: ScriptedServer, request: bytes = GET) -> bytes:
    """Send raw bytes, return every byte until the server closes."""
    stream: trio.abc.Stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    if server.tls:
        context = ssl.create_default_context(cadata=server.ca_pem.decode())
        stream = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
    data = b""
    async with stream:
        await stream.send_all(request)
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                data += chunk
    return data


async def test_chunks_are_sent_exactly_and_pauses_are_kept() -> None:
    async with ScriptedServer(tls=False) as server:
        server.add(Reply(200, chunks=(b"hello", 0.2, b"wo", b"rld"), close=True))
        started = trio.current_time()
        data = await _raw(server)
        assert trio.current_time() - started >= 0.2
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"5\r\nhello\r\n2\r\nwo\r\n3\r\nrld\r\n0\r\n\r\n"
    (request,) = server.requests
    assert (request.method, request.path, request.query) == ("GET", "/api", {"x": "1"})
    assert request.header("Authorization") == "Bearer abc"


async def test_a_cut_lands_in_the_middle_of_a_chunk() -> None:
    async with ScriptedServer(tls=False) as server:
        server.add(Reply(200, chunks=(b"abcdef", b"ghijkl"), drop_after=8))
        data = await _raw(server)
    body = data.partition(b"\r\n\r\n")[2]
    assert body == b"6\r\nabcdef\r\n6\r\ngh"  # the size line promised 6 bytes, 2 came


async def test_content_length_bodies_delays_and_unscripted_requests() -> None:
    async with ScriptedServer(tls=False) as server:
        server.add(Reply(201, b"created", delay=0.1, close=True))
        data = await _raw(server)
        assert data.startswith(b"HTTP/1.1 201 ")
        assert data.endswith(b"\r\n\r\ncreated")
        data = await _raw(server, GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        assert data.startswith(b"HTTP/1.1 500 ")
        assert b"not scripted: GET /api?x=1" in data


@pytest.mark.parametrize("notify", [True, False])
async def test_close_with_or_without_tls_close_notify(notify: bool) -> None:
    async with ScriptedServer() as server:
        server.add(Reply(200, chunks=(b"partial",), drop_after=3, close_notify=notify))
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        context = ssl.create_default_context(cadata=server.ca_pem.decode())
        tls = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
        async with tls:
            await tls.send_all(GET)
            received = b""
            with trio.fail_after(5):
                try:
                    while chunk := await tls.receive_some():
                        received += chunk
                    clean = True
                except trio.BrokenResourceError:
                    clean = False  # EOF without close_notify
        assert received.endswith(b"7\r\npar")
        assert clean is notify


def test_the_server_runs_in_a_thread_for_blocking_tests() -> None:
    import kubemoon_sync
    from kubemoon_core import GroupVersionResource

    before = threading.active_count()
    with ScriptedServer(lambda request: Reply.json({"kind": "Pod"})) as server:
        assert threading.active_count() == before + 1
        with kubemoon_sync.Client(server.client_config()) as client:
            pod = client.get(GroupVersionResource("", "v1", "pods"), "a", namespace="ns")
        assert pod == {"kind": "Pod"}
        server.wait_blocking(lambda: server.open_connections == 0)
        assert server.connections_opened == 1
    assert threading.active_count() == before
