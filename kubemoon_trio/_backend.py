"""The few trio primitives the adapter code needs; one of three hand-written backends.

Rules: this module and its twins ``kubemoon_asyncio/_backend.py`` and
``kubemoon_sync/_backend.py`` are the only places where the adapters differ; everything
else in those packages is generated from ``kubemoon_trio`` by ``scripts/unasync.py``.
Same names, same signatures, on every side.
"""

# Longer than 700 lines because each of the three backends is kept in one file, with the
# same names in the same order, so that they read side by side (kubemoon_asyncio/_backend.py,
# kubemoon_sync/_backend.py).

from __future__ import annotations

import contextlib
import functools
import math
import signal
import ssl
import subprocess
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

import httpcore
import trio

from kubemoon_io import check_armed_guard, report_late_send

__all__ = [
    "LOOP_NAME",
    "TASK_STATUS_IGNORED",
    "PortStatus",
    "BodyReader",
    "ByteStream",
    "CapacityLimiter",
    "run_in_thread",
    "Event",
    "Lock",
    "TaskGroup",
    "TaskStatus",
    "LoopHandle",
    "current_time",
    "fail_after",
    "install_signal_handlers",
    "network_backend",
    "run_loop",
    "run_process",
    "serve_tcp",
    "serve_tls",
    "shielded",
    "sleep",
    "sleep_until",
    "wait_event",
    "wall_time",
]

LOOP_NAME = "trio"

T = TypeVar("T")

Lock = trio.Lock
Event = trio.Event
TaskStatus = trio.TaskStatus
TASK_STATUS_IGNORED = trio.TASK_STATUS_IGNORED


