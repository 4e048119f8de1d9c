"""Run the fast test tiers on every supported CPython found on this machine.

Usage: ``python scripts/test_matrix.py [3.11 3.12 ...]`` (``make test-matrix``). Each
version gets its own virtual environment, ``.venv-3.X``, with an editable install of
``.[dev]`` (reinstalled when pyproject.toml changes). A version that is not installed is
skipped with a message; the exit status is non-zero when any run failed.

An interpreter is looked up as ``python3.X`` on ``PATH``, then under pyenv's versions
directory (``$PYENV_ROOT`` or ``~/.pyenv``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

SUPPORTED = ("3.11", "3.12", "3.13")
TIERS = ("tests/unit", "tests/property")
ROOT = Path(__file__).resolve().parent.parent


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip()


def find_python(version: str) -> str | None:
    """The path of a CPython ``version`` interpreter, or None."""
    candidates = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv.is_dir():
        # Newest patch release first: 3.12.10 sorts after 3.12.9.
        found = [p for p in pyenv.glob(f"{version}.*") if p.name[len(version) + 1 :].isdigit()]
        found.sort(key=lambda p: int(p.name[len(version) + 1 :]), reverse=True)
        candidates += [str(p / "bin" / "python") for p in found]
    for candidate in candidates:
        if _version_of(candidate) == version:
            return candidate
    return None


def _ensure_venv(version: str, python: str) -> Path:
    venv = ROOT / f".venv-{version}"
    stamp = venv / ".installed-stamp"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return venv
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, cwd=ROOT)
    subprocess.run([*pip, "-e", ".[dev]"], check=True, cwd=ROOT)
    stamp.write_text(digest)
    return venv


def main(argv: list[str]) -> int:
    versions = argv or list(SUPPORTED)
    results: list[tuple[str, str]] = []
    for version in versions:
        python = find_python(version)
        if python is None:
            print(f"== CPython {version}: not installed, skipped", flush=True)
            results.append((version, "skipped (not installed)"))
            continue
        print(f"== CPython {version}: {python}", flush=True)
        try:
            venv = _ensure_venv(version, python)
        except subprocess.CalledProcessError as exc:
            results.append((version, f"FAILED to install (exit {exc.returncode})"))
            continue
        run = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pytest", "-q", *TIERS], cwd=ROOT, check=False
        )
        results.append((version, "passed" if run.returncode == 0 else f"FAILED ({run.returncode})"))
    print("== test-matrix summary")
    for version, outcome in results:
        print(f"   CPython {version}: {outcome}")
    return 1 if any(outcome.startswith("FAILED") for _, outcome in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
