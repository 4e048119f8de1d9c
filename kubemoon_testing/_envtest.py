"""Prebuilt binaries: the envtest release archives that controller-tools publishes.

Rules of this module:

- The index is controller-tools' ``envtest-releases.yaml``: ``releases`` maps a Kubernetes
  version to archive file names (``envtest-<version>-<os>-<arch>.tar.gz``), each with a
  ``selfLink`` (where to download it) and a ``hash`` (hex SHA-512 of the archive).
- An archive is a gzipped tar holding ``controller-tools/envtest/{etcd,kube-apiserver,
  kubectl}``. Only those exact member names, as regular files, are ever extracted; any other
  member (links, devices, ``../`` paths) is ignored, so an archive cannot write outside the
  destination.
- Every archive is checked against its SHA-512 before anything is extracted. An archive
  from a URL must come with a hash (the index gives one); only a local file may be used
  without one, because whoever names it already has it.
- Sizes are bounded (the index, each archive, each member) and every network read has a
  timeout. Failures raise :class:`EnvtestArchiveError` (a wrong hash:
  :class:`ArchiveHashError`), naming the source and what was wrong.
- Each binary is written to a temporary name and renamed into place, as a Go build does.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from kubemoon_core import KubeMoonError

from ._apiserver import KUBERNETES_VERSION

__all__ = [
    "ENVTEST_INDEX_URL",
    "ArchiveHashError",
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
_TIMEOUT = 60.0
_CHUNK = 1024 * 1024


class EnvtestArchiveError(KubeMoonError):
    """An envtest index or archive could not be fetched, read or used; says which and why."""


class ArchiveHashError(EnvtestArchiveError):
    """An archive's SHA-512 is not the expected one; nothing was installed from it."""


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


def _open(source: str) -> IO[bytes]:
    """Open a local path, a ``file:`` URL, or an ``http(s)`` URL for reading."""
    scheme = urllib.parse.urlsplit(source).scheme.lower()
    try:
        if scheme in ("http", "https"):
            response: IO[bytes] = urllib.request.urlopen(source, timeout=_TIMEOUT)
            return response
        if scheme == "file":
            return open(urllib.request.url2pathname(urllib.parse.urlsplit(source).path), "rb")
        if scheme and len(scheme) > 1:  # "c:" is a Windows drive, not a scheme
            raise EnvtestArchiveError(f"{source}: only http, https and file URLs are supported")
        return open(source, "rb")
    except EnvtestArchiveError:
        raise
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the error response open
        raise EnvtestArchiveError(f"cannot read {source}: {exc}") from None
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise EnvtestArchiveError(f"cannot read {source}: {exc}") from None


def _read_bounded(source: str, limit: int, sink: IO[bytes] | None = None) -> tuple[bytes, str]:
    """Read ``source`` (into ``sink`` if given) and return (bytes or b"", SHA-512 hex)."""
    digest = hashlib.sha512()
    kept = bytearray()
    total = 0
    with _open(source) as stream:
        try:
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise EnvtestArchiveError(f"{source}: larger than {limit} bytes")
                digest.update(chunk)
                if sink is None:
                    kept += chunk
                else:
                    sink.write(chunk)
        except (OSError, ValueError) as exc:
            raise EnvtestArchiveError(f"cannot read {source}: {exc}") from None
    return bytes(kept), digest.hexdigest()


def find_envtest_archive(
    index: str = ENVTEST_INDEX_URL,
    *,
    version: str = KUBERNETES_VERSION,
    os_name: str | None = None,
    arch: str | None = None,
) -> EnvtestArchive | None:
    """The archive of ``version`` for this OS and architecture listed in ``index`` (a URL or
    a local file in controller-tools' ``envtest-releases.yaml`` format), or ``None`` if the
    index lists none. Raises :class:`EnvtestArchiveError` if the index cannot be read or is
    not in that format."""
    here_os, here_arch = _platform()
    wanted = f"envtest-{version}-{os_name or here_os}-{arch or here_arch}.tar.gz"
    data, _ = _read_bounded(index, _MAX_INDEX_BYTES)
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


def install_envtest_archive(
    source: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    sha512: str | None = None,
    programs: Iterable[str] | None = None,
) -> list[str]:
    """Install ``programs`` from the envtest archive at ``source`` (an http(s) URL, a
    ``file:`` URL or a local path) into ``directory``; return the names installed.

    ``programs`` defaults to every one the archive holds (kube-apiserver and etcd at
    least). The archive must match ``sha512`` (hex), which is required for a URL. Raises
    :class:`ArchiveHashError` on a mismatch (nothing is installed) and
    :class:`EnvtestArchiveError` if the archive cannot be read or lacks a program asked for.
    """
    text = os.fspath(source)
    wanted = set(ARCHIVED_PROGRAMS if programs is None else programs)
    required = {"kube-apiserver", "etcd"} if programs is None else wanted
    unknown = wanted - ARCHIVED_PROGRAMS
    if unknown:
        raise EnvtestArchiveError(
            f"envtest archives hold only {', '.join(sorted(ARCHIVED_PROGRAMS))}, "
            f"not {', '.join(sorted(unknown))}"
        )
    if sha512 is not None and not _is_sha512(sha512):
        raise EnvtestArchiveError(f"--sha512 is not a hex SHA-512: {sha512!r}")
    if sha512 is None and _is_url(text):
        raise EnvtestArchiveError(f"{text}: an archive from a URL needs its SHA-512")
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=target, prefix=".envtest-archive.") as spool:
        _, digest = _read_bounded(text, _MAX_ARCHIVE_BYTES, spool)
        if sha512 is not None and digest != sha512.lower():
            raise ArchiveHashError(
                f"{text}: SHA-512 is {digest}, expected {sha512.lower()}; refusing to install it"
            )
        spool.seek(0)
        return _extract(text, spool, target, wanted, required)


def _extract(
    name: str, spool: IO[bytes], target: Path, wanted: set[str], required: set[str]
) -> list[str]:
    installed: list[str] = []
    try:
        with tarfile.open(fileobj=spool, mode="r:gz") as archive:
            for member in archive:
                program = member.name.removeprefix("./").removeprefix(_MEMBER_PREFIX)
                if (
                    member.name.removeprefix("./") != _MEMBER_PREFIX + program
                    or program not in wanted
                    or program in installed
                    or not member.isreg()
                    or member.size > _MAX_ARCHIVE_BYTES
                ):
                    continue
                stream = archive.extractfile(member)
                if stream is None:  # pragma: no cover - isreg() members always have data
                    continue
                _write_binary(stream, target, program)
                installed.append(program)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise EnvtestArchiveError(f"{name}: not a readable .tar.gz: {exc}") from None
    missing = required - set(installed)
    if missing:
        raise EnvtestArchiveError(
            f"{name}: no {', '.join(_MEMBER_PREFIX + m for m in sorted(missing))} "
            "(not an envtest archive?)"
        )
    return sorted(installed)


def _write_binary(stream: IO[bytes], target: Path, program: str) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{program}.", dir=target)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(_CHUNK):
                out.write(chunk)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, target / program)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
