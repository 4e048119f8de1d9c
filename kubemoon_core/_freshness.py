"""Read-your-own-writes: per-key floors that keep a lagging cache from hiding a write.

Rules:

- resourceVersions are compared as kube-apiserver 1.37 guarantees (KEP-5504, apimachinery's
  ``resourceversion.CompareResourceVersion``): a comparable resourceVersion is a non-empty
  string of ASCII decimal digits without a leading zero (so ``"0"`` is not one: it is a
  special value in list and watch requests, never a live version); two are ordered by
  length, then character by character. Anything else is *not comparable*, and
  :func:`compare_resource_versions` says so with None: it is never guessed to be newer.
- A write's answer becomes the *floor* of its key in one cache (:class:`WriteFloors`): until
  the cache holds a version at least as new, reads get the written object; a delete leaves
  a *tombstone* (the object is gone) so a read does not resurrect it. A delete answered
  with an object carrying ``deletionTimestamp`` (finalizers pending) is a floor, not a
  tombstone: the object still exists.
- A floor is dropped as soon as the cache holds a version >= it (checked on every read and
  on every change the cache delivers), once the cache's collection resourceVersion (the
  point its list and watch have reached) is >= it, after ``max_age`` seconds, or, beyond
  ``max_entries``, oldest first. When the cached version and the floor are not comparable,
  the floor is dropped and the cache wins: the layer steps aside rather than guess (a read
  is then what it would be without it). A write whose answer has no comparable
  resourceVersion (some aggregated APIs) records no floor, for the same reason.
- Dry-run writes, collection deletes and subresources other than ``status`` record
  nothing: their answers are not the object as stored.
- Judging a floor decodes nothing: the cached copy's resourceVersion is read from the store
  as kept (a compact store keeps it beside the bytes). Only a tombstone without a version
  needs the cached copy's uid, read once per cached version. A read asks only about the
  floors it could return: those of a namespace (:meth:`WriteFloors.written_keys`) or those
  whose written object an index function puts under a value
  (:meth:`WriteFloors.indexed_keys`), so its cost follows the floors it returns, not all
  the floors pending.
- Pure: time comes in as ``now`` (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, KeysView, Mapping
from dataclasses import dataclass
from typing import Any

from ._changes import Change, ChangeType
from ._errors import LocalProtocolError
from ._request import Request
from ._resources import GroupVersionResource, ObjectKey, ResourcePath
from ._store import Store

__all__ = [
    "DEFAULT_FLOOR_MAX_AGE",
    "DEFAULT_FLOOR_MAX_ENTRIES",
    "Floor",
    "WriteFloors",
    "WrittenObject",
    "compare_resource_versions",
    "written_object",
]

DEFAULT_FLOOR_MAX_AGE = 300.0
"""Seconds a floor is kept at most (an informer that has not caught up in five minutes is
broken, and its failure is reported elsewhere)."""
DEFAULT_FLOOR_MAX_ENTRIES = 10_000
"""Floors one cache keeps at most; beyond it the oldest is forgotten."""

_DIGITS = frozenset("0123456789")
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _comparable(rv: object) -> bool:
    return isinstance(rv, str) and rv != "" and rv[0] != "0" and _DIGITS.issuperset(rv)


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b``; None if either is
    not a comparable resourceVersion (see the module's rules). Only meaningful for two
    versions of objects of one resource on one API server."""
    if not (_comparable(a) and _comparable(b)):
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]


def _cached_resource_version(store: Store, key: ObjectKey) -> str | None:
    """The resourceVersion of the cached object ``key`` (None if absent or without one).

    The one place the layer reads a cached version: without decoding a compact entry."""
    return store.resource_version(key)


