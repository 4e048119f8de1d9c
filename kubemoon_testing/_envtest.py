"""Prebuilt binaries: the envtest release archives that controller-tools publishes.

Rules of this module:

- The index is controller-tools' ``envtest-releases.yaml``: ``releases`` maps a Kubernetes
  version to archive file names (``envtest-<version>-<os>-<arch>.tar.gz``), each with a
  ``selfLink`` (where to download it) and a ``hash`` (hex SHA-512 of the archive).
- An archive is a gzipped tar holding ``controller-tools/envtest/{etcd,kube-apiserver,
  kubectl}``. Only those exact member names, as regular files, are ever extracted. Other
  members (directories, other files) are skipped; an archive with a member that points
  outside it (an absolute or ``../`` path), or whose program is a link, a device or there
  twice, is refused.
- Every archive is checked against its SHA-512 before anything is extracted. An archive
  from a URL must come with a hash (the index gives one); only a local file may be used
  without one, because whoever names it already has it.
- Asked for a Kubernetes version, an archive must be of it: its file name, when it has the
  upstream form, must say that version (checked before downloading), and its
  ``kube-apiserver --version`` must print it (checked before installing). Otherwise
  :class:`ArchiveVersionError`, naming both versions.
- An archive is staged: downloaded, extracted and checked in a temporary directory inside
  the destination, and only when everything holds are its binaries renamed into place. A
  refused archive leaves the destination as it was.
- Sizes are bounded (the index, each archive, each member), every network read has a
  timeout, and every download an overall deadline (a server that sends a byte now and then
  cannot hold a read for long): when it passes, the download's connections are shut down and
  :class:`DownloadDeadlineError` is raised. Failures raise :class:`EnvtestArchiveError` (a
  wrong hash: :class:`ArchiveHashError`), naming the source (a URL without its user
  information or query) and what was wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import math
import os
import platform
import posixpath
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

import yaml

from kubemoon_core import KubeMoonError

from ._versions import selected_version

__all__ = [
    "ENVTEST_INDEX_URL",
    "ArchiveHashError",
    "ArchiveVersionError",
    "DownloadDeadlineError",
    "EnvtestArchive",
    "EnvtestArchiveError",
    "find_envtest_archive",
    "install_envtest_archive",
]

#: controller-tools' index of envtest release archives (``kubemoon-testenv build --index``).
ENVTEST_INDEX_URL = (
    "https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/main/envtest-releases.yaml"
)
#: Where the programs sit inside an archive.
_MEMBER_PREFIX = "controller-tools/envtest/"
#: The programs an envtest archive carries (kube-controller-manager is not among them).
ARCHIVED_PROGRAMS = frozenset({"kube-apiserver", "etcd", "kubectl"})
_MAX_INDEX_BYTES = 8 * 1024 * 1024
_MAX_ARCHIVE_BYTES = 1024 * 1024 * 1024
#: Seconds any one network operation (connect, one read) may take.
_TIMEOUT = 60.0
#: Default overall deadlines, in seconds, of downloading the index and an archive (about
#: 100 MB: 30 minutes is 56 KB/s).
INDEX_DEADLINE = 120.0
ARCHIVE_DEADLINE = 1800.0
#: Seconds ``kube-apiserver --version`` may take.
_VERSION_TIMEOUT = 60.0
_CHUNK = 1024 * 1024
#: The temporary directory an archive is staged in, inside the destination.
STAGE_PREFIX = ".envtest-stage."
#: An upstream archive name: envtest-<version>-<os>-<arch>.tar.gz.
_ARCHIVE_NAME = re.compile(
    r"envtest-(v\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)-[0-9a-z]+-[0-9a-z]+\.tar\.gz"
)
_VERSION_OUTPUT = re.compile(r"\s*Kubernetes (v\d+\.\d+\.\d+[0-9A-Za-z.+-]*)\s*")


class EnvtestArchiveError(KubeMoonError):
    """An envtest index or archive could not be fetched, read or used; says which and why."""


class ArchiveHashError(EnvtestArchiveError):
    """An archive's SHA-512 is not the expected one; nothing was installed from it."""


