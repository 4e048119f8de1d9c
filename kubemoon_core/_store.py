"""The object cache a reflector fills: objects by key, secondary indexes, and changes.

Rules:

- Objects are keyed by :class:`ObjectKey` (namespace, name). Every mutation that changes
  what readers see returns the :class:`Change` values it implies; a mutation that changes
  nothing (an object with the resourceVersion already stored, a delete of an unknown key)
  returns none.
- A full list is applied as an *epoch*: :meth:`Store.begin_epoch`, then :meth:`Store.stage`
  for each listed object, then :meth:`Store.commit_epoch` (or :meth:`Store.abort_epoch`).
  Readers keep seeing the previous state until the commit, which adds, replaces and sweeps
  in one step. Staging keeps one copy: an object whose resourceVersion matches the stored
  one is only *marked* (the stored copy stays), so a relist of an unchanged set holds no
  second copy of it; only new and changed objects wait in the epoch.
- Watch events (:meth:`Store.upsert`, :meth:`Store.delete`) are refused while an epoch is
  open: mixing them would make the sweep wrong.
- ``transform`` runs on every object before it is stored (e.g. to drop ``managedFields``);
  it must keep ``metadata.name``, ``namespace`` and ``resourceVersion``. Index functions and
  the transform are the caller's code: their exceptions propagate, and they run before the
  store changes, so a failing one leaves the store as it was.
- Stored objects are shared with readers and with the changes: do not mutate them.
- A *compact* store (``Store(compact=True)``) keeps each object as its UTF-8 JSON bytes
  next to its resourceVersion and decodes on every read: each read returns a fresh dict
  that belongs to the caller (mutating it cannot change the store). The bytes are the
  ``raw`` bytes a caller hands in (checked: they must decode to the object, apiVersion and
  kind aside, which a list item leaves out and which are then written in front) or, when
  there are none or a transform ran, the object encoded by the fastest codec installed.
  A watch event's change carries dicts as in a plain store (``old`` decoded from the stored
  bytes); the changes of a committed list are lazy (:mod:`._changes`): they keep the
  stored bytes and decode ``old`` and ``new`` on each access, so a list's peak is the
  store plus one page, not every object twice. A list stages the encoded entry alone.
  A resourceVersion that is not a string of at most 254 UTF-8 bytes is not kept (the API
  server's are short decimal strings): such an object counts as changed on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ._changes import Change, ChangeType, _InitialChange, _LazyChanges
from ._errors import LocalProtocolError
from ._resources import ObjectKey
from ._store_codec import (
    _any_stack,
    _blob_rv,
    _blob_start,
    _Codec,
    _Entry,
    _fast_codec,
    _pack,
    _sorted_json,
)

__all__ = [
    "Store",
    "label_indexer",
    "namespace_indexer",
]

Obj = dict[str, Any]
# Keys are (namespace, name) tuples inside the store: their hash is computed in C, while
# ObjectKey's dataclass hash runs Python code on every lookup. The API speaks ObjectKey.
_Key = tuple[str, str]
# The callables a store takes (typing aliases, not exported).
IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]
Transform = Callable[[dict[str, Any]], dict[str, Any]]

_ADDED, _MODIFIED, _DELETED = ChangeType.ADDED, ChangeType.MODIFIED, ChangeType.DELETED


_codec: Callable[[], _Codec] = _fast_codec  # tests swap in _standard_codec
_ENCODE_ERRORS = (TypeError, ValueError, RecursionError, OverflowError)
# Comparing or encoding a deep object recurses from the caller's stack (see _store_codec).
_equal: Callable[[tuple[Any, Any]], bool] = _any_stack(lambda pair: pair[0] == pair[1])
_sorted_deep: Callable[[Any], str] = _any_stack(_sorted_json)

# Every effective mutation builds a Change and its ObjectKey. Setting their slots through the
# descriptors skips the frozen dataclasses' __init__ (one object.__setattr__ per field
# through a Python frame): the same objects, half the cost. Neither class validates in
# __post_init__, and the key's parts were checked by _key.
_NEW = object.__new__
_SET_NAMESPACE = ObjectKey.__dict__["namespace"].__set__
_SET_NAME = ObjectKey.__dict__["name"].__set__
_SET_TYPE = Change.__dict__["type"].__set__
_SET_KEY = Change.__dict__["key"].__set__
_SET_OLD = Change.__dict__["old"].__set__
_SET_NEW = Change.__dict__["new"].__set__


def _object_key(key: _Key) -> ObjectKey:
    object_key = _NEW(ObjectKey)
    _SET_NAMESPACE(object_key, key[0])
    _SET_NAME(object_key, key[1])
    return object_key


def _change(
    kind: ChangeType, key: _Key, old: Obj | None, new: Obj | None, cls: type[Change] = Change
) -> Change:
    object_key = _object_key(key)
    change = _NEW(cls)
    _SET_TYPE(change, kind)
    _SET_KEY(change, object_key)
    _SET_OLD(change, old)
    _SET_NEW(change, new)
    return change


def namespace_indexer(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Index function: the object's namespace (``""`` for cluster-scoped objects)."""
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace", "") if isinstance(metadata, Mapping) else ""
    return (namespace,) if isinstance(namespace, str) else ()


