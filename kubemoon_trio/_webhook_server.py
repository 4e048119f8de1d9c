"""An HTTPS server for admission and conversion webhooks: h11 over the backend's TLS.

Rules: every protocol decision (routing, 404/405/413/415/400, calling handlers, encoding
reviews) is made by :class:`kubemoon_core.WebhookApp`; this module only moves bytes
between the backend's :class:`ByteStream` and h11, enforces timeouts, reloads the
certificate when its files change, and records logs and metrics. Loop-specific code lives
in ``_backend`` (``serve_tls``), so the module can be generated for other loops.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h11

from kubemoon_core import LocalProtocolError, PendingAdmission, WebhookApp, WebhookReply
from kubemoon_io import CertificateSource, _tracing

from ._backend import (
    TASK_STATUS_IGNORED,
    ByteStream,
    TaskStatus,
    current_time,
    serve_tls,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["WebhookServer"]

logger = logging.getLogger("kubemoon.webhook")

# One read's worth of bytes; also bounds what h11 buffers beyond a complete head.
_READ_SIZE = 65536
# The longest request head accepted (request line and headers).
_MAX_HEAD_SIZE = 65536


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
    match yet) keeps the previous context and is tried again on the next check.
    """

    def __init__(self, cert_file: str, key_file: str, interval: float) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self._stamps = (_stamp(cert_file), _stamp(key_file))
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            raise LocalProtocolError(
                f"cannot load the webhook certificate {cert_file} and key {key_file}: {exc}"
            ) from exc
        # Constructed outside the event loop too, so no clock yet: the first check is free.
        self._checked_at = -math.inf
        self.reloads = 0

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

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
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
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


class _Close(Exception):
    """End this connection (after an error answer, a timeout or the peer leaving)."""


class _Timeout(_Close):
    """The peer was too slow: answer 408 if a request had begun, then close."""


class _PortReporter:
    """Records the bound port on the server, then passes it on to the caller's status."""

    def __init__(self, server: WebhookServer, outer: TaskStatus[int]) -> None:
        self._server = server
        self._outer = outer

    def started(self, value: int) -> None:
        self._server._port = value
        self._outer.started(value)


