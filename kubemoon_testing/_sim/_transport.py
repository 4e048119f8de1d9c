"""The simulated cluster's client transports: how a real client's requests reach
:meth:`SimulatedCluster.answer <kubemoon_testing.sim.SimulatedCluster.answer>` and its
answers come back, with no sockets.

Rules: two paths, chosen per client (``cluster.client(framing=...)``). Unframed (the
default): the client takes its connection pools from :class:`SimNetworkBackend`'s
``open_pool``; a :class:`_SimConnection` takes the httpcore request the client built and
answers an httpcore response whose body is handed over as it is (a watch's lines as they
are written), with no HTTP framing on either side. Framed: a connection is an in-memory
byte stream to an h11 server (:class:`_SimStream`), the client's httpcore frames each
request as HTTP/1.1 and parses the answer; it checks the framing. Both hand the same core
``Request`` to the cluster (:func:`_core_request`), and pauses, pauses at a write, send
guards, dropped and expired watches and read timeouts act at the same points in both.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote

import anyio
import anyio.lowlevel
import h11
import httpcore

from kubemoon_core import Request, Response
from kubemoon_io import check_armed_guard

from ._store import SimApiServer, SimWatch

__all__ = ["SimNetworkBackend"]


class SimulatedCluster(Protocol):
    """What a transport uses of ``kubemoon_testing.sim.SimulatedCluster`` (which imports
    this module): its model, answers, clock, pauses and open connections."""

    server: SimApiServer
    _streams: set[Any]
    _paused: dict[str, float]
    _pause_on_write: dict[str, float]

    def now(self) -> float: ...

    def changed(self) -> anyio.Event: ...

    def answer(self, request: Request, identity: str = "") -> Response | SimWatch: ...

    async def hold(self, identity: str) -> None: ...

    def _writing(self, identity: str, head: bytes) -> None: ...

    def _writing_request(self, identity: str, method: bytes, target: bytes) -> None: ...


class SimNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend interface, connecting to a :class:`SimulatedCluster`.

    With ``framing``, a connection is an in-memory byte stream to an h11 server
    (:class:`_SimStream`): the client's httpcore frames each request as HTTP/1.1 and parses
    the answer. Without it (the default) the backend also offers ``open_pool``, which the
    client uses instead of its connection pools: a :class:`_SimPool` of
    :class:`_SimConnection` takes httpcore's request object as the client built it and
    answers httpcore's response object, the body handed over as it is (a watch's lines as
    they are written), with no HTTP framing on either side. Both hand the same
    :class:`~kubemoon_core.Request` to :meth:`SimulatedCluster.answer`, and pauses, pauses
    at a write, send guards, dropped and expired watches and read timeouts act at the same
    points (tests/unit/test_sim_transport.py checks that they answer alike).
    """

    open_pool: Callable[..., _SimPool] | None

    def __init__(
        self, cluster: SimulatedCluster, identity: str = "", *, framing: bool = False
    ) -> None:
        self._cluster = cluster
        self._identity = identity
        self.open_pool = None if framing else self._open_pool

    def _open_pool(self, *, max_connections: int) -> _SimPool:
        return _SimPool(self._cluster, self._identity, max_connections)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        await anyio.lowlevel.checkpoint()
        await self._cluster.hold(self._identity)
        return _SimStream(self._cluster, self._identity)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the simulated cluster has no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _SimStream(httpcore.AsyncNetworkStream):
    """One in-memory connection: an h11 server fed the client's bytes."""

    def __init__(self, cluster: SimulatedCluster, identity: str = "") -> None:
        self._cluster = cluster
        self.identity = identity
        self._h11 = h11.Connection(h11.SERVER)
        self._out = bytearray()
        self._request: h11.Request | None = None
        self._body = bytearray()
        self._watch: SimWatch | None = None
        self._closed = False
        cluster._streams.add(self)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # No checkpoint: the answer's read that always follows is one (a scheduler pass
        # per write would be most of a request's cost).
        if self._closed or self._cut:
            raise httpcore.WriteError("the connection is closed")
        if not buffer:
            return  # h11 reads b"" as the end of the stream
        if self._h11.their_state is h11.IDLE and self._cluster._pause_on_write:
            self._cluster._writing(self.identity, bytes(buffer[:512]))
        if self._cluster._paused:
            await self._cluster.hold(self.identity)
        check_armed_guard()  # a gated write: its authority must hold as its bytes go out
        self._h11.receive_data(bytes(buffer))
        self._drain_requests()

    def _drain_requests(self) -> None:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpcore.WriteError(
                    f"the simulated server refused the request: {exc}"
                ) from None
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request, self._body = event, bytearray()
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self._respond()
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _respond(self) -> None:
        head = self._request
        assert head is not None
        request = _core_request(head.method, head.target, head.headers, bytes(self._body))
        answer = self._cluster.answer(request, self.identity)
        if isinstance(answer, SimWatch):
            self._watch = answer
            self._out += self._h11.send(
                h11.Response(
                    status_code=200,
                    headers=[
                        ("Content-Type", "application/json"),
                        ("Transfer-Encoding", "chunked"),
                    ],
                )
            )
            return
        headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
        self._out += self._h11.send(h11.Response(status_code=answer.status_code, headers=headers))
        if answer.body:
            self._out += self._h11.send(h11.Data(data=answer.body))
        self._out += self._h11.send(h11.EndOfMessage())
        self._next_cycle()

    def _next_cycle(self) -> None:
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._drain_requests()

    @property
    def watching(self) -> bool:
        """True while this connection streams a watch."""
        return self._watch is not None and not self._closed

    @property
    def current_watch(self) -> SimWatch | None:
        """The watch this connection streams, if any."""
        return self._watch

    def cut(self) -> None:
        """Drop the connection: the client reads the end of the stream mid-response."""
        self._cut = True
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None

    _cut = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        while True:
            if self._cluster._paused:
                await self._cluster.hold(self.identity)
            if self._cut:
                await anyio.lowlevel.checkpoint()
                return b""
            if self._out:
                data = bytes(self._out[:max_bytes])
                del self._out[:max_bytes]
                await anyio.lowlevel.checkpoint()
                return data
            if self._closed or self._h11.our_state in (h11.MUST_CLOSE, h11.CLOSED):
                await anyio.lowlevel.checkpoint()
                return b""
            watch = self._watch
            if watch is None:
                raise httpcore.ReadError("the simulated server has no answer pending")
            server = self._cluster.server
            lines = watch.take(self._cluster.now(), server.resource_version)
            if lines:
                self._out += self._h11.send(
                    h11.Data(data=b"".join(line.encode() for line in lines))
                )
                continue
            if watch.closed:
                server.forget(watch)
                self._watch = None
                self._out += self._h11.send(h11.EndOfMessage())
                self._next_cycle()
                continue
            wake = watch.next_deadline()
            until = min(deadline, math.inf if wake is None else wake)
            changed = self._cluster.changed()
            with anyio.CancelScope(deadline=until):
                await changed.wait()
            if not changed.is_set() and anyio.current_time() >= deadline and not watch.has_pending:
                raise httpcore.ReadTimeout("the simulated watch sent nothing in time")

    async def aclose(self) -> None:
        self._closed = True
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None
        self._cluster._streams.discard(self)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the simulated cluster serves http:// only")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._closed or self._cut or bool(self._out)
        return None


