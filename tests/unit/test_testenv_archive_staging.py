"""An envtest archive is checked whole before anything is installed from it, and must be of
the cache's Kubernetes version (``install_envtest_archive``, ``kubemoon-testenv build
--archive``).

Local files only, no network. The stand-in kube-apiserver is a shell script that prints the
line the real one prints for ``--version``. The binary cache is always under ``tmp_path``.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from kubemoon_testing import (
    KUBERNETES_VERSION,
    ArchiveVersionError,
    EnvtestArchiveError,
    install_envtest_archive,
)
from kubemoon_testing._testenv import main

PREFIX = "controller-tools/envtest/"
OTHER_VERSION = "v1.36.0"
assert OTHER_VERSION != KUBERNETES_VERSION


def apiserver(version: str, note: str = "") -> bytes:
    return f"#!/bin/sh\necho 'Kubernetes {version}'\n# {note}\n".encode()


OLD = {
    "kube-apiserver": apiserver(KUBERNETES_VERSION, "old"),
    "etcd": b"old etcd",
    "kubectl": b"old kubectl",
    "kube-controller-manager": b"old kcm",
}
NEW_APISERVER = apiserver(KUBERNETES_VERSION, "new")


def member(name: str, content: bytes = b"", kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(content) if kind == tarfile.REGTYPE else 0
    info.mode = 0o755
    return info


def make_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info, content in members:
            archive.addfile(info, io.BytesIO(content) if info.isreg() else None)
    return path


def regular(program: str, content: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return member(PREFIX + program, content), content


def snapshot(directory: Path) -> Mapping[str, tuple[int, bytes | str | None]]:
    """Every entry under ``directory``: its mode and its bytes (a link: its target)."""
    entries: dict[str, tuple[int, bytes | str | None]] = {}
    for path in sorted(directory.rglob("*")):
        status = path.lstat()
        if path.is_symlink():
            content: bytes | str | None = os.readlink(path)
        elif path.is_file():
            content = path.read_bytes()
        else:
            content = None
        entries[str(path.relative_to(directory))] = (status.st_mode, content)
    return entries


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A binary cache (``KUBEMOON_TESTENV_DIR`` under ``tmp_path``) that an earlier build
    filled, lock file included."""
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / KUBERNETES_VERSION
    directory.mkdir(parents=True)
    for name, content in OLD.items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o755)
    (directory / ".build.lock").touch()
    return directory


