"""``kubemoon-testenv build`` from envtest release archives, entirely offline.

An archive in the upstream layout (``controller-tools/envtest/{kube-apiserver,etcd}`` in a
.tar.gz, wrapping the binaries this suite built) and an index in controller-tools'
``envtest-releases.yaml`` format are served by an HTTP server on 127.0.0.1. The command
installs from the index, from a URL and from a local file; a wrong hash, a hostile archive
or index, or a missing Go toolchain for the rest are refused with typed errors.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import subprocess
import tarfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from kubemoon_testing import (
    ArchiveHashError,
    EnvtestArchiveError,
    default_binary_dir,
    find_envtest_archive,
    install_envtest_archive,
)
from kubemoon_testing._envtest import _platform
from kubemoon_testing._testenv import main
from kubemoon_testing._versions import selected_version

PREFIX = "controller-tools/envtest/"
#: The Kubernetes release of this run (--kubernetes-version): the one built and archived.
RUN_VERSION = selected_version()
#: The binaries this suite built (read before any test points the cache elsewhere).
BUILT = default_binary_dir()
#: A stand-in kube-apiserver: the command checks the version an archive's one prints.
APISERVER = f"#!/bin/sh\necho 'Kubernetes {RUN_VERSION}'\n".encode()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on 127.0.0.1, and its base URL."""
    root = tmp_path / "www"
    root.mkdir()

    def handler(*args: object) -> _Quiet:
        return _Quiet(*args, directory=str(root))  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def make_archive(path: Path, members: Mapping[str, bytes | Path], level: int = 1) -> str:
    """Write a .tar.gz holding ``members`` (name -> content or file); return its SHA-512."""
    with tarfile.open(path, "w:gz", compresslevel=level) as archive:
        for name, content in members.items():
            if isinstance(content, Path):
                archive.add(content, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(content)
                info.mode = 0o755
                archive.addfile(info, io.BytesIO(content))
    return hashlib.sha512(path.read_bytes()).hexdigest()


def write_index(path: Path, archive_url: str, sha512: str, version: str = RUN_VERSION) -> None:
    os_name, arch = _platform()
    name = f"envtest-{version}-{os_name}-{arch}.tar.gz"
    other = f"envtest-{version}-plan9-mips.tar.gz"
    index = {
        "releases": {
            "v1.0.0": {name: {"hash": "0" * 128, "selfLink": "https://example.invalid/x"}},
            version: {
                other: {"hash": "1" * 128, "selfLink": "https://example.invalid/y"},
                name: {"hash": sha512, "selfLink": archive_url},
            },
        }
    }
    path.write_text(yaml.safe_dump(index))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty binary cache for the command (``KUBEMOON_TESTENV_DIR``)."""
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / RUN_VERSION


@pytest.mark.integration
def test_build_installs_the_suites_binaries_from_an_upstream_layout_archive(
    served: tuple[Path, str], cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = served
    real = BUILT
    sources = {PREFIX + name: real / name for name in ("kube-apiserver", "etcd")}
    for name, path in sources.items():
        assert path.is_file(), f"{name}: run `make testenv` first"
    sha512 = make_archive(root / "envtest.tar.gz", sources)
    write_index(root / "envtest-releases.yaml", f"{base}/envtest.tar.gz", sha512)

    code = main(
        ["build", "--only", "kube-apiserver,etcd", "--index", f"{base}/envtest-releases.yaml"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SHA-512 verified" in out
    for name in ("kube-apiserver", "etcd"):
        assert (cache / name).read_bytes() == (real / name).read_bytes()
    version = subprocess.run(
        [str(cache / "kube-apiserver"), "--version"], capture_output=True, text=True, check=True
    )
    assert RUN_VERSION in version.stdout
    assert not [p for p in cache.iterdir() if p.name.startswith(".envtest-archive.")]

    # Cached now: a second build neither downloads nor builds.
    assert main(["build", "--only", "kube-apiserver,etcd", "--index", "/nonexistent"]) == 0
    assert "already built" in capsys.readouterr().out


def test_archive_from_a_url_and_from_a_local_file(served: tuple[Path, str], tmp_path: Path) -> None:
    root, base = served
    members = {PREFIX + "kube-apiserver": b"#!apiserver", PREFIX + "etcd": b"#!etcd"}
    sha512 = make_archive(root / "a.tar.gz", members)

    from_url = tmp_path / "from-url"
    got = install_envtest_archive(f"{base}/a.tar.gz", from_url, sha512=sha512.upper())
    assert got == ["etcd", "kube-apiserver"]
    assert (from_url / "etcd").read_bytes() == b"#!etcd"
    assert (from_url / "etcd").stat().st_mode & 0o111

    from_file = tmp_path / "from-file"
    got = install_envtest_archive(root / "a.tar.gz", from_file, programs=["etcd"])
    assert got == ["etcd"]
    assert not (from_file / "kube-apiserver").exists()

    with pytest.raises(EnvtestArchiveError, match="needs its SHA-512"):
        install_envtest_archive(f"{base}/a.tar.gz", tmp_path / "no-hash")
    with pytest.raises(EnvtestArchiveError, match="404"):
        install_envtest_archive(f"{base}/missing.tar.gz", tmp_path / "x", sha512=sha512)
    with pytest.raises(EnvtestArchiveError, match="only http, https and file"):
        install_envtest_archive("ftp://127.0.0.1/a.tar.gz", tmp_path / "x", sha512=sha512)
    with pytest.raises(EnvtestArchiveError, match="hold only"):
        install_envtest_archive(root / "a.tar.gz", tmp_path / "x", programs=["kube-scheduler"])


def test_a_wrong_hash_is_refused_and_nothing_is_installed(
    served: tuple[Path, str], cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = served
    members = {PREFIX + "kube-apiserver": b"tampered", PREFIX + "etcd": b"tampered"}
    sha512 = make_archive(root / "a.tar.gz", members)
    wrong = hashlib.sha512(b"the real archive").hexdigest()
    with pytest.raises(ArchiveHashError, match=f"expected {wrong}"):
        install_envtest_archive(f"{base}/a.tar.gz", cache, sha512=wrong)
    assert not cache.exists()  # not even the directory it would have made

    write_index(root / "index.yaml", f"{base}/a.tar.gz", wrong)
    code = main(["build", "--only", "kube-apiserver,etcd", "--index", f"{base}/index.yaml"])
    captured = capsys.readouterr()
    assert code == 1
    assert "refusing to install it" in captured.err
    assert not (cache / "kube-apiserver").exists()
    assert sha512 in captured.err  # what the archive really hashes to


def test_no_fitting_archive_falls_back_to_the_go_build(
    served: tuple[Path, str],
    cache: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, base = served
    write_index(root / "index.yaml", f"{base}/a.tar.gz", "a" * 128, version="v1.0.1")
    monkeypatch.setenv("PATH", "/nonexistent")  # no Go: the fallback shows in the error
    code = main(["build", "--only", "kube-apiserver", "--index", f"{base}/index.yaml"])
    captured = capsys.readouterr()
    assert code == 1
    assert f"lists no envtest archive of {RUN_VERSION}" in captured.out
    assert "cannot build kube-apiserver" in captured.err

    # An unreachable or malformed index is the same: build with Go.
    (root / "bad.yaml").write_text("releases: [1, 2]\n")
    assert main(["build", "--only", "etcd", "--index", f"{base}/bad.yaml"]) == 1
    captured = capsys.readouterr()
    assert "no 'releases' mapping" in captured.out
    assert "building with Go instead" in captured.out

    # The controller manager is never in an archive; the message says what it is for.
    members = {
        PREFIX + "kube-apiserver": APISERVER,
        PREFIX + "etcd": b"e",
        PREFIX + "kubectl": b"k",
    }
    sha512 = make_archive(root / "a.tar.gz", members)
    write_index(root / "good.yaml", f"{base}/a.tar.gz", sha512)
    monkeypatch.setenv("KUBEMOON_TESTENV_INDEX", "none")
    assert main(["build", "--only", "etcd"]) == 1  # no index at all: straight to Go
    assert "installing" not in capsys.readouterr().out
    monkeypatch.setenv("KUBEMOON_TESTENV_INDEX", f"{base}/good.yaml")  # a mirror
    assert main(["build"]) == 1
    captured = capsys.readouterr()
    assert "cannot build kube-controller-manager" in captured.err
    assert "without garbage collection" in captured.err
    assert (cache / "etcd").read_bytes() == b"e"
    assert (cache / "kubectl").read_bytes() == b"k"


def test_hostile_archives_write_nothing_outside_and_are_refused(
    tmp_path: Path,
) -> None:
    target = tmp_path / "bin"
    escape = tmp_path / "escaped"
    hostile = tmp_path / "hostile.tar.gz"
    with tarfile.open(hostile, "w:gz") as archive:
        for name in ("../escaped", f"{PREFIX}../../escaped", "/etc/passwd-kubemoon"):
            info = tarfile.TarInfo(name)
            info.size = 4
            archive.addfile(info, io.BytesIO(b"evil"))
        link = tarfile.TarInfo(PREFIX + "kube-apiserver")
        link.type = tarfile.SYMTYPE
        link.linkname = str(escape)
        archive.addfile(link)
    with pytest.raises(EnvtestArchiveError, match="'../escaped' points outside the archive"):
        install_envtest_archive(hostile, target)
    assert not escape.exists()
    assert not (target / "kube-apiserver").exists()

    linked = tmp_path / "linked.tar.gz"
    with tarfile.open(linked, "w:gz") as archive:
        archive.addfile(link)
    with pytest.raises(EnvtestArchiveError, match="kube-apiserver is not a regular file"):
        install_envtest_archive(linked, target)
    assert not escape.exists()

    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(EnvtestArchiveError, match="not a readable .tar.gz"):
        install_envtest_archive(garbage, target)

    for text, error in [
        ("{", "not YAML"),
        ("- a list\n", "no 'releases' mapping"),
        (f"releases: {{{RUN_VERSION}: 3}}\n", "is not a mapping"),
    ]:
        (tmp_path / "i.yaml").write_text(text)
        with pytest.raises(EnvtestArchiveError, match=error):
            find_envtest_archive(str(tmp_path / "i.yaml"))
    os_name, arch = _platform()
    name = f"envtest-{RUN_VERSION}-{os_name}-{arch}.tar.gz"
    for entry, error in [
        ({"hash": "0" * 128, "selfLink": "file:///etc/passwd"}, "not an http"),
        ({"hash": "zz", "selfLink": "https://example.invalid/a"}, "not a hex SHA-512"),
    ]:
        (tmp_path / "i.yaml").write_text(yaml.safe_dump({"releases": {RUN_VERSION: {name: entry}}}))
        with pytest.raises(EnvtestArchiveError, match=error):
            find_envtest_archive(str(tmp_path / "i.yaml"))
    with pytest.raises(EnvtestArchiveError, match="cannot read"):
        find_envtest_archive(str(tmp_path / "missing.yaml"))


def test_sizes_are_bounded(
    served: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubemoon_testing import _envtest

    root, base = served
    (root / "index.yaml").write_text("releases: {}\n" + "#" * 200)
    monkeypatch.setattr(_envtest, "_MAX_INDEX_BYTES", 100)
    with pytest.raises(EnvtestArchiveError, match="larger than 100 bytes"):
        find_envtest_archive(f"{base}/index.yaml")
    members = {PREFIX + "kube-apiserver": b"x" * 5000, PREFIX + "etcd": b"e"}
    sha512 = make_archive(root / "a.tar.gz", members, level=0)
    monkeypatch.setattr(_envtest, "_MAX_ARCHIVE_BYTES", 1000)
    with pytest.raises(EnvtestArchiveError, match="larger than 1000 bytes"):
        install_envtest_archive(f"{base}/a.tar.gz", tmp_path / "bin", sha512=sha512)
    assert not (tmp_path / "bin" / "kube-apiserver").exists()
