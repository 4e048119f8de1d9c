"""The few asyncio primitives the adapter code needs; one of three hand-written backends.

Rules: same names and signatures as ``kubemoon_trio/_backend.py``; everything else in
``kubemoon_asyncio`` is generated from ``kubemoon_trio`` by ``scripts/unasync.py``. The
clock is the running loop's (``loop.time()``, monotonic). httpcore runs on asyncio through
anyio. asyncio cannot shield a block from cancellation, but a cancellation is delivered
once: cleanup that runs after it (``finally``, ``except``) is not interrupted again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import ssl
import subprocess
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, cast

import httpcore

from kubemoon_io import ClosingNetworkBackend

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

LOOP_NAME = "asyncio"

Lock = asyncio.Lock
Event = asyncio.Event

T = TypeVar("T")


class TaskStatus(Generic[T]):
    """Handed to a task started with :meth:`TaskGroup.start`; it calls :meth:`started`."""

    def __init__(self, future: asyncio.Future[Any] | None = None) -> None:
        self._future = future

    def started(self, value: T | None = None) -> None:
        """Say the task is ready; :meth:`TaskGroup.start` returns ``value``."""
        if self._future is not None and not self._future.done():
            self._future.set_result(value)


TASK_STATUS_IGNORED: TaskStatus[Any] = TaskStatus()


class TaskGroup:
    """Children run concurrently; leaving waits for them; an error cancels all.

    :meth:`cancel` cancels the children and the body; that cancellation ends at the group,
    as a trio nursery's does.
    """

    def __init__(self) -> None:
        self._group = asyncio.TaskGroup()
        self._host: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cancelled = False

    async def __aenter__(self) -> TaskGroup:
        self._host = asyncio.current_task()
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self._group.__aexit__(exc_type, exc, tb)
        except asyncio.CancelledError:
            if not self._own_cancellation():
                raise
            return True
        if exc_type is asyncio.CancelledError and self._own_cancellation():
            return True
        return None

    def _own_cancellation(self) -> bool:
        # Swallow only the cancellation this group asked for, as asyncio.timeout does.
        if not self._cancelled or self._host is None:
            return False
        return self._host.uncancel() == 0

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` as a child."""
        task = self._group.create_task(_call(fn, *args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, fn: Callable[..., Awaitable[object]], *args: object) -> Any:
        """Run ``fn(*args, task_status=...)`` as a child; return what it passes to started()."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        task = self._group.create_task(_call(fn, *args, task_status=TaskStatus(future)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: _fail_start(future, t))
        return await future

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
        if self._cancelled:
            return
        self._cancelled = True
        for task in list(self._tasks):
            task.cancel()
        if self._host is not None:
            self._host.cancel()


async def _call(fn: Callable[..., Awaitable[object]], *args: object, **kwargs: object) -> None:
    await fn(*args, **kwargs)


def _fail_start(future: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        future.set_exception(RuntimeError("the task ended without calling started()"))


def network_backend() -> httpcore.AsyncNetworkBackend:
    """The network backend of the client's connection pools: a cancelled TLS handshake
    closes its socket at once (see :class:`kubemoon_io.ClosingNetworkBackend`)."""
    return ClosingNetworkBackend(httpcore.AnyIOBackend())


async def wait_event(event: asyncio.Event, deadline: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``deadline`` passes (False)."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            await event.wait()
    return event.is_set()


class _FailAfter:
    """The scope :func:`fail_after` returns: ``asyncio.timeout`` in a plain class.

    Entered once per request, so no generator-based async context manager around it.
    """

    __slots__ = ("_seconds", "_timeout")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._timeout: asyncio.Timeout | None = None

    async def __aenter__(self) -> None:
        if self._seconds is not None:
            self._timeout = asyncio.timeout(max(self._seconds, 0.0))
            await self._timeout.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timeout = self._timeout
        if timeout is None:
            return
        try:
            await timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError:
            raise TimeoutError(f"no result within {self._seconds:g} s") from None


def fail_after(seconds: float | None) -> _FailAfter:
    """Raise ``TimeoutError`` if the body takes longer than ``seconds`` (None: no limit).

    Use as ``async with fail_after(seconds): ...``.
    """
    return _FailAfter(seconds)


def shielded() -> AbstractContextManager[object]:
    """Cleanup after a delivered cancellation runs to its end on asyncio; a marker only."""
    return contextlib.nullcontext()


def current_time() -> float:
    """The monotonic clock the core machines are fed: the running loop's."""
    return asyncio.get_running_loop().time()


class LoopHandle:
    """The loop running when it was made: plain functions called on it from any thread.

    What a metrics scrape needs (prometheus_client serves it from a thread of its own):
    :meth:`call` runs ``fn(now)`` on the loop, where the state it reads is consistent and
    the clock is the loop's; off the loop it waits for that. Once the loop has stopped (or
    when none ran), nothing changes that state any more, and ``fn`` runs right there.
    """

    def __init__(self) -> None:
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # made off a loop
            self._loop = None

    def call(self, fn: Callable[[float], T]) -> T:
        """``fn(now)`` on the loop, from the loop itself or from any other thread."""
        loop = self._loop
        if loop is None:
            return fn(time.monotonic())
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            return fn(loop.time())
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def on_loop() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(loop.time()))
                except BaseException as exc:  # handed to the caller's thread
                    future.set_exception(exc)

        if loop.is_running() and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(on_loop)
            except RuntimeError:  # closed meanwhile
                future.cancel()
            while not future.cancelled():
                try:
                    return future.result(timeout=0.1)
                except concurrent.futures.TimeoutError:
                    # Stopped before running it: cancelled here, or running it, then waited.
                    if not loop.is_running():
                        future.cancel()
        return fn(loop.time())  # the loop's clock (time.monotonic) reads from any thread


