"""Packaging: ``pip install kubemoon`` installs the library only; ConfigMirror (the example
operator, with its ``kubemoon-configmirror`` program) is a distribution of its own.

The wheels are built with pip, as a user would, from a copy of the sources so the
working tree gets no build artefacts. The release artefacts are built as ``make dist``
builds them (sdist and wheel of both, ``twine check --strict``) and installed into a clean
virtual environment; ``scripts/version.py`` bumps and checks the version on a copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import kubemoon_core

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(
    ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", "_build", ".*_cache", "tests"
)
VERSION = kubemoon_core.__version__


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("sources") / "kubemoon"
    shutil.copytree(ROOT, copy, ignore=IGNORED)
    return copy


def build_wheel(project: Path, out: Path) -> tuple[list[str], str, str]:
    """``pip wheel --no-deps <project> -w <out>``: the wheel's file names, entry points and
    metadata. The build must not warn that its license metadata is deprecated."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", str(project), "-w", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    output = built.stdout + built.stderr
    assert "project.license` as a TOML table is deprecated" not in output
    assert "License classifiers are deprecated" not in output
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()

        def read(suffix: str) -> str:
            found = [n for n in names if n.endswith(f".dist-info/{suffix}")]
            return wheel.read(found[0]).decode() if found else ""

        return names, read("entry_points.txt"), read("METADATA")


def test_the_library_wheel_holds_no_configmirror(sources: Path, tmp_path: Path) -> None:
    names, scripts, _ = build_wheel(sources, tmp_path)
    top_level = {name.split("/")[0] for name in names}
    assert {"kubemoon_core", "kubemoon_trio", "kubemoon_cli"} <= top_level
    assert not any(name.startswith("configmirror") for name in top_level), top_level
    assert "kubemoon = kubemoon_cli:main" in scripts
    assert "configmirror" not in scripts


def test_configmirror_is_its_own_wheel_with_the_program(sources: Path, tmp_path: Path) -> None:
    names, scripts, metadata = build_wheel(sources / "configmirror", tmp_path)
    assert "configmirror/_operator.py" in names
    assert "configmirror/py.typed" in names
    packages = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert packages == {"configmirror"}
    assert "kubemoon-configmirror = configmirror._cli:main" in scripts
    assert f"Requires-Dist: kubemoon[webhooks]>={VERSION}" in metadata


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv,
        check=False,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode == 0, f"{argv} exited with {proc.returncode}:\n{proc.stdout[-4000:]}"
    return proc.stdout


@pytest.mark.integration
def test_make_dist_artefacts_pass_twine_and_install_into_a_clean_venv(
    sources: Path, tmp_path: Path
) -> None:
    # What `make dist` runs, on a copy (so the checkout's dist/ is not touched).
    dist = tmp_path / "dist"
    bin_dir = Path(sys.executable).parent
    for project in (sources, sources / "configmirror"):
        run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), "."], project)
    built = sorted(p.name for p in dist.iterdir())
    assert built == [
        f"kubemoon-{VERSION}-py3-none-any.whl",
        f"kubemoon-{VERSION}.tar.gz",
        f"kubemoon_configmirror-{VERSION}-py3-none-any.whl",
        f"kubemoon_configmirror-{VERSION}.tar.gz",
    ]
    checked = run(
        [str(bin_dir / "twine"), "check", "--strict", *map(str, dist.iterdir())], tmp_path
    )
    assert checked.count("PASSED") == 4, checked

    # A clean venv: nothing of this checkout on the path, only the two wheels (the
    # library with its testing extra, as the docs install it) and their dependencies.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = str(target / "bin" / "python")
    # The README's and docs/testing.rst's commands, as written (from the directory
    # holding dist/).
    library = f"./dist/kubemoon-{VERSION}-py3-none-any.whl[testing]"
    operator = f"./dist/kubemoon_configmirror-{VERSION}-py3-none-any.whl"
    for wanted in (library, operator):
        run([python, "-m", "pip", "install", "-q", wanted], tmp_path, env)
    shown = run(
        [
            python,
            "-c",
            "import importlib.metadata as m, kubemoon_core, configmirror, kubemoon_testing; "
            "print(m.version('kubemoon'), m.version('kubemoon-configmirror'), "
            "kubemoon_core.__version__, configmirror.__file__)",
        ],
        tmp_path,
        env,
    ).split()
    assert shown[:3] == [VERSION] * 3
    assert shown[3].startswith(str(target))
    assert "usage: kubemoon-configmirror" in run(
        [str(target / "bin" / "kubemoon-configmirror"), "--help"], tmp_path, env
    )
    assert "crd" in run([str(target / "bin" / "kubemoon"), "--help"], tmp_path, env)
    assert "usage: kubemoon-testenv" in run(
        [str(target / "bin" / "kubemoon-testenv"), "--help"], tmp_path, env
    )


def test_the_version_script_bumps_every_copy_and_checks_the_tag(tmp_path: Path) -> None:
    for name in (
        "scripts/version.py",
        "kubemoon_core/__init__.py",
        "configmirror/pyproject.toml",
        "CHANGELOG.md",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    script = [sys.executable, str(tmp_path / "scripts" / "version.py")]

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*script, *args], check=False, capture_output=True, text=True, cwd=tmp_path
        )

    assert status().stdout.strip() == VERSION
    assert status("check").returncode == 0
    assert status("check", "--tag", f"v{VERSION}").returncode == 0
    wrong_tag = status("check", "--tag", "v99.0.0")
    assert wrong_tag.returncode == 1 and "is not v" in wrong_tag.stderr
    assert status("bump", "not-a-version").returncode == 1
    assert status("bump", VERSION).returncode == 1

    assert status("bump", "9.8.7").returncode == 0
    assert status().stdout.strip() == "9.8.7"
    assert status("check", "--tag", "v9.8.7").returncode == 0
    configmirror = (tmp_path / "configmirror" / "pyproject.toml").read_text()
    assert 'version = "9.8.7"' in configmirror and '"kubemoon[webhooks]>=9.8.7"' in configmirror
    changelog = (tmp_path / "CHANGELOG.md").read_text()
    assert changelog.index("## Unreleased") < changelog.index("## [9.8.7] - ")

    # A copy that drifts is caught.
    (tmp_path / "configmirror" / "pyproject.toml").write_text(
        configmirror.replace('"kubemoon[webhooks]>=9.8.7"', '"kubemoon[webhooks]>=0.0.1"')
    )
    drift = status("check")
    assert drift.returncode == 1 and "kubemoon>= requirement is 0.0.1" in drift.stderr


@pytest.mark.integration
def test_the_documented_git_url_forms_build(tmp_path: Path) -> None:
    """``pip install "kubemoon[testing] @ git+file://$PWD"`` and the ConfigMirror form with
    ``#subdirectory=configmirror``, from the README, in a clone (this checkout's HEAD)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    url = f"git+file://{ROOT}"
    out = tmp_path / "wheels"
    for requirement in (
        f"kubemoon[testing] @ {url}",
        f"kubemoon-configmirror @ {url}#subdirectory=configmirror",
    ):
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), requirement],
            tmp_path,
        )
    assert sorted(p.name for p in out.iterdir()) == [
        f"kubemoon-{VERSION}-py3-none-any.whl",
        f"kubemoon_configmirror-{VERSION}-py3-none-any.whl",
    ]
