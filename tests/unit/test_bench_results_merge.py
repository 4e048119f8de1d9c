"""bench/results.md keeps one section per module: a partial run replaces only its own."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import run as bench_run
    from _results import merge_results, render_results, split_sections
    from _table import Row
finally:
    sys.path.remove(str(BENCH))

MACHINE = "x86_64, CPython 3.11.7"
ORDER = ["bench_a", "bench_b", "bench_c"]


def _rows(tag: str, n: int = 2) -> list[Row]:
    return [
        Row(f"{tag}: figure {i}", "inputs", f"{i} {tag}/s", "≤ 1", i % 2 == 0) for i in range(n)
    ]


def _full() -> str:
    return render_results({name: _rows(name) for name in ORDER}, MACHINE)


def test_a_full_run_has_one_machine_line_and_a_section_per_module() -> None:
    text = _full()
    assert text.count("Measured on") == 1
    assert text.splitlines()[0].startswith("Measured on ")
    head, sections = split_sections(text)
    assert list(sections) == ORDER
    assert "Measured" in head
    assert "| bench_b: figure 1 | inputs | 1 bench_b/s | ≤ 1 | not met |" in sections["bench_b"]


def test_a_partial_run_replaces_only_its_sections() -> None:
    before = _full()
    after = merge_results(before, {"bench_b": _rows("new-b", 3)}, MACHINE, ORDER)
    old_head, old = split_sections(before)
    new_head, new = split_sections(after)
    assert new_head == old_head
    assert list(new) == ORDER
    assert new["bench_a"] == old["bench_a"]
    assert new["bench_c"] == old["bench_c"]
    assert "bench_b: figure" not in new["bench_b"]
    assert new["bench_b"].count("| new-b: figure") == 3
    # The replaced section says it was measured on its own, and on what.
    assert "Measured alone (`run.py bench_b`) on " in new["bench_b"]
    assert MACHINE in new["bench_b"]
    assert after.count("Measured on") == 1


def test_merging_is_idempotent_and_a_later_full_run_drops_the_notes() -> None:
    once = merge_results(_full(), {"bench_c": _rows("c2")}, MACHINE, ORDER)
    assert merge_results(once, {"bench_c": _rows("c2")}, MACHINE, ORDER) == once
    assert "Measured alone" not in _full()


def test_sections_follow_the_module_order_and_unknown_ones_keep_their_place() -> None:
    text = render_results({"bench_c": _rows("c"), "bench_x": _rows("x")}, MACHINE)
    merged = merge_results(text, {"bench_a": _rows("a"), "bench_y": _rows("y")}, MACHINE, ORDER)
    _, sections = split_sections(merged)
    assert list(sections) == ["bench_a", "bench_c", "bench_x", "bench_y"]


def test_a_missing_or_empty_file_gets_a_machine_line() -> None:
    merged = merge_results("", {"bench_a": _rows("a")}, MACHINE, ORDER)
    head, sections = split_sections(merged)
    assert head.startswith("Measured on ")
    assert list(sections) == ["bench_a"]


def test_a_file_from_before_sections_is_kept_above_them() -> None:
    legacy = "Measured on 2 cores, old.\n\n| benchmark | inputs | result | target | met |\n|---|---|---|---|---|\n| old row | i | r |  |  |\n"
    merged = merge_results(legacy, {"bench_a": _rows("a")}, MACHINE, ORDER)
    assert merged.startswith(legacy)
    _, sections = split_sections(merged)
    assert list(sections) == ["bench_a"]


def test_a_row_text_that_looks_like_a_heading_is_not_a_section() -> None:
    rows = [Row("## bench_z", "## also", "1", "", None)]
    text = render_results({"bench_a": rows, "bench_b": _rows("b")}, MACHINE)
    _, sections = split_sections(text)
    assert list(sections) == ["bench_a", "bench_b"]


# -- run.py end to end, with stand-in modules ---------------------------------------------


@pytest.fixture
def fake_modules(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Row]]:
    """bench_a, bench_b, bench_c as importable modules whose rows() the test sets."""
    rows: dict[str, list[Row]] = {name: _rows(name) for name in ORDER}
    for name in ORDER:
        module = types.ModuleType(name)
        module.rows = lambda name=name: rows[name]  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bench_run, "MODULES", [*ORDER, "bench_not_written"])
    return rows


def test_run_py_full_then_partial(
    fake_modules: dict[str, list[Row]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.md"
    assert bench_run.main([], results) == 0
    full = results.read_text(encoding="utf-8")
    assert list(split_sections(full)[1]) == ORDER
    assert "skipping bench_not_written" in capsys.readouterr().err

    fake_modules["bench_a"] = _rows("rerun-a")
    assert bench_run.main(["bench_a"], results) == 0
    partial = results.read_text(encoding="utf-8")
    _, old = split_sections(full)
    _, new = split_sections(partial)
    assert "rerun-a: figure 0" in new["bench_a"]
    assert new["bench_b"] == old["bench_b"]
    assert new["bench_c"] == old["bench_c"]

    # A module that is not written yet replaces nothing.
    assert bench_run.main(["bench_not_written"], results) == 0
    assert results.read_text(encoding="utf-8") == partial

    # A full run rewrites the whole file again, without notes.
    assert bench_run.main([], results) == 0
    again = results.read_text(encoding="utf-8")
    assert "Measured alone" not in again
    assert "rerun-a: figure 0" in again


def test_the_committed_results_file_has_a_section_per_module() -> None:
    """bench/results.md as committed: every listed module that has rows has its section."""
    _, sections = split_sections((BENCH / "results.md").read_text(encoding="utf-8"))
    assert sections
    assert set(sections) <= set(bench_run.MODULES)


def test_the_commit_measured_is_named_on_the_full_run_and_on_each_module_run_alone() -> None:
    full = render_results({name: _rows(name) for name in ORDER}, MACHINE, "abc123")
    assert full.splitlines()[0].endswith(" at commit abc123.")
    merged = merge_results(full, {"bench_b": _rows("b2")}, MACHINE, ORDER, "def456")
    _, sections = split_sections(merged)
    assert "at commit def456." in sections["bench_b"]
    assert "def456" not in sections["bench_a"] + sections["bench_c"]
    assert merged.splitlines()[0].endswith(" at commit abc123.")


def test_the_commit_is_read_from_git() -> None:
    commit = bench_run.measured_commit()
    assert commit is not None
    assert commit.removesuffix("-dirty").isalnum()