def wall_time() -> float:
    """Seconds since the epoch, for credential expiry."""
    return time.time()


async def sleep(seconds: float) -> None:
    """Sleep for ``seconds`` (cancellable)."""
    await asyncio.sleep(max(0.0, seconds))


async def sleep_until(deadline: float) -> None:
    """Sleep until ``current_time()`` reaches ``deadline`` (cancellable)."""
    if math.isinf(deadline):
        await asyncio.Event().wait()
    await asyncio.sleep(max(0.0, deadline - current_time()))


async def run_process(
    argv: Sequence[str], env: Mapping[str, str], *, timeout: float, output_limit: int
) -> tuple[int, bytes]:
    """Run a credential plugin: no stdin, stdout captured, stderr inherited.

    Raises ``TimeoutError`` (the process killed) after ``timeout`` seconds; stops reading at
    ``output_limit`` + 1 bytes, so the caller can refuse an oversized answer.
    """
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
    )
    try:
        # Shielded: a cancellation in the middle of starting it would leave the child
        # running and its transport open (asyncio kills it at garbage collection, with a
        # ResourceWarning); the spawn finishes and the child is killed here instead.
        process = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            started = await spawn
            started.kill()
            await started.wait()
        raise
    output = bytearray()
    try:
        async with asyncio.timeout(timeout):
            assert process.stdout is not None
            while len(output) <= output_limit:
                chunk = await process.stdout.read(65536)
                if not chunk:
                    break
                output += chunk
            if len(output) > output_limit:
                process.kill()
            code = await process.wait()
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None
    finally:
        killed = process.returncode is None
        if killed:
            process.kill()
        # A process the plugin started in the background may still hold its stdout:
        # close our end, or wait() (which waits for every pipe) and the transport never end.
        transport = process._transport  # type: ignore[attr-defined]
        stdout = transport.get_pipe_transport(1)
        if stdout is not None:
            stdout.close()
        if killed:
            await process.wait()
    return code, bytes(output[: output_limit + 1])


