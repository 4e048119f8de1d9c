"""Run the benchmarks, print their tables and write them to bench/results.md.

Each benchmark module exposes ``rows() -> list[Row]``; a row is a ratio or a rate measured
in this process, with its inputs and, where there is one, its target. results.md holds one
section per module: with no arguments every module runs and the whole file is rewritten;
``run.py bench_x bench_y`` replaces only those modules' sections and keeps the others.
"""

from __future__ import annotations

import importlib
import platform
import subprocess
import sys
from pathlib import Path

from _results import merge_results, render_results
from _table import Row

MODULES = [
    "bench_watch",
    "bench_reflector",
    "bench_memory",
    "bench_informer",
    "bench_queue",
    "bench_typed",
    "bench_webhook",
    "bench_client",
    "bench_operator",
    "bench_tracing",
    "bench_freshness",
    "bench_priority",
    "bench_sharding",
    "bench_sim",
]


def measured_commit() -> str | None:
    """The commit the benchmarks ran on (``-dirty`` when the tree had changes), or None
    outside a git checkout."""
    here = Path(__file__).parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if changed else head


def main(argv: list[str] | None = None, results: Path | None = None) -> int:
    """Run the benchmark modules named on the command line (``argv``), or all of them, and
    write ``results`` (bench/results.md)."""
    chosen = sys.argv[1:] if argv is None else argv
    names = chosen or MODULES
    ran: dict[str, list[Row]] = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"(skipping {name}: not written yet)", file=sys.stderr)
            continue
        print(f"running {name}...", file=sys.stderr, flush=True)
        ran[name] = list(module.rows())
    machine = (
        f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
    )
    if results is None:
        results = Path(__file__).with_name("results.md")
    commit = measured_commit()
    if chosen:
        existing = results.read_text(encoding="utf-8") if results.exists() else ""
        text = merge_results(existing, ran, machine, MODULES, commit)
    else:
        text = render_results(ran, machine, commit)
    print(text)
    results.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