class TaskGroup:
    """A nursery: children run concurrently; leaving waits for them; an error cancels all.

    :meth:`cancel` cancels the children and the body; that cancellation ends at the group.
    """

    def __init__(self) -> None:
        self._manager = trio.open_nursery()
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> TaskGroup:
        self._nursery = await self._manager.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._manager.__aexit__(exc_type, exc, tb)

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` as a child."""
        assert self._nursery is not None, "the task group is not open"
        self._nursery.start_soon(fn, *args)

    async def start(self, fn: Callable[..., Awaitable[object]], *args: object) -> Any:
        """Run ``fn(*args, task_status=...)`` as a child; return what it passes to started()."""
        assert self._nursery is not None, "the task group is not open"
        return await self._nursery.start(fn, *args)

    def abandon(self) -> None:
        """Cancel as :meth:`cancel` does; leaving the group then waits for the children as
        usual, since a cancelled task always ends (the blocking twin stops waiting)."""
        self.cancel()

    @property
    def left_behind(self) -> bool:
        """True when leaving did not wait for every child: never on this loop."""
        return False

    def cancel(self) -> None:
        """Cancel every child and the body."""
        assert self._nursery is not None, "the task group is not open"
        self._nursery.cancel_scope.cancel()


class _GuardedTransport(trio.abc.Stream):
    """The socket under a TLS stream, checking the armed send guard before each send:
    ``trio.SSLStream`` encrypts, then takes a lock (a scheduler checkpoint) before it hands
    the record to its transport, so the check must come here, where nothing yields before
    the ``send`` system call (``kubemoon_io.check_armed_guard``)."""

    __slots__ = ("inner",)

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        check_armed_guard()
        await self.inner.send_all(data)
        report_late_send()  # frozen inside the send: the bytes may arrive late; say so

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TrioStream(httpcore.AsyncNetworkStream):
    """A trio stream as httpcore's connections use it: what ``httpcore.TrioStream`` does,
    with each read and write under one bare cancel scope instead of two context managers
    made by generators (a request reads and writes several times), and a TLS handshake
    that closes the socket when it fails in any way, cancellation included (the rule of
    :class:`kubemoon_io.ClosingNetworkBackend`). Timeouts and failures become httpcore's
    exceptions, wrapping trio's as httpcore's own backend does.

    Small writes are held back and sent together just before the next read: an HTTP/1.1
    client writes a request's head, then its body, then reads the answer, so the whole
    request goes out in one TLS record and one ``send`` (instead of one per part). Past
    ``COALESCE_LIMIT`` bytes the held data is sent at once. A failure to send the held
    data at the read is what a failed write is to httpcore's connection: a ``WriteError``
    is passed over and the answer read (a server may answer and close early), a
    ``WriteTimeout`` is raised.
    """

    __slots__ = ("_pending", "_pending_timeout", "_stream")

    COALESCE_LIMIT = 64 * 1024

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._pending = b""
        self._pending_timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._pending:
            with contextlib.suppress(httpcore.WriteError):
                await self._flush()
        try:
            # As httpcore's own trio stream: the chunk as the stream gives it.
            if timeout is None:
                return cast(bytes, await self._stream.receive_some(max_bytes))
            with trio.CancelScope(deadline=trio.current_time() + timeout):
                return cast(bytes, await self._stream.receive_some(max_bytes))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpcore.ReadError(exc) from exc
        raise httpcore.ReadTimeout(trio.TooSlowError())  # the scope ran out

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if len(self._pending) + len(buffer) <= self.COALESCE_LIMIT:
            self._pending += buffer
            self._pending_timeout = timeout
            return
        if self._pending:
            await self._flush()
        await self._send(buffer, timeout)

    async def _flush(self) -> None:
        data, self._pending = self._pending, b""
        await self._send(data, self._pending_timeout)

    async def _send(self, data: bytes, timeout: float | None) -> None:
        check_armed_guard()  # a gated write: its authority must hold as its bytes go out
        try:
            if timeout is None:
                await self._stream.send_all(data)
                return
            with trio.CancelScope(deadline=trio.current_time() + timeout):
                await self._stream.send_all(data)
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpcore.WriteError(exc) from exc
        raise httpcore.WriteTimeout(trio.TooSlowError())  # the scope ran out

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._pending:
            await self._flush()
        transport = self._stream
        if isinstance(transport, trio.SocketStream):
            transport = _GuardedTransport(transport)
        tls = trio.SSLStream(
            transport,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            https_compatible=True,
        )
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                await tls.do_handshake()
        except BaseException as exc:
            # Closing checkpoints, which may raise the cancellation again: the original
            # failure is what is raised.
            with contextlib.suppress(BaseException):
                await self._stream.aclose()
            if isinstance(exc, trio.TooSlowError):
                raise httpcore.ConnectTimeout(exc) from exc
            if isinstance(exc, trio.BrokenResourceError):
                raise httpcore.ConnectError(exc) from exc
            raise
        return _TrioStream(tls)

    def _socket_stream(self) -> trio.SocketStream:
        stream = self._stream
        while isinstance(stream, trio.SSLStream | _GuardedTransport):
            stream = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream.inner
        assert isinstance(stream, trio.SocketStream)
        return stream

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            stream = self._stream
            return stream._ssl_object if isinstance(stream, trio.SSLStream) else None
        if info == "client_addr":
            return self._socket_stream().socket.getsockname()
        if info == "server_addr":
            return self._socket_stream().socket.getpeername()
        if info == "socket":
            return self._socket_stream().socket
        if info == "is_readable":
            return self._socket_stream().socket.is_readable()
        return None


class _TrioNetworkBackend(httpcore.AsyncNetworkBackend):
    """Connects as ``httpcore.TrioBackend`` does; its streams are :class:`_TrioStream`."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                stream = await trio.open_tcp_stream(host, port, local_address=local_address)
            for option in socket_options or ():
                stream.setsockopt(*option)
        except trio.TooSlowError as exc:
            raise httpcore.ConnectTimeout(exc) from exc
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpcore.ConnectError(exc) from exc
        return _TrioStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                stream = await trio.open_unix_socket(path)
            for option in socket_options or ():
                stream.setsockopt(*option)
        except trio.TooSlowError as exc:
            raise httpcore.ConnectTimeout(exc) from exc
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpcore.ConnectError(exc) from exc
        return _TrioStream(stream)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


def network_backend() -> httpcore.AsyncNetworkBackend:
    """The network backend of the client's connection pools: httpcore's trio backend made
    lighter per read and write; a failed or cancelled TLS handshake closes its socket at
    once (see :class:`_TrioStream`)."""
    return _TrioNetworkBackend()


async def wait_event(event: trio.Event, deadline: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``deadline`` passes (False)."""
    with trio.move_on_at(math.inf if deadline is None else deadline):
        await event.wait()
    return event.is_set()


class _FailAfter:
    """The scope :func:`fail_after` returns: one cancel scope, no generator machinery.

    A CRUD request enters one of these per call, so it is a plain class around a bare
    ``CancelScope`` rather than ``trio.fail_after`` under an async context manager (three
    generator frames and two context managers more, per request).
    """

    __slots__ = ("_scope", "_seconds")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._scope: trio.CancelScope | None = None

    async def __aenter__(self) -> None:
        if self._seconds is not None:
            self._scope = trio.CancelScope(deadline=trio.current_time() + max(self._seconds, 0.0))
            self._scope.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Never swallows an exception: the one it would (its own cancellation) becomes
        # TimeoutError.
        scope = self._scope
        if scope is None:
            return
        scope.__exit__(exc_type, exc, tb)
        if scope.cancelled_caught:
            assert self._seconds is not None
            raise TimeoutError(f"no result within {self._seconds:g} s") from None


def fail_after(seconds: float | None) -> _FailAfter:
    """Raise ``TimeoutError`` if the body takes longer than ``seconds`` (None: no limit).

    Use as ``async with fail_after(seconds): ...``.
    """
    return _FailAfter(seconds)


def shielded() -> AbstractContextManager[object]:
    """A scope in which cleanup cannot be interrupted by cancellation."""
    return trio.CancelScope(shield=True)


def current_time() -> float:
    """The monotonic clock the core machines are fed: trio's clock."""
    return trio.current_time()


class LoopHandle:
    """The loop running when it was made: plain functions called on it from any thread.

    What a metrics scrape needs (prometheus_client serves it from a thread of its own):
    :meth:`call` runs ``fn(now)`` on the loop, where the state it reads is consistent and
    the clock is the loop's; off the loop it waits for that. Once the loop has ended (or
    when none ran), nothing changes that state any more, and ``fn`` runs right there.
    """

    def __init__(self) -> None:
        try:
            self._token: trio.lowlevel.TrioToken | None = trio.lowlevel.current_trio_token()
            self._clock: trio.abc.Clock | None = trio.lowlevel.current_clock()
        except RuntimeError:  # made off a loop
            self._token = self._clock = None

    def call(self, fn: Callable[[float], T]) -> T:
        """``fn(now)`` on the loop, from the loop itself or from any other thread."""
        if self._token is None or self._clock is None:
            return fn(time.monotonic())
        try:
            here = trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            here = False
        if here:
            return fn(trio.current_time())
        try:
            return trio.from_thread.run_sync(
                lambda: fn(trio.current_time()), trio_token=self._token
            )
        except trio.RunFinishedError:
            return fn(self._clock.current_time())  # trio's clock reads from any thread


def wall_time() -> float:
    """Seconds since the epoch, for credential expiry."""
    return time.time()


async def sleep(seconds: float) -> None:
    """Sleep for ``seconds`` (cancellable)."""
    await trio.sleep(max(0.0, seconds))


async def sleep_until(deadline: float) -> None:
    """Sleep until ``current_time()`` reaches ``deadline`` (cancellable)."""
    await trio.sleep_until(deadline)


async def run_process(
    argv: Sequence[str], env: Mapping[str, str], *, timeout: float, output_limit: int
) -> tuple[int, bytes]:
    """Run a credential plugin: no stdin, stdout captured, stderr inherited.

    Raises ``TimeoutError`` (the process killed) after ``timeout`` seconds; stops reading at
    ``output_limit`` + 1 bytes, so the caller can refuse an oversized answer.
    """
    output = bytearray()
    with trio.move_on_after(timeout) as scope:
        process = await trio.lowlevel.open_process(
            list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        try:
            assert process.stdout is not None
            while len(output) <= output_limit:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    break
                output += chunk
            if len(output) > output_limit:
                process.kill()
            code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()
    if scope.cancelled_caught:
        raise TimeoutError(f"no answer within {timeout:g} s")
    return code, bytes(output[: output_limit + 1])


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
        self._read_done: trio.Event | None = None
        self._closing = False
        # True once the body ended: its generators are finished, nothing is left to unwind.
        self._finished = False

    async def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body, ``b""`` at its end (or once it is being closed)."""
        if self._closing:
            return b""
        self._read_done = trio.Event()
        with trio.move_on_at(math.inf if deadline is None else deadline) as scope:
            self._read_scope = scope
            try:
                return await self.read_chunk()
            finally:
                self._read_scope = None
                self._read_done.set()
        if self.closing():
            return b""  # stopped by aclose from another task
        raise TimeoutError("no data before the deadline")

    async def read_chunk(self) -> bytes:
        """The next chunk, ``b""`` at the end, for a body only this task reads and closes.

        No scope of its own: the caller's deadline bounds the read (a whole CRUD response is
        read under its call's deadline), and no other task stops it midway.
        """
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            self._finished = True
            return b""
        except httpcore.ReadTimeout as exc:
            raise TimeoutError("no data before the read timeout") from exc

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
        if self._finished:
            # The body was read to its end: its generators are done, only the response is
            # left to close (httpcore shields its return of the connection to the pool).
            await self._response.aclose()
            return
        with shielded():
            if self._read_scope is not None:
                assert self._read_done is not None
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


# -- serving ------------------------------------------------------------------------------


class ByteStream:
    """One accepted connection: ``receive_some``, ``send_all``, ``aclose``."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    async def receive_some(self, max_bytes: int = 65536, deadline: float | None = None) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` when the peer closed its side.

        Raises ``TimeoutError`` when nothing arrives before ``deadline`` (``current_time``).
        """
        try:
            with trio.fail_at(math.inf if deadline is None else deadline):
                return bytes(await self._stream.receive_some(max_bytes))
        except trio.TooSlowError:
            raise TimeoutError("no data before the deadline") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from exc

    async def send_all(self, data: bytes, deadline: float | None = None) -> None:
        """Send every byte of ``data``; ``TimeoutError`` if the peer does not read in time."""
        try:
            with trio.fail_at(math.inf if deadline is None else deadline):
                await self._stream.send_all(data)
        except trio.TooSlowError:
            raise TimeoutError("the peer did not read before the deadline") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from exc

    def peer_certified(self) -> bool:
        """True when the peer presented a client certificate the TLS handshake verified."""
        getpeercert = getattr(self._stream, "getpeercert", None)
        return bool(getpeercert()) if getpeercert is not None else False

    async def aclose(self) -> None:
        """Close the connection (bounded: a peer that stalls the TLS goodbye is dropped)."""
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._stream.aclose()
        if scope.cancelled_caught:
            await trio.aclose_forcefully(self._stream)


async def serve_tcp(
    handler: Callable[[ByteStream], Awaitable[object]],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on ``host:port`` (0: any free port) until cancelled.

    Each connection runs ``handler`` in a task of its own and is closed after it. The port
    actually bound is passed to ``task_status.started``. Running out of file descriptors
    (EMFILE) is logged, and accepting resumes shortly after.
    """
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(
        await trio.open_tcp_listeners(port, host=host)
    )
    bound = listeners[0].socket.getsockname()[1]  # type: ignore[attr-defined]
    if ssl_context is not None:
        listeners = [
            trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in listeners
        ]

    async def serve_one(stream: trio.abc.Stream) -> None:
        connection = ByteStream(stream)
        try:
            await handler(connection)
        except ConnectionError:
            pass  # the peer went away; nothing to answer
        finally:
            await connection.aclose()

    task_status.started(bound)
    await trio.serve_listeners(serve_one, listeners)


