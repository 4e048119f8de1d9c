"""Status conditions: metav1.Condition validation and transition-time semantics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import (
    find_condition,
    is_status_condition_false,
    is_status_condition_true,
    remove_condition,
    set_condition,
)

T0 = datetime(2026, 11, 30, 12, 0, 0, 999999, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_a_new_condition_is_appended_with_its_transition_time() -> None:
    result = set_condition(
        None, "Ready", "False", "Pending", "waiting", observed_generation=1, wall=T0
    )
    assert result == [
        {
            "type": "Ready",
            "status": "False",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-11-30T12:00:00Z",
            "reason": "Pending",
            "message": "waiting",
        }
    ]
    assert is_status_condition_false(result, "Ready")
    assert not is_status_condition_true(result, "Ready")
    assert not is_status_condition_true(result, "Missing")
    assert not is_status_condition_false(None, "Ready")


def test_transition_time_changes_only_when_status_flips() -> None:
    first = set_condition([], "Ready", "False", "Pending", "a", observed_generation=1, wall=T0)
    same = set_condition(first, "Ready", "False", "Pending", "a", observed_generation=1, wall=T1)
    assert same == first  # steady state: nothing to write
    reworded = set_condition(
        first, "Ready", "False", "Blocked", "b", observed_generation=2, wall=T1
    )
    assert reworded[0]["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    assert (reworded[0]["reason"], reworded[0]["message"], reworded[0]["observedGeneration"]) == (
        "Blocked",
        "b",
        2,
    )
    flipped = set_condition(reworded, "Ready", "True", "Done", "", observed_generation=2, wall=T1)
    assert flipped[0]["lastTransitionTime"] == "2026-11-30T12:05:00Z"
    assert is_status_condition_true(flipped, "Ready")
    assert first[0]["status"] == "False"  # inputs are never modified


def test_other_conditions_keep_their_place_and_a_local_offset_is_converted() -> None:
    base: list[dict[str, Any]] = [
        {"type": "A", "status": "True"},
        {"type": "Ready", "status": "True", "reason": "X", "message": ""},  # no time: stamped
        {"type": "B", "status": "False"},
        {"type": "Ready", "status": "False"},  # a duplicate: dropped
        "garbage",  # type: ignore[list-item]
    ]
    local = T0.astimezone(timezone(timedelta(hours=-3)))
    result = set_condition(base, "Ready", "True", "X", "", observed_generation=0, wall=local)
    assert [c["type"] for c in result] == ["A", "Ready", "B"]
    assert result[1]["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    assert find_condition(result, "B") == {"type": "B", "status": "False"}
    assert find_condition(result, "C") is None
    assert remove_condition(result, "A") == result[1:]
    assert remove_condition(None, "A") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "True", "R", ""), "type must be 1 to 316"),
        (("not a name", "True", "R", ""), "qualified name"),
        (("Bad_Prefix/Ready", "True", "R", ""), "qualified name"),
        (("example.com/" + "r" * 64, "True", "R", ""), "qualified name"),
        (("Ready", "true", "R", ""), "True, False or Unknown"),
        (("Ready", "True", "", ""), "CamelCase identifier"),
        (("Ready", "True", "not camel", ""), "CamelCase identifier"),
        (("Ready", "True", "9Lives", ""), "CamelCase identifier"),
        (("Ready", "True", "R" * 1025, ""), "CamelCase identifier"),
        (("Ready", "True", "R", None), "message must be a string"),
        (("Ready", "True", "R", "m" * 32769), "message must be a string"),
    ],
)
def test_invalid_conditions_are_refused(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        set_condition([], *args, observed_generation=0, wall=T0)


def test_valid_edge_values() -> None:
    result = set_condition(
        [], "example.com/Ready", "Unknown", "A_b,c:D", "", observed_generation=0, wall=T0
    )
    assert result[0]["reason"] == "A_b,c:D"
    for generation in (-1, True, 1.0):
        with pytest.raises(LocalProtocolError, match="observed_generation"):
            set_condition([], "R", "True", "R", "", observed_generation=generation, wall=T0)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="timezone-aware"):
        set_condition([], "R", "True", "R", "", observed_generation=0, wall=datetime(2026, 1, 1))
