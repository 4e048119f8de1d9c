"""No hand-written module is longer than 700 lines without saying why at its top.

One job per file (issue 33): a newcomer should find behaviour by guessing the file, and a
file past ~700 lines usually holds two jobs. The rule, checked here for every ``.py`` file
of the hand-written packages below:

- A file of at most ``LIMIT`` lines passes.
- A longer file passes only when the first non-blank line after its module docstring
  (the first line of the file when it has none) is a comment of the fixed form
  ``# Longer than 700 lines because <reason>``; the reason may go on over further
  comment lines. Put it between the docstring and ``from __future__ import annotations``.
- Generated files are not checked: the twins ``kubemoon_asyncio`` and ``kubemoon_sync``
  (not scanned at all) and modules whose first lines say ``DO NOT EDIT`` (the typed
  built-in kinds in ``kubemoon_core/builtin``).
- ``PENDING_SPLITS`` lists files being split right now; the integrator empties it as the
  splits land.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "kubemoon_core",
    "kubemoon_io",
    "kubemoon_trio",
    "kubemoon_testing",
    "kubemoon_cli",
    "configmirror",
)
LIMIT = 700
REASON = re.compile(r"# Longer than 700 lines because \S")
# How many opening lines may carry a generator's DO NOT EDIT header.
GENERATED_HEADER_LINES = 5

# Files over the limit whose split is under way or still to be assigned. Paths are relative
# to the repository root. The integrator removes each entry once its split has landed; a
# file listed here is not checked at all, so keep the list short and every entry explained.
PENDING_SPLITS: dict[str, str] = {
    # Not split yet (issue 33): the next session's work.
    "kubemoon_testing/_apiserver.py": "processes, PKI, CRD install and the fixture",
    "kubemoon_core/_watch.py": "834 lines: the decoder and the event scanner",
    "kubemoon_testing/_testenv.py": "717 lines: versioned builds grew it; split module rendering",
    # Over the limit by a few lines and not yet assigned: split or give a reason.
    "kubemoon_core/_membership.py": "719 lines when this test was written",
    "kubemoon_core/_webhook_config.py": "727 lines when this test was written",
    "kubemoon_core/_store.py": "730 lines when this test was written",
}


def _generated(lines: list[str]) -> bool:
    return any("DO NOT EDIT" in line for line in lines[:GENERATED_HEADER_LINES])


def oversize_problem(text: str, limit: int = LIMIT) -> str | None:
    """Why ``text`` (one module's source) breaks the rule, or None when it keeps it."""
    lines = text.splitlines()
    if len(lines) <= limit or _generated(lines):
        return None
    body = ast.parse(text).body
    start = 0  # the index of the first line after the docstring
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        start = body[0].end_lineno or 0
    first = next((line for line in lines[start:] if line.strip()), "")
    if REASON.match(first):
        return None
    return (
        f"{len(lines)} lines (limit {limit}) and no '# Longer than 700 lines because ...' "
        "as the first line after the module docstring"
    )


def _hand_written_modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        found.extend(
            path
            for path in sorted((ROOT / package).rglob("*.py"))
            if not any(part.startswith(".") or part.endswith(".egg-info") for part in path.parts)
        )
    return found


def test_the_packages_are_found() -> None:
    modules = {path.relative_to(ROOT).as_posix() for path in _hand_written_modules()}
    for package in PACKAGES:
        assert f"{package}/__init__.py" in modules


def test_no_hand_written_module_is_over_700_lines_without_a_reason() -> None:
    problems = []
    for path in _hand_written_modules():
        name = path.relative_to(ROOT).as_posix()
        if name in PENDING_SPLITS:
            continue
        problem = oversize_problem(path.read_text(encoding="utf-8"))
        if problem is not None:
            problems.append(f"{name}: {problem}")
    assert not problems, "\n".join(problems)


DOCSTRING = '"""A module."""\n\n'
FILLER = "x = 1\n" * 10


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (DOCSTRING + FILLER, True),  # short enough
        (DOCSTRING + FILLER * 2, False),  # too long, no reason
        (DOCSTRING + "# Longer than 700 lines because it must be.\n" + FILLER * 2, True),
        ('"""A\nlong docstring."""\n# Longer than 700 lines because so.\n' + FILLER * 2, True),
        ("# Longer than 700 lines because no docstring.\n" + FILLER * 2, True),
        # The reason must come first, not somewhere further down.
        (DOCSTRING + FILLER * 2 + "# Longer than 700 lines because late.\n", False),
        (DOCSTRING + "import os\n# Longer than 700 lines because late.\n" + FILLER * 2, False),
        # A reason must be given, in the fixed form.
        (DOCSTRING + "# Longer than 700 lines because\n" + FILLER * 2, False),
        (DOCSTRING + "# long because it must be\n" + FILLER * 2, False),
        # Generated modules say so in their first lines and are not checked.
        ("# Generated by a script.\n# DO NOT EDIT.\n" + DOCSTRING + FILLER * 2, True),
    ],
)
def test_the_rule(text: str, kept: bool) -> None:
    assert (oversize_problem(text, limit=15) is None) is kept