def install_signal_handlers(
    signals: Sequence[int], callback: Callable[[], object]
) -> Callable[[], None]:
    """Call ``callback`` in the loop when one of ``signals`` arrives; return an undo function."""
    token = trio.lowlevel.current_trio_token()
    previous = {}
    for number in signals:
        previous[number] = signal.signal(
            number, lambda *_: token.run_sync_soon(callback, idempotent=True)
        )

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore


def run_loop(fn: Callable[..., Awaitable[object]], **kwargs: object) -> None:
    """Run ``fn(**kwargs)`` on a new trio loop, in this thread, until it returns."""
    trio.run(functools.partial(fn, **kwargs))


class PortStatus(Protocol):
    """Where :func:`serve_tls` reports the port it bound (a trio ``TaskStatus[int]``)."""

    def started(self, value: int) -> None:
        """Called once, when the server accepts connections."""


async def serve_tls(
    handler: Callable[[ByteStream], Awaitable[None]],
    host: str,
    port: int,
    context: Callable[[], ssl.SSLContext],
    *,
    handshake_timeout: float,
    max_handshakes: int = 64,
    task_status: PortStatus = TASK_STATUS_IGNORED,
) -> None:
    """Accept TLS connections on ``host:port`` until cancelled, each in a task of its own.

    ``context()`` is asked for the SSL context of every new connection (so a reloaded
    certificate applies to the next handshake). The handshake must finish within
    ``handshake_timeout`` seconds, and at most ``max_handshakes`` are under way at once (a
    new one abandons the oldest); failed handshakes are dropped silently. Reports the
    bound port through ``task_status``.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    pending: dict[trio.CancelScope, None] = {}  # handshakes under way, oldest first

    async def connection(tcp: trio.SocketStream) -> None:
        tls = trio.SSLStream(tcp, context(), server_side=True, https_compatible=True)
        with trio.move_on_after(handshake_timeout) as scope:
            pending[scope] = None
            if len(pending) > max_handshakes:
                oldest = next(iter(pending))
                del pending[oldest]
                oldest.cancel()
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await trio.aclose_forcefully(tcp)
                return
            finally:
                pending.pop(scope, None)
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


# -- worker threads -------------------------------------------------------------------------


CapacityLimiter = trio.CapacityLimiter
"""At most ``total`` calls of :func:`run_in_thread` at once (``CapacityLimiter(total)``)."""


async def run_in_thread(fn: Callable[[], T], limiter: trio.CapacityLimiter) -> T:
    """Call ``fn()`` on a worker thread, at most ``limiter.total_tokens`` at once, so CPU
    work on untrusted input never runs on the loop (cancellation waits for the call)."""
    return await trio.to_thread.run_sync(fn, limiter=limiter)
