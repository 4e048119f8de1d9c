#!/usr/bin/env python3
"""Rewrite imports of names that moved out of ``kubemoon_core``'s top level.

``python scripts/migrate_imports.py PATH...`` rewrites ``from kubemoon_core import X`` and
``kubemoon_core.X`` in Python, reStructuredText and Markdown files so that each moved name
is imported from its namespace (``kubemoon_core.errors``, ``kubemoon_core.typed``, ...).
The map comes from ``kubemoon_core`` itself, so the script stays right as names move.
``--check`` lists the files it would change and exits 1 if there are any.
Run ``ruff check --fix`` and ``ruff format`` afterwards to sort and wrap the imports.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import kubemoon_core

MOVED: dict[str, str] = dict(kubemoon_core._MOVED)
SUFFIXES = {".py", ".pyi", ".rst", ".md"}
SKIP = {"CHANGELOG.md"}
# A file that names the old paths on purpose (the test of this script, say) says so.
KEEP_MARKER = "migrate-imports: keep"

IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from kubemoon_core import "
    r"(?:\((?P<multi>[^)]*)\)|(?P<single>[^\n]*?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.MULTILINE,
)
ATTRIBUTE = re.compile(r"\bkubemoon_core\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)\b")


def _names(text: str) -> list[str]:
    names = []
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        names.extend(part.strip() for part in code.split(",") if part.strip())
    return names


def _statement(indent: str, module: str, names: list[str]) -> str:
    one_line = f"{indent}from {module} import {', '.join(names)}"
    if len(one_line) <= 100:
        return one_line
    body = "".join(f"{indent}    {name},\n" for name in names)
    return f"{indent}from {module} import (\n{body}{indent})"


def _rewrite_import(match: re.Match[str]) -> str:
    names = _names(match["multi"] if match["multi"] is not None else match["single"])
    groups: dict[str, list[str]] = {}
    for name in names:
        base = name.split(" as ")[0].strip()
        groups.setdefault(MOVED.get(base, "kubemoon_core"), []).append(name)
    if list(groups) == ["kubemoon_core"]:
        return match[0]
    comment = match["comment"] or ""
    statements = [
        _statement(match["indent"], module, group) for module, group in sorted(groups.items())
    ]
    # A comment (a noqa, say) applies to each statement the one import became.
    return "\n".join(statement + comment for statement in statements)


def _rewrite_attribute(match: re.Match[str]) -> str:
    home = MOVED.get(match["name"])
    return f"{home}.{match['name']}" if home else match[0]


def rewrite(text: str) -> str:
    """``text`` with every moved name imported or named at its new home."""
    return ATTRIBUTE.sub(_rewrite_attribute, IMPORT.sub(_rewrite_import, text))


def _files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        candidates = path.rglob("*") if path.is_dir() else [path]
        for candidate in candidates:
            parts = set(candidate.parts)
            if parts & {".venv", ".git", "build", "_build", "node_modules", ".mypy_cache"}:
                continue
            if candidate.suffix in SUFFIXES and candidate.name not in SKIP and candidate.is_file():
                found.append(candidate)
    own = Path(kubemoon_core.__file__).parent
    return [f for f in found if f.resolve().parent != own.resolve()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; list the files")
    args = parser.parse_args(argv)
    changed = []
    for path in _files(args.paths):
        text = path.read_text(encoding="utf-8")
        if KEEP_MARKER in text:
            continue
        new = rewrite(text)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(path)
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