class BodyReader:
    """Reads a streamed response body chunk by chunk, with an optional deadline per read.

    ``receive`` returns ``b""`` at the end of the body and raises ``TimeoutError`` when the
    deadline (on :func:`current_time`) passes first. :meth:`aclose` may be called from
    another task while a read is suspended: it expires that read's timeout at once.
    """

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        stream = response.stream
        assert hasattr(stream, "__aiter__"), "an async response stream"
        self._chunks = cast(AsyncGenerator[bytes, None], stream.__aiter__())
        self._read_timeout: asyncio.Timeout | None = None
        self._read_done: asyncio.Event | None = None
        self._closing = False
        # True once the body ended: its generators are finished, nothing is left to close.
        self._finished = False

    async def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body, ``b""`` at its end (or once it is being closed)."""
        if self._closing:
            return b""
        self._read_done = asyncio.Event()
        try:
            async with asyncio.timeout_at(deadline) as timeout:
                self._read_timeout = timeout
                return await self.read_chunk()
        except TimeoutError:
            if not timeout.expired():
                raise  # httpcore's own read timeout, not the deadline
            if self.closing():
                return b""  # stopped by aclose from another task
            raise TimeoutError("no data before the deadline") from None
        finally:
            self._read_timeout = None
            self._read_done.set()

    async def read_chunk(self) -> bytes:
        """The next chunk, ``b""`` at the end, for a body only this task reads and closes.

        No timeout of its own: the caller's deadline bounds the read (a whole CRUD response
        is read under its call's deadline), and no other task stops it midway.
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
        """Close the body, and with it the connection it came on."""
        self._closing = True
        if self._finished:
            await self._response.aclose()  # the body's generators are done already
            return
        if self._read_timeout is not None:
            assert self._read_done is not None
            self._read_timeout.reschedule(asyncio.get_running_loop().time())
            await self._read_done.wait()
        try:
            await self._chunks.aclose()
        except (httpcore.NetworkError, httpcore.ProtocolError, RuntimeError):
            pass  # the read that was stopped already finished the body's generators
        finally:
            await self._response.aclose()


# -- serving ------------------------------------------------------------------------------


