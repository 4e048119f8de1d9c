"""The client: core ``Request`` values performed over httpcore against one API server.

Rules: every URL is built by ``ClientConfig.url`` and so stays on the configured origin;
redirects are never followed (a 3xx is an ``ApiError``); credentials are added here and
nowhere else, and never logged. CRUD shares one connection pool (``_pool``); every stream
(WATCH) gets a pool of its own with one connection (``_streams``), closed when the stream
is closed or cancelled. Non-2xx answers become the core's typed ``ApiError``; network
failures ``TransportError``. A 429 or 5xx that carries ``Retry-After`` is retried after
that delay, a bounded number of times. A write made where a send guard is set
(``kubemoon_io.gated_writes``: a reconcile that a Lease authorises) is checked by it
through httpcore's ``trace`` extension (``_framing.guarded``), right before its headers
and again before its body are written -- after the connection was taken and its TLS
handshake done -- so a paused process never sends it on stale authority. Paging through a
LIST is ``_paginate``'s job; this module holds the client and its verbs only.
"""

from __future__ import annotations

import collections
import logging
import math
import ssl
from collections.abc import Callable
from typing import Any

import httpcore

from kubemoon_core import (
    ApiError,
    ListOptions,
    Request,
    Response,
    decode_response,
    watch_request,
)
from kubemoon_core._client_config import ClientConfig
from kubemoon_core._request import Target
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import KeptOut, error_from_response, retry_delay
from kubemoon_core.typed import DeclaredKind, resource_info
from kubemoon_io import (
    PLUGIN_TIMEOUT,
    ResponseTooLarge,
    TransportTimeout,
    _tracing,
    check_transport,
    current_send_guard,
    disarm_send_guard,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
    proxy_settings,
    transport_error,
)
from kubemoon_io import ssl_context as make_ssl_context

from . import _backend
from ._auth import Credentials
from ._framing import (
    ERROR_BODY_LIMIT,
    NETWORK_ERRORS,
    Headers,
    closing_failed_socks,
    decode_headers,
    encode_headers,
    guarded,
)
from ._pool import CrudPool
from ._streams import StreamResponse, Watch
from ._verbs import ClientVerbs

__all__ = ["Client", "StreamResponse", "Watch"]  # the streams re-exported: their old home

logger = logging.getLogger("kubemoon.client")

DEFAULT_TIMEOUT = 30.0
DEFAULT_TOTAL_TIMEOUT = 60.0
DEFAULT_MAX_BODY_SIZE = 128 * 1024 * 1024
# A watch silent for longer than the server would keep it open is a dead connection.
WATCH_IDLE_MARGIN = 30.0
MAX_SERVER_WATCH = 3600.0


def _seconds(name: str, value: float) -> float:
    """``value`` if it is a usable duration (a finite number above zero); else a
    ``LocalProtocolError`` naming the argument (never the loop's own ValueError)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise LocalProtocolError(
            f"{name} must be a finite number of seconds above 0, not {value!r}"
        )
    return float(value)


def _time_left(name: str, value: float) -> float:
    """A call's own limit: a finite number (zero or less: already expired)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LocalProtocolError(f"{name} must be a finite number of seconds, not {value!r}")
    return float(value)