class WebhookServer:
    """Serves a :class:`~kubemoon_core.WebhookApp` over HTTPS (TLS 1.2+) with h11.

    ``cert_file`` and ``key_file`` are PEM files (unloadable files raise
    :class:`~kubemoon_core.LocalProtocolError`), reloaded when they change (checked at
    most every ``reload_interval`` seconds, on a new connection or request); after a
    reload, each kept-alive connection is closed after its next answer. ``header_timeout``
    bounds the wait for a request head once its first byte arrived, ``request_timeout``
    the whole request from its first byte to the end of its body, ``idle_timeout`` a
    kept-alive connection without a request (longer than Go's 90 s idle pool, so the API
    server closes first and never posts into a connection being closed). Metrics go to
    ``registry`` (prometheus_client's default when None). Run with :meth:`serve` until
    cancelled. Instead of files, ``certificate`` may be an in-memory source (a
    :class:`~kubemoon_io.ServingCertificate` its owner swaps).
    """

    def __init__(
        self,
        app: WebhookApp,
        *,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        certificate: CertificateSource | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        header_timeout: float = 10.0,
        request_timeout: float = 30.0,
        idle_timeout: float = 120.0,
        handshake_timeout: float = 10.0,
        reload_interval: float = 1.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self._requested_port = port
        self.header_timeout = header_timeout
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self._certificates: CertificateSource
        if certificate is not None:  # held in memory and swapped by its owner
            self._certificates = certificate
        elif cert_file is None or key_file is None:
            raise LocalProtocolError(
                "a webhook server needs cert_file and key_file, or certificate"
            )
        else:
            self._certificates = _Certificates(
                os.fspath(cert_file), os.fspath(key_file), reload_interval
            )
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

    async def serve(self, *, task_status: TaskStatus[int] = TASK_STATUS_IGNORED) -> None:
        """Accept and answer webhook requests until cancelled; reports the bound port."""

        logger.info("webhook server starting", extra={"routes": sorted(self.app.routes)})
        try:
            await serve_tls(
                self._connection,
                self.host,
                self._requested_port,
                self._certificates.context,
                handshake_timeout=self.handshake_timeout,
                task_status=_PortReporter(self, task_status),
            )
        finally:
            self._port = None

    # -- one connection ------------------------------------------------------------------

    async def _connection(self, stream: ByteStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_SIZE)
        # The certificate this connection was made with (the handshake just checked it).
        generation = self._certificates.reloads
        try:
            while True:
                await self._one_request(stream, conn, generation)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
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

    async def _one_request(self, stream: ByteStream, conn: h11.Connection, generation: int) -> None:
        started = None
        deadline = current_time() + self.idle_timeout
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
                try:
                    await self._receive(stream, conn, deadline)
                except _Timeout:
                    if started is not None:
                        await self._send(stream, conn, self._timeout_reply(), close=True)
                    raise
                if started is None:
                    started = current_time()
                    deadline = started + self.header_timeout
        except h11.RemoteProtocolError as exc:
            await self._send_bad_request(stream, conn, str(exc))
            raise _Close from exc
        assert started is not None
        await self._answer(stream, conn, event, started, generation)

    async def _answer(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        started: float,
        generation: int,
    ) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        headers = [
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers
        ]
        reply = self.app.precheck(method, target, headers)
        webhook = self.app.webhook_name(target)
        in_flight, latency = self._metrics.children(webhook)
        in_flight.inc()
        review = _tracing.review_span(method, target, headers)
        try:
            if reply is None:
                reply = await self._read_and_handle(
                    stream, conn, method=method, target=target, headers=headers, started=started
                )
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
                _log(method, target, reply, elapsed)

    async def _read_and_handle(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        *,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        started: float,
    ) -> WebhookReply:
        deadline = started + self.request_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return self._bad_request(str(exc))
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.app.max_body_size:
                    return self.app.too_large(target)  # the rest is never read
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                body = b"".join(chunks)
                _tracing.note_review(body)
                result = self.app.dispatch(method, target, headers, body, prechecked=True)
                if isinstance(result, PendingAdmission):
                    return await _await_verdict(result)
                return result
            elif event is h11.NEED_DATA:
                try:
                    await self._receive(stream, conn, deadline)
                except _Timeout:
                    return self._timeout_reply()  # a peer that left raises _Close instead
            else:  # ConnectionClosed mid-body: nobody is left to answer
                raise _Close

    # -- answers ---------------------------------------------------------------------------

    def _bad_request(self, message: str) -> WebhookReply:
        return _plain(400, f"malformed HTTP request: {message}")

    def _timeout_reply(self) -> WebhookReply:
        return _plain(408, "the request did not arrive in time")

    async def _send_bad_request(
        self, stream: ByteStream, conn: h11.Connection, message: str
    ) -> None:
        if conn.our_state is h11.SEND_RESPONSE or conn.our_state is h11.IDLE:
            await self._send(stream, conn, self._bad_request(message), close=True)

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


async def _await_verdict(pending: PendingAdmission) -> WebhookReply:
    """Await an async handler's verdict (a handler that does I/O, e.g. an access review)."""
    try:
        verdict = await pending.verdict
    except Exception as exc:  # a handler's failure is a denied review, never a lost server
        return pending.failed(exc)
    return pending.reply(verdict)


def _path(target: str) -> str:
    return target.split("?", 1)[0]


def _plain(status: int, message: str) -> WebhookReply:
    body = message.encode()
    headers = (("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))))
    return WebhookReply(status, headers, body, outcome="error", message=message)


def _log(method: str, target: str, reply: WebhookReply, elapsed: float) -> None:
    # Answered reviews (allowed, denied or failed) are routine; HTTP errors are not.
    level = logging.DEBUG if reply.status == 200 else logging.WARNING
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        "%s %s -> %d %s%s",
        method,
        _path(target),
        reply.status,
        reply.outcome,
        f": {reply.message}" if reply.message else "",
        extra={
            "webhook": reply.webhook,
            "uid": reply.uid,
            "status": reply.status,
            "outcome": reply.outcome,
            "duration_seconds": round(elapsed, 6),
        },
    )
