"""The few blocking primitives the adapter code needs; one of three hand-written backends.

Rules: same names and signatures as ``kubemoon_trio/_backend.py``. A plain blocking call
(a :class:`~kubemoon_sync.Client` request, a watch) starts no thread and no event loop. Only
a :class:`TaskGroup` starts threads, one per child, for the runtime (manager, informers,
workers). Cancelling a group is cooperative: every sleep and wait of its threads raises
:class:`Cancelled`, and a watch being read in one of them has its socket shut down.
A blocking read cannot be interrupted at a deadline, so inside :func:`fail_after` every
connect, TLS handshake, read and write of a connection gets a socket timeout no longer
than the time left (:func:`network_backend`); streams outside it use their read timeout.
"""

# Longer than 700 lines because each of the three backends is kept in one file, with the
# same names in the same order, so that they read side by side (kubemoon_trio/_backend.py,
# kubemoon_asyncio/_backend.py); this one is the longest because it builds from threads
# what trio and asyncio provide: cancellation, deadlines and task groups.
from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import math
import os
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, cast

import httpcore

from kubemoon_io import TransportTimeout, check_armed_guard, report_late_send

__all__ = [
    "LOOP_NAME",
    "TASK_STATUS_IGNORED",
    "PortStatus",
    "BodyReader",
    "ByteStream",
    "CapacityLimiter",
    "run_in_thread",
    "Cancelled",
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

LOOP_NAME = "threads"

logger = logging.getLogger("kubemoon.server")

Lock = threading.Lock

T = TypeVar("T")

# How often a wait on an Event looks at its thread's cancellation.
_POLL = 0.05

# How long leaving an abandoned group still waits for its threads to notice the cancellation.
_ABANDON_WAIT = 2.0


class Cancelled(BaseException):
    """The task group this thread runs in was cancelled."""


class _Token:
    """The cancellation state of one task group, inherited by nested groups."""

    def __init__(self, parent: _Token | None) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._children: list[_Token] = []
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0
        if parent is not None:
            with parent._lock:
                parent._children.append(self)
            if parent.event.is_set():
                self.event.set()

    def cancel(self) -> None:
        with self._lock:
            self.event.set()
            children, callbacks = list(self._children), list(self._callbacks.values())
        for child in children:
            child.cancel()
        for callback in callbacks:
            with contextlib.suppress(Exception):
                callback()

    def on_cancel(self, callback: Callable[[], None]) -> int:
        with self._lock:
            self._next += 1
            self._callbacks[self._next] = callback
            handle = self._next
        if self.event.is_set():
            callback()
        return handle

    def forget(self, handle: int) -> None:
        with self._lock:
            self._callbacks.pop(handle, None)


_local = threading.local()


def _token() -> _Token | None:
    return cast(_Token | None, getattr(_local, "token", None))


def _check() -> None:
    token = _token()
    if token is not None and token.event.is_set():
        raise Cancelled


class Event(threading.Event):
    """A ``threading.Event`` whose :meth:`wait` raises :class:`Cancelled` when cancelled."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set (True) or ``timeout`` passes (False)."""
        token = _token()
        if token is None:
            return super().wait(timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            _check()
            left = _POLL if end is None else min(_POLL, end - time.monotonic())
            if super().wait(max(left, 0.0)):
                return True
            if end is not None and time.monotonic() >= end:
                return False


class TaskStatus(Generic[T]):
    """Handed to a task started with :meth:`TaskGroup.start`; it calls :meth:`started`."""

    def __init__(self) -> None:
        self.value: Any = None
        self.ready = threading.Event()

    def started(self, value: T | None = None) -> None:
        """Say the task is ready; :meth:`TaskGroup.start` returns ``value``."""
        self.value = value
        self.ready.set()


TASK_STATUS_IGNORED: TaskStatus[Any] = TaskStatus()


class TaskGroup:
    """Children run concurrently, each on a thread; leaving waits for them.

    An error in a child or in the body cancels the group; errors are raised together as an
    ``ExceptionGroup`` when leaving. :meth:`cancel` cancels the children and the body; that
    cancellation ends at the group. After :meth:`abandon`, leaving waits at most
    two seconds for the threads: one stuck in plain blocking code (which no
    cancellation reaches) is left running, a daemon thread, and its outcome is dropped.
    """

    def __init__(self) -> None:
        self._token: _Token | None = None
        self._outer: _Token | None = None
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._abandoned_at: float | None = None

    def __enter__(self) -> TaskGroup:
        self._outer = _token()
        self._token = _Token(self._outer)
        _local.token = self._token
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._token is not None
        if exc is not None and not isinstance(exc, Cancelled):
            self._token.cancel()
        try:
            for thread in self._threads:
                while thread.is_alive() and not self._gave_up():
                    thread.join(_POLL)
                    if self._outer is not None and self._outer.event.is_set():
                        self._token.cancel()
        finally:
            _local.token = self._outer
        with self._lock:
            errors = [e for e in self._errors if not isinstance(e, Cancelled)]
        if exc is not None and not isinstance(exc, Cancelled):
            errors.insert(0, exc)
        if errors:
            if all(isinstance(e, Exception) for e in errors):
                raise ExceptionGroup("errors in a task group", cast(list[Exception], errors))
            raise BaseExceptionGroup("errors in a task group", errors)
        outer_cancelled = self._outer is not None and self._outer.event.is_set()
        return isinstance(exc, Cancelled) and not outer_cancelled

    def _gave_up(self) -> bool:
        abandoned = self._abandoned_at
        return abandoned is not None and time.monotonic() >= abandoned + _ABANDON_WAIT

    def _run(self, fn: Callable[..., object], args: tuple[object, ...], kwargs: Any) -> None:
        _local.token = self._token
        try:
            fn(*args, **kwargs)
        except BaseException as exc:  # every failure is reported when the group is left
            if not isinstance(exc, Cancelled):
                with self._lock:
                    self._errors.append(exc)
                assert self._token is not None
                self._token.cancel()

    def start_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` as a child, on a thread of its own."""
        self._spawn(fn, args, {})

    def _spawn(self, fn: Callable[..., object], args: tuple[object, ...], kwargs: Any) -> None:
        name = f"kubemoon-{getattr(fn, '__name__', 'task')}"
        # A child sees the context it was started in (a trace, a log context), as trio
        # and asyncio tasks do.
        run = contextvars.copy_context().run
        thread = threading.Thread(target=run, args=(self._run, fn, args, kwargs), name=name)
        thread.daemon = True
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def start(self, fn: Callable[..., object], *args: object) -> Any:
        """Run ``fn(*args, task_status=...)`` as a child; return what it passes to started()."""
        status: TaskStatus[Any] = TaskStatus()
        self._spawn(fn, args, {"task_status": status})
        thread = self._threads[-1]
        while not status.ready.wait(_POLL):
            if not thread.is_alive():
                with self._lock:
                    if self._errors:
                        raise self._errors[-1]
                raise RuntimeError("the task ended without calling started()")
            _check()
        return status.value

    def cancel(self) -> None:
        """Cancel every child and the body."""
        assert self._token is not None, "the task group is not open"
        self._token.cancel()

    def abandon(self) -> None:
        """Cancel, and on leaving wait at most two seconds for the threads."""
        if self._abandoned_at is None:
            self._abandoned_at = time.monotonic()
        self.cancel()

    @property
    def left_behind(self) -> bool:
        """True when leaving did not wait for every thread (some still run, abandoned)."""
        return any(thread.is_alive() for thread in self._threads)


def wait_event(event: threading.Event, deadline: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``deadline`` passes (False)."""
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    return event.wait(timeout)


def _deadline() -> float | None:
    """The deadline of the innermost :func:`fail_after` of this thread (monotonic), or None."""
    return cast(float | None, getattr(_local, "deadline", None))


class _DeadlinePassed(Exception):
    """This thread's :func:`fail_after` deadline struck while a child process ran (the
    scope whose deadline it was turns it into its ``TimeoutError``)."""


# What a blocking call raises when its socket timeout (cut to the time left) strikes.
_TIMEOUTS = (TimeoutError, httpcore.TimeoutException, TransportTimeout, _DeadlinePassed)


class _FailAfter:
    """The scope :func:`fail_after` returns: a plain class (entered once per request).

    While it is open, this thread's deadline cuts every socket timeout of the connections
    made by :func:`network_backend` (nested scopes keep the earliest deadline).
    """

    __slots__ = ("_deadline", "_outer", "_seconds")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._deadline: float | None = None
        self._outer: float | None = None

    def __enter__(self) -> None:
        self._outer = _deadline()
        if self._seconds is None:
            return
        self._deadline = time.monotonic() + max(self._seconds, 0.0)
        if self._outer is None or self._deadline < self._outer:
            _local.deadline = self._deadline

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _local.deadline = self._outer
        seconds, deadline = self._seconds, self._deadline
        if seconds is None or deadline is None or time.monotonic() < deadline:
            return
        if exc is None or isinstance(exc, _TIMEOUTS):
            # Past the deadline, a timeout (the cut socket timeout) is this deadline's, as a
            # cancelled scope is on the async adapters.
            raise TimeoutError(f"no result within {seconds:g} s") from None


def fail_after(seconds: float | None) -> _FailAfter:
    """Raise ``TimeoutError`` if the body takes longer than ``seconds`` (None: no limit).

    A blocking body is not interrupted midway; instead the socket operations of
    :func:`network_backend`'s connections wait no longer than the time left, so a
    connection that answers slowly (even a byte at a time) ends at the deadline.
    """
    return _FailAfter(seconds)


def _time_left(timeout: float | None, error: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` cut to this thread's deadline; ``error`` once the deadline has passed."""
    deadline = _deadline()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every socket operation waits no longer than the time left."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        check_armed_guard()  # a gated write: its authority must hold as its bytes go out
        self._stream.write(buffer, _time_left(timeout, httpcore.WriteTimeout))
        report_late_send()  # frozen inside the send: the bytes may arrive late; say so

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's blocking backend, with the connections of :class:`_DeadlineStream`."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def network_backend() -> httpcore.NetworkBackend:
    """The backend of the client's connection pools: deadline-aware socket timeouts."""
    return _DeadlineBackend()


def shielded() -> AbstractContextManager[object]:
    """Nothing interrupts blocking cleanup; kept for symmetry with trio."""
    return contextlib.nullcontext()


def current_time() -> float:
    """The monotonic clock the core machines are fed."""
    return time.monotonic()


class LoopHandle:
    """Kept for symmetry with trio and asyncio, where it calls ``fn`` on their loop from
    any thread: here no loop owns the runtime's state, and :meth:`call` runs ``fn`` in the
    calling thread."""

    def call(self, fn: Callable[[float], T]) -> T:
        """``fn(now)`` here, on the monotonic clock."""
        return fn(time.monotonic())


def wall_time() -> float:
    """Seconds since the epoch, for credential expiry."""
    return time.time()


def sleep(seconds: float) -> None:
    """Sleep for ``seconds``; raises :class:`Cancelled` if this thread's group is cancelled."""
    token = _token()
    wait = None if math.isinf(seconds) else max(0.0, seconds)
    if token is None:
        if wait is None:
            threading.Event().wait()
        time.sleep(wait or 0.0)
    elif token.event.wait(wait):
        raise Cancelled


def sleep_until(deadline: float) -> None:
    """Sleep until ``current_time()`` reaches ``deadline``."""
    sleep(deadline - time.monotonic())


def run_process(
    argv: Sequence[str], env: Mapping[str, str], *, timeout: float, output_limit: int
) -> tuple[int, bytes]:
    """Run a credential plugin: no stdin, stdout captured, stderr inherited.

    Raises ``TimeoutError`` (the process killed) after ``timeout`` seconds; stops reading at
    ``output_limit`` + 1 bytes, so the caller can refuse an oversized answer.
    """
    process = subprocess.Popen(
        list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    # Reads wait no longer than the time left: killing the plugin does not end a read
    # while a process it started in the background still holds its stdout open. An
    # enclosing fail_after (a Lease renewal's deadline) cuts the run, as a cancelled scope
    # does on the async adapters.
    deadline = time.monotonic() + timeout
    scope = _deadline()
    cut = scope is not None and scope < deadline
    if scope is not None and cut:
        deadline = scope
    expired = False
    output = bytearray()
    try:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while len(output) <= output_limit:
            left = deadline - time.monotonic()
            if left <= 0:
                expired = True
                break
            if not poller.poll(max(1, math.ceil(left * 1000))):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            output += chunk
        if expired or len(output) > output_limit:
            process.kill()
        try:
            code = process.wait(timeout=None if expired else max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:  # stdout closed, the plugin still running
            expired = True
            process.kill()
            code = process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    if expired and cut:
        raise _DeadlinePassed("the caller's deadline passed while the plugin ran")
    if expired:
        raise TimeoutError(f"no answer within {timeout:g} s")
    return code, bytes(output[: output_limit + 1])


class BodyReader:
    """Reads a streamed response body chunk by chunk, with an optional deadline per read.

    ``receive`` returns ``b""`` at the end of the body and raises ``TimeoutError`` when the
    deadline (on :func:`current_time`) or the read timeout the stream was opened with
    passes first: the connection's socket waits no longer than the time left (see
    :func:`network_backend`). When the reading thread's task group is cancelled, the
    connection's socket is shut down, which ends the read.
    """

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        stream = response.stream
        assert hasattr(stream, "__iter__"), "a blocking response stream"
        self._chunks = cast(Generator[bytes, None, None], stream.__iter__())
        self._token = _token()
        self._handle = self._token.on_cancel(self._interrupt) if self._token else None
        self._closing = False

    def _interrupt(self) -> None:
        network = self._response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body, ``b""`` at its end."""
        if self._closing:
            return b""
        outer = _deadline()
        if deadline is not None and (outer is None or deadline < outer):
            _local.deadline = deadline
        try:
            return self._chunks.__next__()
        except StopIteration:
            return b""
        except httpcore.ReadTimeout as exc:
            raise TimeoutError("no data before the deadline or the read timeout") from exc
        except (httpcore.NetworkError, httpcore.ProtocolError):
            _check()  # a shutdown by cancellation is a cancellation, not a broken stream
            raise
        finally:
            _local.deadline = outer

    def read_chunk(self) -> bytes:
        """The next chunk, ``b""`` at the end, for a body only this thread reads and closes."""
        return self.receive()

    def closing(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._closing

    def close(self) -> None:
        """Close the body, and with it the connection it came on."""
        self._closing = True
        if self._token is not None and self._handle is not None:
            self._token.forget(self._handle)
        with shielded():
            try:
                self._chunks.close()
            finally:
                self._response.close()


# -- serving ------------------------------------------------------------------------------


class ByteStream:
    """One accepted connection: ``receive_some``, ``send_all``, ``close``.

    Reads wait in short slices so that a cancelled task group ends them.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        sock.settimeout(_POLL)

    def receive_some(self, max_bytes: int = 65536, deadline: float | None = None) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` when the peer closed its side.

        Raises ``TimeoutError`` when nothing arrives before ``deadline`` (``current_time``).
        """
        while True:
            _check()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no data before the deadline")
            try:
                return self._sock.recv(max_bytes)
            except TimeoutError:
                continue
            except ssl.SSLWantReadError:
                continue
            except ssl.SSLError as exc:  # a bad record from the peer: the connection is over
                raise ConnectionError(f"TLS failed: {exc}") from exc

    def send_all(self, data: bytes, deadline: float | None = None) -> None:
        """Send every byte of ``data``; ``TimeoutError`` if the peer does not read in time."""
        left = 30.0 if deadline is None else max(deadline - time.monotonic(), 0.001)
        self._sock.settimeout(left)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise TimeoutError("the peer did not read before the deadline") from None
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS failed: {exc}") from exc
        finally:
            self._sock.settimeout(_POLL)

    def peer_certified(self) -> bool:
        """True when the peer presented a client certificate the TLS handshake verified."""
        getpeercert = getattr(self._sock, "getpeercert", None)
        return bool(getpeercert()) if getpeercert is not None else False

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def serve_tcp(
    handler: Callable[[ByteStream], object],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: TaskStatus[int] = TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on ``host:port`` (0: any free port) until cancelled.

    Each connection runs ``handler`` on a thread of its own and is closed after it. The port
    actually bound is passed to ``task_status.started``. Running out of file descriptors
    (EMFILE) is logged, and accepting resumes shortly after.
    """
    listener = socket.create_server((host, port))
    listener.settimeout(_POLL)

    def serve_one(sock: socket.socket) -> None:
        try:
            if ssl_context is not None:
                sock.settimeout(10.0)
                sock = ssl_context.wrap_socket(sock, server_side=True)
            connection = ByteStream(sock)
        except (OSError, ssl.SSLError):
            sock.close()
            return
        try:
            handler(connection)
        except ConnectionError:
            pass  # the peer went away; nothing to answer
        finally:
            connection.close()

    with listener, TaskGroup() as connections:
        task_status.started(listener.getsockname()[1])
        while True:
            _check()
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    logger.error("cannot accept a connection: %s (out of file descriptors)", exc)
                    sleep(0.1)
                    continue
                raise
            connections.start_soon(serve_one, sock)


class PortStatus(Protocol):
    """Where :func:`serve_tls` reports the port it bound."""

    def started(self, value: int) -> None:
        """Called once, when the server accepts connections."""


def serve_tls(
    handler: Callable[[ByteStream], object],
    host: str,
    port: int,
    context: Callable[[], ssl.SSLContext],
    *,
    handshake_timeout: float,
    max_handshakes: int = 64,
    task_status: PortStatus = TASK_STATUS_IGNORED,
) -> None:
    """Accept TLS connections on ``host:port`` until cancelled, each on a thread of its own.

    ``context()`` is asked for the SSL context of every new connection (so a reloaded
    certificate applies to the next handshake). A handshake must finish within
    ``handshake_timeout``, and at most ``max_handshakes`` are under way at once (a new one
    abandons the oldest); failed ones are dropped.
    """
    listener = socket.create_server((host, port))
    listener.settimeout(_POLL)
    pending: dict[socket.socket, None] = {}  # handshakes under way, oldest first
    lock = threading.Lock()

    def serve_one(sock: socket.socket) -> None:
        try:
            sock.settimeout(handshake_timeout)
            tls = context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ssl.SSLError):
            sock.close()
            return
        with lock:
            pending[tls] = None
            oldest = next(iter(pending)) if len(pending) > max_handshakes else None
            if oldest is not None:
                del pending[oldest]
        if oldest is not None:
            with contextlib.suppress(OSError):
                # The plain socket's shutdown: its handshake, on its own thread, sees the end
                # of the stream (SSLSocket.shutdown would pull its SSL object from under it).
                socket.socket.shutdown(oldest, socket.SHUT_RDWR)
        try:
            tls.do_handshake()
        except (OSError, ssl.SSLError):
            tls.close()
            return
        finally:
            with lock:
                pending.pop(tls, None)
        connection = ByteStream(tls)
        try:
            handler(connection)
        except ConnectionError:
            pass  # the peer went away; nothing to answer
        finally:
            connection.close()

    with listener, TaskGroup() as connections:
        task_status.started(listener.getsockname()[1])
        while True:
            _check()
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    logger.error("cannot accept a connection: %s (out of file descriptors)", exc)
                    sleep(0.1)
                    continue
                raise
            connections.start_soon(serve_one, sock)


def install_signal_handlers(
    signals: Sequence[int], callback: Callable[[], object]
) -> Callable[[], None]:
    """Call ``callback`` when one of ``signals`` arrives (main thread only); return an undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {number: signal.signal(number, lambda *_: callback()) for number in signals}

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore


def run_loop(fn: Callable[..., object], **kwargs: object) -> None:
    """Call ``fn(**kwargs)`` in this thread (the blocking twin of running a loop)."""
    fn(**kwargs)


# -- worker threads -------------------------------------------------------------------------


class CapacityLimiter:
    """At most ``total`` calls of :func:`run_in_thread` at once."""

    def __init__(self, total: int) -> None:
        self.total_tokens = total
        self._semaphore = threading.BoundedSemaphore(total)


def run_in_thread(fn: Callable[[], T], limiter: CapacityLimiter) -> T:
    """Call ``fn()`` on this thread (every connection has one already), at most
    ``limiter.total_tokens`` at once across threads."""
    while not limiter._semaphore.acquire(timeout=_POLL):
        _check()
    try:
        return fn()
    finally:
        limiter._semaphore.release()