class ArchiveVersionError(EnvtestArchiveError):
    """An archive holds another Kubernetes version than the one asked for; the message names
    both, and nothing was installed from it."""


class DownloadDeadlineError(EnvtestArchiveError):
    """A download did not finish within its overall deadline (the message names the URL and
    the deadline); nothing was installed from it."""


@dataclass(frozen=True, slots=True)
class EnvtestArchive:
    """One archive listed in the index: where it is and its expected SHA-512 (hex)."""

    name: str
    url: str
    sha512: str


def _platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )
    system = {"win32": "windows", "cygwin": "windows"}.get(sys.platform, sys.platform)
    return system, arch


def _is_url(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme.lower() in ("http", "https")


def shown(source: str) -> str:
    """``source`` as messages name it: a URL without its user information (a password) or
    query (a token); anything else as it is."""
    if not _is_url(source):
        return source
    parts = urllib.parse.urlsplit(source)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, "..." if parts.query else "", "")
    )


def _checked_deadline(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    if not isinstance(deadline, int | float) or not (math.isfinite(deadline) and deadline > 0):
        raise EnvtestArchiveError(
            f"a download deadline must be a positive number of seconds, not {deadline!r}"
        )
    return float(deadline)


class _Deadline:
    """The overall deadline of one download. When it passes, every connection the download
    opened is shut down, so whatever blocks on one (connecting through TLS, reading the
    headers or the body) returns at once; :meth:`finish` then says it passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._expired = False
        self._finished = False
        # Duplicates of the connections' sockets: shutting one down ends the connection
        # even after TLS has taken the original over.
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        duplicate = sock.dup()
        with self._lock:
            self._watched.append(duplicate)
            expired = self._expired
        if expired:
            _shut(duplicate)

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._expired = True
            watched = list(self._watched)
        for sock in watched:
            _shut(sock)

    def finish(self) -> bool:
        """Stop watching; return whether the deadline had passed."""
        with self._lock:
            self._finished = True
        self._timer.cancel()
        if self._timer is not threading.current_thread():
            self._timer.join()
        for sock in self._watched:
            sock.close()
        self._watched.clear()
        return self._expired


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _WatchedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection whose socket a :class:`_Deadline` watches once connected."""

    deadline: _Deadline | None = None

    def connect(self) -> None:
        super().connect()  # for HTTPS: before the TLS handshake, so that is watched too
        if self.deadline is not None and self.sock is not None:
            self.deadline.watch(self.sock)


class _WatchedHTTPSConnection(http.client.HTTPSConnection, _WatchedHTTPConnection):
    pass


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPConnection:
        connection = _WatchedHTTPConnection(host, **kwargs)
        connection.deadline = self._deadline
        return connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPConnection:
        # No context: the default one, as urllib.request.urlopen uses.
        connection = _WatchedHTTPSConnection(host, **kwargs)
        connection.deadline = self._deadline
        return connection

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


def _open(source: str, deadline: _Deadline | None = None) -> IO[bytes]:
    """Open a local path, a ``file:`` URL, or an ``http(s)`` URL for reading (with
    ``deadline`` watching its connections)."""
    scheme = urllib.parse.urlsplit(source).scheme.lower()
    try:
        if scheme in ("http", "https"):
            if deadline is None:
                response: IO[bytes] = urllib.request.urlopen(source, timeout=_TIMEOUT)
                return response
            opener = urllib.request.build_opener(
                _WatchedHTTPHandler(deadline), _WatchedHTTPSHandler(deadline)
            )
            watched: IO[bytes] = opener.open(source, timeout=min(_TIMEOUT, deadline.seconds))
            return watched
        if scheme == "file":
            return open(urllib.request.url2pathname(urllib.parse.urlsplit(source).path), "rb")
        if scheme and len(scheme) > 1:  # "c:" is a Windows drive, not a scheme
            raise EnvtestArchiveError(
                f"{shown(source)}: only http, https and file URLs are supported"
            )
        return open(source, "rb")
    except EnvtestArchiveError:
        raise
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the error response open
        raise EnvtestArchiveError(f"cannot read {shown(source)}: {exc}") from None
    except (OSError, ValueError, urllib.error.URLError, http.client.HTTPException) as exc:
        raise EnvtestArchiveError(f"cannot read {shown(source)}: {exc}") from None


def _read_all(
    source: str, limit: int, sink: IO[bytes] | None, deadline: _Deadline | None
) -> tuple[bytes, str]:
    digest = hashlib.sha512()
    kept = bytearray()
    total = 0
    with _open(source, deadline) as stream:
        try:
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise EnvtestArchiveError(f"{shown(source)}: larger than {limit} bytes")
                digest.update(chunk)
                if sink is None:
                    kept += chunk
                else:
                    sink.write(chunk)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise EnvtestArchiveError(f"cannot read {shown(source)}: {exc}") from None
    return bytes(kept), digest.hexdigest()


def _read_bounded(
    source: str, limit: int, sink: IO[bytes] | None = None, *, deadline: float | None = None
) -> tuple[bytes, str]:
    """Read ``source`` (into ``sink`` if given) and return (bytes or b"", SHA-512 hex); a URL
    within ``deadline`` seconds (``None``: no overall deadline)."""
    if deadline is None or not _is_url(source):
        return _read_all(source, limit, sink, None)
    watch = _Deadline(deadline)
    try:
        result = _read_all(source, limit, sink, watch)
    except EnvtestArchiveError:
        if not watch.finish():
            raise
    finally:
        expired = watch.finish()
    if expired:
        # Whatever the read failed with (or a body cut short), the deadline was the cause.
        raise DownloadDeadlineError(
            f"{shown(source)}: the download did not finish within its deadline of "
            f"{deadline:g} s; gave up"
        ) from None
    return result


def find_envtest_archive(
    index: str = ENVTEST_INDEX_URL,
    *,
    version: str | None = None,
    os_name: str | None = None,
    arch: str | None = None,
    deadline: float | None = INDEX_DEADLINE,
) -> EnvtestArchive | None:
    """The archive of ``version`` (default: the test environment's, see
    :func:`~kubemoon_testing.default_binary_dir`) for this OS and architecture listed in
    ``index`` (a URL or a local file in controller-tools' ``envtest-releases.yaml``
    format), or ``None`` if the index lists none. Raises :class:`EnvtestArchiveError` if
    the index cannot be read or is not in that format, :class:`DownloadDeadlineError` if
    downloading it takes longer than ``deadline`` seconds (``None``: no overall deadline)."""
    seconds = _checked_deadline(deadline)
    if version is None:
        version = selected_version()
    here_os, here_arch = _platform()
    wanted = f"envtest-{version}-{os_name or here_os}-{arch or here_arch}.tar.gz"
    data, _ = _read_bounded(index, _MAX_INDEX_BYTES, deadline=seconds)
    index = shown(index)
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise EnvtestArchiveError(f"{index}: not YAML: {exc}") from None
    releases = document.get("releases") if isinstance(document, Mapping) else None
    if not isinstance(releases, Mapping):
        raise EnvtestArchiveError(f"{index}: no 'releases' mapping (not an envtest index)")
    archives = releases.get(version)
    if archives is None:
        return None
    if not isinstance(archives, Mapping):
        raise EnvtestArchiveError(f"{index}: releases.{version} is not a mapping")
    entry = archives.get(wanted)
    if entry is None:
        return None
    where = f"{index}: releases.{version}.{wanted}"
    if not isinstance(entry, Mapping):
        raise EnvtestArchiveError(f"{where} is not a mapping")
    url, digest = entry.get("selfLink"), entry.get("hash")
    if not isinstance(url, str) or not _is_url(url):
        raise EnvtestArchiveError(f"{where}.selfLink is not an http(s) URL: {url!r}")
    if not isinstance(digest, str) or not _is_sha512(digest):
        raise EnvtestArchiveError(f"{where}.hash is not a hex SHA-512: {digest!r}")
    return EnvtestArchive(name=wanted, url=url, sha512=digest.lower())


def _is_sha512(text: str) -> bool:
    return len(text) == 128 and all(c in "0123456789abcdefABCDEF" for c in text)


def _named_version(source: str) -> str | None:
    """The Kubernetes version an archive's file name states, if it has the upstream form."""
    if urllib.parse.urlsplit(source).scheme.lower() in ("http", "https", "file"):
        name = posixpath.basename(urllib.parse.unquote(urllib.parse.urlsplit(source).path))
    else:
        name = os.path.basename(source)
    match = _ARCHIVE_NAME.fullmatch(name)
    return match.group(1) if match else None


def install_envtest_archive(
    source: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    sha512: str | None = None,
    programs: Iterable[str] | None = None,
    version: str | None = None,
    deadline: float | None = ARCHIVE_DEADLINE,
) -> list[str]:
    """Install ``programs`` from the envtest archive at ``source`` (an http(s) URL, a
    ``file:`` URL or a local path) into ``directory``; return the names installed.

    ``programs`` defaults to every one the archive holds (kube-apiserver and etcd at
    least). The archive must match ``sha512`` (hex), which is required for a URL, and, if
    ``version`` is given (``"v1.37.2"``), be of that Kubernetes version: its upstream file
    name and its ``kube-apiserver --version`` must say so. A URL must be downloaded within
    ``deadline`` seconds (``None``: no overall deadline).

    Everything is checked in a temporary directory inside ``directory`` before any binary
    is renamed into place, so on any error ``directory`` is left as it was. Raises
    :class:`ArchiveHashError` on a hash mismatch, :class:`ArchiveVersionError` on a version
    mismatch, :class:`DownloadDeadlineError` when the deadline passes, and
    :class:`EnvtestArchiveError` if the archive cannot be read, lacks a program asked for
    or holds a hostile member.
    """
    text = os.fspath(source)
    asked = None if programs is None else set(programs)
    wanted = set(ARCHIVED_PROGRAMS if asked is None else asked)
    required = {"kube-apiserver", "etcd"} if asked is None else set(wanted)
    unknown = wanted - ARCHIVED_PROGRAMS
    if unknown:
        raise EnvtestArchiveError(
            f"envtest archives hold only {', '.join(sorted(ARCHIVED_PROGRAMS))}, "
            f"not {', '.join(sorted(unknown))}"
        )
    if sha512 is not None and not _is_sha512(sha512):
        raise EnvtestArchiveError(f"--sha512 is not a hex SHA-512: {sha512!r}")
    if sha512 is None and _is_url(text):
        raise EnvtestArchiveError(f"{shown(text)}: an archive from a URL needs its SHA-512")
    seconds = _checked_deadline(deadline)
    target = Path(directory)
    if version is not None:
        named = _named_version(text)
        if named is not None and named != version:
            raise ArchiveVersionError(
                f"{shown(text)}: its name says Kubernetes {named}, but {target} is for "
                f"{version}; refusing to install it"
            )
        # The version is read from kube-apiserver, installed or not.
        wanted.add("kube-apiserver")
        required.add("kube-apiserver")
    created = [p for p in (target, *target.parents) if not p.exists()]
    try:
        target.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=target))
    except OSError as exc:
        raise EnvtestArchiveError(f"cannot install into {target}: {exc}") from None
    try:
        with tempfile.TemporaryFile(dir=stage, prefix=".archive.") as spool:
            _, digest = _read_bounded(text, _MAX_ARCHIVE_BYTES, spool, deadline=seconds)
            if sha512 is not None and digest != sha512.lower():
                raise ArchiveHashError(
                    f"{shown(text)}: SHA-512 is {digest}, expected {sha512.lower()}; "
                    "refusing to install it"
                )
            spool.seek(0)
            staged = _extract(shown(text), spool, stage, wanted, required)
        if version is not None:
            found = _binary_version(shown(text), stage / "kube-apiserver")
            if found != version:
                raise ArchiveVersionError(
                    f"{shown(text)}: holds Kubernetes {found} (its kube-apiserver --version), "
                    f"but {target} is for {version}; refusing to install it"
                )
        installing = [p for p in staged if asked is None or p in asked]
        _move_in(stage, target, installing)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for path in created:  # the destination did not exist: it does not now either
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return installing


