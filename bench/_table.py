"""The row type of the benchmark table and its markdown rendering."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured, on what, the figure and the target."""

    benchmark: str
    inputs: str
    result: str
    target: str = ""
    met: bool | None = None  # None: no target, just a figure


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The markdown table of ``rows``: header, separator, one line per row."""
    lines = [
        "| benchmark | inputs | result | target | met |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        met = "" if r.met is None else ("met" if r.met else "not met")
        lines.append(f"| {r.benchmark} | {r.inputs} | {r.result} | {r.target} | {met} |")
    return lines


def render(rows: Sequence[Row], machine: str) -> str:
    """A markdown table with a header naming the machine."""
    lines = [f"Measured on {os.cpu_count()} cores, {machine}.", "", *table_lines(rows)]
    return "\n".join(lines) + "\n"
