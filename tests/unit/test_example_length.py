"""The examples stay short: the TeamSpace operator within kopf's lines for the same operator.

Lines are counted two ways, and KubeMoon's file must not be longer in either: every line of
the file, and code lines only (no blank lines, comments or docstrings), because the
KubeMoon example documents itself more than the kopf one does.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEAMSPACE = ROOT / "examples" / "teamspace"
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def _docstring_lines(source: str) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(path: Path) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    source = path.read_text()
    docstrings = _docstring_lines(source)
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def all_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_code_lines_skip_blank_lines_comments_and_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Doc\nstring."""\n\n# note\nx = (\n    1,\n)\n\n\ndef f():\n    """One."""\n    return x  # why\n'
    )
    assert code_lines(sample) == 5  # x = ( / 1, / ) / def f(): / return x
    assert all_lines(sample) == 12


@pytest.mark.parametrize("count", [all_lines, code_lines])
def test_the_teamspace_operator_is_not_longer_than_kopf_s(count: Callable[[Path], int]) -> None:
    ours = count(TEAMSPACE / "operator.py")
    kopf = count(TEAMSPACE / "kopf_equivalent.py")
    assert ours <= kopf, f"operator.py has {ours} lines, the kopf equivalent {kopf}"


def test_the_tutorial_states_the_counted_figures() -> None:
    text = " ".join((ROOT / "docs" / "tutorial.rst").read_text().split())
    ours, kopf = TEAMSPACE / "operator.py", TEAMSPACE / "kopf_equivalent.py"
    assert (
        f"The TeamSpace operator is {code_lines(ours)} lines of code (no blank lines, "
        f"comments or docstrings) and {all_lines(ours)} lines in all"
    ) in text
    assert f"is {code_lines(kopf)} lines of code and {all_lines(kopf)} in all" in text