def _count(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LocalProtocolError(f"{name} must be an integer of at least {minimum}, not {value!r}")
    return value


class Client(ClientVerbs):
    """A Kubernetes API client for one server and one identity.

    Build it from a :class:`~kubemoon_core.kubeconfig.ClientConfig` (or :meth:`from_kubeconfig`,
    :meth:`in_cluster`, :meth:`from_environment`); close it with ``aclose()`` or use it as a
    context manager. ``timeout`` bounds connecting and each read of a CRUD request, and
    ``total_timeout`` the whole of it (each call may pass its own); ``max_body_size`` caps a
    response body (error bodies are cut at 64 KiB); ``max_retries`` bounds the retries of
    429/5xx answers that carry ``Retry-After``; ``exec_timeout`` bounds an exec credential
    plugin's run (which the call's ``total_timeout`` does not include). ``network_backend``
    (httpcore's interface) replaces the loop's sockets, as :mod:`kubemoon_testing.sim` does
    to reach a simulated cluster in memory (one that also has ``open_pool`` answers
    whole requests, unframed). The defaults are the same on every adapter.

    The verbs take a resource and mappings (``get(CONFIGMAPS, name)`` is a ``dict``), or a
    kind and its objects, typed: ``get(ConfigMap, name, namespace="ns")`` is a
    ``ConfigMap``, ``list(ConfigMap)`` yields ``ConfigMap`` objects and
    ``create(ConfigMap(...))`` answers one.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_retries: int = 3,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 10,
        exec_timeout: float = PLUGIN_TIMEOUT,
        watch_idle_margin: float = WATCH_IDLE_MARGIN,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.config = config
        # Where connections come from: the loop's sockets, or a simulated cluster's
        # in-memory streams (kubemoon_testing.sim).
        self._network_backend = network_backend
        # True inside ``async with client``: its creator closes it, not a Manager.
        self.in_context = False
        self._timeout = _seconds("timeout", timeout)
        self._total_timeout = _seconds("total_timeout", total_timeout)
        exec_timeout = _seconds("exec_timeout", exec_timeout)
        self._max_body_size = _count("max_body_size", max_body_size, 0)
        self._watch_idle_margin = _seconds("watch_idle_margin", watch_idle_margin)
        self._max_retries = _count("max_retries", max_retries, 0)
        max_connections = _count("max_connections", max_connections, 1)
        check_transport(config)
        self._proxy = proxy_settings(config)
        self._socks = self._proxy is not None and self._proxy.kind == "socks5"
        self._own_tls = ssl_context is None and config.scheme == "https"
        if self._own_tls:
            ssl_context = make_ssl_context(config)
        self._ssl_context = ssl_context
        self._max_connections = max_connections
        self._pool_certificate: tuple[bytes, bytes] | None = None
        self._credentials = Credentials(config, plugin_timeout=exec_timeout)
        self._pool = self._new_pool(max_connections=max_connections)
        self._streams: set[StreamResponse] = set()
        # (code, method, host) -> requests answered: rest_client_requests_total.
        self.request_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._host = config.host_header
        # What every request sends the same way, encoded once: the Host header, the
        # encoded forms of the core's few distinct header sets, the last Authorization
        # value, and the timeout extension of a CRUD read.
        self._host_field = (b"Host", config.host_header.encode("ascii"))
        self._encoded_headers: dict[Headers, list[tuple[bytes, bytes]]] = {}
        self._authorization: tuple[str, tuple[bytes, bytes]] | None = None
        self._crud_extensions = self._extensions(timeout)
        # Every URL is ``config.origin`` + a target (ClientConfig.url).
        self._base_url = httpcore.URL(config.origin)
        self._origin_length = len(config.origin)
        # Told (request, answer) after every successful write (read-your-own-writes).
        self._write_observers: list[Callable[[Request, Any], object]] = []

    def __repr__(self) -> str:
        context = f" context={self.config.context!r}" if self.config.context else ""
        return f"<Client {self.config.origin}{self.config.base_path}{context}>"

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, *, context: str | None = None, **kwargs: Any
    ) -> Client:
        """A client for a kubeconfig context (``KUBECONFIG`` or ``~/.kube/config``)."""
        return cls(load_kubeconfig(path, context=context), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> Client:
        """A client for the pod's own ServiceAccount."""
        return cls(load_in_cluster_config(), **kwargs)

    @classmethod
    def from_environment(cls, *, context: str | None = None, **kwargs: Any) -> Client:
        """A client configured as controllers are: KUBECONFIG, in-cluster, ~/.kube/config."""
        return cls(load_config(context=context), **kwargs)

    def _new_pool(self, *, max_connections: int, stream: bool = False) -> Any:
        proxy = self._proxy
        # A network backend with ``open_pool(max_connections)`` serves whole requests
        # (kubemoon_testing.sim's fast path): its pool takes httpcore's request as built
        # here and answers httpcore's response, with no HTTP framing. A stream's pool of
        # one connection is closed with the stream, as below.
        open_pool = getattr(self._network_backend, "open_pool", None)
        if proxy is None and open_pool is not None:
            return open_pool(max_connections=max_connections)
        if proxy is None and not stream:
            return CrudPool(
                max_connections=max_connections,
                keepalive_expiry=60.0,
                ssl_context=self._ssl_context,
                network_backend=self._network_backend or _backend.network_backend(),
            )
        # A stream's pool holds its one connection and keeps nothing alive after it.
        limits: dict[str, Any] = {
            "max_connections": max_connections,
            "max_keepalive_connections": 0 if stream else None,
            "keepalive_expiry": 60.0,
            "retries": 0,
            # Closes the socket of a cancelled TLS handshake (else a ResourceWarning later).
            "network_backend": self._network_backend or _backend.network_backend(),
        }
        if proxy is None:
            return httpcore.AsyncConnectionPool(ssl_context=self._ssl_context, **limits)
        if proxy.kind == "socks5":
            return httpcore.AsyncSOCKSProxy(
                proxy_url=proxy.url, proxy_auth=proxy.auth, ssl_context=self._ssl_context, **limits
            )
        return httpcore.AsyncHTTPProxy(
            proxy_url=proxy.url,
            proxy_auth=proxy.auth,
            ssl_context=self._ssl_context,
            proxy_ssl_context=proxy.tls,
            **limits,
        )

    @property
    def connection_count(self) -> int:
        """Open connections: the CRUD pool's plus one per open stream (for leak checks)."""
        return len(self._pool.connections) + sum(1 for s in self._streams if not s.closed)

    async def __aenter__(self) -> Client:
        self.in_context = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.in_context = False
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection, streams included."""
        with _backend.shielded():
            for stream in list(self._streams):
                await stream.aclose()
            self._streams.clear()
            await self._pool.aclose()

    # -- performing requests ---------------------------------------------------------------

    def _extensions(self, read_timeout: float | None) -> dict[str, Any]:
        extensions: dict[str, Any] = {
            "timeout": {
                "connect": self._timeout,
                "read": read_timeout,
                "write": self._timeout,
                "pool": self._timeout,
            }
        }
        if self.config.tls_server_name:
            extensions["sni_hostname"] = self.config.tls_server_name
        return extensions

    def _raw_request(
        self, request: Request, url: str, authorization: str | None, read_timeout: float | None
    ) -> httpcore.Request:
        encoded = self._encoded_headers.get(request.headers)
        if encoded is None:
            encoded = encode_headers(request.headers)
            if len(self._encoded_headers) >= 64:
                self._encoded_headers.clear()  # bounded: callers may send headers of their own
            self._encoded_headers[request.headers] = encoded
        headers = [self._host_field, *encoded]
        if request.body or request.method in ("POST", "PUT", "PATCH"):
            headers.append((b"Content-Length", str(len(request.body)).encode("ascii")))
        if authorization is not None:
            cached = self._authorization
            if cached is None or cached[0] != authorization:
                cached = (authorization, (b"Authorization", authorization.encode("latin-1")))
                self._authorization = cached
            headers.append(cached[1])
        headers.extend(_tracing.trace_headers())
        extensions = (
            self._crud_extensions
            if read_timeout == self._timeout
            else self._extensions(read_timeout)
        )
        # The URL from its parts: ``url`` is the origin (split once, by httpcore itself)
        # followed by the target, so httpcore need not parse it again for every request.
        try:
            target = url[self._origin_length :].encode("ascii")
        except UnicodeEncodeError:
            raise LocalProtocolError(
                f"request target {request.target!r} is not ASCII: percent-encode it"
            ) from None
        base = self._base_url
        parsed = httpcore.URL(scheme=base.scheme, host=base.host, port=base.port, target=target)
        if self._socks:
            extensions = closing_failed_socks(extensions)
        if request.method != "GET":
            guard = current_send_guard()
            if guard is not None:
                extensions = guarded(extensions, guard, f"{request.method} {request.path}")
        return httpcore.Request(
            request.method, parsed, headers=headers, content=request.body, extensions=extensions
        )

    @_tracing.traced_request
    async def _exchange(
        self,
        request: Request,
        url: str,
        authorization: str | None,
        read_timeout: float,
        deadline: float,
    ) -> Response:
        raw_request = self._raw_request(request, url, authorization, read_timeout)
        try:
            try:
                raw = await self._pool.handle_async_request(raw_request)
            finally:
                disarm_send_guard()  # however the exchange ended
            body = await self._read_body(raw, deadline, request.body_limit)
        except NETWORK_ERRORS as exc:
            self.request_counts["<error>", request.method, self._host] += 1
            raise transport_error(exc, self.config.origin, self.config.tls_server_name) from None
        self.request_counts[str(raw.status), request.method, self._host] += 1
        return Response(raw.status, decode_headers(raw.headers), body)

    async def _read_body(
        self, raw: httpcore.Response, deadline: float, body_limit: int | None = None
    ) -> bytes:
        # Bounded: an error body is cut at 64 KiB, any other body over the cap is refused,
        # and a body that trickles in stops at the call's deadline (even where a blocking
        # read cannot be interrupted, each chunk is checked). The reads need no scope of
        # their own: the call's deadline scope (send) bounds them. The response is closed
        # here, whatever happens.
        limit = self._max_body_size if 200 <= raw.status < 300 else ERROR_BODY_LIMIT
        cap = "max_body_size"
        if body_limit is not None and body_limit < limit and limit != ERROR_BODY_LIMIT:
            limit, cap = body_limit, "the request's body_limit"
        reader = _backend.BodyReader(raw)
        try:
            chunks: list[bytes] = []
            size = 0
            while chunk := await reader.read_chunk():
                if _backend.current_time() > deadline:
                    raise TimeoutError("the response body is still arriving at the deadline")
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    if limit == ERROR_BODY_LIMIT:
                        return b"".join(chunks)[:limit]
                    raise ResponseTooLarge(
                        f"{self.config.origin}: the response body exceeds {limit} bytes "
                        f"({cap}); the connection was closed"
                    )
        finally:
            await reader.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _authorize(self) -> tuple[str | None, int]:
        """The Authorization header; a client certificate from an exec plugin is loaded."""
        authorization = await self._credentials.authorization()
        certificate = self._credentials.provider.client_certificate
        if certificate != self._pool_certificate and self._own_tls and certificate is not None:
            # New connections present the plugin's certificate; old ones are closed.
            self._ssl_context = make_ssl_context(
                self.config, client_cert_data=certificate[0], client_key_data=certificate[1]
            )
            old, self._pool = self._pool, self._new_pool(max_connections=self._max_connections)
            self._pool_certificate = certificate
            with _backend.shielded():
                await old.aclose()
        return authorization

    async def send(self, request: Request, *, timeout: float | None = None) -> Response:
        """Perform ``request`` and return the whole response, whatever its status.

        ``timeout`` bounds the call's time on the network (default: the client's
        ``total_timeout``); past it :class:`TransportTimeout` is raised. An exec credential
        plugin's run does not count: it is bounded by ``exec_timeout`` alone, and a plugin
        that hangs raises ``ConfigError`` naming the plugin and that timeout. After a 401
        the credentials are refreshed once (exec plugin, rotated token file) and the
        request is retried once. Network failures raise :class:`TransportError`.
        """
        total = self._total_timeout if timeout is None else _time_left("timeout", timeout)
        url = self.config.url(request.target)
        authorization, generation = await self._authorize()
        left = total
        try:
            started = _backend.current_time()
            response = await self._exchange_within(request, url, authorization, left)
            if response.status_code == 401 and await self._credentials.refresh(generation):
                left -= _backend.current_time() - started
                authorization, _ = await self._authorize()
                started = _backend.current_time()
                response = await self._exchange_within(request, url, authorization, left)
        except TimeoutError:
            raise TransportTimeout(
                f"{self.config.origin}: {request.method} {request.path} took longer than "
                f"{total:g} s"
            ) from None
        return response

    async def _exchange_within(
        self, request: Request, url: str, authorization: str | None, seconds: float
    ) -> Response:
        """One exchange that must end within ``seconds``; ``TimeoutError`` otherwise."""
        seconds = max(seconds, 0.0)
        deadline = _backend.current_time() + seconds
        async with _backend.fail_after(seconds):
            return await self._exchange(
                request, url, authorization, min(self._timeout, seconds), deadline
            )

    async def open_stream(
        self, request: Request, *, read_timeout: float | None = None, check: bool = False
    ) -> StreamResponse:
        """Start ``request`` on a connection of its own and return its streaming response.

        ``read_timeout`` bounds each read (None: unbounded). With ``check``, a non-2xx answer
        is read, the stream closed and the ``ApiError`` raised. A 401 refreshes the
        credentials and retries once, as :meth:`send` does.
        """
        if read_timeout is not None:
            read_timeout = _seconds("read_timeout", read_timeout)
        url = self.config.url(request.target)
        authorization, generation = await self._authorize()
        stream = await self._start(request, url, authorization, read_timeout)
        if stream.status_code == 401 and await self._credentials.refresh(generation):
            await stream.aclose()
            authorization, _ = await self._authorize()
            stream = await self._start(request, url, authorization, read_timeout)
        if check and not 200 <= stream.status_code < 300:
            try:
                body = await stream.read_error_body()
            finally:
                await stream.aclose()
            raise error_from_response(stream.status_code, stream.headers, body, path=request.path)
        return stream

    @_tracing.traced_request
    async def _start(
        self, request: Request, url: str, authorization: str | None, read_timeout: float | None
    ) -> StreamResponse:
        pool = self._new_pool(max_connections=1, stream=True)
        try:
            raw = await pool.handle_async_request(
                self._raw_request(request, url, authorization, read_timeout)
            )
        except BaseException as exc:
            with _backend.shielded():
                await pool.aclose()
            if isinstance(exc, NETWORK_ERRORS):
                self.request_counts["<error>", request.method, self._host] += 1
                raise transport_error(
                    exc, self.config.origin, self.config.tls_server_name
                ) from None
            raise
        self.request_counts[str(raw.status), request.method, self._host] += 1
        stream = StreamResponse(pool, raw, self.config.origin, self.config.tls_server_name)
        self._streams = {s for s in self._streams if not s.closed}
        self._streams.add(stream)
        return stream

    def add_write_observer(self, observer: Callable[[Request, Any], object]) -> None:
        """Call ``observer(request, answer)`` after each successful write made with
        :meth:`request` or a verb (a runtime's caches use it to read their own writes).
        An observer that raises is logged; the write's result stands."""
        self._write_observers.append(observer)

    def remove_write_observer(self, observer: Callable[[Request, Any], object]) -> None:
        """Stop calling ``observer`` (added with :meth:`add_write_observer`); absent is fine."""
        if observer in self._write_observers:
            self._write_observers.remove(observer)

    async def request(self, request: Request, *, kept_out: list[KeptOut] | None = None) -> Any:
        """Perform ``request`` and return its decoded JSON body; raise the ApiError otherwise.

        A 3xx is an error (redirects are not followed). A retryable answer (429, 5xx) that
        carries ``Retry-After`` is retried after that delay, at most ``max_retries`` times.
        With ``kept_out`` the answer is a LIST page whose items too deeply nested to decode
        are left out and recorded there (see :func:`~kubemoon_core.decode_response`).
        """
        attempt = 0
        while True:
            response = await self.send(request)
            try:
                answer = decode_response(response, request, kept_out=kept_out)
                if self._write_observers and request.method != "GET":
                    self._tell_observers(request, answer)
                return answer
            except ApiError as exc:
                delay = retry_delay(exc, attempt, max_retries=self._max_retries)
                if delay is None:
                    raise
                attempt += 1
                logger.info(
                    "%s %s answered %d; retrying in %.1fs (attempt %d)",
                    request.method,
                    request.path,
                    exc.code,
                    delay,
                    attempt,
                )
                await _backend.sleep(delay)

    def _tell_observers(self, request: Request, answer: Any) -> None:
        for observer in list(self._write_observers):
            try:
                observer(request, answer)
            except Exception:  # bookkeeping must never fail a write that succeeded
                logger.exception("a write observer failed on %s %s", request.method, request.path)

    # -- verbs ----------------------------------------------------------------------------

    # The verbs are ClientVerbs' (_verbs.py), named here to be documented as the client's
    # (``list`` shadows the builtin in the rest of this class body).
    get = ClientVerbs.get
    list = ClientVerbs.list
    create = ClientVerbs.create
    replace = ClientVerbs.replace
    patch = ClientVerbs.patch
    apply = ClientVerbs.apply
    delete = ClientVerbs.delete

    def watch(
        self,
        resource: Target | type[DeclaredKind],
        *,
        namespace: str | None = None,
        options: ListOptions | None = None,
        read_timeout: float | None = None,
    ) -> Watch:
        """Watch a collection on a connection of its own (see :class:`Watch`).

        ``read_timeout`` is how long the stream may stay silent before
        :class:`TransportTimeout` (a half-open connection never answers again). By default
        it is the server-side ``timeoutSeconds`` plus the client's ``watch_idle_margin``
        (30 s), or, without one, the longest a server keeps a watch open (an hour) plus it.
        A kind (``watch(ConfigMap)``) names its resource; the events hold mappings.
        """
        if isinstance(resource, type):
            resource = resource_info(resource).api_resource
        if read_timeout is not None:
            read_timeout = _seconds("read_timeout", read_timeout)
        else:
            server_side = options.timeout_seconds if options is not None else None
            read_timeout = self._watch_idle_margin + (
                server_side if server_side is not None else MAX_SERVER_WATCH
            )
        return Watch(
            self, watch_request(resource, namespace=namespace, options=options), read_timeout
        )
