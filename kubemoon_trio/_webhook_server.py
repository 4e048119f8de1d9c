"""An HTTPS server for admission and conversion webhooks: h11 over the backend's TLS.

Rules: every protocol decision (routing, 404/405/413/415/400/500, calling handlers,
encoding reviews) is made by :class:`kubemoon_core.WebhookApp`; this module only moves
bytes between the backend's :class:`ByteStream` and h11, enforces limits and timeouts,
reloads the certificate when its files change, and records logs and metrics. Untrusted
bytes stay off the loop: bodies are bounded per route before they are buffered, and
decoding, synchronous handlers and encoding run on worker threads (a bounded number at
once), so a Lease renewal on the same loop never waits for a review. Loop-specific code
lives in ``_backend`` (``serve_tls``, ``run_in_thread``), so the module can be generated
for other loops.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import os
import ssl
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import h11

from kubemoon_core import LocalProtocolError, PendingAdmission, WebhookApp, WebhookReply
from kubemoon_io import CertificateSource, _tracing, load_cert_chain, raise_open_file_limit

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
from ._connections import Connections, ConnectionSlot, ConnectionState

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["WebhookServer"]

logger = logging.getLogger("kubemoon.webhook")

T = TypeVar("T")

# One read's worth of bytes; also bounds what h11 buffers beyond a complete head.
_READ_SIZE = 65536
# The longest request head accepted (request line and headers).
_MAX_HEAD_SIZE = 65536
# Reviews with a longer body are handled one at a time (on a thread of their own): a big
# review's decoded copies take tens of times its size in memory.
_LARGE_BODY = 256 * 1024


@dataclass(frozen=True, slots=True)
class _FileStamp:
    mtime_ns: int
    size: int
    inode: int


def _stamp(path: str) -> _FileStamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _FileStamp(st.st_mtime_ns, st.st_size, st.st_ino)


class _Certificates:
    """The serving certificate, reloaded when its files change (checked per connection).

    Secrets mounted by the kubelet and written by cert-manager change in place: the files
    are compared by mtime, size and inode at most every ``interval`` seconds, and a new
    context is built when either changed. A half-written pair (cert and key that do not
    match yet) keeps the previous context and is tried again on the next check. With a
    ``client_ca_file`` every client must present a certificate that CA signed (mutual
    TLS); that file is watched as well.
    """

    def __init__(
        self, cert_file: str, key_file: str, interval: float, client_ca_file: str | None = None
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.interval = interval
        self._stamps = self._stamp_files()
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            raise LocalProtocolError(
                f"cannot load the webhook certificate {cert_file} and key {key_file}"
                f"{f' or the client CA {client_ca_file}' if client_ca_file else ''}: {exc}"
            ) from exc
        # Constructed outside the event loop too, so no clock yet: the first check is free.
        self._checked_at = -math.inf
        self.reloads = 0

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        load_cert_chain(context, self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL  # required per route: see precheck
        return context

    def _stamp_files(self) -> tuple[_FileStamp | None, ...]:
        files = [self.cert_file, self.key_file]
        if self.client_ca_file is not None:
            files.append(self.client_ca_file)
        return tuple(_stamp(name) for name in files)

    def context(self) -> ssl.SSLContext:
        """The context for a new handshake (after checking the files, if due)."""
        self.check()
        return self._context

    def check(self) -> int:
        """Reload the files if they changed (at most every ``interval`` s); the reload count."""
        now = current_time()
        if now - self._checked_at < self.interval:
            return self.reloads
        self._checked_at = now
        stamps = self._stamp_files()
        if stamps != self._stamps:
            try:
                self._context = self._load()
            except (OSError, ssl.SSLError) as exc:
                logger.warning(
                    "webhook certificate reload failed, keeping the previous one: %s",
                    exc,
                    extra={"cert_file": self.cert_file, "key_file": self.key_file},
                )
            else:
                self._stamps = stamps
                self.reloads += 1
                logger.info(
                    "webhook certificate reloaded from %s",
                    self.cert_file,
                    extra={"cert_file": self.cert_file, "key_file": self.key_file},
                )
        return self.reloads


class _RequireClientCertificates:
    """An in-memory certificate source whose contexts verify a client certificate against
    ``ca_file`` (mutual TLS), as ``client_ca_file`` does for files."""

    def __init__(self, inner: CertificateSource, ca_file: str) -> None:
        self._inner = inner
        self._ca_file = ca_file
        self._prepared: ssl.SSLContext | None = None
        try:
            with open(ca_file, "rb"):
                pass
        except OSError as exc:
            raise LocalProtocolError(f"cannot read the client CA {ca_file}: {exc}") from exc

    @property
    def reloads(self) -> int:
        return self._inner.reloads

    def check(self) -> int:
        return self._inner.check()

    def context(self) -> ssl.SSLContext:
        context = self._inner.context()
        if context is not self._prepared:  # a new certificate: a new context to prepare once
            context.load_verify_locations(cafile=self._ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL  # required per route: see precheck
            self._prepared = context
        return context


class _Metrics:
    """controller-runtime's webhook metrics, once per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415 - optional

        self.requests = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )
        # Labelled children, looked up once: the label lookup costs more than the update.
        self._children: dict[str, tuple[Any, Any]] = {}
        self._counters: dict[tuple[str, int], Any] = {}

    def children(self, webhook: str) -> tuple[Any, Any]:
        """The in-flight gauge and the latency histogram of one webhook."""
        found = self._children.get(webhook)
        if found is None:
            found = (self.in_flight.labels(webhook), self.latency.labels(webhook))
            self._children[webhook] = found
        return found

    def count(self, webhook: str, status: int) -> None:
        """Count one answered request."""
        counter = self._counters.get((webhook, status))
        if counter is None:
            counter = self._counters[webhook, status] = self.requests.labels(webhook, str(status))
        counter.inc()