def _move_in(stage: Path, target: Path, programs: list[str]) -> None:
    """Rename the staged ``programs`` into ``target`` (each rename is atomic)."""
    for program in programs:
        destination = target / program
        if destination.is_dir() and not destination.is_symlink():
            raise EnvtestArchiveError(f"cannot install {program}: {destination} is a directory")
    try:
        for program in programs:
            os.replace(stage / program, target / program)
    except OSError as exc:  # pragma: no cover - same file system, checked above
        raise EnvtestArchiveError(f"cannot install into {target}: {exc}") from None


def _binary_version(name: str, binary: Path) -> str:
    """The Kubernetes version ``binary --version`` prints (``Kubernetes v1.37.2``)."""
    try:
        done = subprocess.run(
            [os.fspath(binary), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvtestArchiveError(
            f"{name}: cannot run its kube-apiserver --version to learn its Kubernetes "
            f"version (not for this OS and architecture?): {exc}"
        ) from None
    printed = done.stdout.decode("utf-8", "replace")
    match = _VERSION_OUTPUT.fullmatch(printed)
    if done.returncode != 0 or match is None:
        raise EnvtestArchiveError(
            f"{name}: its kube-apiserver --version printed {printed.strip()[:200]!r} "
            f"(exit status {done.returncode}), not a Kubernetes version"
        )
    return match.group(1)


def _escapes(member: str) -> bool:
    path = PurePosixPath(member)
    return path.is_absolute() or ".." in path.parts or member.startswith("\\")


def _extract(
    name: str, spool: IO[bytes], stage: Path, wanted: set[str], required: set[str]
) -> list[str]:
    extracted: list[str] = []
    try:
        with tarfile.open(fileobj=spool, mode="r:gz") as archive:
            for member in archive:
                if _escapes(member.name) or (member.islnk() and _escapes(member.linkname)):
                    raise EnvtestArchiveError(
                        f"{name}: member {member.name!r} points outside the archive; "
                        "refusing to install it"
                    )
                relative = member.name.removeprefix("./")
                program = relative.removeprefix(_MEMBER_PREFIX)
                if relative != _MEMBER_PREFIX + program or program not in wanted:
                    continue
                if not member.isreg():
                    raise EnvtestArchiveError(
                        f"{name}: {relative} is not a regular file; refusing to install it"
                    )
                if program in extracted:
                    raise EnvtestArchiveError(
                        f"{name}: holds {relative} twice; refusing to install it"
                    )
                if member.size > _MAX_ARCHIVE_BYTES:
                    raise EnvtestArchiveError(
                        f"{name}: {relative} is larger than the archive limit"
                    )
                stream = archive.extractfile(member)
                if stream is None:  # pragma: no cover - isreg() members always have data
                    continue
                _write_binary(stream, stage / program)
                extracted.append(program)
    except EnvtestArchiveError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise EnvtestArchiveError(f"{name}: not a readable .tar.gz: {exc}") from None
    missing = required - set(extracted)
    if missing:
        raise EnvtestArchiveError(
            f"{name}: no {', '.join(_MEMBER_PREFIX + m for m in sorted(missing))} "
            "(not an envtest archive?)"
        )
    return sorted(extracted)


def _write_binary(stream: IO[bytes], path: Path) -> None:
    with open(path, "xb") as out:
        while chunk := stream.read(_CHUNK):
            out.write(chunk)
    os.chmod(path, 0o755)
