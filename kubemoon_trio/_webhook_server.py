"""An HTTPS server for admission and conversion webhooks: the h11 loop over the backend's TLS.

Rules: every protocol decision (routing, 404/405/413/415/400/500, calling handlers,
encoding reviews) is made by :class:`kubemoon_core.webhooks.WebhookApp`; this module only moves
bytes between the backend's :class:`ByteStream` and h11, enforces limits and timeouts, and
logs. The certificate and its reloading are ``_cert_reload``'s, the metrics
``_webhook_metrics``', the garbage-collector pause around a large review
``kubemoon_io._gc``'s. Untrusted bytes cannot hold the loop: bodies are bounded per route
before they are buffered; a review of at most ``inline_body_size`` bytes (64 KiB, whose
worst case decodes in ~1-2 ms) for an async handler is decoded, handled and encoded on the
loop, without a thread hop; a plain handler's review (the user's synchronous code, which
may block) and any longer one run on worker threads (a bounded number at once). A route
whose reviews keep holding the loop longer than a budget (5 ms of CPU, or 0.5 s; three
strikes, forgiven slowly) moves to the worker threads for good, so a Lease renewal on the
same loop never waits long for reviews. Loop-specific code lives in
``_backend`` (``serve_tls``, ``run_in_thread``), so the module can be generated for other
loops.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import h11

from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import PendingAdmission, WebhookApp, WebhookReply
from kubemoon_io import CertificateSource, _tracing, raise_open_file_limit
from kubemoon_io._gc import without_gc

from ._backend import (
    TASK_STATUS_IGNORED,
    ByteStream,
    CapacityLimiter,
    TaskGroup,
    TaskStatus,
    current_time,
    run_in_thread,
    serve_tls,
)
from ._cert_reload import ReloadingCertificates, RequireClientCertificates
from ._connections import Connections, ConnectionSlot, ConnectionState
from ._webhook_metrics import metrics_for

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["DEFAULT_INLINE_BODY_SIZE", "WebhookServer"]

T = TypeVar("T")

logger = logging.getLogger("kubemoon.webhook")

# One read's worth of bytes; also bounds what h11 buffers beyond a complete head.
_READ_SIZE = 65536
# The longest request head accepted (request line and headers).
_MAX_HEAD_SIZE = 65536
# Reviews with a longer body are handled one at a time (on a thread of their own): a big
# review's decoded copies take tens of times its size in memory.
_LARGE_BODY = 256 * 1024
#: Reviews with a body at most this long are decoded, handled and encoded on the loop (no
#: thread hop), longer ones on worker threads. Measured (docs/webhooks.rst, "Where reviews
#: run"): the worst 64 KiB body (8,000 tiny keys, 21,000 empty objects) decodes in about
#: 1.3 ms with any backend, a 256 KiB one in 5 to 12 ms.
DEFAULT_INLINE_BODY_SIZE = 64 * 1024
# A review that held the loop longer than this (thread CPU time, so a preempted loop does
# not count) is a strike against its route: the loop is late by at most max_connections
# times the budget (64 x 5 ms) for a burst of reviews within it.
_INLINE_CPU_BUDGET = 0.005
# ... or longer than this in wall time: a handler that blocks (I/O, a sleep, a lock). Not
# lower: a worker thread decoding a large review in C holds the GIL for ~100 ms.
_INLINE_WALL_BUDGET = 0.5
# A route with this many strikes moves to worker threads for good; each review within the
# budget takes 1/16 of a strike away. One review over the budget on a busy machine (a
# hypervisor's steal time counts as CPU time) moves nothing; a handler over it on more than
# one review in ~16 moves after a few.
_STRIKES = 3.0
_STRIKE_DECAY = 1 / 16


class _Close(Exception):
    """End this connection (after an error answer, a timeout or the peer leaving)."""


class _Timeout(_Close):
    """The peer was too slow: answer 408 if a request had begun, then close."""


class _LogLimiter:
    """At most one record per key every ``interval`` seconds; counts what it held back.

    Keys are bounded (the oldest are forgotten), so a client choosing what goes into a key
    cannot grow memory. Locked because the blocking twin logs from many threads.
    """

    def __init__(self, interval: float = 60.0, keys: int = 256) -> None:
        self.interval = interval
        self._keys = keys
        self._seen: OrderedDict[tuple[str, ...], tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: tuple[str, ...], now: float) -> int | None:
        """None: hold this record back; else how many were held back since the last one."""
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.interval:
                self._seen[key] = (entry[0], entry[1] + 1)
                return None
            self._seen[key] = (now, 0)
            self._seen.move_to_end(key)
            while len(self._seen) > self._keys:
                self._seen.popitem(last=False)
            return entry[1] if entry is not None else 0


class _PortReporter:
    """Records the bound port on the server, then passes it on to the caller's status."""

    def __init__(self, server: WebhookServer, outer: TaskStatus[int]) -> None:
        self._server = server
        self._outer = outer

    def started(self, value: int) -> None:
        self._server._port = value
        self._outer.started(value)


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise LocalProtocolError(f"{name} must be a positive number, not {value!r}")


