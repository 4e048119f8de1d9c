"""``kubemoon-testenv``: build or locate the real kube-apiserver, etcd, controller manager and
the kubectl that differential tests compare against.

Rules of this module:

- The Go module that pins the three programs ships inside this package
  (``kubemoon_testing/testenv/``: ``go.mod``, ``go.sum``, ``tools.go``), so a user's project
  builds exactly what KubeMoon's own suite runs, with nothing but Go and the module proxy.
- Binaries are cached per Kubernetes version outside any project, in
  :func:`~kubemoon_testing.default_binary_dir`; a build of a binary that exists is a no-op.
- Each binary is built to a temporary name and renamed into place, so an interrupted build
  never leaves a half-written binary. Concurrent builds serialize on a ``flock`` of
  ``.build.lock`` in the cache directory (the same lock the old ``testenv/build.sh`` took).
- A build never edits the module files: it runs in a temporary copy with ``-mod=readonly``
  and ``GOWORK=off``.
- Programs that controller-tools' envtest release archives carry (kube-apiserver, etcd,
  kubectl) are taken from the archive of this Kubernetes version when the index lists one
  for this OS and architecture (or from ``--archive``), checked against its SHA-512; what
  no archive provides (always kube-controller-manager) is built with Go. An index that
  cannot be reached, or that lists no archive that fits, means the Go build; an archive
  whose hash or Kubernetes version is wrong stops the command, and leaves the cache as it
  was (the archive is checked whole before any binary is renamed into place).
- Every download has an overall deadline (``--download-deadline``), so a server that
  trickles bytes cannot hold the build lock for long.

This module is the command line and the build; the Go module itself (where it ships, how a
release's is rendered, ``kubemoon-testenv module --write/--check``) is
``kubemoon_testing._testenv_module``, and running ``go`` with progress lines is
``kubemoon_testing._go_runs``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from . import _envtest, _go_runs
from ._apiserver import default_binary_dir
from ._go_runs import _GO_HINT, _BuildError, _elapsed, _go_env, _GoRun, _say
from ._testenv_module import (
    _ETCD_MODULE,
    _MODULE_DIR,
    _MODULE_FILES,
    _TOOLS,
    _module,
    _render_module,
    module_dir,
)
from ._versions import (
    SUPPORTED_RELEASES,
    VERSION_ENV,
    UnsupportedVersionError,
    release_for,
    selected_version,
)

__all__ = ["main"]

_VERSION_PKG = "k8s.io/component-base/version"
#: Where ``build`` looks for envtest archives unless ``--index`` says: a URL, a file, or
#: ``none`` (a mirror, or no download at all).
_INDEX_ENV = "KUBEMOON_TESTENV_INDEX"


@dataclass(frozen=True, slots=True)
class _Program:
    name: str
    package: str
    aliases: tuple[str, ...]


_PROGRAMS = (
    _Program("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", ("apiserver",)),
    _Program("etcd", _ETCD_MODULE, ()),
    _Program(
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        ("controller-manager", "kcm"),
    ),
    # The reference of the kubeconfig differential tests (tests/differential).
    _Program("kubectl", "k8s.io/kubernetes/cmd/kubectl", ()),
)


def _select(names: str | None) -> list[_Program]:
    if not names:
        return list(_PROGRAMS)
    chosen: list[_Program] = []
    for raw in names.split(","):
        wanted = raw.strip()
        if not wanted:
            continue
        for program in _PROGRAMS:
            if wanted == program.name or wanted in program.aliases:
                if program not in chosen:
                    chosen.append(program)
                break
        else:
            known = ", ".join(p.name for p in _PROGRAMS)
            raise _BuildError(f"unknown program {wanted!r} (known: {known})")
    return chosen


def _missing(directory: Path, programs: Sequence[_Program]) -> list[_Program]:
    return [p for p in programs if not os.access(directory / p.name, os.X_OK)]


def _size(num: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if num < 1000 or unit == "GB":
            return f"{num:.0f} {unit}" if unit in ("B", "KB") else f"{num:.1f} {unit}"
        num /= 1000
    raise AssertionError("unreachable")


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """Hold ``directory/.build.lock`` exclusively; say so when another build holds it."""
    with open(directory / ".build.lock", "a", encoding="ascii") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say("another build is running in this cache directory; waiting for it ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file descriptor


def _ldflags(program: _Program, etcd_version: str, version: str) -> str:
    if program.name == "etcd":
        return f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-{etcd_version}"
    minor = version.split(".")[1]
    return (
        f"-s -w -X {_VERSION_PKG}.gitVersion={version} -X {_VERSION_PKG}.gitMajor=1 "
        f"-X {_VERSION_PKG}.gitMinor={minor} -X {_VERSION_PKG}.gitTreeState=clean"
    )


def _build(directory: Path, programs: Sequence[_Program], go: str, version: str) -> None:
    """Build ``programs`` of ``version`` into ``directory`` (the lock is held)."""
    env = _go_env()
    with tempfile.TemporaryDirectory(prefix="kubemoon-testenv-module-") as tmp:
        module = Path(tmp)
        # A writable copy: the installed package may be read-only, and a build must never
        # touch the shipped go.mod/go.sum.
        shipped = module_dir(version)
        if all((shipped / name).exists() for name in _MODULE_FILES):
            for name in _MODULE_FILES:
                shutil.copyfile(shipped / name, module / name)
            shutil.copyfile(_MODULE_DIR / _TOOLS, module / _TOOLS)
        else:
            _render_module(release_for(version), module, go)
        go_version = subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False, env=env
        ).stdout.strip()
        _say(f"using {go_version or go}")
        _say("downloading Go modules (a cold download is about 100 MB) ...")
        took = _GoRun("downloading Go modules", [go, "mod", "download"], module, env).wait()
        _say(f"modules ready in {_elapsed(took)}")
        etcd_version = subprocess.run(
            [go, "list", "-m", "-f", "{{.Version}}", _ETCD_MODULE],
            cwd=module,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        for program in programs:
            final = directory / program.name
            fd, tmp_name = tempfile.mkstemp(prefix=f".{program.name}.", dir=directory)
            os.close(fd)
            try:
                _say(f"building {program.name} ({program.package}) ...")
                argv = [
                    go,
                    "build",
                    "-v",
                    "-mod=readonly",
                    "-trimpath",
                    "-pgo=off",
                    "-ldflags",
                    _ldflags(program, etcd_version, version),
                    "-o",
                    tmp_name,
                    program.package,
                ]
                run = _GoRun(f"building {program.name}", argv, module, env)
                took = run.wait()
                os.chmod(tmp_name, 0o755)
                os.replace(tmp_name, final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_name)
            compiled = f", {run.packages} packages compiled" if run.packages else " (all cached)"
            _say(f"built {program.name} in {_elapsed(took)}{compiled}")


def _summary(directory: Path, go: str | None) -> None:
    rows = []
    for program in _PROGRAMS:
        path = directory / program.name
        if path.exists():
            rows.append(f"{program.name} {_size(path.stat().st_size)}")
        else:
            rows.append(f"{program.name} not built")
    _say(f"binaries in {directory}: {', '.join(rows)}; total {_size(_tree_size(directory))}")
    if go is not None:
        gocache = subprocess.run(
            [go, "env", "GOCACHE"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if gocache and Path(gocache).is_dir():
            _say(
                f"Go build cache {gocache}: {_size(_tree_size(Path(gocache)))} "
                "(makes rebuilds fast; `go clean -cache` frees it)"
            )


@dataclass(frozen=True, slots=True)
class _Prebuilt:
    """Where prebuilt programs may come from (``build --index/--archive/--no-archive``)."""

    index: str | None = _envtest.ENVTEST_INDEX_URL
    archive: str | None = None
    sha512: str | None = None
    #: Overall deadline of each download in seconds; None: the defaults of _envtest.
    deadline: float | None = None


def _install_prebuilt(
    directory: Path, todo: list[_Program], source: _Prebuilt, version: str
) -> list[_Program]:
    """Install what an envtest archive can provide; return the programs still to build."""
    fits = [p for p in todo if p.name in _envtest.ARCHIVED_PROGRAMS]
    if not fits or (source.archive is None and source.index is None):
        return todo
    names = [p.name for p in fits]
    if source.archive is not None:
        url, sha512 = source.archive, source.sha512
    else:
        assert source.index is not None
        try:
            found = _envtest.find_envtest_archive(
                source.index,
                version=version,
                deadline=source.deadline if source.deadline else _envtest.INDEX_DEADLINE,
            )
        except _envtest.EnvtestArchiveError as exc:
            _say(f"no prebuilt archive ({exc}); building with Go instead")
            return todo
        if found is None:
            _say(
                f"{source.index} lists no envtest archive of {version} for this "
                "OS and architecture; building with Go instead"
            )
            return todo
        url, sha512 = found.url, found.sha512
    _say(f"installing {', '.join(names)} from {_envtest.shown(url)} ...")
    start = time.monotonic()
    _envtest.install_envtest_archive(
        url,
        directory,
        sha512=sha512,
        programs=names,
        version=version,
        deadline=source.deadline if source.deadline else _envtest.ARCHIVE_DEADLINE,
    )
    checked = "SHA-512 verified" if sha512 else "no SHA-512 given"
    _say(f"installed {', '.join(names)} in {_elapsed(time.monotonic() - start)} ({checked})")
    return [p for p in todo if p not in fits]


def _run_build(
    names: str | None,
    *,
    force: bool,
    source: _Prebuilt | None = None,
    version: str | None = None,
) -> int:
    """Install (from an envtest archive) or build (with Go) the selected programs of
    Kubernetes ``version`` (default :func:`selected_version`), all by default, unless they
    are cached; return 0."""
    source = source if source is not None else _Prebuilt()
    version = selected_version(version)
    directory = default_binary_dir(version)
    programs = _select(names)
    if not force and not _missing(directory, programs):
        _say(f"{', '.join(p.name for p in programs)} {version} already built in {directory}")
        return 0
    go = shutil.which("go")
    directory.mkdir(parents=True, exist_ok=True)
    with _build_lock(directory):
        start = time.monotonic()  # not counting the wait for another build
        # Holding the lock, a temporary file here belongs to a build that was SIGKILLed.
        for program in _PROGRAMS:
            for stale in directory.glob(f".{program.name}.*"):
                stale.unlink(missing_ok=True)
        for stage in directory.glob(f"{_envtest.STAGE_PREFIX}*"):
            shutil.rmtree(stage, ignore_errors=True)
        todo = list(programs) if force else _missing(directory, programs)
        todo = _install_prebuilt(directory, todo, source, version)
        if not todo:
            _say(f"nothing left to build in {directory}")
        elif go is None:
            wanted = ", ".join(p.name for p in todo)
            off = (
                "; without it the test fixtures run without garbage collection and "
                "namespace deletion (controller_manager=False)"
                if [p.name for p in todo] == ["kube-controller-manager"]
                else ""
            )
            raise _BuildError(f"cannot build {wanted} {version}: {_GO_HINT}{off}")
        else:
            _say(
                f"building {', '.join(p.name for p in todo)} {version} into "
                f"{directory} (cold, all four take about 20 minutes on 2 idle "
                f"cores; progress every {_go_runs._PROGRESS_EVERY:.0f} s)"
            )
            _build(directory, todo, go, version)
    _say(f"done in {_elapsed(time.monotonic() - start)}")
    _summary(directory, go if todo else None)
    return 0


def _path(name: str | None, version: str | None = None) -> int:
    directory = default_binary_dir(version)
    if name is None:
        print(directory)
        return 0
    (program,) = _select(name)
    path = directory / program.name
    print(path)
    if not os.access(path, os.X_OK):
        _say(
            f"{program.name} is not built yet: run `kubemoon-testenv build --version "
            f"{selected_version(version)}`",
            sys.stderr,
        )
        return 1
    return 0


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return seconds


def _terminate(signum: int, _frame: object) -> NoReturn:
    # SIGTERM becomes a normal exit, so the `finally` blocks remove temporary files.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kubemoon-testenv`` command."""
    parser = argparse.ArgumentParser(
        prog="kubemoon-testenv",
        description=(
            f"Get (once) or locate kube-apiserver, etcd, kube-controller-manager and kubectl "
            "of a supported Kubernetes release "
            f"({', '.join(r.version for r in SUPPORTED_RELEASES)}; default: "
            f"${VERSION_ENV}, else the newest) for kubemoon_testing's real test environment: from "
            "controller-tools' envtest release archive where one fits (SHA-512 checked), "
            "else built with Go (kube-controller-manager always is). Binaries "
            "are cached in $KUBEMOON_TESTENV_DIR/<version> (default "
            "${XDG_CACHE_HOME:-~/.cache}/kubemoon/testenv/<version>)."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser(
        "build",
        help="install what is missing from a prebuilt envtest archive, build the rest with Go",
    )
    build_cmd.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated subset: kube-apiserver, etcd, kube-controller-manager, kubectl",
    )
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if cached")
    build_cmd.add_argument(
        "--index",
        metavar="URL_OR_FILE",
        default=os.environ.get(_INDEX_ENV) or _envtest.ENVTEST_INDEX_URL,
        help="controller-tools' envtest-releases.yaml to find a prebuilt archive in, or "
        f"'none' (default: ${_INDEX_ENV}, else %(default)s)",
    )
    build_cmd.add_argument(
        "--archive",
        metavar="URL_OR_FILE",
        help="take kube-apiserver and etcd from this envtest archive instead of the index "
        "(it must be of the Kubernetes version built)",
    )
    build_cmd.add_argument(
        "--sha512", metavar="HEX", help="expected SHA-512 of --archive (required for a URL)"
    )
    build_cmd.add_argument(
        "--no-archive", action="store_true", help="build everything with Go, download nothing"
    )
    build_cmd.add_argument(
        "--download-deadline",
        metavar="SECONDS",
        type=_seconds,
        help="give up on any one download after this long (default: "
        f"{_envtest.INDEX_DEADLINE:g} s for the index, {_envtest.ARCHIVE_DEADLINE:g} s for an "
        "archive)",
    )
    build_cmd.add_argument(
        "--version",
        metavar="VERSION",
        help="the Kubernetes release: a supported minor (1.36) or its release (v1.36.3), or "
        f"'all' for every supported one (default: ${VERSION_ENV}, else the newest)",
    )
    path_cmd = commands.add_parser("path", help="print the cache directory or one binary")
    path_cmd.add_argument("name", nargs="?", help="print this binary's path; exit 1 if missing")
    path_cmd.add_argument("--version", metavar="VERSION", help="as for build (not 'all')")
    module_cmd = commands.add_parser(
        "module",
        help="render the Go module of a supported release from the list of supported releases",
    )
    module_cmd.add_argument("--version", metavar="VERSION", help="one release (default: all)")
    mode = module_cmd.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the shipped go.mod/go.sum")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if a shipped go.mod/go.sum is stale"
    )
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.command == "build":
            source = _Prebuilt(
                index=None if args.no_archive or args.index == "none" else args.index,
                archive=None if args.no_archive else args.archive,
                sha512=args.sha512,
                deadline=args.download_deadline,
            )
            if args.version == "all":
                for release in SUPPORTED_RELEASES:
                    _run_build(args.only, force=args.force, source=source, version=release.version)
                return 0
            return _run_build(args.only, force=args.force, source=source, version=args.version)
        if args.command == "module":
            return _module(args.version, write=args.write, check=args.check)
        return _path(args.name, args.version)
    except (_BuildError, _envtest.EnvtestArchiveError, UnsupportedVersionError) as exc:
        _say(str(exc), sys.stderr)
        return 1
    except KeyboardInterrupt:
        _say("interrupted", sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
