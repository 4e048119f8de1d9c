"""Object changes: what a cache reports and what a controller consumes.

Rules: a change always names its key; ``old`` is None for additions, ``new`` is None for
deletions. Changes are frozen values, safe to hand between machines.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._resources import ObjectKey

__all__ = ["Change", "ChangeType"]


class ChangeType(enum.Enum):
    """The kind of change a cache saw."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Change:
    """One change of one cached object."""

    type: ChangeType
    key: ObjectKey
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None

    @property
    def object(self) -> Mapping[str, Any]:
        """The newest known state: ``new``, or ``old`` for a deletion."""
        obj = self.new if self.new is not None else self.old
        assert obj is not None, "a Change always carries old or new"
        return obj
