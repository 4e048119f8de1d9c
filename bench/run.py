"""Run every benchmark, print one markdown table and write it to bench/results.md.

Each benchmark module exposes ``rows() -> list[Row]``; a row is a ratio or a rate measured
in this process, with its inputs and, where there is one, its target.
"""

from __future__ import annotations

import importlib
import platform
import sys
from pathlib import Path

from _table import Row, render

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
]


def main() -> int:
    """Run the benchmark modules named on the command line, or all of them."""
    names = sys.argv[1:] or MODULES
    rows: list[Row] = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"(skipping {name}: not written yet)", file=sys.stderr)
            continue
        print(f"running {name}...", file=sys.stderr, flush=True)
        rows.extend(module.rows())
    machine = (
        f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
    )
    table = render(rows, machine)
    print(table)
    Path(__file__).with_name("results.md").write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