@dataclass(frozen=True, slots=True)
class WrittenObject:
    """What a successful write left on the server, as its answer tells it.

    ``obj`` is the object as stored (None for a tombstone); ``resource_version`` is the
    answer's (None when a delete answered with a Status); ``uid`` the object's.
    """

    resource: GroupVersionResource
    key: ObjectKey
    obj: Mapping[str, Any] | None
    resource_version: str | None
    uid: str | None

    @property
    def deleted(self) -> bool:
        """True for a tombstone: the write removed the object."""
        return self.obj is None


def written_object(request: Request, answer: object) -> WrittenObject | None:
    """The object a successful write ``request`` left, read from its decoded ``answer``.

    None for reads, dry runs, collection deletes, subresources other than ``status``, an
    answer that is not the named object, and an answer whose resourceVersion is not
    comparable. Never raises on what a server answered.
    """
    if request.method not in _WRITES or not isinstance(answer, Mapping):
        return None
    if any(name == "dryRun" for name, _ in request.query):
        return None
    try:
        path = ResourcePath.parse(request.path)
    except LocalProtocolError:
        return None
    if path.subresource not in (None, "status"):
        return None
    metadata = _metadata(answer)
    name = metadata.get("name")
    namespace = metadata.get("namespace", "")
    uid = metadata.get("uid")
    uid = uid if isinstance(uid, str) and uid else None
    if request.method == "DELETE":
        if path.name is None:
            return None  # a collection delete: which objects went is not said
        key = ObjectKey(path.namespace or "", path.name)
        if answer.get("kind") == "Status":
            # No version: the tombstone is judged by the uid of the deleted object, so
            # without one there is nothing to judge by.
            details = answer.get("details")
            found = details.get("uid") if isinstance(details, Mapping) else None
            if answer.get("status") != "Success" or not isinstance(found, str) or not found:
                return None
            return WrittenObject(path.gvr, key, None, None, found)
        if name != path.name or namespace != key.namespace:
            return None
        rv = metadata.get("resourceVersion")
        if not _comparable(rv):
            return None
        if metadata.get("deletionTimestamp"):
            return WrittenObject(path.gvr, key, answer, rv, uid)  # finalizers pending
        return WrittenObject(path.gvr, key, None, rv, uid)
    if answer.get("kind") == "Status" or not isinstance(name, str) or not name:
        return None
    if not isinstance(namespace, str) or namespace != (path.namespace or ""):
        return None
    if path.name is not None and path.name != name:
        return None
    rv = metadata.get("resourceVersion")
    if not _comparable(rv):
        return None
    return WrittenObject(path.gvr, ObjectKey(namespace, name), answer, rv, uid)


@dataclass(frozen=True, slots=True)
class Floor:
    """The written state of one key a cache must not read older than.

    ``obj`` is None for a tombstone (the write deleted the object). ``resource_version`` is
    None only for a tombstone from a delete answered with a Status: it then hides the cached
    object of the same ``uid``, and one of another uid only if it is not newer than
    ``after``, the version this process last wrote of the deleted object (a cached object
    of another uid and a later version may have been created after the delete: with no
    version to compare, the cache wins).
    """

    key: ObjectKey
    obj: Mapping[str, Any] | None
    resource_version: str | None
    uid: str | None
    recorded_at: float
    after: str | None = None

    @property
    def deleted(self) -> bool:
        """True for a tombstone."""
        return self.obj is None


def _forget(table: dict[str, dict[ObjectKey, Floor]], name: str, floor: Floor) -> None:
    """Take ``floor`` out of ``table[name]`` if it is there (not another floor of its key)."""
    bucket = table.get(name)
    if bucket is not None and bucket.get(floor.key) is floor:
        bucket.pop(floor.key, None)
        if not bucket:
            table.pop(name, None)
            if bucket:  # another thread filled it meanwhile: keep what it added
                table.setdefault(name, {}).update(bucket)


