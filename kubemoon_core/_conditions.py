"""Status conditions with ``metav1.Condition`` semantics, as pure list transformations.

Rules: a condition list holds at most one condition per ``type``. Setting a condition
returns a new list (the input is never modified); ``lastTransitionTime`` changes only when
``status`` flips, so re-asserting the same state changes nothing but the fields that
differ, and asserting exactly the current state returns an equal list (no status write).
Values are validated as the API server validates ``metav1.Condition``: ``type`` a
qualified name, ``status`` True/False/Unknown, ``reason`` a CamelCase identifier of at
most 1024 characters, ``message`` at most 32768 characters, ``observedGeneration`` not
negative.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ._errors import LocalProtocolError

__all__ = [
    "find_condition",
    "is_status_condition_false",
    "is_status_condition_true",
    "remove_condition",
    "set_condition",
]

_STATUSES = ("True", "False", "Unknown")
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
_TYPE_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_TYPE_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_MAX_TYPE = 316
_MAX_REASON = 1024
_MAX_MESSAGE = 32768


def _validate(
    type: object, status: object, reason: object, message: object, observed_generation: object
) -> None:
    if not isinstance(type, str) or not 0 < len(type) <= _MAX_TYPE:
        raise LocalProtocolError(f"condition type must be 1 to {_MAX_TYPE} characters: {type!r}")
    prefix, slash, name = type.rpartition("/")
    if not _TYPE_NAME.match(name) or len(name) > 63 or (slash and not _TYPE_PREFIX.match(prefix)):
        raise LocalProtocolError(f"condition type must be a qualified name: {type!r}")
    if status not in _STATUSES:
        raise LocalProtocolError(f"condition status must be True, False or Unknown: {status!r}")
    if not isinstance(reason, str) or len(reason) > _MAX_REASON or not _REASON.match(reason):
        raise LocalProtocolError(
            f"condition reason must be a CamelCase identifier of at most {_MAX_REASON} "
            f"characters: {reason!r}"
        )
    if not isinstance(message, str) or len(message) > _MAX_MESSAGE:
        raise LocalProtocolError(f"condition message must be a string of at most {_MAX_MESSAGE}")
    if (
        isinstance(observed_generation, bool)
        or not isinstance(observed_generation, int)
        or observed_generation < 0
    ):
        raise LocalProtocolError(
            f"observed_generation must be a non-negative integer: {observed_generation!r}"
        )


def _time(wall: datetime) -> str:
    if not isinstance(wall, datetime) or wall.tzinfo is None:
        raise LocalProtocolError("wall must be a timezone-aware datetime")
    return wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time: seconds


def _entries(conditions: Iterable[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    return [c for c in conditions or () if isinstance(c, Mapping)]


def find_condition(
    conditions: Iterable[Mapping[str, Any]] | None, type: str
) -> dict[str, Any] | None:
    """A copy of the condition of ``type``, or None."""
    for condition in _entries(conditions):
        if condition.get("type") == type:
            return dict(condition)
    return None


def is_status_condition_true(conditions: Iterable[Mapping[str, Any]] | None, type: str) -> bool:
    """True when the condition of ``type`` exists with status ``True``."""
    found = find_condition(conditions, type)
    return found is not None and found.get("status") == "True"


def is_status_condition_false(conditions: Iterable[Mapping[str, Any]] | None, type: str) -> bool:
    """True when the condition of ``type`` exists with status ``False``."""
    found = find_condition(conditions, type)
    return found is not None and found.get("status") == "False"


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    type: str,
    status: str,
    reason: str,
    message: str,
    *,
    observed_generation: int,
    wall: datetime,
) -> list[dict[str, Any]]:
    """A new list with the condition of ``type`` set; see the module rules.

    ``wall`` is the transition time used when the condition is new or its status flips.
    """
    _validate(type, status, reason, message, observed_generation)
    stamp = _time(wall)
    result: list[dict[str, Any]] = []
    found = False
    for condition in _entries(conditions):
        entry = dict(condition)
        if entry.get("type") == type and not found:
            found = True
            if entry.get("status") != status or not entry.get("lastTransitionTime"):
                entry["lastTransitionTime"] = stamp
            entry.update(
                status=status,
                reason=reason,
                message=message,
                observedGeneration=observed_generation,
            )
        elif entry.get("type") == type:
            continue  # a duplicate type: the API would refuse the list; keep the first
        result.append(entry)
    if not found:
        result.append(
            {
                "type": type,
                "status": status,
                "observedGeneration": observed_generation,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
    return result


def remove_condition(
    conditions: Iterable[Mapping[str, Any]] | None, type: str
) -> list[dict[str, Any]]:
    """A new list without the condition of ``type``."""
    return [dict(c) for c in _entries(conditions) if c.get("type") != type]