class _SimPool:
    """The client's pool of unframed connections (see :class:`SimNetworkBackend`), as its
    own pools behave: at most ``max_connections`` busy, idle ones reused newest first, a
    request past the cap waits (up to the pool timeout) for one to be given back; after
    ``aclose`` no connection it knew stays open."""

    def __init__(self, cluster: SimulatedCluster, identity: str, max_connections: int) -> None:
        self._cluster = cluster
        self._identity = identity
        self._max = max_connections
        self._idle: list[_SimConnection] = []
        self._busy: set[_SimConnection] = set()
        self._freed: anyio.Event | None = None

    @property
    def connections(self) -> list[_SimConnection]:
        """The open connections, idle and busy."""
        return [*self._idle, *self._busy]

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        deadline: float | None = None
        while True:
            connection = self._take()
            if connection is not None:
                break
            if deadline is None:
                timeout = (request.extensions.get("timeout") or {}).get("pool")
                deadline = math.inf if timeout is None else anyio.current_time() + timeout
            if self._freed is None:
                self._freed = anyio.Event()
            freed = self._freed
            with anyio.move_on_after(deadline - anyio.current_time()):
                await freed.wait()
            if not freed.is_set():
                raise httpcore.PoolTimeout("no connection became free in time")
        try:
            return await connection.handle_async_request(request)
        except BaseException:
            self.release(connection)
            raise

    def _take(self) -> _SimConnection | None:
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.is_idle():
                self._busy.add(connection)
                return connection
            connection._close()
        if len(self._busy) < self._max:
            connection = _SimConnection(self._cluster, self._identity, self)
            self._busy.add(connection)
            return connection
        return None

    def release(self, connection: _SimConnection) -> None:
        """Take back ``connection`` (idle again, or closed); one taken before the pool was
        last closed is closed."""
        if connection in self._busy:
            self._busy.discard(connection)
            if connection.is_idle():
                self._idle.append(connection)
            else:
                connection._close()
        else:
            connection._close()
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    async def aclose(self) -> None:
        """Close every connection (a request in flight fails)."""
        for connection in [*self._idle, *self._busy]:
            connection._close()
        self._idle.clear()
        self._busy.clear()


