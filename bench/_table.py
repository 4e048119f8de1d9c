"""The row type of the benchmark table and its markdown rendering."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured, on what, the figure and the target."""

    benchmark: str
    inputs: str
    result: str
    target: str = ""
    met: bool | None = None  # None: no target, just a figure


def render(rows: list[Row], machine: str) -> str:
    """A markdown table with a header naming the machine."""
    lines = [
        f"Measured on {os.cpu_count()} cores, {machine}.",
        "",
        "| benchmark | inputs | result | target | met |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        met = "" if r.met is None else ("met" if r.met else "not met")
        lines.append(f"| {r.benchmark} | {r.inputs} | {r.result} | {r.target} | {met} |")
    return "\n".join(lines) + "\n"
