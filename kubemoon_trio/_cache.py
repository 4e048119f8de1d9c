"""Shared informers: one LIST+WATCH per resource, namespace and selector, however many
controllers read it, and the read-only view of a cache that user code gets.

Rules: informers are created on first request and started at once if the runtime is
running; asking again with the same resource, namespace and selectors returns the same
informer (a second request with other index functions adds to its indexes before it has
started, and is refused after). Stored objects drop ``managedFields``; with ``compact``
every cache is a ``Store(compact=True)`` (JSON bytes, each read decodes a fresh copy). A
cache is read by users through :class:`CacheReader` only: the reflector alone writes it.

Read-your-own-writes: while the runtime runs, every successful write made with its client
(create, replace, patch, apply, the status subresource, delete) is recorded as the *floor*
of its key in each cache of that resource (:class:`~kubemoon_core.lowlevel.WriteFloors`), and a
reader answers with the written object, or not at all after a delete, until the cache holds
a version at least as new. Caches with a label, field or shard selector only have the keys
they already hold refreshed (a write may take an object out of them; whether it still
matches is the server's to say), and tombstones hide deleted ones.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubemoon_core import APIResource, GroupVersionResource, ObjectKey, Request
from kubemoon_core._kept_out import check_label_size
from kubemoon_core.errors import CacheSyncTimeout, LocalProtocolError
from kubemoon_core.lowlevel import Store, WriteFloors, written_object

from . import _backend
from ._client import Client
from ._informer import FailureHandler, Informer

__all__ = ["CacheReader", "SharedInformers"]

IndexFunc = Callable[[Mapping[str, Any]], tuple[str, ...]]
InformerKey = tuple[GroupVersionResource, str | None, str | None, str | None, bool, str | None]

# What a lookup gives for a key that is not there (None means: deleted by our write).
_ABSENT: Any = object()

# The private switch of read-your-own-writes (tests turn it off to show what it prevents).
_READ_YOUR_WRITES = True


def _drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def _bounded_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """A metadata-only cache's transform: no managedFields, and an object whose labels are
    past the bound is refused (kept out of the cache, with an ERROR naming it)."""
    check_label_size(obj)
    return _drop_managed_fields(obj)


def _as_cached(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A written object as a full cache stores it: a copy without ``managedFields``."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def _as_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A written object as a metadata-only cache stores it (``PartialObjectMetadata``)."""
    metadata = _as_cached(obj).get("metadata")
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": metadata if isinstance(metadata, Mapping) else {},
    }