def _core_request(
    method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> Request:
    """The core ``Request`` the server answers, from a request's parts as h11 parses them
    (header names lower-cased): the same on both paths."""
    path, _, query = target.decode("ascii").partition("?")
    return Request(
        method=method.decode("ascii"),
        path=unquote(path),
        query=tuple(parse_qsl(query, keep_blank_values=True)) if query else (),
        headers=tuple([(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]),
        body=body,
    )


# httpcore's texts for a connection cut before or during an answer (what the framed path's
# client reads then).
_NO_ANSWER = "Server disconnected without sending a response."
_CUT_BODY = "peer closed connection without sending complete message body (incomplete chunked read)"
_WATCH_HEADERS = [(b"Content-Type", b"application/json"), (b"Transfer-Encoding", b"chunked")]
_ANSWER_EXTENSIONS = {"http_version": b"HTTP/1.1", "reason_phrase": b""}


class _SimConnection:
    """One unframed in-memory connection (see :class:`SimNetworkBackend`): one request at a
    time, kept alive between them; it connects (a pause holds it) on its first request."""

    def __init__(self, cluster: SimulatedCluster, identity: str, pool: _SimPool) -> None:
        self._cluster = cluster
        self.identity = identity
        self._pool = pool
        self._connected = False
        self._busy = False
        self._closed = False
        self._cut = False
        self._watch: SimWatch | None = None

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        if self._closed or self._cut or self._busy:
            raise httpcore.ConnectionNotAvailable()
        cluster = self._cluster
        self._busy = True
        try:
            if not self._connected:
                await anyio.lowlevel.checkpoint()
                await cluster.hold(self.identity)
                self._connected = True
                cluster._streams.add(self)
            trace = request.extensions.get("trace")
            if trace is not None:
                await trace("http11.send_request_headers.started", {"request": request})
            method = request.method
            target = request.url.target
            # The request goes out: as the framed path's first write does.
            if cluster._pause_on_write:
                cluster._writing_request(self.identity, method, target)
            if cluster._paused:
                await cluster.hold(self.identity)
            check_armed_guard()  # a gated write: its authority must hold as it goes out
            if self._closed or self._cut:
                raise httpcore.WriteError("the connection is closed")
            content = request.stream
            if isinstance(content, Iterable):  # httpcore's ByteStream: the body as built
                body = b"".join(list(content))
            else:
                body = b"".join([chunk async for chunk in content])
            answer = cluster.answer(
                _core_request(method, target, request.headers, body), self.identity
            )
            if isinstance(answer, SimWatch):
                self._watch = answer
            # The answer's read, as the framed path's.
            if cluster._paused:
                await cluster.hold(self.identity)
            await anyio.lowlevel.checkpoint()
            if self._cut or self._closed:
                raise httpcore.RemoteProtocolError(_NO_ANSWER)
            stream: _Body | _WatchBody
            if isinstance(answer, SimWatch):
                status = 200
                headers = _WATCH_HEADERS
                timeouts = request.extensions.get("timeout") or {}
                stream = _WatchBody(self, timeouts.get("read"))
            else:
                status = answer.status_code
                headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
                headers.append((b"Content-Length", str(len(answer.body)).encode("ascii")))
                stream = _Body(self, answer.body)
            response = httpcore.Response(
                status, headers=headers, content=stream, extensions=_ANSWER_EXTENSIONS
            )
            if trace is not None:
                await trace("http11.receive_response_headers.complete", {"return_value": response})
            return response
        except BaseException:
            self._close()  # as httpcore closes a connection whose exchange failed
            raise

    def _done(self, finished: bool) -> None:
        """The answer's body was closed: idle again if it was read to its end (else closed,
        as httpcore closes a connection whose answer was left unread); back to the pool."""
        if finished:
            self._busy = False
        else:
            self._close()
        self._pool.release(self)

    def _close(self) -> None:
        self._closed = True
        self._busy = False
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None
        self._cluster._streams.discard(self)

    @property
    def watching(self) -> bool:
        """True while this connection streams a watch."""
        return self._watch is not None and not self._closed

    @property
    def current_watch(self) -> SimWatch | None:
        """The watch this connection streams, if any."""
        return self._watch

    def cut(self) -> None:
        """Drop the connection: the client reads the end of the stream mid-response."""
        self._cut = True
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None

    async def aclose(self) -> None:
        self._close()

    def is_idle(self) -> bool:
        """Neither answering nor closed (nor dropped by the server)."""
        return not (self._busy or self._closed or self._cut)


class _Body:
    """A whole answer's body, handed over in one chunk."""

    __slots__ = ("_connection", "_data", "_finished")

    def __init__(self, connection: _SimConnection, data: bytes) -> None:
        self._connection: _SimConnection | None = connection
        self._data: bytes | None = data
        self._finished = False

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        data = self._data
        if data:
            self._data = None
            return data
        self._data = None
        self._finished = True
        raise StopAsyncIteration

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection._done(self._finished)


class _WatchBody:
    """A watch's body: its lines as they are written, each batch one chunk."""

    __slots__ = ("_connection", "_finished", "_timeout")

    def __init__(self, connection: _SimConnection, timeout: float | None) -> None:
        self._connection: _SimConnection | None = connection
        self._timeout = timeout
        self._finished = False

    def __aiter__(self) -> _WatchBody:
        return self

    async def __anext__(self) -> bytes:
        connection = self._connection
        if self._finished or connection is None:
            raise StopAsyncIteration
        cluster = connection._cluster
        timeout = self._timeout
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        while True:
            if cluster._paused:
                await cluster.hold(connection.identity)
            watch = connection._watch
            if connection._cut or connection._closed or watch is None:
                await anyio.lowlevel.checkpoint()
                raise httpcore.RemoteProtocolError(_CUT_BODY)
            server = cluster.server
            lines = watch.take(cluster.now(), server.resource_version)
            if lines:
                await anyio.lowlevel.checkpoint()
                return b"".join([line.encode() for line in lines])
            if watch.closed:
                server.forget(watch)
                connection._watch = None
                self._finished = True
                await anyio.lowlevel.checkpoint()
                raise StopAsyncIteration
            wake = watch.next_deadline()
            until = min(deadline, math.inf if wake is None else wake)
            changed = cluster.changed()
            with anyio.CancelScope(deadline=until):
                await changed.wait()
            if not changed.is_set() and anyio.current_time() >= deadline and not watch.has_pending:
                raise httpcore.ReadTimeout("the simulated watch sent nothing in time")

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection._done(self._finished)
