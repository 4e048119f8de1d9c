"""The queue model and the leader-election simulation, run long (``make fuzz``).

The same properties as tests/property/test_queue_model.py and test_leader_simulation.py;
tests/conftest.py registers the Hypothesis profiles and HYPOTHESIS_PROFILE picks one
(``fuzz``: 5000 examples per test). The stateful machine also takes longer step runs here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests" / "property") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests" / "property"))

# By the names pytest itself gives these modules (their folders have no __init__.py), so a
# session collecting tests/ and fuzz/ together shares one copy. Imported dynamically so
# that mypy does not see one file under two module names.
_spec = importlib.util.spec_from_file_location("_kubemoon_profiles", ROOT / "tests" / "conftest.py")
assert _spec is not None
assert _spec.loader is not None
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))  # registers, loads profiles
_simulation = importlib.import_module("test_leader_simulation")
_queue_model = importlib.import_module("test_queue_model")

LongQueueMachine: Any = type("LongQueueMachine", (_queue_model.QueueMachine,), {})
TestQueueModelLong = LongQueueMachine.TestCase
TestQueueModelLong.settings = settings(settings.default, stateful_step_count=200)


def test_leader_crash_and_replace_long() -> None:
    """Leadership never overlaps; a crashed leader is replaced in bound (active profile)."""
    _simulation.test_leadership_never_overlaps_and_a_crashed_leader_is_replaced()


def test_leader_lossy_network_long() -> None:
    """Leadership never overlaps on a lossy network (active profile)."""
    _simulation.test_leadership_never_overlaps_on_a_lossy_network()


def test_leader_partition_long() -> None:
    """A cut-off leader steps down before a successor starts (active profile)."""
    _simulation.test_a_partitioned_leader_steps_down_before_a_successor_starts()
