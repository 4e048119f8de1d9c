"""The few blocking primitives the generated adapter code needs (twin of the trio backend).

Rules: same names and signatures as ``kubemoon_trio/_backend.py``; nothing here starts a
thread or an event loop. A blocking read cannot be interrupted at a deadline, so streams
are opened with a read timeout instead and a read past it raises ``TimeoutError``.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import cast

import httpcore

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

Lock = threading.Lock
Event = threading.Event


def shielded() -> AbstractContextManager[object]:
    """Nothing interrupts blocking cleanup; kept for symmetry with trio."""
    return contextlib.nullcontext()


def current_time() -> float:
    """The monotonic clock the core machines are fed."""
    return time.monotonic()


def wall_time() -> float:
    """Seconds since the epoch, for credential expiry."""
    return time.time()


def sleep(seconds: float) -> None:
    """Sleep for ``seconds``."""
    time.sleep(max(0.0, seconds))


def sleep_until(deadline: float) -> None:
    """Sleep until ``current_time()`` reaches ``deadline``."""
    time.sleep(max(0.0, deadline - time.monotonic()))


def run_process(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, bytes]:
    """Run a credential plugin: no stdin, stdout captured, stderr inherited."""
    result = subprocess.run(  # noqa: PLW1510 - the caller checks the code
        list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    return result.returncode, result.stdout


class BodyReader:
    """Reads a streamed response body chunk by chunk.

    ``receive`` returns ``b""`` at the end of the body. The deadline is advisory: the read
    timeout the stream was opened with bounds each read, and a read past it raises
    ``TimeoutError`` (through httpcore's ``ReadTimeout``).
    """

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        stream = response.stream
        assert hasattr(stream, "__iter__"), "a blocking response stream"
        self._chunks = cast(Generator[bytes, None, None], stream.__iter__())

    def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body, ``b""`` at its end."""
        del deadline
        try:
            return self._chunks.__next__()
        except StopIteration:
            return b""
        except httpcore.ReadTimeout as exc:
            raise TimeoutError("no data before the read timeout") from exc

    def close(self) -> None:
        """Close the body, and with it the connection it came on."""
        with shielded():
            try:
                self._chunks.close()
            finally:
                self._response.close()
