"""Drive the sans-IO core from plain asyncio and the standard library alone.

KubeMoon's core never touches a socket or a clock, so any event loop can drive it. Here the
"adapter" is a few dozen lines of asyncio: ``asyncio.open_connection`` with an
``ssl.SSLContext`` and a hand-written HTTP/1.1 exchange. The core does the Kubernetes part:

- :func:`list_then_watch`: ``list_request``/``watch_request`` build the requests,
  ``decode_response`` decodes the LIST (or raises a typed ``ApiError``), ``WatchDecoder``
  turns the watch body into events whatever the chunk boundaries;
- :func:`run_reflector`: the core ``Reflector`` decides everything (what to request, when,
  what a failure means, when a watch stalled), fed with asyncio's clock (``loop.time()``).

No trio, no httpcore on the client side. Run it as a script to try the reflector against a
scripted server (started in a thread)::

    $ python examples/asyncio_embedding.py
    ADDED a 9
    ADDED b 11
    MODIFIED a 12
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit

from kubemoon_core import (
    GroupVersionResource,
    ListOptions,
    Request,
    Response,
    decode_response,
    list_request,
    watch_request,
)
from kubemoon_core._reflector import Reflector
from kubemoon_core._watch import WatchDecoder

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


class Connection:
    """One HTTP/1.1 request/response on one asyncio TLS connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, server: str, context: ssl.SSLContext) -> Connection:
        """Connect to ``https://host:port`` with ``context``."""
        parts = urlsplit(server)
        reader, writer = await asyncio.open_connection(
            parts.hostname, parts.port or 443, ssl=context, server_hostname=parts.hostname
        )
        return cls(reader, writer)

    async def send(self, request: Request, host: str, token: str) -> tuple[int, dict[str, str]]:
        """Send ``request``; return the status code and headers of the answer."""
        lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in request.headers]
        lines += [f"Authorization: Bearer {token}", "Connection: close"]
        if request.body:
            lines.append(f"Content-Length: {len(request.body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    async def body(self, headers: dict[str, str]) -> AsyncGenerator[bytes, None]:
        """The body as it arrives (de-chunked); the pieces are not lines, nor events."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readline()
                    return
                remaining = size
                while remaining:
                    piece = await self.reader.read(remaining)
                    if not piece:
                        raise ConnectionError("the stream was cut mid-chunk")
                    remaining -= len(piece)
                    yield piece
                await self.reader.readexactly(2)
        else:
            yield await self.reader.readexactly(int(headers.get("content-length", "0")))

    async def close(self) -> None:
        """Close the connection."""
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()


async def list_then_watch(server: str, ca_pem: bytes, token: str) -> list[str]:
    """LIST the ConfigMaps of ``default``, then WATCH from the list's resourceVersion.

    Returns the lines it printed (for tests).
    """
    context = ssl.create_default_context(cadata=ca_pem.decode())
    host = urlsplit(server).netloc
    out: list[str] = []

    connection = await Connection.open(server, context)
    try:
        request = list_request(CONFIGMAPS, namespace="default", options=ListOptions(limit=500))
        status, headers = await connection.send(request, host, token)
        body = b"".join([piece async for piece in connection.body(headers)])
    finally:
        await connection.close()
    page = decode_response(Response(status, tuple(headers.items()), body))  # ApiError if not 2xx
    version = page["metadata"]["resourceVersion"]
    names = [item["metadata"]["name"] for item in page["items"]]
    out.append(f"LIST resourceVersion={version} objects={names}")
    print(out[-1])

    connection = await Connection.open(server, context)
    try:
        options = ListOptions(resource_version=version, allow_watch_bookmarks=True)
        request = watch_request(CONFIGMAPS, namespace="default", options=options)
        status, headers = await connection.send(request, host, token)
        if status != 200:
            body = b"".join([piece async for piece in connection.body(headers)])
            decode_response(Response(status, tuple(headers.items()), body))  # raises ApiError
        decoder = WatchDecoder()
        async for piece in connection.body(headers):
            for event in decoder.receive_data(piece):
                out.append(
                    f"{event.type} {event.object['metadata']['name']} {event.resource_version}"
                )
                print(out[-1])
        decoder.receive_data(b"")  # a partial event left over would raise here
    finally:
        await connection.close()
    return out


async def run_reflector(server: str, ca_pem: bytes, token: str, *, changes: int) -> list[str]:
    """Keep a Reflector's store in sync until it has reported ``changes`` changes.

    Returns the lines it printed (one per change).
    """
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cadata=ca_pem.decode())
    host = urlsplit(server).netloc
    reflector = Reflector(CONFIGMAPS, namespace="default", rng=random.Random())
    out: list[str] = []

    def report(batch: list[Any]) -> None:
        for change in batch:
            version = change.object["metadata"]["resourceVersion"]
            out.append(f"{change.type.value} {change.key.name} {version}")
            print(out[-1])

    while len(out) < changes:
        request = reflector.next_request(loop.time())
        if request is None:  # waiting (a backoff, or the next watch): sleep until told
            deadline = reflector.next_deadline()
            assert deadline is not None
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            continue
        if not request.stream:  # a LIST page: perform it, hand over the whole response
            try:
                connection = await Connection.open(server, context)
                try:
                    status, headers = await connection.send(request, host, token)
                    body = b"".join([piece async for piece in connection.body(headers)])
                finally:
                    await connection.close()
            except OSError as exc:
                reflector.request_failed(loop.time(), exc)
                continue
            response = Response(status, tuple(headers.items()), body)
            report(reflector.receive_response(response, loop.time()))
            continue
        # A watch: head, then every chunk as it comes, polling for stalls at the deadline.
        error: BaseException | None = None
        try:
            connection = await Connection.open(server, context)
        except OSError as exc:
            reflector.watch_ended(loop.time(), exc)
            continue
        try:
            status, headers = await connection.send(request, host, token)
            reflector.receive_watch_head(status, headers.items(), loop.time())
            pieces = connection.body(headers)
            try:
                while not reflector.poll(loop.time()) and len(out) < changes:
                    deadline = reflector.next_deadline() or loop.time()
                    try:
                        piece = await asyncio.wait_for(anext(pieces, b""), deadline - loop.time())
                    except TimeoutError:
                        continue  # poll() now says the watch stalled
                    if not piece:
                        break  # a clean end: the reflector resumes from its resume point
                    report(reflector.receive_watch_data(piece, loop.time()))
            finally:
                await pieces.aclose()
        except OSError as exc:  # connection errors, including a cut mid-chunk
            error = exc
        finally:
            await connection.close()
            reflector.watch_ended(loop.time(), error)
    return out


def _scripted_server() -> Any:
    """A scripted server in a thread (kubemoon_testing), so the example runs on its own."""
    from kubemoon_testing import Reply, ScriptedServer  # noqa: PLC0415

    def cm(name: str, rv: str) -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}

    server = ScriptedServer()
    listing = {
        "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "10"},
        "items": [cm("a", "9")],
    }
    server.add(
        Reply.json(listing),
        Reply.watch(
            [("ADDED", cm("b", "11")), ("MODIFIED", cm("a", "12"))], chunk_size=7, stall=True
        ),
    )
    return server.start_in_thread()


if __name__ == "__main__":
    scripted = _scripted_server()
    try:
        asyncio.run(run_reflector(scripted.url, scripted.ca_pem, "example-token", changes=3))
    finally:
        scripted.stop()