class CacheReader:
    """Read-only access to one informer's cache. Objects are shared: do not mutate them.

    Reads (:meth:`get`, :meth:`objects`, :meth:`by_index`, :meth:`keys_by_index`) see this
    process's own writes at once (``floors``, given by :class:`SharedInformers`); ``len()``
    and iteration are the cache's own keys.
    """

    def __init__(
        self,
        informer: Informer,
        *,
        floors: WriteFloors | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        selective: bool = False,
    ) -> None:
        self._informer = informer
        self._store = informer.store
        self._floors = floors
        self._floor_keys = floors.live_keys() if floors is not None else frozenset()
        self._indexers = indexers if indexers is not None else {}
        self._selective = selective

    def __repr__(self) -> str:
        return f"<CacheReader {self._informer.name} objects={len(self._store)}>"

    def __len__(self) -> int:
        return len(self._store)

    def __iter__(self) -> Iterator[ObjectKey]:
        return iter(self._store)

    @property
    def synced(self) -> bool:
        """True once the first complete list has been applied."""
        return self._informer.has_synced

    def _fresher(
        self, keys: Iterable[ObjectKey], watermark: str
    ) -> dict[tuple[str, str], Mapping[str, Any] | None]:
        """Those of ``keys`` whose floor is ahead of the cache, by (namespace, name) (a
        tuple hashes in C, an ObjectKey in Python): the written object (None: deleted).
        ``watermark``: the collection's resourceVersion, read before the store."""
        floors = self._floors
        assert floors is not None
        now = _backend.current_time()
        store = self._store
        fresher = floors.fresher
        selective = self._selective
        found: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        for key in keys:
            if selective and key not in store:
                continue  # whether it belongs here is the server's to say
            floor = fresher(store, key, watermark, now)
            if floor is not None:
                found[key.namespace, key.name] = floor.obj
        return found

    def get(self, name: str | ObjectKey, namespace: str = "") -> Mapping[str, Any] | None:
        """The cached object ``namespace/name`` (or an :class:`ObjectKey`), or None."""
        key = name if isinstance(name, ObjectKey) else ObjectKey(namespace, name)
        if key not in self._floor_keys:
            return self._store.get(key)
        floors = self._floors
        assert floors is not None
        watermark = self._informer.reflector.resource_version
        store = self._store
        if self._selective and key not in store:
            return None
        floor = floors.fresher(store, key, watermark, _backend.current_time())
        if floor is None:
            return store.get(key)
        return floor.obj

    def json(self, name: str | ObjectKey, namespace: str = "") -> bytes | None:
        """The cached object's JSON document when the cache is compact and holds what a
        read would return (None otherwise: a plain cache, an absent key, or a write of
        this runtime the cache has not caught up with; read :meth:`get` then)."""
        key = name if isinstance(name, ObjectKey) else ObjectKey(namespace, name)
        if key in self._floor_keys:
            return None
        return self._store.json(key)

    def objects(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        """Every cached object, or those of ``namespace``."""
        store = self._store
        floors = self._floors
        if floors is None or not len(floors):
            if namespace is None:
                return store.objects()
            return self._namespaced(namespace)
        # The collection's resourceVersion first: the store read after it is at least as
        # new. Only the floors this read could return are judged (those of ``namespace``).
        watermark = self._informer.reflector.resource_version
        fresher = self._fresher(floors.written_keys(namespace), watermark)
        if not fresher:
            return store.objects() if namespace is None else self._namespaced(namespace)
        # By key, not by identity: a compact store decodes a fresh copy on every read, and
        # only of the objects returned (not those a written object replaces).
        keys = store.keys() if namespace is None else self._namespaced_keys(namespace)
        found: list[Mapping[str, Any]] = []
        pop, get, absent = fresher.pop, store.get, _ABSENT
        for key in keys:
            written = pop((key.namespace, key.name), absent)
            if written is absent:
                if (obj := get(key)) is not None:
                    found.append(obj)
            elif written is not None:
                found.append(written)  # else deleted by our own write
        found.extend(written for written in fresher.values() if written is not None)
        return found

    def _namespaced_keys(self, namespace: str) -> list[ObjectKey]:
        return [key for key in self._store if key.namespace == namespace]

    def _namespaced(self, namespace: str) -> list[Mapping[str, Any]]:
        # Through get(): a compact store decodes only the objects of that namespace.
        store = self._store
        return [
            obj for key in self._namespaced_keys(namespace) if (obj := store.get(key)) is not None
        ]

    def _indexed(
        self, index: str, value: str, *, objects: bool
    ) -> list[tuple[ObjectKey, Mapping[str, Any] | None]]:
        """The (key, object) pairs under ``value`` (with ``objects`` False, the objects are
        None: nothing is decoded)."""
        store = self._store
        floors = self._floors
        assert floors is not None
        # The collection's resourceVersion first: the store read after it is at least as new.
        watermark = self._informer.reflector.resource_version
        keys = store.keys_by_index(index, value)  # raises for an unknown index
        # The floors this read could return: of the written objects the index function
        # puts under the value, and of the keys cached under it.
        floor_keys = self._floor_keys
        candidates = floors.indexed_keys(index, value)
        named = {(key.namespace, key.name) for key in candidates}
        candidates.extend(
            key for key in keys if (key.namespace, key.name) not in named and key in floor_keys
        )
        fresher = self._fresher(candidates, watermark) if candidates else {}
        function = self._indexers.get(index)
        found: list[tuple[ObjectKey, Mapping[str, Any] | None]] = []
        absent = _ABSENT
        for key in keys:
            written = fresher.pop((key.namespace, key.name), absent) if fresher else absent
            if written is absent:
                if objects:
                    if (obj := store.get(key)) is not None:
                        found.append((key, obj))
                elif key in store:
                    found.append((key, None))
            elif written is not None and function is not None and value in function(written):
                found.append((key, written))
            # else deleted, or no longer under this value
        if function is not None:
            # Written objects the cache has not indexed under this value (yet).
            found.extend(
                (ObjectKey(*pair), obj)
                for pair, obj in fresher.items()
                if obj is not None and value in function(obj)
            )
        return found

    def by_index(self, index: str, value: str) -> list[Mapping[str, Any]]:
        """The objects whose index function ``index`` gave ``value``."""
        if self._floors is None or not len(self._floors):
            return self._store.by_index(index, value)
        return [obj for _, obj in self._indexed(index, value, objects=True) if obj is not None]

    def keys_by_index(self, index: str, value: str) -> list[ObjectKey]:
        """The keys of the objects whose index function ``index`` gave ``value``."""
        if self._floors is None or not len(self._floors):
            return self._store.keys_by_index(index, value)
        return [key for key, _ in self._indexed(index, value, objects=False)]


class SharedInformers:
    """The informers of one runtime, shared by every controller that reads a resource.

    ``on_failure(informer, verb, error)`` hears how every LIST and WATCH attempt went.
    ``compact`` makes every cache a ``Store(compact=True)``.
    """

    def __init__(
        self,
        client: Client,
        *,
        on_failure: Callable[[Informer, str, BaseException | None], object] | None = None,
        stall_margin: float = 30.0,
        rng: random.Random | None = None,
        compact: bool = False,
    ) -> None:
        self._client = client
        self._compact = compact
        self._on_failure = on_failure
        self._stall_margin = stall_margin
        self._rng = rng if rng is not None else random.Random()
        self._informers: dict[InformerKey, Informer] = {}
        self._indexers: dict[InformerKey, dict[str, IndexFunc]] = {}
        self._tasks: _backend.TaskGroup | None = None
        # Read-your-own-writes: the floors of every cache, by resource.
        self._read_your_writes = _READ_YOUR_WRITES
        self._floors: dict[InformerKey, WriteFloors] = {}
        # resource -> (informer, its floors, whether its selectors narrow the collection)
        self._by_resource: dict[GroupVersionResource, list[tuple[Informer, WriteFloors, bool]]] = {}

    def __iter__(self) -> Iterator[Informer]:
        return iter(list(self._informers.values()))

    def __len__(self) -> int:
        return len(self._informers)

    def get(
        self,
        resource: GroupVersionResource | APIResource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        metadata_only: bool = False,
        sharded_for: str | None = None,
    ) -> Informer:
        """The informer of ``resource`` (in ``namespace``, with the selectors), shared.

        ``metadata_only`` informers cache ``PartialObjectMetadata`` and are distinct from
        full ones. ``sharded_for`` names the sharded controller that owns the informer: it
        is that controller's alone (its selectors change with its ranges), starts held
        (requests nothing until the controller's first :meth:`Informer.reselect`) and is
        shared only by asking again with the same name.
        """
        gvr = resource.gvr if isinstance(resource, APIResource) else resource
        key: InformerKey = (
            gvr,
            namespace or None,
            label_selector,
            field_selector,
            metadata_only,
            sharded_for,
        )
        informer = self._informers.get(key)
        if informer is None:
            store = Store(
                indexers=dict(indexers or {}),
                transform=_bounded_metadata if metadata_only else _drop_managed_fields,
                compact=self._compact,
            )
            informer = Informer(
                self._client,
                resource,
                namespace=namespace or None,
                label_selector=label_selector,
                field_selector=field_selector,
                store=store,
                stall_margin=self._stall_margin,
                rng=self._rng,
                metadata_only=metadata_only,
                held=sharded_for is not None,
            )
            informer_ref = informer
            handler: FailureHandler = lambda verb, error: self._failed(informer_ref, verb, error)  # noqa: E731
            informer.set_failure_handler(handler)
            self._informers[key] = informer
            self._indexers[key] = dict(indexers or {})
            floors = WriteFloors(
                transform=_as_metadata if metadata_only else _as_cached,
                indexers=dict(indexers or {}),
            )
            informer.add_handler(floors.observe)
            self._floors[key] = floors
            narrowed = bool(label_selector or field_selector or sharded_for)
            self._by_resource.setdefault(gvr, []).append((informer, floors, narrowed))
            if self._tasks is not None:
                self._tasks.start_soon(informer.run)
        elif indexers:
            known = self._indexers[key]
            for name, function in indexers.items():
                if known.get(name, function) is not function:
                    raise LocalProtocolError(
                        f"{informer.name}: another index is already named {name!r}"
                    )
            missing = {n: f for n, f in indexers.items() if n not in known}
            if missing:
                if self._tasks is not None:
                    raise LocalProtocolError(
                        f"{informer.name}: indexes must be added before the runtime starts"
                    )
                informer.store.add_indexers(missing)
                self._floors[key].add_indexers(missing)
                known.update(missing)
        return informer

    def reader(self, informer: Informer) -> CacheReader:
        """The read-only view of ``informer``'s cache (seeing this runtime's own writes)."""
        for key, known in self._informers.items():
            if known is informer:
                _, _, label_selector, field_selector, _, sharded_for = key
                # A sharded informer's selectors change with its ranges: always selective.
                selective = bool(
                    label_selector
                    or field_selector
                    or sharded_for
                    or informer.reflector.shard_selector
                )
                return CacheReader(
                    informer,
                    floors=self._floors[key] if self._read_your_writes else None,
                    indexers=self._indexers[key],
                    selective=selective,
                )
        return CacheReader(informer)

    def record_write(self, request: Request, answer: object) -> None:
        """Make a successful write's answer the floor of its key in every cache of its
        resource (the client calls this while the runtime runs)."""
        written = written_object(request, answer)
        if written is None:
            return
        now = _backend.current_time()
        key = written.key
        for informer, floors, narrowed in self._by_resource.get(written.resource, ()):
            if informer.namespace is not None and informer.namespace != key.namespace:
                continue
            if (narrowed or informer.reflector.shard_selector) and key not in informer.store:
                # A selective cache is only refreshed for keys it holds (the reader skips
                # the others): a floor for an object outside its selectors would never be
                # caught up with, and would be scanned by every read until it expired.
                continue
            floors.record(written, now)

    def stale_reads_avoided(self) -> dict[GroupVersionResource, int]:
        """Reads answered with this runtime's own write because the cache lagged, by resource."""
        counts: dict[GroupVersionResource, int] = {}
        for resource, tables in self._by_resource.items():
            counts[resource] = sum(floors.stale_reads_avoided for _, floors, _ in tables)
        return counts

    async def _record_writes(self) -> None:
        """Record the client's writes until cancelled (the runtime's lifetime)."""
        if not self._read_your_writes:
            return
        self._client.add_write_observer(self.record_write)
        try:
            await _backend.sleep_until(math.inf)
        finally:
            self._client.remove_write_observer(self.record_write)

    def _failed(self, informer: Informer, verb: str, error: BaseException | None) -> None:
        if self._on_failure is not None:
            self._on_failure(informer, verb, error)

    def start(self, tasks: _backend.TaskGroup) -> None:
        """Run every informer in ``tasks``; informers asked for later start at once."""
        self._tasks = tasks
        tasks.start_soon(self._record_writes)
        for informer in self._informers.values():
            tasks.start_soon(informer.run)

    @property
    def synced(self) -> bool:
        """True once every informer has applied its first complete list."""
        return all(informer.has_synced for informer in self._informers.values())

    def not_synced(self) -> list[Informer]:
        """The informers still waiting for their first complete list."""
        return [i for i in self._informers.values() if not i.has_synced]

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every informer has synced; with ``timeout``, raise
        :class:`~kubemoon_core.errors.CacheSyncTimeout` naming the first one that has not."""
        deadline = None if timeout is None else _backend.current_time() + timeout
        for informer in list(self._informers.values()):
            left = None if deadline is None else max(deadline - _backend.current_time(), 0.0)
            try:
                await informer.wait_synced(left)
            except CacheSyncTimeout as exc:
                raise CacheSyncTimeout(
                    f"{informer.name}: not synced after {timeout:g} s",
                    last_error=exc.last_error,
                ) from None
