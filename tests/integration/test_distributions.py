"""Packaging: ``pip install kubemoon`` installs the library only; ConfigMirror (the example
operator, with its ``kubemoon-configmirror`` program) is a distribution of its own.

The wheels are built with pip, as a user would, from a copy of the sources so the
working tree gets no build artefacts.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "_build", ".*_cache", "tests"
)


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
    assert "Requires-Dist: kubemoon>=0.1.0" in metadata
