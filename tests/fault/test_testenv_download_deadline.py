"""A download of an envtest index or archive has one overall deadline.

A server on 127.0.0.1 trickles one byte every 0.2 s (each read is well within the per-read
timeout, so only an overall deadline ends it): in the body, in the headers, or in a body
without a length (where shutting the connection down looks like the end of the body). With
the deadline set to 1 s the download fails with :class:`DownloadDeadlineError` naming the
URL (without its user information or query) and the deadline. A ``SIGALRM`` guard turns a
download that hangs into a failure instead of a hung test.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from kubemoon_testing import (
    KUBERNETES_VERSION,
    DownloadDeadlineError,
    EnvtestArchiveError,
    find_envtest_archive,
    install_envtest_archive,
)
from kubemoon_testing._testenv import main

DRIP_EVERY = 0.2
DEADLINE = 1.0
#: Far more than the test waits: a download without a deadline would take hours.
GUARD = 30.0

_HEADS = {
    "body": b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n",
    "no-length": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
    "headers": b"HTTP/1.1 200 OK\r\nX-Slow: ",
}


class DripServer:
    """Answers every request by sending the head its path names, then one byte every
    ``DRIP_EVERY`` seconds until the client goes away or the server stops."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        self._listener.settimeout(DRIP_EVERY)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(GUARD)
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ", 2)[1].decode()
                conn.sendall(_HEADS[path.split("/")[1]])
                while not self._stop.wait(DRIP_EVERY):
                    conn.sendall(b"a")
            except OSError:
                return  # the client gave up

    def close(self) -> None:
        self._stop.set()
        self._accepter.join(GUARD)
        self._listener.close()
        for thread in self._threads:
            thread.join(GUARD)


@pytest.fixture
def drip() -> Iterator[str]:
    server = DripServer()
    try:
        yield server.base
    finally:
        server.close()


class Hung(Exception):
    pass


def _hung(_signum: int, _frame: FrameType | None) -> None:
    raise Hung(f"the download was still running after {GUARD:g} s")


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Fail (not hang) if the body takes more than GUARD seconds."""
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.setitimer(signal.ITIMER_REAL, GUARD)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("where", sorted(_HEADS))
def test_a_trickling_archive_download_stops_at_its_deadline(
    where: str, drip: str, tmp_path: Path
) -> None:
    url = f"{drip}/{where}/envtest.tar.gz?token=secret"
    target = tmp_path / "bin"
    target.mkdir()
    with guarded(), pytest.raises(DownloadDeadlineError) as caught:
        install_envtest_archive(url, target, sha512="0" * 128, deadline=DEADLINE)
    message = str(caught.value)
    assert f"{drip}/{where}/envtest.tar.gz" in message
    assert "within its deadline of 1 s" in message
    assert "secret" not in message
    assert list(target.iterdir()) == []


def test_a_trickling_index_stops_at_its_deadline(drip: str) -> None:
    with guarded(), pytest.raises(DownloadDeadlineError, match=r"index\.yaml: the download"):
        find_envtest_archive(f"{drip}/body/index.yaml", deadline=DEADLINE)


def test_build_gives_up_on_a_trickling_archive_at_its_deadline(
    drip: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path / "cache"))
    url = f"{drip}/body/envtest.tar.gz"
    argv = ["build", "--only", "kube-apiserver,etcd", "--archive", url, "--sha512", "0" * 128]
    with guarded():
        assert main([*argv, "--download-deadline", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{url}: the download did not finish within its deadline of 1 s" in err
    assert sorted(p.name for p in (tmp_path / "cache" / KUBERNETES_VERSION).iterdir()) == [
        ".build.lock"
    ]


def test_a_deadline_must_be_positive_seconds(tmp_path: Path) -> None:
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(EnvtestArchiveError, match="positive number of seconds"):
            install_envtest_archive(tmp_path / "a.tar.gz", tmp_path, deadline=bad)
        with pytest.raises(EnvtestArchiveError, match="positive number of seconds"):
            find_envtest_archive(str(tmp_path / "i.yaml"), deadline=bad)
    with pytest.raises(SystemExit):
        main(["build", "--download-deadline", "0"])


def test_credentials_in_a_url_are_not_repeated_in_errors(tmp_path: Path) -> None:
    url = "http://user:secret@127.0.0.1:9/envtest.tar.gz"
    with pytest.raises(EnvtestArchiveError) as caught:
        install_envtest_archive(url, tmp_path, sha512="0" * 128, deadline=DEADLINE)
    assert "secret" not in str(caught.value)
    assert "127.0.0.1:9/envtest.tar.gz" in str(caught.value)
