"""Object changes: what a cache reports and what a controller consumes.

Rules: a change always names its key; ``old`` is None for additions, ``new`` is None for
deletions; :attr:`Change.initial` marks the changes of a reflector's first complete list (a
restart's whole cache), which controllers queue at low priority; it is a scheduling hint
and takes no part in equality. Changes are frozen values, safe to hand between machines.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._resources import ObjectKey

__all__ = ["Change", "ChangeType", "initial_change"]


class ChangeType(enum.Enum):
    """The kind of change a cache saw."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True, eq=False)
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

    @property
    def initial(self) -> bool:
        """True for a change of a reflector's first complete list (:func:`initial_change`)."""
        return False

    def __eq__(self, other: Any) -> bool:  # "object" is the property above
        if not isinstance(other, Change):
            return NotImplemented
        return (self.type, self.key, self.old, self.new) == (
            other.type,
            other.key,
            other.old,
            other.new,
        )

    def __hash__(self) -> int:
        return hash((self.type, self.key, self.old, self.new))


@dataclass(frozen=True, slots=True, eq=False)
class _InitialChange(Change):
    @property
    def initial(self) -> bool:
        return True


def initial_change(change: Change) -> Change:
    """The same change, marked as part of a first complete list (:attr:`Change.initial`)."""
    return _InitialChange(change.type, change.key, change.old, change.new)