_METRICS: weakref.WeakKeyDictionary[Any, _Metrics] = weakref.WeakKeyDictionary()


def _metrics_for(registry: CollectorRegistry | None) -> _Metrics:
    if registry is None:
        from prometheus_client import REGISTRY  # noqa: PLC0415 - optional dependency

        registry = REGISTRY
    metrics = _METRICS.get(registry)
    if metrics is None:
        metrics = _METRICS[registry] = _Metrics(registry)
    return metrics


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


def _without_gc(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` with the cyclic garbage collector paused while it runs (on a worker thread).

    A review is acyclic JSON, so the collector finds nothing in it; yet decoding a big one
    allocates enough containers to trigger full collections, and a collection holds the
    GIL for every thread -- the event loop's too. Paused for a large review, which runs
    one at a time; reference counting still frees everything as usual.
    """

    def paused() -> T:
        global _gc_pauses, _gc_was_enabled
        with _gc_lock:
            if _gc_pauses == 0:
                _gc_was_enabled = gc.isenabled()
                gc.disable()
            _gc_pauses += 1
        try:
            return fn()
        finally:
            with _gc_lock:
                _gc_pauses -= 1
                resume = _gc_pauses == 0 and _gc_was_enabled
                if resume:
                    gc.enable()
            if resume:
                # The review is garbage by now, so a full collection is short; it reclaims
                # the cycles that the rest of the process made meanwhile.
                gc.collect()

    return paused


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
    """Serves a :class:`~kubemoon_core.WebhookApp` over HTTPS (TLS 1.2+) with h11.

    ``cert_file`` and ``key_file`` are PEM files (unloadable files raise
    :class:`~kubemoon_core.LocalProtocolError`), reloaded when they change (checked at
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
    (:meth:`~kubemoon_core.WebhookApp.body_limit`). Decoding, synchronous handlers and
    encoding run on at most ``handler_threads`` worker threads at once, and reviews over
    256 KiB on one more, one at a time (async handlers are awaited on the loop). Metrics
    go to ``registry`` (prometheus_client's default when None). Run with :meth:`serve`
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
                certificate if ca_file is None else _RequireClientCertificates(certificate, ca_file)
            )
        elif cert_file is None or key_file is None:
            raise LocalProtocolError(
                "a webhook server needs cert_file and key_file, or certificate"
            )
        else:
            self._certificates = _Certificates(
                os.fspath(cert_file), os.fspath(key_file), reload_interval, ca_file
            )
        self._connections = Connections(max_connections)
        self._threads = CapacityLimiter(handler_threads)
        self._large_threads = CapacityLimiter(1)
        self._log_limiter = _LogLimiter()
        self._metrics = _metrics_for(registry)
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
                return await self._handle(method, target, headers, body)
            elif event is h11.NEED_DATA:
                try:
                    await self._receive(stream, conn, deadline)
                except _Timeout:
                    return self._timeout_reply()  # a peer that left raises _Close instead
            else:  # ConnectionClosed mid-body: nobody is left to answer
                raise _Close

    async def _handle(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> WebhookReply:
        """Decode, call the handler and encode on a worker thread; await an async verdict."""
        span = _tracing.current_span()

        def dispatch() -> WebhookReply | PendingAdmission:
            _tracing.note_review(body, span)  # parses the body: off the loop, like the rest
            return self.app.dispatch(method, target, headers, body, prechecked=True)

        large = len(body) > _LARGE_BODY
        threads = self._large_threads if large else self._threads
        result = await run_in_thread(_without_gc(dispatch) if large else dispatch, threads)
        if not isinstance(result, PendingAdmission):
            return result
        try:
            verdict = await result.verdict
        except Exception as exc:  # a handler's failure is a failed call, never a lost server
            return result.failed(exc)
        reply = functools.partial(result.reply, verdict)
        return await run_in_thread(_without_gc(reply) if large else reply, threads)

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
