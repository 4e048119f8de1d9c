"""Running the ``go`` command for ``kubemoon-testenv``: one command at a time, with a
progress line every ``_PROGRESS_EVERY`` seconds, and the errors a build step reports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__: list[str] = []

#: Seconds between two progress lines while ``go`` works.
_PROGRESS_EVERY = 15.0
_GO_HINT = (
    "Go >= 1.26 is required to build them (the `go` command on PATH; https://go.dev/dl/); "
    "it fetches everything else from the Go module proxy"
)
# An import path printed by `go build -v`: no spaces, no colons.
_PACKAGE_LINE = re.compile(r"^[A-Za-z0-9_.~/+-]+$")


class _BuildError(Exception):
    """A build step failed; the message is for the user."""


def _say(message: str, stream: IO[str] | None = None) -> None:
    print(f"kubemoon-testenv: {message}", file=stream or sys.stdout, flush=True)


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class _GoRun:
    """Run one ``go`` command, printing a progress line every ``_PROGRESS_EVERY`` seconds.

    With ``go build -v`` each compiled package is printed on its own line: the latest one
    and the count go into the progress line. Any other output (errors) is printed at once.
    """

    def __init__(self, what: str, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.what = what
        self.packages = 0
        self.latest = ""
        self.other: deque[str] = deque(maxlen=200)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.rstrip("\n")
            if _PACKAGE_LINE.match(line):
                with self._lock:
                    self.packages += 1
                    self.latest = line
            elif line.strip():
                self.other.append(line)
                print(f"  {line}", flush=True)

    def wait(self) -> float:
        """Wait for the command; return its duration or raise :class:`_BuildError`."""
        start = time.monotonic()
        try:
            while True:
                try:
                    code = self._proc.wait(timeout=_PROGRESS_EVERY)
                    break
                except subprocess.TimeoutExpired:
                    with self._lock:
                        detail = (
                            f", {self.packages} packages compiled, now {self.latest}"
                            if self.packages
                            else ""
                        )
                    _say(f"{self.what}: {_elapsed(time.monotonic() - start)} elapsed{detail}")
        finally:
            if self._proc.poll() is None:  # interrupted: take go down with us
                self._proc.terminate()
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._reader.join(5)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        if code != 0:
            raise _BuildError(f"{self.what} failed (exit status {code})")
        return time.monotonic() - start


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The shipped module alone decides versions: no go.work from a parent directory.
    env["GOWORK"] = "off"
    env["CGO_ENABLED"] = "0"
    return env


def _go_out(go: str, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [go, *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise _BuildError(f"go {' '.join(argv)} failed (exit status {done.returncode}): {tail}")
    return done.stdout
