"""Shard selectors: which part of a collection a client lists and watches.

kube-apiserver 1.37 (alpha gate ``ShardedListAndWatch``) filters LIST and WATCH by the
query parameter ``shardSelector``: ``shardRange(<path>, '<start>', '<end>')`` terms joined
by ``||``, over the 64-bit FNV-1a hash of ``object.metadata.uid`` or
``object.metadata.namespace`` (a cluster-scoped object hashes the empty string). Bounds are
``'0x'`` and 16 lower-case hex digits, the start inclusive and the end exclusive; the whole
space ends at ``'0x10000000000000000'`` (2**64).

Rules: everything here is pure. :func:`fnv1a_64` is the hash the apiserver computes over
the raw UTF-8 bytes; :meth:`ShardSelector.contains` is the same filter applied on the
client, so a client still receives only its share when the gate is off or when several
apiservers (some without the gate) sit behind one balancer. A bad range or selector is a
:class:`ShardSelectorError` naming what is wrong, never something the server answers with
its HTTP 500. With the gate off the server silently ignores the parameter; a LIST of one
tiny range (``shard_probe_request`` and ``sharding_enabled`` in ``_request``) tells the
two apart.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import LocalProtocolError

__all__ = [
    "HASH_SPACE",
    "ShardField",
    "ShardRange",
    "ShardSelector",
    "ShardSelectorError",
    "fnv1a_64",
    "shard_hash",
]

HASH_SPACE = 1 << 64
"""The size of the hash space: ranges cover ``[0, 2**64)``."""

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = HASH_SPACE - 1

# The longest selector text parse() reads, and the most terms a selector may hold.
MAX_SELECTOR_LENGTH = 64 * 1024
MAX_TERMS = 1024


class ShardSelectorError(LocalProtocolError):
    """A shard range or selector is malformed; the message names what is wrong."""


class ShardField(enum.Enum):
    """The object field whose hash places an object in a shard."""

    UID = "object.metadata.uid"
    NAMESPACE = "object.metadata.namespace"


def fnv1a_64(data: bytes) -> int:
    """The 64-bit FNV-1a hash of ``data`` (Go's ``hash/fnv.New64a``)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ShardSelectorError(f"fnv1a_64 hashes bytes, got {type(data).__name__}")
    h = _FNV_OFFSET
    for byte in bytes(data):
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


@functools.lru_cache(maxsize=16384)
def text_hash(text: str) -> int:
    """:func:`fnv1a_64` of ``text``'s UTF-8 bytes, remembered for the last 16,384 texts.

    A sharded replica hashes the same uids over and over (every change of a primary, every
    write it gates, every owned object it labels); in pure Python one hash of a uid costs
    microseconds, a lookup here a fraction of one. Raises :class:`UnicodeEncodeError` (not
    remembered) for a lone surrogate.
    """
    return fnv1a_64(text.encode("utf-8"))


def _field_value(obj: Mapping[str, Any], field: ShardField) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return ""
    value = metadata.get("uid" if field is ShardField.UID else "namespace")
    return value if isinstance(value, str) else ""


def shard_hash(obj: Mapping[str, Any], field: ShardField = ShardField.UID) -> int:
    """The hash that places ``obj`` in a shard: FNV-1a 64 of the field's UTF-8 bytes.

    A missing field (a cluster-scoped object's namespace) hashes the empty string.
    """
    if not isinstance(field, ShardField):
        raise ShardSelectorError(f"field must be a ShardField, got {field!r}")
    try:
        return text_hash(_field_value(obj, field))
    except UnicodeEncodeError as exc:  # a lone surrogate cannot come from JSON the server sent
        raise ShardSelectorError(f"{field.value} is not valid UTF-8 text") from exc


def _bound(value: int) -> str:
    return "'0x10000000000000000'" if value == HASH_SPACE else f"'0x{value:016x}'"


@dataclass(frozen=True, slots=True)
class ShardRange:
    """The hashes ``start <= h < end`` of one field; ``end`` may be ``2**64``."""

    start: int
    end: int
    field: ShardField = ShardField.UID

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ShardSelectorError(f"range {name} must be an int, got {value!r}")
        if not isinstance(self.field, ShardField):
            raise ShardSelectorError(f"range field must be a ShardField, got {self.field!r}")
        if not 0 <= self.start < HASH_SPACE:
            raise ShardSelectorError(f"range start {self.start} is outside [0, 2**64)")
        if not 0 < self.end <= HASH_SPACE:
            raise ShardSelectorError(f"range end {self.end} is outside (0, 2**64]")
        if self.start >= self.end:
            raise ShardSelectorError(
                f"range start 0x{self.start:x} is not below its end 0x{self.end:x}"
            )

    def contains_hash(self, value: int) -> bool:
        """Whether a hash lies in the range."""
        return self.start <= value < self.end

    def render(self) -> str:
        """The apiserver's syntax: ``shardRange(object.metadata.uid, '0x…', '0x…')``."""
        return f"shardRange({self.field.value}, {_bound(self.start)}, {_bound(self.end)})"

    @property
    def size(self) -> int:
        """How many hashes the range holds."""
        return self.end - self.start

    def __str__(self) -> str:
        return self.render()


_TERM = re.compile(
    r"\s*shardRange\(\s*(object\.metadata\.(?:uid|namespace))\s*,\s*"
    r"'0x([0-9a-f]{16}|10000000000000000)'\s*,\s*"
    r"'0x([0-9a-f]{16}|10000000000000000)'\s*\)\s*"
)


@dataclass(frozen=True, slots=True)
class ShardSelector:
    """A union of :class:`ShardRange` values over one field, rendered joined by ``||``.

    Build one with ``ShardSelector((ShardRange(a, b),))``, :meth:`of_range`,
    :meth:`equal_split` or :meth:`parse`. :meth:`contains` is the client-side filter.
    """

    ranges: tuple[ShardRange, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.ranges, tuple):
            raise ShardSelectorError("ranges must be a tuple of ShardRange")
        if not self.ranges:
            raise ShardSelectorError("a shard selector needs at least one range")
        if len(self.ranges) > MAX_TERMS:
            raise ShardSelectorError(f"a shard selector holds at most {MAX_TERMS} ranges")
        for index, item in enumerate(self.ranges):
            if not isinstance(item, ShardRange):
                raise ShardSelectorError(f"ranges[{index}] is not a ShardRange: {item!r}")
        fields = {item.field for item in self.ranges}
        if len(fields) > 1:
            raise ShardSelectorError("every range of a shard selector must hash the same field")

    @classmethod
    def of_range(cls, start: int, end: int, field: ShardField = ShardField.UID) -> ShardSelector:
        """A selector of one range."""
        return cls((ShardRange(start, end, field),))

    @classmethod
    def equal_split(
        cls, parts: int, index: int, field: ShardField = ShardField.UID
    ) -> ShardSelector:
        """Range ``index`` of ``parts`` equal ranges covering the whole space."""
        for name, value in (("parts", parts), ("index", index)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ShardSelectorError(f"{name} must be an int, got {value!r}")
        if parts < 1 or not 0 <= index < parts:
            raise ShardSelectorError(f"need parts >= 1 and 0 <= index < parts, got {index}/{parts}")
        return cls.of_range(HASH_SPACE * index // parts, HASH_SPACE * (index + 1) // parts, field)

    @classmethod
    def parse(cls, text: str) -> ShardSelector:
        """Read the apiserver's syntax; anything else is a :class:`ShardSelectorError`."""
        if not isinstance(text, str):
            raise ShardSelectorError(f"a shard selector is text, got {type(text).__name__}")
        if len(text) > MAX_SELECTOR_LENGTH:
            raise ShardSelectorError(f"shard selector longer than {MAX_SELECTOR_LENGTH} chars")
        ranges: list[ShardRange] = []
        for index, term in enumerate(text.split("||")):
            match = _TERM.fullmatch(term)
            if match is None:
                raise ShardSelectorError(
                    f"term {index} is not shardRange(object.metadata.uid|namespace, "
                    f"'0x' + 16 lower-case hex digits, ...): {term.strip()[:80]!r}"
                )
            path, start, end = match.groups()
            ranges.append(ShardRange(int(start, 16), int(end, 16), ShardField(path)))
        return cls(tuple(ranges))

    @property
    def field(self) -> ShardField:
        """The field every range hashes."""
        return self.ranges[0].field

    def render(self) -> str:
        """The value of the ``shardSelector`` query parameter."""
        return " || ".join(item.render() for item in self.ranges)

    def __str__(self) -> str:
        return self.render()

    def contains_hash(self, value: int) -> bool:
        """Whether a hash lies in one of the ranges."""
        return any(item.start <= value < item.end for item in self.ranges)

    def contains(self, obj: Mapping[str, Any]) -> bool:
        """Whether the apiserver would send ``obj`` to this selector (the client filter)."""
        return self.contains_hash(shard_hash(obj, self.field))

    @property
    def fraction(self) -> float:
        """The share of the hash space covered (overlaps counted once)."""
        covered = 0
        reach = 0
        for item in sorted(self.ranges, key=lambda r: r.start):
            start = max(item.start, reach)
            if item.end > start:
                covered += item.end - start
                reach = item.end
        return covered / HASH_SPACE
