"""Object changes: what a cache reports and what a controller consumes.

Rules: a change always names its key; ``old`` is None for additions, ``new`` is None for
deletions; :attr:`Change.initial` marks the changes of a reflector's first complete list (a
restart's whole cache), which controllers queue at low priority; it is a scheduling hint
and takes no part in equality. Changes are frozen values, safe to hand between machines.

A compact store's full list reports *lazy* changes: they keep the stored JSON bytes and
decode ``old`` and ``new`` on each access (a fresh dict the reader owns, as a compact
store's reads are), so a list of 100,000 changes holds no decoded object. Bytes that no
longer decode raise :class:`~kubemoon_core.errors.DecodeError` naming the object; the
bytes stay in the change (nothing is lost) and the error can be met again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ._errors import DecodeError
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


# A lazy change's loader: the document of one stored blob (kubemoon_core._store_codec).
_Load = Callable[[bytes], Any]


# The slots of Change, which a lazy change fills with its own values (below).
_SET_TYPE = Change.__dict__["type"].__set__
_GET_KEY, _SET_KEY = Change.__dict__["key"].__get__, Change.__dict__["key"].__set__
_GET_OLD, _SET_OLD = Change.__dict__["old"].__get__, Change.__dict__["old"].__set__
_GET_NEW, _SET_NEW = Change.__dict__["new"].__get__, Change.__dict__["new"].__set__


class _LazyChange(Change):
    """A change whose ``old`` and ``new`` are stored blobs, decoded on every access.

    Light by design (a list's worth of them waits at the peak of a sync): Change's own
    slots hold the store's key tuple and the blobs, shared with the store, and ``key`` is
    made on access; 72 bytes a change.
    """

    __slots__ = ("_load",)

    _load: _Load

    def __init__(
        self,
        kind: ChangeType,
        key: tuple[str, str],
        old: bytes | None,
        new: bytes | None,
        load: _Load,
    ) -> None:
        _SET_TYPE(self, kind)
        _SET_KEY(self, key)
        _SET_OLD(self, old)
        _SET_NEW(self, new)
        _SET_LOAD(self, load)

    def _decoded(self, blob: bytes | None, which: str) -> Mapping[str, Any] | None:
        if blob is None:
            return None
        try:
            obj = self._load(blob)
        except Exception as exc:  # msgspec's and the standard library's errors alike
            raise DecodeError(
                f"{self.key}: the cached bytes of the {which} object do not decode: {exc}",
                path=which,
            ) from None
        if type(obj) is not dict:
            raise DecodeError(
                f"{self.key}: the cached bytes of the {which} object are not a JSON object",
                path=which,
            )
        return obj

    @property
    def key(self) -> ObjectKey:
        """The object's key (made now: the change keeps the store's key tuple)."""
        namespace, name = _GET_KEY(self, type(self))
        key = _NEW(ObjectKey)  # ObjectKey's __init__ without its Python frame (no checks)
        _SET_NAMESPACE(key, namespace)
        _SET_NAME(key, name)
        return key

    @property
    def old(self) -> Mapping[str, Any] | None:
        """The previous state, decoded now (a fresh dict on every access)."""
        return self._decoded(_GET_OLD(self, type(self)), "old")

    @property
    def new(self) -> Mapping[str, Any] | None:
        """The new state, decoded now (a fresh dict on every access)."""
        return self._decoded(_GET_NEW(self, type(self)), "new")

    @property
    def object(self) -> Mapping[str, Any]:
        """The newest known state, decoded now (one decode: ``new``, or ``old``)."""
        blob = _GET_NEW(self, type(self))
        obj = self._decoded(blob, "new") if blob is not None else self.old
        assert obj is not None, "a Change always carries old or new"
        return obj

    def _blobs(self) -> tuple[bytes | None, bytes | None]:
        return _GET_OLD(self, type(self)), _GET_NEW(self, type(self))

    def __repr__(self) -> str:
        return f"Change(type={self.type!r}, key={self.key!r}, old=<lazy>, new=<lazy>)"

    def __reduce__(self) -> Any:  # a pickled or copied lazy change is a decoded one
        cls = _InitialChange if self.initial else Change
        return (cls, (self.type, self.key, self.old, self.new))


_SET_LOAD = _LazyChange.__dict__["_load"].__set__
_NEW = object.__new__
_SET_NAMESPACE = ObjectKey.__dict__["namespace"].__set__
_SET_NAME = ObjectKey.__dict__["name"].__set__


class _LazyInitialChange(_LazyChange):
    __slots__ = ()

    @property
    def initial(self) -> bool:
        return True


# One record of a committed list (see _LazyChanges): a compact store's entry (blob, key)
# for an addition, shared with the store, or (type, key, old blob, new blob).
_Record = tuple[Any, ...]


class _LazyChanges(Sequence[Change]):
    """The changes of a compact store's committed list, made on access.

    An addition is the store's own entry (8 bytes in the list, nothing else held); other
    changes are a 4-tuple of the key and blobs. Indexing or iterating makes a
    :class:`_LazyChange` each time (equal, not identical, changes); equal to any sequence
    of equal changes, a list included.
    """

    __slots__ = ("_initial", "_load", "_records")

    def __init__(self, records: list[_Record], load: _Load, *, initial: bool = False) -> None:
        self._records = records
        self._load = load
        self._initial = initial

    def _make(self, record: _Record) -> Change:
        cls = _LazyInitialChange if self._initial else _LazyChange
        if len(record) == 2:
            return cls(ChangeType.ADDED, record[1], None, record[0], self._load)
        return cls(record[0], record[1], record[2], record[3], self._load)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> Change: ...
    @overload
    def __getitem__(self, index: slice) -> list[Change]: ...
    def __getitem__(self, index: int | slice) -> Change | list[Change]:
        if isinstance(index, slice):
            return [self._make(record) for record in self._records[index]]
        return self._make(self._records[index])

    def __iter__(self) -> Iterator[Change]:
        make = self._make
        for record in self._records:
            yield make(record)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return f"<{len(self)} lazy changes>"


def initial_change(change: Change) -> Change:
    """The same change, marked as part of a first complete list (:attr:`Change.initial`)."""
    if isinstance(change, _LazyChange):  # stays lazy: nothing is decoded here
        key = change.key
        return _LazyInitialChange(
            change.type, (key.namespace, key.name), *change._blobs(), change._load
        )
    return _InitialChange(change.type, change.key, change.old, change.new)