def _truncated(path: Path) -> Path:
    """A gzipped tar cut off after its first program (a download cut short)."""
    make_archive(
        path,
        [regular("kube-apiserver", NEW_APISERVER), regular("etcd", os.urandom(200_000))],
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


# Each archive holds programs that would install, before or after what gets it refused.
REFUSED = {
    "etcd missing": (
        lambda p: make_archive(
            p, [regular("kube-apiserver", NEW_APISERVER), regular("kubectl", b"new kubectl")]
        ),
        "no controller-tools/envtest/etcd",
    ),
    "etcd is a link": (
        lambda p: make_archive(
            p,
            [
                regular("kube-apiserver", NEW_APISERVER),
                (member(PREFIX + "etcd", kind=tarfile.SYMTYPE), b""),
            ],
        ),
        "etcd is not a regular file",
    ),
    "a member escapes": (
        lambda p: make_archive(
            p,
            [
                regular("kube-apiserver", NEW_APISERVER),
                regular("etcd", b"new etcd"),
                (member("../../escaped", b"evil"), b"evil"),
            ],
        ),
        "'../../escaped' points outside the archive",
    ),
    "etcd twice": (
        lambda p: make_archive(
            p,
            [
                regular("kube-apiserver", NEW_APISERVER),
                regular("etcd", b"new etcd"),
                regular("etcd", b"other etcd"),
            ],
        ),
        "holds controller-tools/envtest/etcd twice",
    ),
    "cut short": (_truncated, "not a readable .tar.gz"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_archive_leaves_the_directory_as_it_was(
    case: str, cache: Path, tmp_path: Path
) -> None:
    make, error = REFUSED[case]
    archive = make(tmp_path / "refused.tar.gz")
    before = snapshot(cache)
    with pytest.raises(EnvtestArchiveError, match=error):
        install_envtest_archive(archive, cache)
    assert snapshot(cache) == before
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_archive_build_leaves_the_cache_as_it_was(
    case: str, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, error = REFUSED[case]
    archive = make(tmp_path / "refused.tar.gz")
    before = snapshot(cache)
    code = main(["build", "--force", "--only", "kube-apiserver,etcd", "--archive", str(archive)])
    assert code == 1
    assert error in capsys.readouterr().err
    assert snapshot(cache) == before


def test_a_refused_archive_does_not_leave_a_directory_it_made(tmp_path: Path) -> None:
    archive = REFUSED["etcd missing"][0](tmp_path / "refused.tar.gz")
    target = tmp_path / "new" / "bin"
    with pytest.raises(EnvtestArchiveError, match="no controller-tools/envtest/etcd"):
        install_envtest_archive(archive, target)
    assert not (tmp_path / "new").exists()


def good_archive(path: Path, version: str = KUBERNETES_VERSION) -> Path:
    return make_archive(
        path,
        [
            regular("kube-apiserver", apiserver(version)),
            regular("etcd", b"new etcd"),
            regular("kubectl", b"new kubectl"),
        ],
    )


def test_an_archive_of_another_version_is_refused(cache: Path, tmp_path: Path) -> None:
    archive = good_archive(tmp_path / "other.tar.gz", OTHER_VERSION)
    before = snapshot(cache)
    with pytest.raises(ArchiveVersionError) as caught:
        install_envtest_archive(archive, cache, version=KUBERNETES_VERSION)
    message = str(caught.value)
    assert f"holds Kubernetes {OTHER_VERSION}" in message
    assert f"is for {KUBERNETES_VERSION}" in message
    assert snapshot(cache) == before

    # Also when kube-apiserver itself is not asked for: it is what says the version.
    with pytest.raises(ArchiveVersionError, match=OTHER_VERSION):
        install_envtest_archive(archive, cache, programs=["etcd"], version=KUBERNETES_VERSION)
    assert snapshot(cache) == before


def test_build_refuses_an_archive_of_another_version(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = good_archive(tmp_path / "other.tar.gz", OTHER_VERSION)
    before = snapshot(cache)
    for only in ("kube-apiserver,etcd", "etcd"):
        code = main(["build", "--force", "--only", only, "--archive", str(archive)])
        err = capsys.readouterr().err
        assert code == 1
        assert f"holds Kubernetes {OTHER_VERSION}" in err
        assert f"is for {KUBERNETES_VERSION}" in err
        assert snapshot(cache) == before


def test_an_archive_named_for_another_version_is_refused_before_it_is_read(
    cache: Path, tmp_path: Path
) -> None:
    named = tmp_path / f"envtest-{OTHER_VERSION}-linux-amd64.tar.gz"  # never written
    with pytest.raises(ArchiveVersionError) as caught:
        install_envtest_archive(named, cache, version=KUBERNETES_VERSION)
    assert f"its name says Kubernetes {OTHER_VERSION}" in str(caught.value)
    assert KUBERNETES_VERSION in str(caught.value)
    url = f"https://example.invalid/envtest-{OTHER_VERSION}-darwin-arm64.tar.gz"
    with pytest.raises(ArchiveVersionError, match=OTHER_VERSION):
        install_envtest_archive(url, cache, sha512="0" * 128, version=KUBERNETES_VERSION)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"\x7fELF not for this machine", "cannot run its kube-apiserver --version"),
        (b"#!/bin/sh\necho 'etcd Version: 3.6.0'\n", "not a Kubernetes version"),
        (b"#!/bin/sh\necho 'Kubernetes v1.37.2'\nexit 3\n", "exit status 3"),
    ],
)
def test_an_archive_whose_version_cannot_be_read_is_refused(
    content: bytes, error: str, cache: Path, tmp_path: Path
) -> None:
    archive = make_archive(
        tmp_path / "a.tar.gz", [regular("kube-apiserver", content), regular("etcd", b"e")]
    )
    before = snapshot(cache)
    with pytest.raises(EnvtestArchiveError, match=error):
        install_envtest_archive(archive, cache, version=KUBERNETES_VERSION)
    assert snapshot(cache) == before


def test_an_archive_of_this_version_is_installed_and_nothing_else_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / KUBERNETES_VERSION
    archive = good_archive(tmp_path / f"envtest-{KUBERNETES_VERSION}-linux-amd64.tar.gz")
    assert main(["build", "--only", "etcd", "--archive", str(archive)]) == 0
    assert "installed etcd" in capsys.readouterr().out
    # kube-apiserver was read for its version, not installed.
    assert sorted(p.name for p in cache.iterdir()) == [".build.lock", "etcd"]
    assert (cache / "etcd").read_bytes() == b"new etcd"

    got = install_envtest_archive(archive, cache, version=KUBERNETES_VERSION)
    assert got == ["etcd", "kube-apiserver", "kubectl"]
    assert (cache / "kube-apiserver").read_bytes() == apiserver(KUBERNETES_VERSION)
    assert (cache / "kubectl").stat().st_mode & 0o111
    assert sorted(p.name for p in cache.iterdir()) == [
        ".build.lock",
        "etcd",
        "kube-apiserver",
        "kubectl",
    ]


def test_a_stage_left_by_a_killed_build_is_removed_by_the_next(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = cache / ".envtest-stage.killed"
    stale.mkdir()
    (stale / "kube-apiserver").write_bytes(b"half")
    monkeypatch.setenv("PATH", "/nonexistent")  # no Go: only the archive may serve
    archive = good_archive(tmp_path / "a.tar.gz")
    assert main(["build", "--force", "--only", "etcd", "--archive", str(archive)]) == 0
    assert not stale.exists()
    assert (cache / "etcd").read_bytes() == b"new etcd"