class ByteStream:
    """One accepted connection: ``receive_some``, ``send_all``, ``aclose``.

    ``raw`` is the TCP transport under a connection upgraded to TLS by :func:`serve_tls`
    (the writer's own transport otherwise), which :meth:`aclose` closes.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        raw: asyncio.WriteTransport | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._raw = raw

    async def receive_some(self, max_bytes: int = 65536, deadline: float | None = None) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` when the peer closed its side.

        Raises ``TimeoutError`` when nothing arrives before ``deadline`` (``current_time``).
        """
        try:
            async with asyncio.timeout_at(deadline):
                return await self._reader.read(max_bytes)
        except ssl.SSLError as exc:  # a bad record from the peer: the connection is over
            raise ConnectionError(f"TLS failed: {exc}") from exc

    async def send_all(self, data: bytes, deadline: float | None = None) -> None:
        """Send every byte of ``data``; ``TimeoutError`` if the peer does not read in time."""
        try:
            self._writer.write(data)
            async with asyncio.timeout_at(deadline):
                await self._writer.drain()
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS failed: {exc}") from exc

    def peer_certified(self) -> bool:
        """True when the peer presented a client certificate the TLS handshake verified."""
        return bool(self._writer.get_extra_info("peercert"))

    async def aclose(self) -> None:
        """Close the connection, its socket included, without waiting on the peer.

        What is still unsent (an answer's tail, TLS's close_notify) is handed to the kernel
        first, for at most a second if the peer reads nothing; then the socket is closed,
        as trio's https-compatible TLS streams close: the peer's close_notify is not
        awaited. (asyncio's own TLS close waits for it up to its 30 s shutdown timeout, so
        every evicted idle connection kept its socket and buffers that long.)
        """
        writer = self._writer
        writer.close()  # with TLS: the close_notify, queued behind anything unsent
        raw = self._raw if self._raw is not None else writer.transport
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(1.0):
                # No event says a transport's buffer is empty: looked at every 10 ms, and
                # only while a peer is slow to read (mostly it is empty at once).
                while raw.get_write_buffer_size():
                    await asyncio.sleep(0.01)
        writer.transport.abort()
        raw.abort()  # the TLS transport no longer reaches it once the peer's side ended
        with contextlib.suppress(OSError, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(1.0):
                await writer.wait_closed()  # the socket is closed by then


class _Connections:
    """The tasks of a server's connections, so that stopping the server ends them.

    ``asyncio.start_server`` runs each connection in a task of its own that outlives the
    server; here a stopped server cancels them and waits for them. A cancelled connection
    ends quietly: on Python 3.11 a connection task that ends cancelled makes asyncio log
    "Exception in callback ... CancelledError".
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def run(
        self, connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        """``connection``, as a task this group cancels when the server stops."""

        async def owned(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await connection(reader, writer)
            except asyncio.CancelledError:
                writer.transport.abort()  # the server is stopping
            finally:
                self._tasks.discard(task)

        return owned

    async def cancel_all(self) -> None:
        """Cancel every connection still open and wait until each has ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


async def serve_tcp(
    handler: Callable[[ByteStream], Awaitable[object]],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: TaskStatus[int] = TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on ``host:port`` (0: any free port) until cancelled.

    Each connection runs ``handler`` in a task of its own and is closed after it. The port
    actually bound is passed to ``task_status.started``. Running out of file descriptors
    (EMFILE) is logged by asyncio, and accepting resumes shortly after.
    """

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = ByteStream(reader, writer)
        try:
            await handler(connection)
        except ConnectionError:
            pass  # the peer went away; nothing to answer
        finally:
            await connection.aclose()

    connections = _Connections()
    server = await asyncio.start_server(connections.run(serve_one), host, port, ssl=ssl_context)
    async with server:
        task_status.started(server.sockets[0].getsockname()[1])
        try:
            await server.serve_forever()
        finally:
            await connections.cancel_all()


class PortStatus(Protocol):
    """Where :func:`serve_tls` reports the port it bound."""

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
    certificate applies to the next handshake): the TCP connection is accepted, then
    upgraded. A handshake must finish within ``handshake_timeout``, and at most
    ``max_handshakes`` are under way at once (a new one abandons the oldest); failed ones
    are dropped.
    """
    pending: dict[asyncio.Task[Any], None] = {}  # handshakes under way, oldest first
    abandoned: set[asyncio.Task[Any]] = set()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        pending[task] = None
        if len(pending) > max_handshakes:
            oldest = next(iter(pending))
            del pending[oldest]
            abandoned.add(oldest)
            oldest.cancel()  # it is waiting in start_tls: nothing else runs between
        raw = writer.transport  # the TCP transport, which start_tls wraps
        try:
            await writer.start_tls(context(), ssl_handshake_timeout=handshake_timeout)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            writer.transport.abort()
            return
        except asyncio.CancelledError:
            if task not in abandoned:
                raise
            task.uncancel()
            writer.transport.abort()
            return
        finally:
            pending.pop(task, None)
            abandoned.discard(task)
        stream = ByteStream(reader, writer, raw)
        try:
            await handler(stream)
        finally:
            await stream.aclose()

    connections = _Connections()
    server = await asyncio.start_server(connections.run(connection), host, port)
    async with server:
        task_status.started(server.sockets[0].getsockname()[1])
        try:
            await server.serve_forever()
        finally:
            await connections.cancel_all()


def install_signal_handlers(
    signals: Sequence[int], callback: Callable[[], object]
) -> Callable[[], None]:
    """Call ``callback`` in the loop when one of ``signals`` arrives; return an undo function."""
    loop = asyncio.get_running_loop()
    for number in signals:
        loop.add_signal_handler(number, callback)

    def restore() -> None:
        for number in signals:
            loop.remove_signal_handler(number)

    return restore


def run_loop(fn: Callable[..., Awaitable[object]], **kwargs: object) -> None:
    """Run ``fn(**kwargs)`` on a new asyncio loop, in this thread, until it returns."""

    async def main() -> None:
        await fn(**kwargs)

    asyncio.run(main())


# -- worker threads -------------------------------------------------------------------------


class CapacityLimiter:
    """At most ``total`` calls of :func:`run_in_thread` at once."""

    def __init__(self, total: int) -> None:
        self.total_tokens = total
        self._semaphore = asyncio.Semaphore(total)


async def run_in_thread(fn: Callable[[], T], limiter: CapacityLimiter) -> T:
    """Call ``fn()`` on a worker thread (the loop's default executor), at most
    ``limiter.total_tokens`` at once, so CPU work on untrusted input never runs on the loop.

    A cancelled caller still waits for the call to end before its slot is given back.
    """
    async with limiter._semaphore:
        future = asyncio.get_running_loop().run_in_executor(None, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await asyncio.wait([future])
            raise
