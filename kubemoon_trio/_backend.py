"""The few trio primitives the generated-in-step adapter code needs.

Rules: this module (and its blocking twin ``kubemoon_sync/_backend.py``) is the only place
where the two adapters differ; everything else in ``kubemoon_sync`` is generated from
``kubemoon_trio`` by ``scripts/unasync.py``. Same names, same signatures, both sides.
"""

from __future__ import annotations

import math
import ssl
import subprocess
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Protocol, cast

import httpcore
import trio

__all__ = [
    "BodyReader",
    "Event",
    "Lock",
    "current_time",
    "run_process",
    "shielded",
    "sleep",
    "sleep_until",
    "wall_time",
]

Lock = trio.Lock
Event = trio.Event


def shielded() -> AbstractContextManager[object]:
    """A scope in which cleanup cannot be interrupted by cancellation."""
    return trio.CancelScope(shield=True)


def current_time() -> float:
    """The monotonic clock the core machines are fed: trio's clock."""
    return trio.current_time()


def wall_time() -> float:
    """Seconds since the epoch, for credential expiry."""
    return time.time()


async def sleep(seconds: float) -> None:
    """Sleep for ``seconds`` (cancellable)."""
    await trio.sleep(max(0.0, seconds))


async def sleep_until(deadline: float) -> None:
    """Sleep until ``current_time()`` reaches ``deadline`` (cancellable)."""
    await trio.sleep_until(deadline)


async def run_process(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, bytes]:
    """Run a credential plugin: no stdin, stdout captured, stderr inherited."""
    result = await trio.run_process(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        check=False,
    )
    return result.returncode, result.stdout


class BodyReader:
    """Reads a streamed response body chunk by chunk, with an optional deadline per read.

    ``receive`` returns ``b""`` at the end of the body and raises ``TimeoutError`` when the
    deadline (on :func:`current_time`) passes first.
    """

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        stream = response.stream
        assert hasattr(stream, "__aiter__"), "an async response stream"
        self._chunks = cast(AsyncGenerator[bytes, None], stream.__aiter__())
        # The read in progress, so that aclose from another task can stop it first: the
        # body's generators cannot be closed while a read is suspended inside them.
        self._read_scope: trio.CancelScope | None = None
        self._read_done = trio.Event()
        self._closing = False

    async def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body, ``b""`` at its end (or once it is being closed)."""
        if self._closing:
            return b""
        self._read_done = trio.Event()
        with trio.move_on_at(math.inf if deadline is None else deadline) as scope:
            self._read_scope = scope
            try:
                return await self._chunks.__anext__()
            except StopAsyncIteration:
                return b""
            except httpcore.ReadTimeout as exc:
                raise TimeoutError("no data before the read timeout") from exc
            finally:
                self._read_scope = None
                self._read_done.set()
        if self.closing():
            return b""  # stopped by aclose from another task
        raise TimeoutError("no data before the deadline")

    def closing(self) -> bool:
        """True once :meth:`aclose` has begun (possibly from another task)."""
        return self._closing

    async def aclose(self) -> None:
        """Close the body, and with it the connection it came on.

        httpcore reads a body through nested async generators. Closing only the outer one
        would leave the inner ones suspended until garbage collection (trio warns about
        that), so the body is first unwound by a cancelled read: the cancellation runs
        through every generator, each of which then cleans up and finishes.
        """
        self._closing = True
        with shielded():
            if self._read_scope is not None:
                self._read_scope.cancel()
                await self._read_done.wait()
            with trio.CancelScope() as unwind:
                unwind.cancel()
                try:
                    while await self._chunks.__anext__():
                        pass  # only data already buffered can come before the cancellation
                except (StopAsyncIteration, httpcore.NetworkError, httpcore.ProtocolError):
                    pass
            try:
                await self._chunks.aclose()
            finally:
                await self._response.aclose()


# -- server primitives (webhook server) --
# Everything loop-specific a server needs: a listening socket, TLS, accepting, one task per
# connection, and reads/writes with deadlines. The webhook server uses only these names.

__all__ += [
    "TASK_STATUS_IGNORED",
    "ByteStream",
    "PortStatus",
    "TaskStatus",
    "serve_tls",
]

TaskStatus = trio.TaskStatus
TASK_STATUS_IGNORED = trio.TASK_STATUS_IGNORED


class PortStatus(Protocol):
    """Where :func:`serve_tls` reports the port it bound (a trio ``TaskStatus[int]``)."""

    def started(self, value: int) -> None:
        """Called once, when the server accepts connections."""


class ByteStream:
    """One accepted TLS connection: bytes in and out, each call with an optional deadline.

    ``receive_some`` returns ``b""`` when the peer closed; both calls raise
    ``TimeoutError`` when the deadline (on :func:`current_time`) passes first and
    ``ConnectionError`` when the connection breaks.
    """

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self._stream = stream

    async def receive_some(self, max_bytes: int, deadline: float | None = None) -> bytes:
        """Up to ``max_bytes`` bytes, as soon as some have arrived."""
        with trio.move_on_at(math.inf if deadline is None else deadline):
            try:
                return bytes(await self._stream.receive_some(max_bytes))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionError(str(exc)) from exc
        raise TimeoutError("no data before the deadline")

    async def send_all(self, data: bytes, deadline: float | None = None) -> None:
        """Send every byte of ``data``."""
        with trio.move_on_at(math.inf if deadline is None else deadline):
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionError(str(exc)) from exc
            return
        raise TimeoutError("the peer did not read before the deadline")

    async def aclose(self) -> None:
        """Close the connection (bounded: a peer that stalls the TLS goodbye is dropped)."""
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._stream.aclose()
        if scope.cancelled_caught:
            await trio.aclose_forcefully(self._stream)


async def serve_tls(
    handler: Callable[[ByteStream], Awaitable[None]],
    host: str,
    port: int,
    context: Callable[[], ssl.SSLContext],
    *,
    handshake_timeout: float,
    task_status: PortStatus = TASK_STATUS_IGNORED,
) -> None:
    """Accept TLS connections on ``host:port`` until cancelled, each in a task of its own.

    ``context()`` is asked for the SSL context of every new connection (so a reloaded
    certificate applies to the next handshake). The handshake must finish within
    ``handshake_timeout`` seconds; failed handshakes are dropped silently. Reports the
    bound port through ``task_status``.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)

    async def connection(tcp: trio.SocketStream) -> None:
        tls = trio.SSLStream(tcp, context(), server_side=True, https_compatible=True)
        with trio.move_on_after(handshake_timeout) as scope:
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await trio.aclose_forcefully(tcp)
                return
        if scope.cancelled_caught:
            await trio.aclose_forcefully(tcp)
            return
        stream = ByteStream(tls)
        try:
            await handler(stream)
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        bound: int = listeners[0].socket.getsockname()[1]
        task_status.started(bound)
        await trio.serve_listeners(connection, listeners, handler_nursery=nursery)
