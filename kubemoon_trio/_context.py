"""What a reconcile function is given: the key, the caches, the client and a bound logger.

Rules: a context lives for one reconcile. Reads go to the caches (read-only); writes go
through :attr:`ReconcileContext.client`. The logger carries the controller's name, the key
and the reconcile id on every record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from kubemoon_core import GroupVersionResource, LocalProtocolError, ObjectKey, WorkItem

from ._cache import CacheReader
from ._client import Client

if TYPE_CHECKING:
    from ._events import EventRecorder

__all__ = ["ReconcileContext"]


class _KeyLogger(logging.LoggerAdapter[logging.Logger]):
    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return f"[{extra['controller']} {extra['key']}] {msg}", kwargs


class ReconcileContext:
    """One reconcile of one key.

    :attr:`obj` is the primary object as cached (None once it is gone); :meth:`cache`
    reads any resource the controller watches; :attr:`events` records Kubernetes Events.
    """

    def __init__(
        self,
        *,
        controller: str,
        item: WorkItem,
        client: Client,
        primary: CacheReader,
        caches: Mapping[GroupVersionResource, CacheReader],
        events: EventRecorder,
    ) -> None:
        self.controller = controller
        self.key: ObjectKey = item.key
        self.reconcile_id = item.reconcile_id
        self.requeues = item.requeues
        self.client = client
        self.primary = primary
        self.events = events
        self._caches = caches
        self.log: logging.LoggerAdapter[logging.Logger] = _KeyLogger(
            logging.getLogger(f"kubemoon.controller.{controller}"),
            {"controller": controller, "key": str(item.key), "reconcile_id": item.reconcile_id},
        )

    def __repr__(self) -> str:
        return f"<ReconcileContext {self.controller} {self.key} #{self.reconcile_id}>"

    @property
    def namespace(self) -> str:
        """The namespace of the key (``""`` for a cluster-scoped primary)."""
        return self.key.namespace

    @property
    def name(self) -> str:
        """The name of the key."""
        return self.key.name

    @property
    def obj(self) -> Mapping[str, Any] | None:
        """The primary object from the cache, or None when it is gone."""
        return self.primary.get(self.key)

    def cache(self, resource: GroupVersionResource) -> CacheReader:
        """The cache of a resource this controller watches (primary, owned or watched)."""
        reader = self._caches.get(resource)
        if reader is None:
            known = ", ".join(sorted(str(r) for r in self._caches))
            raise LocalProtocolError(f"{resource} is not watched by {self.controller} ({known})")
        return reader
