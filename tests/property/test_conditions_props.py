"""Hypothesis: condition lists keep one entry per type and move time only on a flip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core.objects import find_condition, set_condition

types = st.sampled_from(["Ready", "Synced", "example.com/Degraded"])
statuses = st.sampled_from(["True", "False", "Unknown"])
reasons = st.sampled_from(["A", "B", "Waiting"])
steps = st.lists(
    st.tuples(types, statuses, reasons, st.integers(0, 5), st.integers(0, 3600)), max_size=30
)
START = datetime(2026, 1, 1, tzinfo=UTC)


@given(steps)
def test_set_condition_sequences(sequence: list[tuple[str, str, str, int, int]]) -> None:
    conditions: list[dict[str, Any]] = []
    now = START
    for type_, status, reason, generation, seconds in sequence:
        now += timedelta(seconds=seconds)
        before = find_condition(conditions, type_)
        updated = set_condition(
            conditions, type_, status, reason, "", observed_generation=generation, wall=now
        )
        after = find_condition(updated, type_)
        assert after is not None
        assert (after["status"], after["reason"], after["observedGeneration"]) == (
            status,
            reason,
            generation,
        )
        if before is not None and before["status"] == status:
            assert after["lastTransitionTime"] == before["lastTransitionTime"]
        else:
            assert after["lastTransitionTime"] == now.strftime("%Y-%m-%dT%H:%M:%SZ")
        types_seen = [c["type"] for c in updated]
        assert len(types_seen) == len(set(types_seen))
        # Setting the same values again is a fixed point: steady state writes nothing.
        assert (
            set_condition(
                updated, type_, status, reason, "", observed_generation=generation, wall=now
            )
            == updated
        )
        conditions = updated
