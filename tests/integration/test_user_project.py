"""A user's own project tests its controller with kubemoon's shipped test environment.

In a fresh directory outside the repository: build KubeMoon's wheel, create a virtual
environment holding only that wheel with its ``testing`` extra (pytest, pytest-trio, anyio,
cryptography), run ``kubemoon-testenv build`` (instant: the binary cache is shared through
``KUBEMOON_TESTENV_DIR``) and then the project's tests, which use the ``kube_apiserver``
and ``kube_namespace`` fixtures. The project is ``sample_project/``, the example of
``docs/testing.rst``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from kubemoon_testing import default_binary_dir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).resolve().parent / "sample_project"


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{argv} exited with {proc.returncode}:\n{proc.stdout[-4000:]}"
    return proc.stdout


def _build_wheel(tmp: Path, env: dict[str, str]) -> Path:
    """``pip wheel --no-deps`` of a copy of the sources (the checkout stays clean)."""
    src = tmp / "kubemoon-src"
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # Only top-level packages: a subpackage (kubemoon_core.builtin) comes with its parent.
    for package in config["tool"]["setuptools"]["packages"]:
        if "." not in package:
            shutil.copytree(REPO / package, src / package, ignore=ignore)
    wheels = tmp / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
        cwd=tmp,
        env=env,
        timeout=300,
    )
    (wheel,) = wheels.glob("kubemoon-*.whl")
    return wheel


def test_a_new_project_builds_the_environment_and_passes_its_tests(tmp_path: Path) -> None:
    # Nothing of this checkout or of its virtual environment may leak into the project.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "KUBEMOON_TESTENV_DIR")
    }
    wheel = _build_wheel(tmp_path, env)
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for name in ("go.mod", "go.sum", "tools.go"):
        assert f"kubemoon_testing/testenv/{name}" in shipped

    project = tmp_path / "backup-controller"
    (project / "tests").mkdir(parents=True)
    shutil.copy2(SAMPLE / "pyproject.toml", project / "pyproject.toml")
    shutil.copy2(SAMPLE / "backup_controller.py", project / "backup_controller.py")
    shutil.copy2(SAMPLE / "check_backup_controller.py", project / "tests/test_backup.py")
    shutil.copy2(SAMPLE / "check_asyncio.py", project / "tests/test_asyncio_loop.py")

    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    bin_dir = venv_dir / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv_dir)
    _run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            f"kubemoon[testing] @ {wheel.as_uri()}",
        ],
        cwd=project,
        env=env,
        timeout=600,
    )

    # The binary cache is per machine, not per project: share the suite's.
    env["KUBEMOON_TESTENV_DIR"] = str(default_binary_dir().parent)
    built = _run([str(bin_dir / "kubemoon-testenv"), "build"], cwd=project, env=env, timeout=60)
    assert "already built" in built
    located = _run([str(bin_dir / "kubemoon-testenv"), "path"], cwd=project, env=env, timeout=60)
    assert located.strip() == str(default_binary_dir())

    out = _run(
        [str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        timeout=300,
    )
    assert "2 passed" in out, out
    # The project's tests ran the installed wheel, not this checkout.
    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import kubemoon_testing; print(kubemoon_testing.__file__)",
        ],
        cwd=project,
        env=env,
        timeout=60,
    )
    assert where.strip().startswith(str(venv_dir))
