"""The CRUD connection pool: one origin, a cap on connections, constant work per request.

Rules: every connection goes to the one API server origin (``ClientConfig.url`` builds every
URL), so the pool is a stack of idle connections and a set of busy ones, with no per-origin
search; a connection is given back when its response body is closed (``PooledBody``), never
earlier; a closed or expired one is closed and skipped, never reused; after ``aclose`` no
connection it knew stays open, and one taken before it is closed when given back. The
counts are guarded by a ``threading.Lock`` that is never held across an ``await`` (the
blocking twin's requests run on several threads). Streams (WATCH) never use this pool: each
gets an httpcore pool of its own (see ``_client``).
"""

from __future__ import annotations

import collections
import math
import ssl
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpcore

from . import _backend

__all__ = ["PooledBody", "CrudPool"]


class PooledBody:
    """A CRUD response's body: closing it hands its connection back to the pool."""

    __slots__ = ("_closed", "_connection", "_pool", "_stream")

    def __init__(
        self, stream: Any, pool: CrudPool, connection: httpcore.AsyncHTTPConnection
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._connection = connection
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        iterator: AsyncIterator[bytes] = self._stream.__aiter__()
        return iterator

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with _backend.shielded():
                await self._stream.aclose()
        finally:
            await self._pool.release(self._connection)


class CrudPool:
    """The CRUD connections to the API server: at most ``max_connections`` open, idle ones
    reused newest first, a request past the cap waits (up to the pool timeout) for one.

    httpcore's pool serves any origin and re-examines every connection twice per request
    (quadratically when several are idle); under concurrent requests it also hands one idle
    connection to two requests, and the loser retries. Here every URL has the one origin
    (``ClientConfig.url``), so a connection is taken from the idle stack and given back
    when its response is closed: constant work per request. A connection found closed or
    expired (kept alive too long, or closed by the server: readable while idle) is closed
    and skipped. The counts are kept under a ``threading.Lock`` (the blocking twin's
    requests run on several threads; nothing waits while holding it).
    """

    # How many more connections a request tries after one found unusable once taken.
    UNAVAILABLE_RETRIES = 2

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_expiry: float,
        ssl_context: ssl.SSLContext | None,
        network_backend: Any,
    ) -> None:
        self._max = max_connections
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._network_backend = network_backend
        self._idle: list[httpcore.AsyncHTTPConnection] = []
        self._busy: set[httpcore.AsyncHTTPConnection] = set()
        self._waiters: collections.deque[Any] = collections.deque()  # the backend's Events
        self._lock = threading.Lock()

    @property
    def connections(self) -> list[httpcore.AsyncHTTPConnection]:
        """The open connections, idle and busy."""
        with self._lock:
            return [*self._idle, *self._busy]

    def _take(
        self, url: httpcore.URL
    ) -> tuple[httpcore.AsyncHTTPConnection | None, list[httpcore.AsyncHTTPConnection]]:
        """A connection to use now (None: wait) and the stale ones to close."""
        stale: list[httpcore.AsyncHTTPConnection] = []
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if connection.is_closed() or connection.has_expired():
                    stale.append(connection)
                    continue
                self._busy.add(connection)
                return connection, stale
            if len(self._busy) < self._max:
                connection = httpcore.AsyncHTTPConnection(
                    url.origin,
                    ssl_context=self._ssl_context,
                    keepalive_expiry=self._keepalive_expiry,
                    network_backend=self._network_backend,
                )
                self._busy.add(connection)
                return connection, stale
            return None, stale

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on a pooled connection; closing the response gives it back.

        A connection that httpcore finds unusable once taken (``ConnectionNotAvailable``:
        closed between the take and its first use) is dropped and the request sent on
        another, at most ``UNAVAILABLE_RETRIES`` more times; but when this pool was closed
        meanwhile (``aclose``: a request in flight fails) it is raised at once, for the
        client to turn into a ``TransportError``.
        """
        attempts = 0
        while True:
            connection = await self._acquire(request)
            try:
                response = await connection.handle_async_request(request)
            except httpcore.ConnectionNotAvailable:
                closed_meanwhile = self._dropped(connection)
                await self.release(connection)
                attempts += 1
                if closed_meanwhile:
                    # Client.aclose, or a pool replaced for a new client certificate.
                    raise httpcore.ConnectionNotAvailable(
                        "the client was closed (or its connections replaced for a new "
                        "client certificate) before the request was sent"
                    ) from None
                if attempts > self.UNAVAILABLE_RETRIES:
                    raise httpcore.ConnectionNotAvailable(
                        f"{attempts} connections in a row closed before the request was sent"
                    ) from None
                continue
            except BaseException:
                await self.release(connection)
                raise
            response.stream = PooledBody(response.stream, self, connection)
            return response

    def _dropped(self, connection: httpcore.AsyncHTTPConnection) -> bool:
        """True when ``aclose`` let go of ``connection`` after it was taken."""
        with self._lock:
            return connection not in self._busy

    async def _acquire(self, request: httpcore.Request) -> httpcore.AsyncHTTPConnection:
        """An idle connection, or a new one, or the first one given back in time."""
        deadline: float | None = None
        while True:
            connection, stale = self._take(request.url)
            await self._close(stale)
            if connection is not None:
                break
            if deadline is None:
                timeout = request.extensions.get("timeout", {}).get("pool")
                deadline = math.inf if timeout is None else _backend.current_time() + timeout
            waiter = _backend.Event()
            with self._lock:
                self._waiters.append(waiter)
            try:
                woken = await _backend.wait_event(waiter, deadline)
            except BaseException:
                self._forget(waiter)
                raise
            if not woken:
                self._forget(waiter)
                raise httpcore.PoolTimeout("no connection became free in time")
        return connection

    def _forget(self, waiter: Any) -> None:
        """A waiter gives up: if a release had already woken it, wake the next one."""
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                return
            following = self._waiters.popleft() if self._waiters else None
        if following is not None:
            following.set()

    async def release(self, connection: httpcore.AsyncHTTPConnection) -> None:
        """Take back ``connection`` (idle again, or closed) and wake one waiting request.

        One taken before the pool was last closed is closed, never kept: ``aclose`` leaves
        no connection open (one still connecting when it ran has nothing to close yet)."""
        with self._lock:
            taken_before_close = connection not in self._busy
            self._busy.discard(connection)
            reusable = (
                not taken_before_close and connection.is_idle() and not connection.is_closed()
            )
            if reusable:
                self._idle.append(connection)
            waiter = self._waiters.popleft() if self._waiters else None
        if waiter is not None:
            waiter.set()
        if not reusable:
            await self._close([connection])

    async def _close(self, connections: list[httpcore.AsyncHTTPConnection]) -> None:
        if connections:
            with _backend.shielded():
                for connection in connections:
                    await connection.aclose()

    async def aclose(self) -> None:
        """Close every connection (a request in flight fails)."""
        with self._lock:
            connections = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        await self._close(connections)
