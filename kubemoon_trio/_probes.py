"""The probes and metrics HTTP server: ``/healthz``, ``/readyz`` and ``/metrics``.

Rules: plain HTTP/1.1 on h11, GET (and HEAD) only. It is bounded: at most
``max_connections`` connections at once -- a new connection beyond that closes the one
idle longest (then the one slowest to send its request), so idle sockets can never turn a
liveness probe into a failure; only when every connection is being answered is a new one
answered 503 and closed. A peer that resets or leaves costs its own connection only. A
request head must arrive within ``header_timeout`` and an idle keep-alive connection is
closed after ``idle_timeout``, so idle clients cannot starve the process of file
descriptors. ``/readyz`` answers 503 with the reasons it is not ready, one
per line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

import h11

from . import _backend
from ._connections import Connections, ConnectionSlot, ConnectionState

__all__ = ["ProbeServer"]

logger = logging.getLogger("kubemoon.probes")

Check = Callable[[], Sequence[str]]
"""A check: the reasons something is wrong, or nothing when all is well."""

_MAX_HEAD = 16 * 1024


def _verbose(target: str) -> bool:
    query = target.partition("?")[2]
    return any(part.partition("=")[0] == "verbose" for part in query.split("&"))


class ProbeServer:
    """Serves the health of a process and its metrics.

    ``healthy`` and ``ready`` return the reasons the process is not healthy or not ready
    (empty: it is); ``metrics`` returns the Prometheus text exposition. ``notes`` returns
    lines that explain without failing: ``/readyz?verbose`` adds them to its answer.
    """

    def __init__(
        self,
        *,
        healthy: Check,
        ready: Check,
        metrics: Callable[[], bytes] | None = None,
        max_connections: int = 32,
        header_timeout: float = 5.0,
        idle_timeout: float = 5.0,
        notes: Check | None = None,
    ) -> None:
        self._checks = {"/healthz": healthy, "/livez": healthy, "/readyz": ready}
        self._metrics = metrics
        self._notes = notes
        self._connections = Connections(max_connections)
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.port: int | None = None

    @property
    def max_connections(self) -> int:
        """The most connections served at once."""
        return self._connections.limit

    @max_connections.setter
    def max_connections(self, limit: int) -> None:
        self._connections.limit = limit

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        return len(self._connections)

    @property
    def evicted_connections(self) -> int:
        """Connections closed since start to make room for a new one."""
        return self._connections.evicted

    @property
    def refused_connections(self) -> int:
        """New connections answered 503 because every connection was being answered."""
        return self._connections.refused

    async def serve(
        self,
        host: str,
        port: int,
        *,
        task_status: _backend.TaskStatus[int] = _backend.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve on ``host:port`` (0: a free port, see ``port``) until cancelled."""
        async with _backend.TaskGroup() as tasks:
            self.port = await tasks.start(_backend.serve_tcp, self._connection, host, port)
            task_status.started(self.port)

    def answer(self, method: str, target: str) -> tuple[int, str, bytes]:
        """The status, content type and body for one request."""
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/metrics" and self._metrics is not None:
            return 200, "text/plain; version=0.0.4; charset=utf-8", self._metrics()
        check = self._checks.get(path)
        if check is None:
            return 404, "text/plain", b"not found\n"
        try:
            reasons = list(check())
        except Exception as exc:  # a check is user-facing code: its failure is a reason
            logger.exception("the %s check failed", path)
            reasons = [f"the check failed: {type(exc).__name__}"]
        notes: list[str] = []
        if self._notes is not None and path == "/readyz" and _verbose(target):
            try:
                notes = list(self._notes())
            except Exception:  # user-facing code, like a check
                logger.exception("the /readyz notes failed")
        if reasons:
            return 503, "text/plain", "".join(f"{r}\n" for r in [*reasons, *notes]).encode()
        return 200, "text/plain", "".join(f"{r}\n" for r in ["ok", *notes]).encode()

    async def _connection(self, stream: _backend.ByteStream) -> None:
        async with _backend.TaskGroup() as group:
            slot = self._connections.admit(group)
            if slot is None:
                # A peer that left or stopped reading costs its connection, nothing more.
                with contextlib.suppress(TimeoutError, ConnectionError):
                    await stream.send_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                        b"Connection: close\r\n\r\n",
                        _backend.current_time() + 1.0,
                    )
                return
            try:
                await self._serve_requests(stream, slot)
            except (TimeoutError, ConnectionError):
                pass  # a slow, idle or vanished client: close the connection
            except h11.ProtocolError as exc:
                logger.debug("bad probe request: %s", exc)
            finally:
                self._connections.release(slot)

    async def _serve_requests(self, stream: _backend.ByteStream, slot: ConnectionSlot) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        first = True
        while True:
            # The first request head must come quickly; later ones within the idle time.
            limit = self.header_timeout if first else self.idle_timeout
            deadline = _backend.current_time() + limit
            slot.set(ConnectionState.IDLE)
            request = None
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536, deadline)
                    if data and slot.state is ConnectionState.IDLE:
                        slot.set(ConnectionState.READING)
                    connection.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                    continue
                if isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                    break
                if isinstance(event, h11.ConnectionClosed):
                    return
            if request is None:
                return
            slot.set(ConnectionState.BUSY)
            status, content_type, body = self.answer(
                request.method.decode("ascii", "replace"), request.target.decode("ascii", "replace")
            )
            headers = [
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
            ]
            data = connection.send(h11.Response(status_code=status, headers=headers)) or b""
            if request.method != b"HEAD":
                data += connection.send(h11.Data(data=body)) or b""
            data += connection.send(h11.EndOfMessage()) or b""
            slot.set(ConnectionState.SENDING)
            await stream.send_all(data, _backend.current_time() + self.header_timeout)
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()
            first = False