def label_indexer(label: str) -> IndexFunc:
    """Index function factory: the value of label ``label``; unlabelled objects are skipped."""

    def index(obj: Mapping[str, Any]) -> tuple[str, ...]:
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        value = labels.get(label) if isinstance(labels, Mapping) else None
        return (value,) if isinstance(value, str) else ()

    return index


def _rv(obj: Mapping[str, Any]) -> Any:
    metadata = obj.get("metadata")
    # type() first: isinstance against an ABC is slow, and decoded JSON is made of dicts.
    if type(metadata) is dict or isinstance(metadata, Mapping):
        return metadata.get("resourceVersion")
    return None


def _key(obj: Obj) -> _Key:
    """(namespace, name) of an object; a malformed one raises ObjectKey.of's DecodeError."""
    metadata = obj.get("metadata")
    if type(metadata) is dict:  # the fast path: what a JSON decoder produced
        name = metadata.get("name")
        namespace = metadata.get("namespace", "")
        if type(name) is str and name and type(namespace) is str:
            return (namespace, name)
    key = ObjectKey.of(obj)
    return (key.namespace, key.name)


def _where(key: _Key) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


class Store:
    """A cache of objects by key with secondary indexes, filled by events and lists.

    ``indexers`` maps an index name to a function returning the index values of an object;
    :meth:`by_index` finds the objects with a value. Iteration order is insertion order.

    With ``compact=True`` each object is kept as its JSON bytes (about a third of the memory
    of the decoded dict for a ConfigMap) and every read decodes a fresh dict the caller
    owns: :meth:`get` costs one decode (about 1.3 us for a 900-byte ConfigMap with msgspec
    installed, 4 us with the standard library), :meth:`objects` one per object. Objects
    must then be JSON values (str keys; no NaN); one that cannot be encoded is refused with
    :class:`~kubemoon_core.errors.LocalProtocolError` and the store is left unchanged.
    """

    __slots__ = (
        "_codec",
        "_compact",
        "_epoch",
        "_indexers",
        "_indices",
        "_namespaces",
        "_objects",
        "_transform",
    )

    def __init__(
        self,
        *,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
        compact: bool = False,
    ) -> None:
        # key -> the object, or in a compact store key -> _Entry
        self._objects: dict[_Key, Any] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        # index name -> value -> keys (a dict used as an insertion-ordered set)
        self._indices: dict[str, dict[str, dict[_Key, None]]] = {
            name: {} for name in self._indexers
        }
        self._transform = transform
        # The open epoch: key -> the new object, or None when the stored one is confirmed
        # unchanged. None when no epoch is open. A compact store stages the entry.
        self._epoch: dict[_Key, Any] | None = None
        self._compact = bool(compact)
        self._codec = _codec() if compact else None
        # One string per namespace for the keys of a compact store (the objects' own
        # strings die with the decoded dicts).
        self._namespaces: dict[str, str] = {}

    @property
    def compact(self) -> bool:
        """True when objects are kept as JSON bytes and decoded on every read."""
        return self._compact

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions; objects already stored are indexed at once.

        All or nothing: a name already in use is refused, and a failing function adds none.
        """
        for name in indexers:
            if name in self._indexers:
                raise LocalProtocolError(f"an index is already named {name!r}")
        computed = {
            key: {name: list(function(obj)) for name, function in indexers.items()}
            for key, obj in self._pairs()
        }
        self._indexers.update(indexers)
        for name in indexers:
            self._indices[name] = {}
        for key, values in computed.items():
            self._reindex(key, values)

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, ObjectKey) and (key.namespace, key.name) in self._objects

    def __iter__(self) -> Iterator[ObjectKey]:
        return iter(self.keys())

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        """The stored object with this key, or None (compact: a fresh decoded dict)."""
        found = self._objects.get((key.namespace, key.name))
        if found is None or self._codec is None:
            return found
        return self._codec.load(found[0])  # type: ignore[no-any-return]

    def json(self, key: ObjectKey) -> bytes | None:
        """The stored object's JSON document as a compact store keeps it (None when the key
        is absent, and always for a plain store, which keeps no bytes): for decoding it
        straight into a declared class (:func:`~kubemoon_core.json_backends.decode_json`)."""
        if self._codec is None:
            return None
        found = self._objects.get((key.namespace, key.name))
        if found is None:
            return None
        blob: bytes = found[0]
        return blob[_blob_start(blob) :]

    def resource_version(self, key: ObjectKey) -> str | None:
        """The stored object's ``metadata.resourceVersion`` (None if absent), no decoding."""
        found = self._objects.get((key.namespace, key.name))
        if found is None:
            return None
        if self._codec is not None:
            return _blob_rv(found[0])
        rv = _rv(found)
        return rv if type(rv) is str else None

    def uid(self, key: ObjectKey) -> str | None:
        """The stored object's ``metadata.uid`` (None if absent or without one). A plain
        store reads it in place; a compact one decodes the object (its entry keeps the
        resourceVersion alone), so ask only when :meth:`resource_version` cannot answer."""
        found = self._objects.get((key.namespace, key.name))
        if found is None:
            return None
        obj = found if self._codec is None else self._codec.load(found[0])
        metadata = obj.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        return uid if type(uid) is str else None

    def keys(self) -> list[ObjectKey]:
        """Every key, in insertion order."""
        return [ObjectKey(namespace, name) for namespace, name in self._objects]

    def objects(self) -> list[Mapping[str, Any]]:
        """Every stored object, in insertion order."""
        if self._codec is None:
            return list(self._objects.values())
        load = self._codec.load
        return [load(entry[0]) for entry in self._objects.values()]

    def items(self) -> list[tuple[ObjectKey, Mapping[str, Any]]]:
        """Every (key, object) pair, in insertion order."""
        return [(ObjectKey(ns, name), obj) for (ns, name), obj in self._pairs()]

    @property
    def index_names(self) -> list[str]:
        """The names of the indexes."""
        return list(self._indexers)

    def index_values(self, index: str) -> list[str]:
        """The values of an index that at least one object has."""
        return list(self._index(index))

    def keys_by_index(self, index: str, value: str) -> list[ObjectKey]:
        """The keys of the objects whose index function returned ``value``."""
        return [ObjectKey(ns, name) for ns, name in self._index(index).get(value, ())]

    def by_index(self, index: str, value: str) -> list[Mapping[str, Any]]:
        """The objects whose index function returned ``value``."""
        objects = self._objects
        keys = self._index(index).get(value, ())
        if self._codec is None:
            return [objects[key] for key in keys]
        load = self._codec.load
        return [load(objects[key][0]) for key in keys]

    def _index(self, name: str) -> dict[str, dict[_Key, None]]:
        index = self._indices.get(name)
        if index is None:
            raise LocalProtocolError(f"no index named {name!r}")
        return index

    def _pairs(self) -> list[tuple[_Key, Obj]]:
        if self._codec is None:
            return list(self._objects.items())
        load = self._codec.load
        return [(key, load(entry[0])) for key, entry in self._objects.items()]

    # -- watch events ----------------------------------------------------------------------

    def upsert(self, obj: Obj, *, raw: bytes | None = None) -> Change | None:
        """Store an added or modified object; return the change, or None if it is known.

        The change is ``ADDED`` when the key was absent and ``MODIFIED`` otherwise, whatever
        the event said: the store, not the event, knows what readers saw. ``raw``: the exact
        UTF-8 JSON bytes of ``obj`` as received; a compact store without a transform keeps
        them (after checking that they decode to ``obj``), any other store ignores them.
        """
        # The hot path of every watch event: the calls of _no_epoch, _transformed and _put
        # are inlined for the common case (no epoch, no index).
        if self._epoch is not None:
            self._no_epoch("upsert")
        if self._codec is not None:
            return self._upsert_compact(obj, raw)
        key = _key(obj)
        objects = self._objects
        old = objects.get(key)
        if old is not None:
            rv = _rv(obj)
            if rv is not None and rv == _rv(old):
                return None  # a replay of what is stored
        new = obj if self._transform is None else self._transform(obj)
        if self._indexers:
            self._put(key, old, new, new)
        else:
            objects[key] = new
        return _change(_ADDED if old is None else _MODIFIED, key, old, new)

    def _upsert_compact(self, obj: Obj, raw: bytes | None) -> Change | None:
        key = _key(obj)
        objects = self._objects
        stored = objects.get(key)
        if stored is not None:
            rv = _rv(obj)
            if rv is not None and rv == _blob_rv(stored[0]):
                return None
            key = stored[1]
        else:
            key = self._intern(key)
        new, entry = self._encoded(key, obj, raw)
        old = None if stored is None else self._decode(stored)
        if self._indexers:
            self._put(key, old, new, entry)
        else:
            objects[key] = entry
        return _change(_ADDED if old is None else _MODIFIED, key, old, new)

    def delete(self, obj: Obj, *, raw: bytes | None = None) -> Change | None:
        """Remove an object (given its last state); return the change, or None if absent.

        The change carries the final state from the event as ``old`` (it is newer than the
        stored copy). ``raw`` is accepted for symmetry with :meth:`upsert` and not used: a
        deletion stores nothing.
        """
        self._no_epoch("delete")
        key = _key(obj)
        old = self._objects.get(key)
        if old is None:
            return None
        final = self._transformed(obj)
        self._remove(key, old)
        return _change(_DELETED, key, final, None)

    # -- epochs: replacing everything with a complete list ---------------------------------

    @property
    def epoch_open(self) -> bool:
        """True between :meth:`begin_epoch` and :meth:`commit_epoch`/:meth:`abort_epoch`."""
        return self._epoch is not None

    @property
    def staged(self) -> int:
        """How many keys the open epoch has marked (0 when none is open)."""
        return 0 if self._epoch is None else len(self._epoch)

    def begin_epoch(self) -> None:
        """Start collecting a complete list; readers keep seeing the current state."""
        self._no_epoch("begin_epoch")
        self._epoch = {}

    def stage(self, obj: Obj, *, raw: bytes | None = None) -> None:
        """Mark an object of the list being collected (later marks of a key win).

        ``raw`` as in :meth:`upsert`. A compact store encodes (or checks) the object now,
        so a list that cannot be stored fails while it is collected.
        """
        epoch = self._open_epoch("stage")
        key = _key(obj)
        stored = self._objects.get(key)
        if stored is not None:
            rv = _rv(obj)
            if self._codec is not None:
                if rv is not None and rv == _blob_rv(stored[0]):
                    epoch[stored[1]] = None  # the stored key: the epoch holds no new tuple
                    return
                key = stored[1]
            elif rv is not None and rv == _rv(stored):
                epoch[key] = None  # unchanged: keep the stored copy, hold no second one
                return
        if self._codec is None:
            epoch[key] = self._transformed(obj)
            return
        if stored is None:
            key = self._intern(key)
        _, entry = self._encoded(key, obj, raw)
        # The entry alone waits: the decoded object dies with its page, the commit's
        # changes decode on access (index functions run on a decoded copy at the commit).
        epoch[key] = entry

    def unstage(self, obj: Obj) -> None:
        """Take an object back out of the list being collected (it was deleted meanwhile)."""
        epoch = self._open_epoch("unstage")
        epoch.pop(_key(obj), None)

    def commit_epoch(self, *, initial: bool = False) -> Sequence[Change]:
        """Make the collected list the content of the store; return the implied changes.

        Changes come in list order (``ADDED``/``MODIFIED``), then ``DELETED`` for every key
        the list did not mention, in store order. ``initial`` marks them as the changes of
        a first complete list (:attr:`Change.initial`, what
        :func:`~kubemoon_core.lowlevel.initial_change` does, without a second list).
        """
        epoch = self._open_epoch("commit_epoch")
        self._epoch = None
        if self._codec is not None:
            return self._commit_compact(epoch, initial)
        cls = _InitialChange if initial else Change
        objects = self._objects
        changes: list[Change] = []
        append = changes.append
        for key, staged in epoch.items():
            if staged is None:
                continue
            old = objects.get(key)
            self._put(key, old, staged, staged)
            append(_change(_ADDED if old is None else _MODIFIED, key, old, staged, cls))
        if len(epoch) != len(objects):
            # Some stored keys were not listed: sweep them.
            gone = [key for key in objects if key not in epoch]
            for key in gone:
                stored = objects[key]
                self._remove(key, stored, stored)
                append(_change(_DELETED, key, stored, None, cls))
        return changes

    def _commit_compact(self, epoch: dict[_Key, Any], initial: bool) -> Sequence[Change]:
        """:meth:`commit_epoch` of a compact store: the changes are lazy (a sequence of
        records holding the stored bytes, decoded on access), so committing a list decodes
        nothing unless an index needs an object's values. An addition's record is the
        store's own entry: a list of 100,000 additions holds 800 KB more than the store."""
        assert self._codec is not None
        objects = self._objects
        indexed = bool(self._indexers)
        records: list[Any] = []
        append = records.append
        if not objects:
            # The first list (or one after everything was deleted): every staged key is an
            # addition and the epoch already has the store's layout: it becomes the store,
            # in list order, instead of a copy of it (no second dict at the peak).
            for key, entry in epoch.items():
                if indexed:
                    self._reindex(key, self._values(self._decode(entry)))
                append(entry)
            self._objects = epoch
            return _LazyChanges(records, self._codec.load, initial=initial)
        for key, staged in epoch.items():
            if staged is None:
                continue
            stored = objects.get(key)
            entry = staged
            if indexed:  # as a plain store, the index functions run now (on decoded copies)
                removed = self._values(self._decode(stored)) if stored is not None else {}
                added = self._values(self._decode(entry))
                self._unindex(key, removed)
                self._reindex(key, added)
            objects[key] = entry
            if stored is None:
                append(entry)
            else:
                append((_MODIFIED, key, stored[0], entry[0]))
        if len(epoch) != len(objects):
            gone = [key for key in objects if key not in epoch]
            for key in gone:
                stored = objects[key]
                self._remove(key, stored)
                append((_DELETED, key, stored[0], None))
        return _LazyChanges(records, self._codec.load, initial=initial)

    def abort_epoch(self) -> None:
        """Drop the collected list; the store stays as it was."""
        self._open_epoch("abort_epoch")
        self._epoch = None

    # -- internals -------------------------------------------------------------------------

    def _no_epoch(self, what: str) -> None:
        if self._epoch is not None:
            raise LocalProtocolError(f"{what} is not allowed while an epoch is open")

    def _open_epoch(self, what: str) -> dict[_Key, Any]:
        if self._epoch is None:
            raise LocalProtocolError(f"{what} needs an open epoch (call begin_epoch first)")
        return self._epoch

    def _transformed(self, obj: Obj) -> Obj:
        return obj if self._transform is None else self._transform(obj)

    def _intern(self, key: _Key) -> _Key:
        namespace = self._namespaces.setdefault(key[0], key[0])
        return key if namespace is key[0] else (namespace, key[1])

    def _decode(self, entry: _Entry) -> Obj:
        assert self._codec is not None
        return self._codec.load(entry[0])  # type: ignore[no-any-return]

    def _encoded(self, key: _Key, obj: Obj, raw: bytes | None) -> tuple[Obj, _Entry]:
        """The (transformed) object and its compact entry; the store is not touched."""
        assert self._codec is not None
        if self._transform is not None:
            obj = self._transform(obj)
            raw = None  # the transform may have changed the object: encode what it made
        if raw is None:
            try:
                data = self._codec.encode(obj)
            except _ENCODE_ERRORS as exc:
                raise LocalProtocolError(
                    f"{_where(key)}: a compact store keeps JSON values only: {exc}"
                ) from None
        else:
            data = self._checked_raw(key, obj, raw)
        return obj, (_pack(_rv(obj), data), key)

    def _checked_raw(self, key: _Key, obj: Obj, raw: bytes) -> bytes:
        """``raw`` if it decodes to ``obj`` (with apiVersion and kind written in front when
        only ``obj`` has them, as a list item); a typed error naming the difference if not."""
        assert self._codec is not None
        where = _where(key)
        if type(raw) is not bytes:
            raise LocalProtocolError(f"{where}: raw must be bytes, not {type(raw).__name__}")
        try:
            decoded = self._codec.decode(raw)
        except Exception as exc:  # msgspec's and the standard library's errors alike
            raise LocalProtocolError(f"{where}: raw is not valid UTF-8 JSON: {exc}") from None
        if type(decoded) is not dict:
            raise LocalProtocolError(f"{where}: raw is not a JSON object")
        metadata = decoded.get("metadata")
        if type(metadata) is not dict:
            metadata = {}
        obj_metadata = obj.get("metadata") or {}
        for field, default in (("name", None), ("namespace", ""), ("resourceVersion", None)):
            if metadata.get(field, default) != obj_metadata.get(field, default):
                raise LocalProtocolError(
                    f"{where}: raw disagrees with the object on metadata.{field} "
                    f"({metadata.get(field, default)!r} vs {obj_metadata.get(field, default)!r})"
                )
        missing = [f for f in ("apiVersion", "kind") if f not in decoded and f in obj]
        for field in missing:
            decoded[field] = obj[field]
        if not _equal((decoded, obj)):
            differ = sorted(
                str(k)
                for k in decoded.keys() | obj.keys()
                if not _equal((decoded.get(k), obj.get(k)))
            )
            raise LocalProtocolError(
                f"{where}: raw does not encode the object (they differ at {', '.join(differ)})"
            )
        # Python's == holds for true and 1, 1 and 1.0, 0.0 and -0.0: the JSON must match
        # too. In the same key order (a raw the object was decoded from) one encoding of
        # each settles it; in another order, the sorted encodings.
        try:
            prefix = self._codec.encode({field: obj[field] for field in missing})
            same = self._codec.encode(decoded) == self._codec.encode(obj) or _sorted_deep(
                decoded
            ) == _sorted_deep(obj)
        except _ENCODE_ERRORS as exc:
            raise LocalProtocolError(
                f"{where}: a compact store keeps JSON values only: {exc}"
            ) from None
        if not same:
            raise LocalProtocolError(
                f"{where}: raw does not encode the object (a number or boolean differs in "
                "type: true and 1, 1 and 1.0, 0.0 and -0.0 are equal in Python, not in JSON)"
            )
        if not missing:
            return raw
        body = raw.strip()  # the object is not empty: it has metadata
        return prefix[:-1] + b"," + body[1:]

    def _put(self, key: _Key, old: Obj | None, new: Obj, stored: Any) -> None:
        if self._indexers:
            # Compute first: a failing index function leaves the store untouched.
            removed = self._values(old) if old is not None else {}
            added = self._values(new)
            self._unindex(key, removed)
            self._reindex(key, added)
        self._objects[key] = stored

    def _remove(self, key: _Key, stored: Any, old: Obj | None = None) -> None:
        if self._indexers:
            if old is None:
                old = self._decode(stored) if self._codec is not None else stored
            self._unindex(key, self._values(old))
        del self._objects[key]

    def _values(self, obj: Obj) -> dict[str, list[str]]:
        return {name: list(function(obj)) for name, function in self._indexers.items()}

    def _reindex(self, key: _Key, values: dict[str, list[str]]) -> None:
        for name, found in values.items():
            index = self._indices[name]
            for value in found:
                bucket = index.get(value)
                if bucket is None:
                    index[value] = bucket = {}
                bucket[key] = None

    def _unindex(self, key: _Key, values: dict[str, list[str]]) -> None:
        for name, found in values.items():
            index = self._indices[name]
            for value in found:
                bucket = index.get(value)
                if bucket is not None:
                    bucket.pop(key, None)
                    if not bucket:
                        del index[value]
