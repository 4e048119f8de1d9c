"""ConfigMirror and the Widget example on the simulated API server, explored (``make fuzz``).

The same properties as tests/property/test_sim_configmirror.py and test_sim_widgets.py,
with examples drawn at random (not derandomized) and longer schedules: up to 12 faults
and 12 user edits. Each example is a whole simulated run (0.1 to 1 s of wall time), so the
count is the active profile's, capped at ``MAX_EXAMPLES``; a failure prints the replay
call and the schedule.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests" / "property") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests" / "property"))

# Registered as in test_fuzz_queue_leader.py: tests/conftest.py loads the profiles, and the
# suites are imported by the names pytest gives them (one copy when collected together).
_spec = importlib.util.spec_from_file_location("_kubemoon_profiles", ROOT / "tests" / "conftest.py")
assert _spec is not None
assert _spec.loader is not None
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
_mirrors: Any = importlib.import_module("test_sim_configmirror")
_widgets: Any = importlib.import_module("test_sim_widgets")

MAX_EXAMPLES = 500
EXPLORE = settings(
    max_examples=min(settings().max_examples, MAX_EXAMPLES),
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)
draws = {
    "seed": st.integers(0, 2**32 - 1),
    "faults": st.integers(0, 12),
    "edits": st.integers(0, 12),
}


@EXPLORE
@given(topology=st.sampled_from(sorted(_mirrors.TOPOLOGIES)), **draws)
def test_configmirror_long(topology: str, seed: int, faults: int, edits: int) -> None:
    """Convergence, quiescence, one writer, nothing refused, errors reported (ConfigMirror)."""
    _mirrors.assert_holds(topology, seed, faults, edits)


@EXPLORE
@given(topology=st.sampled_from(sorted(_widgets.TOPOLOGIES)), **draws)
def test_widgets_long(topology: str, seed: int, faults: int, edits: int) -> None:
    """The same invariants for the Widget example."""
    _widgets.assert_holds(topology, seed, faults, edits)
