"""Shared informers: one LIST+WATCH per resource, namespace and selector, however many
controllers read it, and the read-only view of a cache that user code gets.

Rules: informers are created on first request and started at once if the runtime is
running; asking again with the same resource, namespace and selectors returns the same
informer (a second request with other index functions adds to its indexes before it has
started, and is refused after). Stored objects drop ``managedFields``. A cache is read by
users through :class:`CacheReader` only: the reflector alone writes it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubemoon_core import (
    APIResource,
    CacheSyncTimeout,
    GroupVersionResource,
    LocalProtocolError,
    ObjectKey,
    Store,
)

from . import _backend
from ._client import Client
from ._informer import FailureHandler, Informer

__all__ = ["CacheReader", "SharedInformers"]

IndexFunc = Callable[[Mapping[str, Any]], tuple[str, ...]]
InformerKey = tuple[GroupVersionResource, str | None, str | None, str | None, bool, str | None]


def _drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class CacheReader:
    """Read-only access to one informer's cache. Objects are shared: do not mutate them."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._store = informer.store

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

    def get(self, name: str | ObjectKey, namespace: str = "") -> Mapping[str, Any] | None:
        """The cached object ``namespace/name`` (or an :class:`ObjectKey`), or None."""
        key = name if isinstance(name, ObjectKey) else ObjectKey(namespace, name)
        return self._store.get(key)

    def objects(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        """Every cached object, or those of ``namespace``."""
        if namespace is None:
            return self._store.objects()
        return [obj for key, obj in self._store.items() if key.namespace == namespace]

    def by_index(self, index: str, value: str) -> list[Mapping[str, Any]]:
        """The objects whose index function ``index`` gave ``value``."""
        return self._store.by_index(index, value)

    def keys_by_index(self, index: str, value: str) -> list[ObjectKey]:
        """The keys of the objects whose index function ``index`` gave ``value``."""
        return self._store.keys_by_index(index, value)


class SharedInformers:
    """The informers of one runtime, shared by every controller that reads a resource.

    ``on_failure(informer, verb, error)`` hears how every LIST and WATCH attempt went.
    """

    def __init__(
        self,
        client: Client,
        *,
        on_failure: Callable[[Informer, str, BaseException | None], object] | None = None,
        stall_margin: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._on_failure = on_failure
        self._stall_margin = stall_margin
        self._rng = rng if rng is not None else random.Random()
        self._informers: dict[InformerKey, Informer] = {}
        self._indexers: dict[InformerKey, dict[str, IndexFunc]] = {}
        self._tasks: _backend.TaskGroup | None = None

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
            store = Store(indexers=dict(indexers or {}), transform=_drop_managed_fields)
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
                known.update(missing)
        return informer

    def reader(self, informer: Informer) -> CacheReader:
        """The read-only view of ``informer``'s cache."""
        return CacheReader(informer)

    def _failed(self, informer: Informer, verb: str, error: BaseException | None) -> None:
        if self._on_failure is not None:
            self._on_failure(informer, verb, error)

    def start(self, tasks: _backend.TaskGroup) -> None:
        """Run every informer in ``tasks``; informers asked for later start at once."""
        self._tasks = tasks
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
        :class:`~kubemoon_core.CacheSyncTimeout` naming the first one that has not."""
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
