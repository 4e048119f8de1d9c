"""The Go module that pins the test programs, per supported release: where it ships, how it
is rendered from a Kubernetes release's own ``go.mod``, and ``kubemoon-testenv module``
(print, ``--write`` or ``--check`` the shipped ``go.mod`` and ``go.sum``).

A release's module is rendered in a temporary directory (``go mod tidy`` completes it), so
rendering never edits the shipped files unless ``--write`` asks.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

from ._go_runs import _GO_HINT, _BuildError, _elapsed, _go_env, _go_out, _GoRun, _say
from ._versions import DEFAULT_RELEASE, SUPPORTED_RELEASES, KubernetesRelease, release_for

__all__ = ["module_dir", "render_gomod", "staging_modules"]

#: Directory (package data) with the Go module that pins the programs: the newest
#: release's ``go.mod``/``go.sum`` and ``tools.go`` here, each older release's ``go.mod``
#: and ``go.sum`` in ``<version>/`` below it.
_MODULE_DIR = Path(__file__).resolve().parent / "testenv"
_MODULE_FILES = ("go.mod", "go.sum")
_TOOLS = "tools.go"
_MODULE_PATH = "kubemoon.dev/testenv"
_KUBERNETES_MODULE = "k8s.io/kubernetes"
_ETCD_MODULE = "go.etcd.io/etcd/server/v3"

# `k8s.io/<name> v0.0.0` exactly: the pseudo-versions of kube-openapi or utils
# (v0.0.0-2026...) are published versions and need no replace.
_STAGING_REQUIRE = re.compile(r"^\s*(?:require\s+)?(k8s\.io/[A-Za-z0-9._/-]+)\s+v0\.0\.0(?:\s|$)")
_STAGING_REPLACE = re.compile(r"^\s*(?:replace\s+)?(k8s\.io/[A-Za-z0-9._/-]+)\s+=>\s+\./staging/")
_GO_LINE = re.compile(r"^go\s+\S+\s*$")
_GODEBUG_LINE = re.compile(r"^godebug\s+.*$")


def module_dir(version: str) -> Path:
    """Where the shipped ``go.mod`` and ``go.sum`` of supported release ``version`` are."""
    return _MODULE_DIR if version == DEFAULT_RELEASE.version else _MODULE_DIR / version


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The staging modules of a ``k8s.io/kubernetes`` go.mod: its ``v0.0.0`` requires and
    its ``./staging/`` replaces."""
    names: set[str] = set()
    for raw in kubernetes_gomod.splitlines():
        line = raw.split("//", 1)[0]
        match = _STAGING_REQUIRE.match(line) or _STAGING_REPLACE.match(line)
        if match:
            names.add(match.group(1))
    return sorted(names)


def render_gomod(release: KubernetesRelease, kubernetes_gomod: str) -> str:
    """The skeleton ``go.mod`` of ``release`` (``go mod tidy`` completes it).

    Kubernetes v1.X.Y requires its staging modules (k8s.io/api, ...) at the placeholder
    v0.0.0 and replaces them with ./staging; Go ignores the replaces of a dependency, so
    this module maps each to its published v0.X.Y. etcd is required at the version the
    release pins, which may be newer than its go.mod's.
    """
    go_line = "go 1.26.0"
    godebug: list[str] = []
    for line in kubernetes_gomod.splitlines():
        if _GO_LINE.match(line):
            go_line = line.strip()
        elif _GODEBUG_LINE.match(line):
            godebug.append(line.strip())
    staging = "v0" + release.version[2:]
    replaces = [f"\t{name} => {name} {staging}" for name in staging_modules(kubernetes_gomod)]
    return "\n".join(
        [
            f"// Rendered by `kubemoon-testenv module --write --version {release.version}`,",
            "// completed by `go mod tidy`. Builds kube-apiserver, etcd, kube-controller-manager",
            "// and kubectl for KubeMoon's real test environment.",
            f"module {_MODULE_PATH}",
            "",
            go_line,
            "",
            *godebug,
            "",
            "require (",
            f"\t{_ETCD_MODULE} {release.etcd}",
            f"\t{_KUBERNETES_MODULE} {release.version}",
            ")",
            "",
            "replace (",
            *replaces,
            ")",
            "",
        ]
    )


def _render_module(release: KubernetesRelease, dest: Path, go: str) -> None:
    """Write the complete Go module of ``release`` (``go.mod``, ``go.sum``, ``tools.go``)
    into the empty directory ``dest``: fetch the release's own go.mod from the module
    proxy, render the skeleton, ``go mod tidy``."""
    env = _go_env()
    env["GOFLAGS"] = "-mod=mod"
    with tempfile.TemporaryDirectory(prefix="kubemoon-testenv-gomod-") as outside:
        # Outside any module: a plain download, never an edit of a go.mod.
        raw = _go_out(
            go,
            ["mod", "download", "-json", f"{_KUBERNETES_MODULE}@{release.version}"],
            Path(outside),
            env,
        )
    import json  # noqa: PLC0415

    info = json.loads(raw)
    kubernetes_gomod = Path(info["GoMod"]).read_text(encoding="utf-8")
    (dest / "go.mod").write_text(render_gomod(release, kubernetes_gomod), encoding="utf-8")
    shutil.copyfile(_MODULE_DIR / _TOOLS, dest / _TOOLS)
    _say(f"go mod tidy for {release.version} (downloads its modules) ...")
    took = _GoRun(f"go mod tidy ({release.version})", [go, "mod", "tidy"], dest, env).wait()
    _say(f"module of {release.version} rendered in {_elapsed(took)}")


def _module(version: str | None, *, write: bool, check: bool) -> int:
    """``kubemoon-testenv module``: render (print, write, or check) releases' Go modules."""
    go = shutil.which("go")
    if go is None:
        raise _BuildError(f"cannot render a Go module: {_GO_HINT}")
    releases = [release_for(version)] if version else list(SUPPORTED_RELEASES)
    stale: list[str] = []
    for release in releases:
        with tempfile.TemporaryDirectory(prefix="kubemoon-testenv-render-") as tmp:
            rendered = Path(tmp)
            _render_module(release, rendered, go)
            shipped = module_dir(release.version)
            for name in _MODULE_FILES:
                new = (rendered / name).read_text(encoding="utf-8")
                if write:
                    shipped.mkdir(parents=True, exist_ok=True)
                    (shipped / name).write_text(new, encoding="utf-8")
                elif check:
                    old = shipped / name
                    if not old.exists() or old.read_text(encoding="utf-8") != new:
                        stale.append(str(old))
                else:
                    print(new if name == "go.mod" else "", end="")
            if write:
                _say(f"wrote go.mod and go.sum of {release.version} into {shipped}")
    if stale:
        _say(
            "not what the supported releases render (run `kubemoon-testenv module --write`): "
            + ", ".join(stale),
            sys.stderr,
        )
        return 1
    if check:
        _say(f"the Go modules of {', '.join(r.version for r in releases)} are up to date")
    return 0
