"""Sharded controllers: owner buckets and which keys a replica may reconcile.

A sharded controller's primary objects are split by the hash of their uid
(:func:`~kubemoon_core.sharding.shard_hash`); the API server can filter by uid or namespace only, so
the objects a controller *writes* carry the label :data:`OWNER_BUCKET_LABEL` naming their
owner's bucket: the top :data:`OWNER_BUCKET_BITS` bits of the owner uid's hash, as two
lower-case hex digits. :func:`~kubemoon_core.sharding.assign_ranges` cuts the hash space at bucket
boundaries, so every assigned range is a whole set of buckets and a replica's bucket label
selector (:func:`owner_bucket_selector`) selects exactly the owned objects of the
primaries in its ranges.

Rules: everything here is pure. :class:`ShardedKeys` remembers the hash of each primary
key it saw a change of, and admits a key only while that hash lies in the admitted ranges;
a key it never saw (or forgot) is refused, so nothing outside the ranges is reconciled.
A deletion of an object outside the admitted ranges is an object *leaving* the replica's
shard (its range moved elsewhere): the key is forgotten, never treated as a deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._changes import Change, ChangeType
from ._resources import ObjectKey
from ._shard import HASH_SPACE, ShardRange, ShardSelectorError, text_hash

__all__ = [
    "OWNER_BUCKETS",
    "OWNER_BUCKET_BITS",
    "OWNER_BUCKET_LABEL",
    "ShardedKeys",
    "bucket_range",
    "buckets_of",
    "owner_bucket",
    "owner_bucket_label",
    "owner_bucket_selector",
]

OWNER_BUCKET_LABEL = "shard.kubemoon.io/owner-bucket"
"""The label an object written by a sharded controller carries: its owner's bucket."""
OWNER_BUCKET_BITS = 8
"""How many top bits of the owner uid's hash name its bucket."""
OWNER_BUCKETS = 1 << OWNER_BUCKET_BITS
"""How many buckets there are (256): also the most replicas that get a range."""
_SHIFT = 64 - OWNER_BUCKET_BITS
_BUCKET_SIZE = 1 << _SHIFT


def owner_bucket(uid: str) -> int:
    """The bucket (0 to 255) of an owner with this uid: the top bits of its FNV-1a hash."""
    if not isinstance(uid, str) or not uid:
        raise ShardSelectorError(f"an owner uid is a non-empty string, got {uid!r}")
    try:
        return text_hash(uid) >> _SHIFT
    except UnicodeEncodeError as exc:
        raise ShardSelectorError("an owner uid must be valid UTF-8 text") from exc


def owner_bucket_label(uid: str) -> str:
    """The :data:`OWNER_BUCKET_LABEL` value of an owner with this uid (``"00"`` to ``"ff"``)."""
    return f"{owner_bucket(uid):02x}"


def bucket_range(bucket: int) -> ShardRange:
    """The hashes of one bucket."""
    if isinstance(bucket, bool) or not isinstance(bucket, int) or not 0 <= bucket < OWNER_BUCKETS:
        raise ShardSelectorError(f"a bucket is an int in [0, {OWNER_BUCKETS}), got {bucket!r}")
    return ShardRange(bucket << _SHIFT, (bucket + 1) << _SHIFT)


def buckets_of(ranges: Iterable[ShardRange]) -> tuple[int, ...]:
    """The buckets the ranges cover, exactly: a range that does not start and end on a
    bucket boundary is a :class:`ShardSelectorError` (its buckets would be split)."""
    found: set[int] = set()
    for item in ranges:
        if not isinstance(item, ShardRange):
            raise ShardSelectorError(f"buckets_of() takes ShardRange values, got {item!r}")
        if item.start % _BUCKET_SIZE or item.end % _BUCKET_SIZE:
            raise ShardSelectorError(f"{item} does not start and end on owner-bucket boundaries")
        found.update(range(item.start >> _SHIFT, item.end >> _SHIFT))
    return tuple(sorted(found))


