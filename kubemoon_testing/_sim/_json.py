"""JSON values as the simulated API server keeps them: copies, and an object's parts.

Rules: pure functions over decoded JSON (dicts, lists, scalars, and :class:`RawJSON`
members, which are immutable and shared). Every part of the model hands out copies made
here, so no caller can change a stored object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

__all__ = ["Key"]

Key = tuple[str, str]  # (namespace or "", name)


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (faster than ``copy.deepcopy``)."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def _clone(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of an object."""
    return cast(dict[str, Any], _copy(obj))


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _without(obj: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in names}
