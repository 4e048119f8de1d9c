"""bench/results.md as one section per benchmark module, so that a partial run keeps the rest.

The file is a machine line, then for each module a heading ``## <module>`` (the section's
marker) and the module's table. A full run (every module) writes the whole file with one
machine line. A run of some modules replaces only their sections and keeps every other
section, and anything above the first section, byte for byte; a replaced section says it
was measured alone and on what, since its figures did not come from the run that measured
the rest. Sections are kept in the order of ``MODULES``; a module not in it keeps its place
after them, a new one goes last.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from _table import Row, table_lines

__all__ = ["machine_line", "merge_results", "render_results", "split_sections"]

_HEADING = re.compile(r"^## (\S+)\s*$")


def machine_line(machine: str, commit: str | None = None) -> str:
    """The line naming the machine (cores, architecture, Python) and the commit measured."""
    at = f" at commit {commit}" if commit else ""
    return f"Measured on {os.cpu_count()} cores, {machine}{at}."


def _section(name: str, rows: Sequence[Row], note: str | None) -> str:
    lines = [f"## {name}", ""]
    if note:
        lines += [note, ""]
    lines += table_lines(rows)
    return "\n".join(lines) + "\n"


def _join(head: str, sections: Sequence[str]) -> str:
    parts = [head.rstrip("\n") + "\n"] if head.strip() else []
    parts += [section.rstrip("\n") + "\n" for section in sections]
    return "\n".join(parts)


def render_results(
    sections: Mapping[str, Sequence[Row]], machine: str, commit: str | None = None
) -> str:
    """The whole file of a full run: one machine line, then each module's section."""
    return _join(
        machine_line(machine, commit) + "\n",
        [_section(name, rows, None) for name, rows in sections.items()],
    )


def split_sections(text: str) -> tuple[str, dict[str, str]]:
    """The text above the first section, and each section's text (heading included) by name.

    A file without section headings (written before sections existed) is all head.
    """
    head: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] = head
    for line in text.splitlines(keepends=True):
        found = _HEADING.match(line.rstrip("\r\n"))
        if found is not None:
            current = sections.setdefault(found.group(1), [])
            if current:  # a name twice: keep both bodies, in one section
                current.append("\n")
        current.append(line)
    return "".join(head), {name: "".join(lines) for name, lines in sections.items()}


def merge_results(
    existing: str,
    ran: Mapping[str, Sequence[Row]],
    machine: str,
    order: Sequence[str],
    commit: str | None = None,
) -> str:
    """``existing`` with the sections of the modules in ``ran`` replaced (or added).

    Every other section and the head are kept as they were. A replaced section carries a
    note that it was measured alone, naming the machine and the commit, so a reader can
    tell its figures from those of the full run named at the top.
    """
    head, sections = split_sections(existing)
    if not head.strip() and not sections:
        head = machine_line(machine) + "\n"
    at = f" at commit {commit}" if commit else ""
    note = f"Measured alone (`run.py {' '.join(ran)}`) on {os.cpu_count()} cores, {machine}{at}."
    for name, rows in ran.items():
        sections[name] = _section(name, rows, note)
    known = [name for name in order if name in sections]
    rest = [name for name in sections if name not in order]
    return _join(head, [sections[name] for name in known + rest])
