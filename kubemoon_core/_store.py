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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ._changes import Change, ChangeType
from ._errors import LocalProtocolError
from ._resources import ObjectKey

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


def _change(kind: ChangeType, key: _Key, old: Obj | None, new: Obj | None) -> Change:
    object_key = _NEW(ObjectKey)
    _SET_NAMESPACE(object_key, key[0])
    _SET_NAME(object_key, key[1])
    change = _NEW(Change)
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


class Store:
    """A cache of objects by key with secondary indexes, filled by events and lists.

    ``indexers`` maps an index name to a function returning the index values of an object;
    :meth:`by_index` finds the objects with a value. Iteration order is insertion order.
    """

    __slots__ = ("_epoch", "_indexers", "_indices", "_objects", "_transform")

    def __init__(
        self,
        *,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
    ) -> None:
        self._objects: dict[_Key, Obj] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        # index name -> value -> keys (a dict used as an insertion-ordered set)
        self._indices: dict[str, dict[str, dict[_Key, None]]] = {
            name: {} for name in self._indexers
        }
        self._transform = transform
        # The open epoch: key -> the new object, or None when the stored one is confirmed
        # unchanged. None when no epoch is open.
        self._epoch: dict[_Key, Obj | None] | None = None

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions; objects already stored are indexed at once.

        All or nothing: a name already in use is refused, and a failing function adds none.
        """
        for name in indexers:
            if name in self._indexers:
                raise LocalProtocolError(f"an index is already named {name!r}")
        computed = {
            key: {name: list(function(obj)) for name, function in indexers.items()}
            for key, obj in self._objects.items()
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
        """The stored object with this key, or None."""
        return self._objects.get((key.namespace, key.name))

    def keys(self) -> list[ObjectKey]:
        """Every key, in insertion order."""
        return [ObjectKey(namespace, name) for namespace, name in self._objects]

    def objects(self) -> list[Mapping[str, Any]]:
        """Every stored object, in insertion order."""
        return list(self._objects.values())

    def items(self) -> list[tuple[ObjectKey, Mapping[str, Any]]]:
        """Every (key, object) pair, in insertion order."""
        return [(ObjectKey(ns, name), obj) for (ns, name), obj in self._objects.items()]

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
        return [objects[key] for key in self._index(index).get(value, ())]

    def _index(self, name: str) -> dict[str, dict[_Key, None]]:
        index = self._indices.get(name)
        if index is None:
            raise LocalProtocolError(f"no index named {name!r}")
        return index

    # -- watch events ----------------------------------------------------------------------

    def upsert(self, obj: Obj) -> Change | None:
        """Store an added or modified object; return the change, or None if it is known.

        The change is ``ADDED`` when the key was absent and ``MODIFIED`` otherwise, whatever
        the event said: the store, not the event, knows what readers saw.
        """
        # The hot path of every watch event: the calls of _no_epoch, _transformed and _put
        # are inlined for the common case (no epoch, no index).
        if self._epoch is not None:
            self._no_epoch("upsert")
        key = _key(obj)
        objects = self._objects
        old = objects.get(key)
        if old is not None:
            rv = _rv(obj)
            if rv is not None and rv == _rv(old):
                return None  # a replay of what is stored
        new = obj if self._transform is None else self._transform(obj)
        if self._indexers:
            self._put(key, old, new)
        else:
            objects[key] = new
        return _change(_ADDED if old is None else _MODIFIED, key, old, new)

    def delete(self, obj: Obj) -> Change | None:
        """Remove an object (given its last state); return the change, or None if absent.

        The change carries the final state from the event as ``old`` (it is newer than the
        stored copy).
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

    def stage(self, obj: Obj) -> None:
        """Mark an object of the list being collected (later marks of a key win)."""
        epoch = self._open_epoch("stage")
        key = _key(obj)
        old = self._objects.get(key)
        if old is not None:
            rv = _rv(obj)
            if rv is not None and rv == _rv(old):
                epoch[key] = None  # unchanged: keep the stored copy, hold no second one
                return
        epoch[key] = self._transformed(obj)

    def unstage(self, obj: Obj) -> None:
        """Take an object back out of the list being collected (it was deleted meanwhile)."""
        epoch = self._open_epoch("unstage")
        epoch.pop(_key(obj), None)

    def commit_epoch(self) -> list[Change]:
        """Make the collected list the content of the store; return the implied changes.

        Changes come in list order (``ADDED``/``MODIFIED``), then ``DELETED`` for every key
        the list did not mention, in store order.
        """
        epoch = self._open_epoch("commit_epoch")
        self._epoch = None
        objects = self._objects
        changes: list[Change] = []
        append = changes.append
        for key, new in epoch.items():
            if new is None:
                continue
            old = objects.get(key)
            self._put(key, old, new)
            append(_change(_ADDED if old is None else _MODIFIED, key, old, new))
        if len(epoch) != len(objects):
            # Some stored keys were not listed: sweep them.
            gone = [key for key in objects if key not in epoch]
            for key in gone:
                old = objects[key]
                self._remove(key, old)
                append(_change(_DELETED, key, old, None))
        return changes

    def abort_epoch(self) -> None:
        """Drop the collected list; the store stays as it was."""
        self._open_epoch("abort_epoch")
        self._epoch = None

    # -- internals -------------------------------------------------------------------------

    def _no_epoch(self, what: str) -> None:
        if self._epoch is not None:
            raise LocalProtocolError(f"{what} is not allowed while an epoch is open")

    def _open_epoch(self, what: str) -> dict[_Key, Obj | None]:
        if self._epoch is None:
            raise LocalProtocolError(f"{what} needs an open epoch (call begin_epoch first)")
        return self._epoch

    def _transformed(self, obj: Obj) -> Obj:
        return obj if self._transform is None else self._transform(obj)

    def _put(self, key: _Key, old: Obj | None, new: Obj) -> None:
        if self._indexers:
            # Compute first: a failing index function leaves the store untouched.
            removed = self._values(old) if old is not None else {}
            added = self._values(new)
            self._unindex(key, removed)
            self._reindex(key, added)
        self._objects[key] = new

    def _remove(self, key: _Key, old: Obj) -> None:
        if self._indexers:
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