def owner_bucket_selector(ranges: Iterable[ShardRange]) -> str | None:
    """The label selector of the owned objects of primaries in ``ranges``.

    None when the ranges cover every bucket (watch everything, labelled or not);
    ``shard.kubemoon.io/owner-bucket in (00,01,...)`` otherwise.
    """
    buckets = buckets_of(ranges)
    if len(buckets) == OWNER_BUCKETS:
        return None
    if not buckets:
        raise ShardSelectorError("no ranges: an owner-bucket selector needs at least one")
    values = ",".join(f"{b:02x}" for b in buckets)
    return f"{OWNER_BUCKET_LABEL} in ({values})"


def _uid_hash(obj: Mapping[str, Any] | None) -> int | None:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if not isinstance(uid, str) or not uid:
        return None
    try:
        return text_hash(uid)
    except UnicodeEncodeError:
        return None


class ShardedKeys:
    """Which primary keys a sharded controller may reconcile now.

    Feed it every change of the primary cache (:meth:`observe`) and the ranges the
    membership says may be worked on (:meth:`admit`); ask :meth:`admits` before queueing
    and before handing out a key. Hashes are remembered per key, so a deleted object's key
    is still admitted (its reconcile sees it gone) while its range is admitted.
    """

    __slots__ = ("_hashes", "_ranges")

    def __init__(self) -> None:
        self._ranges: tuple[ShardRange, ...] = ()
        self._hashes: dict[ObjectKey, int] = {}

    def __repr__(self) -> str:
        return f"<ShardedKeys ranges={len(self._ranges)} keys={len(self._hashes)}>"

    def __len__(self) -> int:
        return len(self._hashes)

    @property
    def ranges(self) -> tuple[ShardRange, ...]:
        """The admitted ranges."""
        return self._ranges

    def admit(self, ranges: Iterable[ShardRange]) -> list[ObjectKey]:
        """Admit exactly the keys whose hash lies in ``ranges`` from now on; return the
        known keys this newly admits (queue them: changes seen while their range was
        elsewhere were dropped)."""
        admitted = tuple(ranges)
        for item in admitted:
            if not isinstance(item, ShardRange):
                raise ShardSelectorError(f"admit() takes ShardRange values, got {item!r}")
        before = self._ranges
        self._ranges = admitted
        gained = [r for r in admitted if r not in before]
        if not gained:
            return []
        return [
            key
            for key, value in self._hashes.items()
            if any(r.start <= value < r.end for r in gained)
            and not any(r.start <= value < r.end for r in before)
        ]

    def _in_ranges(self, value: int) -> bool:
        return any(r.start <= value < r.end for r in self._ranges)

    def observe(self, change: Change, *, busy: bool = False) -> bool:
        """Remember the hash of a primary change's object; True if its key is admitted.

        A deletion outside the admitted ranges is the object leaving this shard: the key
        is forgotten and the change must not be treated as a deletion (False). With
        ``busy`` (a reconcile of the key still runs) its hash is kept, so the range it
        belongs to is not reported stopped before that reconcile ends; forget it then.
        """
        value = _uid_hash(change.object)
        if value is None:
            return self.admits(change.key)
        if change.type is ChangeType.DELETED and not self._in_ranges(value):
            if busy:
                self._hashes[change.key] = value
            else:
                self._hashes.pop(change.key, None)
            return False
        self._hashes[change.key] = value
        return self._in_ranges(value)

    def admits(self, key: ObjectKey) -> bool:
        """True when the key's object hashes into an admitted range."""
        value = self._hashes.get(key)
        return value is not None and self._in_ranges(value)

    def hash_of(self, key: ObjectKey) -> int | None:
        """The remembered hash of ``key``'s object."""
        return self._hashes.get(key)

    def forget(self, key: ObjectKey) -> None:
        """Forget ``key`` (its object is gone and its reconcile done)."""
        self._hashes.pop(key, None)

    def keys_in(self, shard: ShardRange, keys: Iterable[ObjectKey]) -> list[ObjectKey]:
        """Those of ``keys`` whose object hashes into ``shard``."""
        found = []
        for key in keys:
            value = self._hashes.get(key)
            if value is not None and shard.start <= value < shard.end:
                found.append(key)
        return found


assert HASH_SPACE == OWNER_BUCKETS * _BUCKET_SIZE
