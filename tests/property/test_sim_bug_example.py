"""The worked example of docs/testing.rst, "Simulating your operator": examples/sim_bug/.

The simulator's search finds the bug of ``reconcile_with_generated_names`` (a failed
status write after a create with ``generateName``: a second ConfigMap), shrinks it to the
schedule ``found.txt`` holds (the page quotes that file, so the page shows what the code
prints), the replay printed reproduces it, and the fixed ``reconcile`` passes the same
search and the replay.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

from kubemoon_testing.sim import DropWatches, FailRequests, FaultSchedule, Pause

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "sim_bug"
if str(EXAMPLE_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_DIR))
_spec = importlib.util.spec_from_file_location("sim_bug_find", EXAMPLE_DIR / "find_the_bug.py")
assert _spec is not None
assert _spec.loader is not None
example: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

FOUND = (EXAMPLE_DIR / "found.txt").read_text(encoding="utf-8").rstrip("\n")


def replayed(text: str) -> tuple[str, int, FaultSchedule]:
    """The reconcile's name, the seed and the schedule of a printed ``replay:`` line."""
    call = text[text.index("replay: ") + len("replay: ") :]
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call)
    assert isinstance(node.args[0], ast.Name)
    names = {
        "FaultSchedule": FaultSchedule,
        "FailRequests": FailRequests,
        "DropWatches": DropWatches,
        "Pause": Pause,
    }
    keywords = {k.arg: k.value for k in node.keywords}
    seed = ast.literal_eval(keywords["seed"])
    # The printed schedule is Python, evaluated with the step classes only, as a user
    # pasting it into a test would.
    faults = eval(compile(ast.Expression(keywords["faults"]), "<replay>", "eval"), names)
    assert isinstance(faults, FaultSchedule)
    return node.args[0].id, seed, faults


def test_the_search_finds_the_bug_and_prints_what_the_docs_show() -> None:
    found = example.search(example.reconcile_with_generated_names)
    assert found == FOUND


def test_the_printed_replay_reproduces_the_bug_and_the_fix_passes_it() -> None:
    name, seed, faults = replayed(FOUND)
    assert name == "reconcile_with_generated_names"
    assert faults.steps, "the shrunk schedule has a fault"
    problems = example.check(example.reconcile_with_generated_names, seed, faults)
    assert problems == FOUND.split("\nreplay: ")[0].split("\n")
    assert example.check(example.reconcile, seed, faults) == []


def test_the_fixed_reconcile_passes_the_same_search() -> None:
    assert example.search(example.reconcile) is None