class WriteFloors:
    """The floors of one cache: the objects this process wrote, until the cache catches up.

    Feed it the writes (:meth:`record`), the changes the cache delivers (:meth:`observe`),
    and ask it, on every read of a key, whether the cache is behind (:meth:`fresher`).
    ``transform`` shapes a written object as the cache stores it (dropping
    ``managedFields``, or keeping metadata only). ``indexers`` are the cache's index
    functions: each written object is indexed when recorded, so a read by index finds its
    floors without looking at the others (:meth:`indexed_keys`). Counters:
    ``stale_reads_avoided`` (reads answered from a floor), ``incomparable`` (floors
    dropped because the cached version could not be compared), ``evicted`` (floors
    forgotten beyond the bounds).
    """

    __slots__ = (
        "_by_namespace",
        "_by_value",
        "_floors",
        "_indexers",
        "_made",
        "_max_age",
        "_max_entries",
        "_transform",
        "_uids",
        "_unindexed",
        "evicted",
        "incomparable",
        "stale_reads_avoided",
    )

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_FLOOR_MAX_ENTRIES,
        max_age: float = DEFAULT_FLOOR_MAX_AGE,
        transform: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise LocalProtocolError(f"max_entries must be a positive int, not {max_entries!r}")
        if (
            isinstance(max_age, bool)
            or not isinstance(max_age, int | float)
            or not 0 < max_age < float("inf")
        ):
            raise LocalProtocolError(f"max_age must be a positive number, not {max_age!r}")
        self._max_entries = max_entries
        self._max_age = float(max_age)
        self._transform = transform
        # key -> floor, oldest record first (a new record of a key moves it to the end).
        self._floors: dict[ObjectKey, Floor] = {}
        # What a read looks up instead of walking every floor. Each entry names the floor
        # it was made for: an entry whose floor is no longer the key's is ignored (another
        # thread may record and drop meanwhile), so a lookup never misses a floor.
        self._by_namespace: dict[str, dict[ObjectKey, Floor]] = {}
        self._indexers: dict[str, IndexFunc] = {}
        # index name -> value -> key -> floor; and the floors an index function failed on
        # (a read by that index asks about them all, and calls the function itself).
        self._by_value: dict[str, dict[str, dict[ObjectKey, Floor]]] = {}
        self._unindexed: dict[str, dict[ObjectKey, Floor]] = {}
        # key -> (its floor, the (index, value) entries made for it)
        self._made: dict[ObjectKey, tuple[Floor, list[tuple[str, str]]]] = {}
        # Tombstones without a version: key -> (the floor, the cached version, its uid).
        self._uids: dict[ObjectKey, tuple[Floor, str, str | None]] = {}
        self.stale_reads_avoided = 0
        self.incomparable = 0
        self.evicted = 0
        if indexers:
            self.add_indexers(indexers)

    def __len__(self) -> int:
        return len(self._floors)

    def __contains__(self, key: object) -> bool:
        """True if ``key`` (an :class:`ObjectKey`) has a floor, ahead of the cache or not."""
        return key in self._floors

    def __repr__(self) -> str:
        return f"<WriteFloors floors={len(self._floors)} avoided={self.stale_reads_avoided}>"

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Index the written objects with these functions too (those pending at once).

        A name already in use is refused (the cache's own indexes are added alike)."""
        for name in indexers:
            if name in self._indexers:
                raise LocalProtocolError(f"an index is already named {name!r}")
        for name, function in indexers.items():
            self._indexers[name] = function
            self._by_value[name] = {}
            self._unindexed[name] = {}
        for floor in list(self._floors.values()):
            self._index(floor, indexers)

    def record(self, written: WrittenObject, now: float) -> None:
        """Remember a write's answer as the floor of its key.

        An answer older than the floor already kept (two writes that finished out of
        order) does not lower it.
        """
        self.expire(now)
        if written.resource_version is None and written.uid is None:
            return  # a tombstone with nothing to judge it by
        key = written.key
        current = self._floors.get(key)
        after: str | None = None
        if current is not None and current.resource_version is not None:
            if written.resource_version is None:
                if written.uid == current.uid:
                    after = current.resource_version  # the delete came after that write
                # Another incarnation's delete: which came first is unknown, so no bound.
            elif (
                compare_resource_versions(written.resource_version, current.resource_version) == -1
            ):
                return
        elif current is not None and written.resource_version is None:
            after = current.after  # deleted again: what bounded the first still does
        obj = written.obj
        if obj is not None and self._transform is not None:
            obj = self._transform(obj)
        floor = Floor(key, obj, written.resource_version, written.uid, now, after)
        # The old floor's index entries, taken before the new floor's replace them in
        # _made: without them the old values would stay findable (and held) for good.
        replaced = self._made.get(key)
        # Findable first, then the floor of its key: a read never misses it.
        self._by_namespace.setdefault(key.namespace, {})[key] = floor
        self._index(floor, self._indexers)
        old = self._floors.pop(key, None)
        self._floors[key] = floor
        if old is not None:
            self._unlink(old, replaced)
        while len(self._floors) > self._max_entries and (oldest := self._oldest()) is not None:
            self._drop(oldest.key)
            self.evicted += 1

    def _index(self, floor: Floor, indexers: Mapping[str, IndexFunc]) -> None:
        """Make ``floor`` findable by the values ``indexers`` give its written object."""
        if floor.obj is None:
            return  # a tombstone hides a cached key, which the cache's own index finds
        made: list[tuple[str, str]] = []
        for name, function in indexers.items():
            try:
                values = list(function(floor.obj))
            except Exception:  # the caller's code: a read by this index calls it again
                self._unindexed[name][floor.key] = floor
                continue
            by_value = self._by_value[name]
            for value in values:
                by_value.setdefault(value, {})[floor.key] = floor
                made.append((name, value))
        if made:
            found = self._made.get(floor.key)
            if found is not None and found[0] is floor:
                made = found[1] + made
            self._made[floor.key] = (floor, made)

    def _unlink(
        self, floor: Floor, made: tuple[Floor, list[tuple[str, str]]] | None = None
    ) -> None:
        """Forget the lookup entries made for ``floor`` (those since made for another floor
        of its key stay); ``made`` is its entries when a newer floor already replaced them
        in the table."""
        key = floor.key
        _forget(self._by_namespace, key.namespace, floor)
        current = self._made.get(key)
        if current is not None and current[0] is floor:
            self._made.pop(key, None)
        if made is None:
            made = current
        if made is not None and made[0] is floor:
            for name, value in made[1]:
                by_value = self._by_value.get(name)
                if by_value is not None:
                    _forget(by_value, value, floor)
        for unindexed in self._unindexed.values():
            if unindexed.get(key) is floor:
                unindexed.pop(key, None)
        memo = self._uids.get(key)
        if memo is not None and memo[0] is floor:
            self._uids.pop(key, None)

    def _drop(self, key: ObjectKey) -> None:
        floor = self._floors.pop(key, None)
        if floor is not None:
            self._unlink(floor)

    def _oldest(self) -> Floor | None:
        # Tolerates another thread changing the table meanwhile (the blocking adapter's
        # informer thread drops floors while a worker records one): never a KeyError.
        try:
            return self._floors[next(iter(self._floors))]
        except (StopIteration, KeyError, RuntimeError):
            return None

    def expire(self, now: float) -> None:
        """Forget the floors older than ``max_age``."""
        limit = now - self._max_age
        while (oldest := self._oldest()) is not None and oldest.recorded_at <= limit:
            self._drop(oldest.key)

    def _caught_up(self, floor: Floor, watermark: str) -> bool:
        """True once the cache's collection resourceVersion has passed the floor."""
        if floor.resource_version is None:
            return False
        return compare_resource_versions(watermark, floor.resource_version) in (0, 1)

    def fresher(self, store: Store, key: ObjectKey, watermark: str, now: float) -> Floor | None:
        """The floor to read instead of ``store``'s copy of ``key``, or None to read the cache.

        ``watermark`` is the resourceVersion the cache's list and watch have reached; read
        it *before* calling, so the store is at least as new. A floor returned is counted
        in ``stale_reads_avoided`` (a tombstone means: the object is gone). Nothing is
        decoded: the cached version is read as the store keeps it (see the module's rules).
        """
        floor = self._floors.get(key)
        if floor is None:
            return None
        if now - floor.recorded_at >= self._max_age or self._caught_up(floor, watermark):
            self._drop(key)
            return None
        if key not in store:
            if floor.obj is not None:
                self.stale_reads_avoided += 1
            return floor
        cached_rv = _cached_resource_version(store, key)
        if floor.resource_version is None:
            # A tombstone without a version: it hides the incarnation it deleted only.
            # Another incarnation: older than the deleted one if not newer than our own
            # write of it; otherwise it may be a re-creation, and the cache is read (the
            # tombstone stays: it still hides a late copy of the incarnation it deleted).
            if self._cached_uid(store, key, floor, cached_rv) != floor.uid and (
                floor.after is None
                or compare_resource_versions(cached_rv or "", floor.after) not in (-1, 0)
            ):
                return None
            self.stale_reads_avoided += 1
            return floor
        order = compare_resource_versions(cached_rv or "", floor.resource_version)
        if order is None:
            self.incomparable += 1
            self._drop(key)
            return None
        if order >= 0:
            self._drop(key)
            return None
        self.stale_reads_avoided += 1
        return floor

    def _cached_uid(
        self, store: Store, key: ObjectKey, floor: Floor, cached_rv: str | None
    ) -> str | None:
        """The uid of the cached ``key``, read once per cached version while ``floor`` (a
        tombstone without a version) stands: a compact store decodes to answer it."""
        memo = self._uids.get(key)
        if memo is not None and memo[0] is floor and cached_rv is not None and memo[1] == cached_rv:
            return memo[2]
        uid = store.uid(key)
        if cached_rv is not None and self._floors.get(key) is floor:
            self._uids[key] = (floor, cached_rv, uid)
        return uid

    def observe(self, change: Change) -> None:
        """Drop the floor of a key the cache has now caught up on (a delivered change)."""
        floor = self._floors.get(change.key)
        if floor is None:
            return
        seen = change.old if change.type is ChangeType.DELETED else change.new
        metadata = _metadata(seen) if seen is not None else {}
        if floor.resource_version is None:
            if change.type is ChangeType.DELETED and floor.uid == metadata.get("uid"):
                self._drop(change.key)
            return
        rv = metadata.get("resourceVersion")
        if compare_resource_versions(rv if isinstance(rv, str) else "", floor.resource_version) in (
            0,
            1,
        ):
            self._drop(change.key)

    def live_keys(self) -> KeysView[ObjectKey]:
        """A live view of the keys that have a floor (a membership test costs one lookup)."""
        return self._floors.keys()

    def written_keys(self, namespace: str | None = None) -> list[ObjectKey]:
        """The keys that have a floor (for readers that must look at every one), or those
        of ``namespace`` (looked up, not searched)."""
        if namespace is None:
            return list(self._floors)
        return list(self._by_namespace.get(namespace, ()))

    def indexed_keys(self, index: str, value: str) -> list[ObjectKey]:
        """The keys whose written object the index function ``index`` (one of
        ``indexers``) put under ``value``, and those it failed on (the reader judges them
        itself); none for an index this table was not given. Tombstones are not indexed:
        they hide cached keys, which the cache's own index finds. While another thread
        changes the table a key may be named whose floor has just gone (:meth:`fresher`
        then says so); a floor recorded before the call is never left out."""
        keys = list(self._by_value.get(index, {}).get(value, ()))
        failed = self._unindexed.get(index)
        if failed:
            named = set(keys)
            keys.extend(key for key in list(failed) if key not in named)
        return keys
