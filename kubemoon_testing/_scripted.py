"""A scripted HTTP/1.1 server (h11 over trio, TLS with throwaway certificates) for fault tests.

Rules: the server answers each request with the next scripted :class:`Reply` (or with its
``handler``), exactly as told: chunk boundaries, pauses, a cut at body byte N (mid-chunk,
with or without TLS ``close_notify``), a stream that never ends. It records every request
with its headers and the connection it came on, and counts connections opened and closed,
so tests can assert where credentials went and that nothing leaked. It listens on
127.0.0.1 only and runs in a trio task (``async with``) or in a thread of its own
(``with`` / :meth:`ScriptedServer.start_in_thread`) for blocking tests.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11
import trio
import trustme

from kubemoon_core._client_config import ClientConfig

__all__ = [
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "watch_lines",
]

Handler = Callable[["RecordedRequest"], "Reply"]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server saw it. Header names are lower-cased."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    connection: int
    at: float
    peer_certificate_subject: str | None = None

    @property
    def path(self) -> str:
        """The path, without the query."""
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        """The query parameters (the last value of each name)."""
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))

    def header(self, name: str) -> str | None:
        """The value of a header, or None."""
        lowered = name.lower()
        for key, value in self.headers:
            if key == lowered:
                return value
        return None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """What to answer to one request, and how.

    - ``body`` is sent with ``Content-Length`` unless ``chunks`` is given: then the body is
      sent with chunked transfer encoding, one HTTP chunk per bytes item, exactly; a float
      item is a pause of that many seconds.
    - ``delay`` pauses before the response head.
    - ``drop_after`` cuts the connection once that many body bytes are out, in the middle
      of a chunk (its size line promises more); ``close_notify=False`` skips the TLS
      ``close_notify`` on that cut (and on ``close``).
    - ``stall`` never ends the body: the server waits, silent, until the client leaves.
    - ``close`` closes the connection after the response.
    - ``trickle`` sends the response head one byte at a time, pausing that many seconds
      before each byte (a head that never stalls long enough for a read timeout).
    """

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    chunks: tuple[bytes | float, ...] | None = None
    delay: float = 0.0
    drop_after: int | None = None
    stall: bool = False
    close_notify: bool = True
    close: bool = False
    trickle: float = 0.0

    @classmethod
    def json(
        cls, document: Any, status: int = 200, headers: Iterable[tuple[str, str]] = ()
    ) -> Reply:
        """A JSON document answer."""
        return cls(
            status,
            json.dumps(document).encode(),
            (("Content-Type", "application/json"), *headers),
        )

    @classmethod
    def status_error(
        cls,
        code: int,
        reason: str,
        message: str = "",
        *,
        retry_after: int | None = None,
    ) -> Reply:
        """A Kubernetes ``Status`` failure (with a ``Retry-After`` header when given)."""
        headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
        document = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message or reason,
        }
        return cls.json(document, code, headers)

    @classmethod
    def watch(
        cls,
        events: Iterable[tuple[str, Mapping[str, Any]]],
        *,
        chunk_size: int | None = None,
        drop_after: int | None = None,
        stall: bool = False,
        close_notify: bool = True,
    ) -> Reply:
        """A WATCH response: one JSON line per ``(type, object)``, chunked.

        ``chunk_size`` splits the stream into chunks of that many bytes regardless of line
        boundaries (default: one chunk per event).
        """
        lines = watch_lines(events)
        if chunk_size is None:
            chunks: tuple[bytes | float, ...] = tuple(lines)
        else:
            data = b"".join(lines)
            chunks = tuple(data[i : i + chunk_size] for i in range(0, len(data), chunk_size))
        return cls(
            200,
            headers=(("Content-Type", "application/json"),),
            chunks=chunks,
            drop_after=drop_after,
            stall=stall,
            close_notify=close_notify,
        )


def watch_lines(events: Iterable[tuple[str, Mapping[str, Any]]]) -> list[bytes]:
    """The newline-delimited JSON lines of watch events."""
    return [
        json.dumps({"type": kind, "object": dict(obj)}, separators=(",", ":")).encode() + b"\n"
        for kind, obj in events
    ]


_KEEP, _CLOSE, _CUT = "keep", "close", "cut"


@dataclass
class _Counters:
    opened: int = 0
    closed: int = 0
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))


class ScriptedServer:
    """An HTTP/1.1 server on 127.0.0.1 that plays a script of :class:`Reply` values.

    Replies queued with :meth:`add` are used first, in order; when the queue is empty,
    ``handler(request)`` answers; with neither, a 500 Status says the request was not
    scripted. ``tls`` (default) serves HTTPS with a certificate for ``hostnames`` from a
    throwaway CA (:attr:`ca_pem`); ``client_ca`` requires client certificates from it.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        tls: bool = True,
        hostnames: Sequence[str] = ("127.0.0.1", "localhost"),
        client_ca: trustme.CA | None = None,
    ) -> None:
        self.handler = handler
        self.tls = tls
        self._script: collections.deque[Reply] = collections.deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._counters = _Counters()
        self.port = 0
        self.ca: trustme.CA | None = None
        self._ssl_context: ssl.SSLContext | None = None
        if tls:
            self.ca = trustme.CA()
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ca.issue_cert(*hostnames).configure_cert(context)
            context.set_alpn_protocols(["http/1.1"])
            if client_ca is not None:
                context.verify_mode = ssl.CERT_REQUIRED
                client_ca.configure_trust(context)
            self._ssl_context = context
        self._exit_stack: AsyncExitStack | None = None
        self._thread: threading.Thread | None = None
        self._thread_token: trio.lowlevel.TrioToken | None = None
        self._thread_scope: trio.CancelScope | None = None
        self._thread_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<ScriptedServer {self.url}>"

    # -- the script --------------------------------------------------------------------------

    def add(self, *replies: Reply) -> ScriptedServer:
        """Queue replies for the next requests, in order; returns self."""
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """How many queued replies were not used yet."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def connections_opened(self) -> int:
        """How many connections were accepted."""
        return self._counters.opened

    @property
    def open_connections(self) -> int:
        """How many connections are open right now (from the server's side)."""
        return self._counters.opened - self._counters.closed

    @property
    def url(self) -> str:
        """The base URL, ``https://127.0.0.1:PORT``."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The PEM certificate of the throwaway CA that signed the server certificate."""
        assert self.ca is not None, "a plain-HTTP server has no CA"
        return self.ca.cert_pem.bytes()

    def client_config(self, **overrides: Any) -> ClientConfig:
        """A ClientConfig for this server that trusts its CA; ``overrides`` set more fields."""
        settings: dict[str, Any] = {"server": self.url, "source": "ScriptedServer"}
        if self.tls:
            settings["ca_data"] = self.ca_pem
        settings.update(overrides)
        return ClientConfig(**settings)

    def kubeconfig(self, user: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A kubeconfig document (parsed YAML) for this server with one user."""
        cluster: dict[str, Any] = {"server": self.url}
        if self.tls:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "scripted", "cluster": cluster}],
            "users": [{"name": "user", "user": dict(user or {})}],
            "contexts": [{"name": "scripted", "context": {"cluster": "scripted", "user": "user"}}],
            "current-context": "scripted",
        }

    def _reply_for(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            if self._script:
                return self._script.popleft()
        if self.handler is not None:
            return self.handler(request)
        return Reply.status_error(
            500, "InternalError", f"not scripted: {request.method} {request.target}"
        )

    # -- waiting -----------------------------------------------------------------------------

    async def wait(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait (in trio) until ``predicate()`` holds; fail after ``timeout`` seconds."""
        with trio.fail_after(timeout):
            while not predicate():
                await trio.sleep(0.005)

    def wait_blocking(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait (blocking) until ``predicate()`` holds; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("the condition did not hold in time")
            time.sleep(0.005)

    # -- serving -----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 and serve until cancelled; ``task_status`` gets the port."""
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            try:
                await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)
            finally:
                for listener in listeners:
                    await listener.aclose()

    async def __aenter__(self) -> ScriptedServer:
        stack = AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        await nursery.start(self.serve)
        self._exit_stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._exit_stack is not None
        stack, self._exit_stack = self._exit_stack, None
        await stack.aclose()

    def start_in_thread(self) -> ScriptedServer:
        """Serve from a background thread (for blocking tests); returns self once listening."""
        ready = threading.Event()

        async def main() -> None:
            self._thread_token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._thread_scope = scope
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.serve)
                    ready.set()

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported by start_in_thread / stop
                self._thread_error = exc
            finally:
                ready.set()

        self._thread = threading.Thread(target=run, name="ScriptedServer", daemon=True)
        self._thread.start()
        ready.wait(30)
        if self._thread_error is not None:
            raise RuntimeError("the scripted server failed to start") from self._thread_error
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        if self._thread is None:
            return
        if self._thread_token is not None and self._thread_scope is not None:
            scope = self._thread_scope
            with suppress(trio.RunFinishedError):
                self._thread_token.run_sync_soon(scope.cancel)
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start_in_thread()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- one connection ----------------------------------------------------------------------

    async def _connection(self, tcp: trio.SocketStream) -> None:
        connection_id = next(self._counters.ids)
        self._counters.opened += 1
        stream: trio.abc.Stream = tcp
        outcome = _CLOSE
        notify = True
        try:
            subject: str | None = None
            if self._ssl_context is not None:
                tls = trio.SSLStream(tcp, self._ssl_context, server_side=True)
                try:
                    await tls.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the client refused our certificate (or left)
                stream = tls
                subject = _subject(tls.getpeercert())
            conn = h11.Connection(h11.SERVER)
            while True:
                request = await self._read_request(stream, conn, connection_id, subject)
                if request is None:
                    return
                reply = self._reply_for(request)
                outcome = await self._respond(stream, conn, reply)
                notify = reply.close_notify
                if outcome != _KEEP or conn.our_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await _close(tcp, stream, notify)
            self._counters.closed += 1

    async def _read_request(
        self,
        stream: trio.abc.Stream,
        conn: h11.Connection,
        connection_id: int,
        subject: str | None,
    ) -> RecordedRequest | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return RecordedRequest(
                    method=head.method.decode(),
                    target=head.target.decode(),
                    headers=tuple(
                        (name.decode().lower(), value.decode("latin-1"))
                        for name, value in head.headers
                    ),
                    body=bytes(body),
                    connection=connection_id,
                    at=time.monotonic(),
                    peer_certificate_subject=subject,
                )
            else:  # ConnectionClosed (or PAUSED, which a server reading requests never sees)
                return None

    async def _respond(self, stream: trio.abc.Stream, conn: h11.Connection, reply: Reply) -> str:
        if reply.delay:
            await trio.sleep(reply.delay)
        headers = [(name.encode(), value.encode()) for name, value in reply.headers]
        chunked = reply.chunks is not None
        if chunked:
            headers.append((b"Transfer-Encoding", b"chunked"))
        else:
            headers.append((b"Content-Length", str(len(reply.body)).encode()))
        if reply.close:
            headers.append((b"Connection", b"close"))
        head = conn.send(h11.Response(status_code=reply.status, headers=headers)) or b""
        if reply.trickle:
            for i in range(len(head)):
                await trio.sleep(reply.trickle)
                await stream.send_all(head[i : i + 1])
        else:
            await stream.send_all(head)
        pieces: Sequence[bytes | float] = reply.chunks if reply.chunks is not None else [reply.body]
        sent = 0
        for piece in pieces:
            if isinstance(piece, float | int) and not isinstance(piece, bool):
                await trio.sleep(float(piece))
                continue
            assert isinstance(piece, bytes)
            if not piece:
                continue
            if reply.drop_after is not None and sent + len(piece) > reply.drop_after:
                keep = reply.drop_after - sent
                if keep > 0:
                    # The size line promises the whole chunk; only part of it ever comes.
                    framed = f"{len(piece):x}\r\n".encode() if chunked else b""
                    await stream.send_all(framed + piece[:keep])
                return _CUT
            await stream.send_all(conn.send(h11.Data(data=piece)) or b"")
            sent += len(piece)
        if reply.drop_after is not None and sent >= reply.drop_after:
            return _CUT
        if reply.stall:
            while await stream.receive_some(65536):
                pass
            return _CUT
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
        return _CLOSE if reply.close or conn.our_state is h11.MUST_CLOSE else _KEEP


def _subject(certificate: Mapping[str, Any] | None) -> str | None:
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    names = certificate.get("subjectAltName", ())
    return str(names[0][1]) if names else "unknown"


async def _close(tcp: trio.SocketStream, stream: trio.abc.Stream, notify: bool) -> None:
    try:
        if notify and stream is not tcp:
            with trio.move_on_after(1):
                await stream.aclose()
        await tcp.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await tcp.aclose()
