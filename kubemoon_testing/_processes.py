"""Child processes of the test kube-apiserver that never outlive the Python process.

Rules: children run in their own session (a terminal's Ctrl-C reaches only Python, which
then stops them in order); on Linux ``PR_SET_PDEATHSIG`` kills them if Python itself is
killed, set by ``setpriv`` where it exists (so no Python runs between fork and exec), else
by a ``preexec_fn``; every fork happens on one long-lived thread (the death signal follows
the forking thread). A work directory whose owner died (SIGKILL: no ``atexit`` ran) is
removed by the next server that starts. Only the standard library.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

__all__: list[str] = []

_LOG_TAIL_LINES = 40


class _Spawner:
    """Starts children from one long-lived daemon thread.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the
    process. Forking from a short-lived worker thread (``trio.to_thread``, a thread pool)
    would kill the servers when that thread retires, so every fork happens here.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[
            tuple[
                Callable[[], subprocess.Popen[bytes]],
                concurrent.futures.Future[subprocess.Popen[bytes]],
            ]
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kubemoon-apiserver-spawner", daemon=True
                )
                self._thread.start()
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._jobs.put((start, future))
        return future.result()

    def _run(self) -> None:
        while True:
            start, future = self._jobs.get()
            try:
                future.set_result(start())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


_SPAWNER = _Spawner()


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    # Resolved in the parent: the child only makes two plain syscalls before exec.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


class _Child:
    """One child process whose output goes to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        # setpriv sets the death signal and execs the program, so no Python code runs
        # between fork and exec: a preexec_fn makes CPython fork for real, which runs the
        # fork handlers of libraries such as grpcio in the child (they may abort it).
        setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        hook = None if setpriv else _die_with_parent_hook()
        if setpriv:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]

        def start() -> subprocess.Popen[bytes]:
            # Append: a restarted apiserver keeps the previous run's log above.
            with open(log_path, "ab") as log:
                return subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # Without setpriv: forked from the spawner thread, and the hook
                    # only makes syscalls through a function resolved before the fork.
                    preexec_fn=hook,  # noqa: PLW1509
                    close_fds=True,
                )

        self.proc = _SPAWNER.spawn(start)

    def exited(self) -> int | None:
        return self.proc.poll()

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; always reaps the process."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
        self.proc.wait()

    def _signal(self, sig: signal.Signals) -> None:
        # The child leads its own process group: signal the group, in case it forked.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    """A port that was free a moment ago (startup retries if someone took it since)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_WORK_DIR_PREFIX = "kubemoon-apiserver-"
_OWNER_FILE = "owner.pid"


def _remove_orphaned_work_dirs() -> None:
    """Delete work directories left by a process that was SIGKILLed (no atexit ran).

    Its children died with it (PR_SET_PDEATHSIG); only the directory remained.
    """
    for path in Path(tempfile.gettempdir()).glob(_WORK_DIR_PREFIX + "*"):
        try:
            owner = int((path / _OWNER_FILE).read_text(encoding="ascii"))
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):
            pass  # alive but not ours (PermissionError), or not a directory we wrote