class WebhookServer:
    """Serves a :class:`~kubemoon_core.webhooks.WebhookApp` over HTTPS (TLS 1.2+) with h11.

    ``cert_file`` and ``key_file`` are PEM files (unloadable files raise
    :class:`~kubemoon_core.errors.LocalProtocolError`), reloaded when they change (checked at
    most every ``reload_interval`` seconds, on a new connection or request); after a
    reload, each kept-alive connection is closed after its next answer. Instead of files,
    ``certificate`` may be an in-memory source (a :class:`~kubemoon_io.ServingCertificate`
    its owner swaps). With
    ``client_ca_file`` (PEM) the server verifies client certificates against that CA (the
    API server's, see docs/webhooks.rst): a client presenting another certificate fails
    the TLS handshake, and one presenting none gets 403 on admission routes (conversion
    routes answer it: the API server sends no client certificate to those).

    Limits: at most ``max_connections`` connections; a new one beyond that closes the
    connection idle longest (else the oldest one still reading a request or sending an
    answer; connections whose handler runs are never closed, and when all are, the new one
    is refused).
    ``handshake_timeout`` bounds the TLS handshake, and at most ``max_handshakes`` are under
    way at once (a new one abandons the oldest); ``first_request_timeout`` bounds the wait for
    a new connection's first request byte, ``header_timeout`` the rest of a request head,
    ``request_timeout`` a whole request from its first byte to the end of its body (and
    the sending of an answer), ``idle_timeout`` a kept-alive connection between requests
    (longer than Go's 90 s idle pool, so the API server closes first and never posts into
    a connection being closed). Bodies are limited per route
    (:meth:`~kubemoon_core.webhooks.WebhookApp.body_limit`). A review for an async handler
    whose body is at most ``inline_body_size`` bytes (0: none) is decoded, handled and
    encoded on the loop; a
    route whose reviews keep taking more than 5 ms of CPU (or 0.5 s) there (three strikes,
    each review within the budget forgiving 1/16 of one) moves off it for good
    (:attr:`threaded_webhooks`, one WARNING). Other reviews are decoded, handled by
    synchronous handlers and encoded on at most ``handler_threads`` worker threads at
    once, and those over 256 KiB on one more, one at a time (async handlers are awaited on
    the loop). Metrics (controller-runtime's, and ``kubemoon_webhook_reviews_total`` by
    ``where`` each review was decoded: ``loop`` or ``worker_thread``) go to ``registry``
    (prometheus_client's default when None). Run with :meth:`serve`
    until cancelled; it first raises the soft open-file limit to the hard one.
    """

    def __init__(
        self,
        app: WebhookApp,
        *,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        certificate: CertificateSource | None = None,
        client_ca_file: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_connections: int = 64,
        max_handshakes: int = 64,
        first_request_timeout: float = 10.0,
        header_timeout: float = 10.0,
        request_timeout: float = 30.0,
        idle_timeout: float = 120.0,
        handshake_timeout: float = 10.0,
        reload_interval: float = 1.0,
        handler_threads: int = 4,
        inline_body_size: int = DEFAULT_INLINE_BODY_SIZE,
        registry: CollectorRegistry | None = None,
    ) -> None:
        _check_positive(
            first_request_timeout=first_request_timeout,
            header_timeout=header_timeout,
            request_timeout=request_timeout,
            idle_timeout=idle_timeout,
            handshake_timeout=handshake_timeout,
        )
        for name, count in (
            ("max_connections", max_connections),
            ("max_handshakes", max_handshakes),
            ("handler_threads", handler_threads),
        ):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise LocalProtocolError(f"{name} must be a positive integer, not {count!r}")
        if (
            isinstance(inline_body_size, bool)
            or not isinstance(inline_body_size, int)
            or inline_body_size < 0
        ):
            raise LocalProtocolError(
                f"inline_body_size must be an integer >= 0, not {inline_body_size!r}"
            )
        self.inline_body_size = inline_body_size
        self.app = app
        self.host = host
        self._requested_port = port
        self.first_request_timeout = first_request_timeout
        self.header_timeout = header_timeout
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.max_handshakes = max_handshakes
        ca_file = None if client_ca_file is None else os.fspath(client_ca_file)
        self._mutual = ca_file is not None
        self._certificates: CertificateSource
        if certificate is not None:  # held in memory and swapped by its owner
            self._certificates = (
                certificate if ca_file is None else RequireClientCertificates(certificate, ca_file)
            )
        elif cert_file is None or key_file is None:
            raise LocalProtocolError(
                "a webhook server needs cert_file and key_file, or certificate"
            )
        else:
            self._certificates = ReloadingCertificates(
                os.fspath(cert_file), os.fspath(key_file), reload_interval, ca_file
            )
        self._connections = Connections(max_connections)
        self._threads = CapacityLimiter(handler_threads)
        self._large_threads = CapacityLimiter(1)
        # Routes moved to worker threads for good (a review of theirs held the loop).
        self._threaded: set[str] = set()
        self._strikes: dict[str, float] = {}
        self._log_limiter = _LogLimiter()
        self._metrics = metrics_for(registry)
        self._port: int | None = None

    def __repr__(self) -> str:
        return f"<WebhookServer {self.host}:{self._port or self._requested_port}>"

    @property
    def serving(self) -> bool:
        """True once :meth:`serve` accepts connections."""
        return self._port is not None

    @property
    def port(self) -> int:
        """The bound port, once :meth:`serve` has started."""
        if self._port is None:
            raise LocalProtocolError("the webhook server is not serving yet")
        return self._port

    @property
    def url(self) -> str:
        """``https://host:port`` of the running server."""
        return f"https://{self.host}:{self.port}"

    @property
    def certificate_reloads(self) -> int:
        """How many times the certificate files were reloaded since start."""
        return self._certificates.reloads

    @property
    def threaded_webhooks(self) -> frozenset[str]:
        """Webhooks whose small reviews were moved off the loop (one held it too long)."""
        return frozenset(self._threaded)

    @property
    def max_connections(self) -> int:
        """The most connections served at once."""
        return self._connections.limit

    @property
    def open_connections(self) -> int:
        """Connections being served now (after their TLS handshake)."""
        return len(self._connections)

    @property
    def evicted_connections(self) -> int:
        """Connections closed since start to make room for a new one."""
        return self._connections.evicted

    @property
    def refused_connections(self) -> int:
        """New connections closed since start because every slot was answering a request."""
        return self._connections.refused

    async def serve(self, *, task_status: TaskStatus[int] = TASK_STATUS_IGNORED) -> None:
        """Accept and answer webhook requests until cancelled; reports the bound port."""

        files = raise_open_file_limit()
        logger.info(
            "webhook server starting",
            extra={"routes": sorted(self.app.routes), "open_file_limit": files},
        )
        try:
            await serve_tls(
                self._connection,
                self.host,
                self._requested_port,
                self._certificates.context,
                handshake_timeout=self.handshake_timeout,
                max_handshakes=self.max_handshakes,
                task_status=_PortReporter(self, task_status),
            )
        finally:
            self._port = None

    # -- one connection ------------------------------------------------------------------

    async def _connection(self, stream: ByteStream) -> None:
        async with TaskGroup() as group:
            evicted = self._connections.evicted
            slot = self._connections.admit(group)
            if slot is None:
                self._warn(
                    ("refused",),
                    "webhook connection refused: all %d connections are answering requests",
                    self._connections.limit,
                )
                return
            if self._connections.evicted != evicted:
                self._warn(
                    ("evicted",),
                    "webhook connection limit (%d) reached: closed the idlest connection",
                    self._connections.limit,
                )
            try:
                await self._serve(stream, slot)
            finally:
                self._connections.release(slot)

    async def _serve(self, stream: ByteStream, slot: ConnectionSlot) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_SIZE)
        # The certificate this connection was made with (the handshake just checked it).
        generation = self._certificates.reloads
        wait = self.first_request_timeout
        try:
            while True:
                await self._one_request(stream, conn, slot, generation, wait)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
                wait = self.idle_timeout
        except _Close:
            return
        except Exception:  # a bug here must cost one connection, never the server
            logger.exception("webhook connection failed")

    async def _receive(self, stream: ByteStream, conn: h11.Connection, deadline: float) -> None:
        """Feed the next bytes to h11; a peer that left mid-request raises ``_Close``."""
        try:
            data = await stream.receive_some(_READ_SIZE, deadline)
        except TimeoutError as exc:
            raise _Timeout from exc
        except ConnectionError as exc:
            raise _Close from exc
        if not data and conn.their_state is not h11.IDLE:
            raise _Close  # gone halfway through a request: nobody is left to answer
        conn.receive_data(data)

    async def _one_request(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        slot: ConnectionSlot,
        generation: int,
        wait: float,
    ) -> None:
        slot.set(ConnectionState.IDLE)
        started = None
        deadline = current_time() + wait
        try:
            # The head: wait idle for its first byte, then header_timeout for the rest.
            while True:
                event = conn.next_event()
                if isinstance(event, h11.Request):
                    break
                if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                    raise _Close
                assert event is h11.NEED_DATA
                if started is None and conn.trailing_data[0]:
                    started = current_time()
                    deadline = started + self.header_timeout
                    slot.set(ConnectionState.READING)
                try:
                    await self._receive(stream, conn, deadline)
                except _Timeout:
                    if started is not None:
                        reply = self._timeout_reply()
                        self._log("", "", reply, current_time() - started)
                        await self._send(stream, conn, reply, close=True)
                    raise
                if started is None:
                    started = current_time()
                    deadline = started + self.header_timeout
                    slot.set(ConnectionState.READING)
        except h11.RemoteProtocolError as exc:
            await self._send_bad_request(stream, conn, str(exc))
            raise _Close from exc
        if started is None:  # a pipelined request, already buffered whole
            started = current_time()
            slot.set(ConnectionState.READING)
        await self._answer(stream, conn, slot, event, started=started, generation=generation)

    async def _answer(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        slot: ConnectionSlot,
        request: h11.Request,
        *,
        started: float,
        generation: int,
    ) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        headers = [
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers
        ]
        certified = stream.peer_certified() if self._mutual else None
        reply = self.app.precheck(method, target, headers, client_certified=certified)
        webhook = self.app.webhook_name(target)
        in_flight, latency = self._metrics.children(webhook)
        in_flight.inc()
        review = _tracing.review_span(method, target, headers)
        if review.ignored is not None:  # a fixed phrase: never the caller's text
            self._warn(("tracestate",), "webhook request: %s ignored", review.ignored)
        try:
            if reply is None:
                reply = await self._read_and_handle(
                    stream,
                    conn,
                    slot,
                    webhook=webhook,
                    method=method,
                    target=target,
                    headers=headers,
                    started=started,
                )
            slot.set(ConnectionState.SENDING)
            # After a certificate reload, kept-alive connections end after their current
            # answer ("Connection: close" is safe, unlike closing an idle connection), so
            # clients move to the new certificate promptly.
            rotated = self._certificates.check() != generation
            await self._send(stream, conn, reply, close=rotated or conn.their_state is not h11.DONE)
        finally:
            in_flight.dec()
            elapsed = current_time() - started
            latency.observe(elapsed)
            review.end(reply)
            if reply is not None:
                self._metrics.count(webhook, reply.status)
                self._log(method, target, reply, elapsed)

    async def _read_and_handle(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        slot: ConnectionSlot,
        *,
        webhook: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        started: float,
    ) -> WebhookReply:
        deadline = started + self.request_timeout
        limit = self.app.body_limit(target)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return self._bad_request(str(exc))
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    return self.app.too_large(target)  # the rest is never read
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                slot.set(ConnectionState.BUSY)
                body = b"".join(chunks)
                chunks.clear()
                return await self._handle(webhook, method, target, headers, body)
            elif event is h11.NEED_DATA:
                try:
                    await self._receive(stream, conn, deadline)
                except _Timeout:
                    return self._timeout_reply()  # a peer that left raises _Close instead
            else:  # ConnectionClosed mid-body: nobody is left to answer
                raise _Close

    async def _handle(
        self,
        webhook: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> WebhookReply:
        """Decode, call the handler and encode: on the loop for a small review of a route
        that stays within the budget, else on a worker thread; await an async verdict."""
        span = _tracing.current_span()

        def dispatch() -> WebhookReply | PendingAdmission:
            _tracing.note_review(body, span)  # parses the body: bounded like the rest
            return self.app.dispatch(method, target, headers, body, prechecked=True)

        large = len(body) > _LARGE_BODY
        # Only an async handler's review stays on the loop: a plain handler is code that may
        # block (a network call), and the loop also renews the Lease.
        inline = (
            len(body) <= self.inline_body_size
            and webhook not in self._threaded
            and self.app.handled_without_blocking(target)
        )
        self._metrics.placed(webhook, inline)
        if inline:
            result = self._on_the_loop(webhook, dispatch)
        else:
            threads = self._large_threads if large else self._threads
            result = await run_in_thread(without_gc(dispatch) if large else dispatch, threads)
        if not isinstance(result, PendingAdmission):
            return result
        try:
            verdict = await result.verdict
        except Exception as exc:  # a handler's failure is a failed call, never a lost server
            return result.failed(exc)
        reply = functools.partial(result.reply, verdict)
        if inline and webhook not in self._threaded:
            return self._on_the_loop(webhook, reply, forgive=False)  # the same review
        threads = self._large_threads if large else self._threads
        return await run_in_thread(without_gc(reply) if large else reply, threads)

    def _on_the_loop(self, webhook: str, fn: Callable[[], T], *, forgive: bool = True) -> T:
        """``fn()`` right here (no thread hop); a route whose calls keep taking more than
        the budget (CPU, or wall time: a handler that blocks) moves to the worker threads."""
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return fn()
        finally:
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            strikes = self._strikes.get(webhook, 0.0)
            if cpu > _INLINE_CPU_BUDGET or wall > _INLINE_WALL_BUDGET:
                strikes += 1.0
                if strikes >= _STRIKES:
                    self._move_to_threads(webhook, cpu, wall)
                self._strikes[webhook] = strikes  # route names only: bounded by the routes
            elif strikes and forgive:  # once per review, not per part of it
                self._strikes[webhook] = max(0.0, strikes - _STRIKE_DECAY)

    def _move_to_threads(self, webhook: str, cpu: float, wall: float) -> None:
        if webhook in self._threaded:
            return
        self._threaded.add(webhook)  # route names only: bounded by the app's routes
        logger.warning(
            "webhook %s: a review took %.1f ms of CPU (%.1f ms) on the event loop; "
            "its reviews now run on worker threads",
            webhook or "-",
            cpu * 1000,
            wall * 1000,
            extra={"webhook": webhook},
        )

    # -- answers ---------------------------------------------------------------------------

    def _bad_request(self, message: str) -> WebhookReply:
        return _plain(400, f"malformed HTTP request: {message}")

    def _timeout_reply(self) -> WebhookReply:
        return _plain(408, "the request did not arrive in time")

    async def _send_bad_request(
        self, stream: ByteStream, conn: h11.Connection, message: str
    ) -> None:
        if conn.our_state is h11.SEND_RESPONSE or conn.our_state is h11.IDLE:
            reply = self._bad_request(message)
            self._log("", "", reply, 0.0)
            await self._send(stream, conn, reply, close=True)

    async def _send(
        self, stream: ByteStream, conn: h11.Connection, reply: WebhookReply, *, close: bool
    ) -> None:
        headers = list(reply.headers)
        if close:
            headers.append(("Connection", "close"))
        deadline = current_time() + self.request_timeout
        try:
            data = conn.send(h11.Response(status_code=reply.status, headers=headers))
            data = (data or b"") + (conn.send(h11.Data(data=reply.body)) or b"")
            data += conn.send(h11.EndOfMessage()) or b""
            await stream.send_all(data, deadline)
        except (h11.LocalProtocolError, TimeoutError, ConnectionError) as exc:
            raise _Close from exc
        if close:
            raise _Close

    # -- logs --------------------------------------------------------------------------------

    def _warn(self, key: tuple[str, ...], message: str, *args: object) -> None:
        held = self._log_limiter.allow(key, current_time())
        if held is None:
            return
        suffix = f" ({held} similar messages held back)" if held else ""
        logger.warning(message + suffix, *args)

    def _log(self, method: str, target: str, reply: WebhookReply, elapsed: float) -> None:
        """Answered reviews at DEBUG; client errors (4xx) at WARNING and failed handlers
        (5xx) at ERROR with the traceback, both at most once a minute per webhook and kind."""
        if reply.status < 400:
            level = logging.DEBUG
            held: int | None = 0
        else:
            error = reply.error
            level = logging.ERROR if reply.status >= 500 else logging.WARNING
            kind = type(error).__name__ if error is not None else str(reply.status)
            # Never the path of an unknown route: a client choosing paths would choose keys.
            key = (reply.webhook or "-", kind)
            held = self._log_limiter.allow(key, current_time())
        if held is None or not logger.isEnabledFor(level):
            return
        error = reply.error
        logger.log(
            level,
            "%s %s -> %d %s%s%s",
            method or "-",
            _path(target) or "-",
            reply.status,
            reply.outcome,
            f": {reply.message}" if reply.message else "",
            f" ({held} similar answers not logged)" if held else "",
            exc_info=(type(error), error, error.__traceback__) if error is not None else None,
            extra={
                "webhook": reply.webhook,
                "uid": reply.uid,
                "status": reply.status,
                "outcome": reply.outcome,
                "duration_seconds": round(elapsed, 6),
            },
        )


def _path(target: str) -> str:
    return target.split("?", 1)[0]


def _plain(status: int, message: str) -> WebhookReply:
    body = message.encode()
    headers = (("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))))
    return WebhookReply(status, headers, body, outcome="error", message=message)
