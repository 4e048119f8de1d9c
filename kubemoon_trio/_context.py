"""What a reconcile function is given: the key, the caches, the client and a bound logger.

Rules: a context lives for one reconcile. Reads go to the caches (read-only); writes go
through :attr:`ReconcileContext.client`, and the caches answer with them at once, until
their watch catches up (read-your-own-writes: the manager's floors, see ``_cache``). The
logger carries the controller's name, the key and the reconcile id on every record, and its
lines read ``controller NAME: NS/NAME: ...``.
A controller of a declared class (``manager.controller("widgets", Widget)``) gets a
``ReconcileContext[Widget]``: ``obj`` is decoded into the class; the other methods take
both mappings and declared objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, overload

from kubemoon_core import (
    ApiError,
    APIResource,
    GroupVersionKind,
    GroupVersionResource,
    ObjectKey,
    Request,
)
from kubemoon_core.errors import (
    AlreadyExists,
    LocalProtocolError,
    NamespaceRequired,
    NotFound,
    TypedDecodeError,
)
from kubemoon_core.json_backends import decode_json
from kubemoon_core.lowlevel import WorkItem
from kubemoon_core.objects import WriteAction, controller_of, plan_status, plan_write, set_condition
from kubemoon_core.sharding import OWNER_BUCKET_LABEL, owner_bucket_label
from kubemoon_core.typed import Condition, Declared, DeclaredKind, decode, encode, resource_info

from . import _backend
from ._cache import CacheReader
from ._client import Client

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from ._events import EventRecorder

    ObjT = TypeVar("ObjT", default=Mapping[str, Any])
else:
    from typing import TypeVar

    ObjT = TypeVar("ObjT")  # its default (a mapping) matters to type checkers only
K = TypeVar("K", bound=DeclaredKind)

__all__ = ["CONTROLLER_UID_INDEX", "DEFAULT_WRITE_CONCURRENCY", "ReconcileContext"]

CONTROLLER_UID_INDEX = "kubemoon.dev/controller-uid"
"""The index of owned objects by the uid of their controller (set up by ``owns``)."""
_UNSENT: Any = object()  # a write_all result slot not filled (yet)
DEFAULT_WRITE_CONCURRENCY = 4
"""How many writes :meth:`ReconcileContext.write_all` has in flight at most, by default."""


class _KeyLogger(logging.LoggerAdapter[logging.Logger]):
    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return f"controller {extra['controller']}: {extra['key']}: {msg}", kwargs


def _resource_of(cls: type) -> GroupVersionResource:
    return resource_info(cls).gvr


def _encoded(value: Any) -> Any:
    """JSON data with the declared objects in it encoded (the rest as it is)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, Mapping):
        return {key: _encoded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encoded(item) for item in value]
    return value


class ReconcileContext(Generic[ObjT]):
    """One reconcile of one key.

    :attr:`obj` is the primary object as cached (None once it is gone), decoded into the
    controller's declared class if it has one; :meth:`cache` reads any resource the
    controller watches; ``events`` records Kubernetes Events.
    """

    def __init__(
        self,
        *,
        controller: str,
        item: WorkItem,
        client: Client,
        primary: CacheReader,
        primary_resource: GroupVersionResource,
        primary_kind: GroupVersionKind | None,
        caches: Mapping[GroupVersionResource, CacheReader],
        events: EventRecorder,
        cls: type[ObjT] | None = None,
        sharded: bool = False,
    ) -> None:
        self.controller = controller
        self._sharded = sharded
        self._cls = cls
        # (what was decoded: the cached mapping or a compact cache's bytes, the object)
        self._decoded: tuple[Mapping[str, Any] | bytes, Any] | None = None
        self.primary_resource = primary_resource
        self._kind = primary_kind
        self.writes = 0
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
    def raw(self) -> Mapping[str, Any] | None:
        """The primary object from the cache as a read-only mapping, or None when it is gone."""
        return self.primary.get(self.key)

    @property
    def obj(self) -> ObjT | None:
        """The primary object from the cache, or None when it is gone.

        A typed controller's object is decoded into its class (once per cached version);
        from a compact cache's JSON bytes in one step
        (:func:`~kubemoon_core.json_backends.decode_json`).
        One that does not decode raises :class:`~kubemoon_core.errors.TypedDecodeError`.
        """
        typed: ObjT
        if self._cls is not None:
            # A compact cache keeps JSON bytes: decode them into the class in one step.
            document = self.primary.json(self.key)
            if document is not None:
                if self._decoded is None or self._decoded[0] != document:
                    self._decoded = (document, decode_json(self._cls, document))
                typed = self._decoded[1]
                return typed
        raw = self.primary.get(self.key)
        if raw is None or self._cls is None:
            return raw  # type: ignore[return-value]  # ObjT is the mapping here
        if self._decoded is None or self._decoded[0] is not raw:
            self._decoded = (raw, decode(self._cls, raw))
        typed = self._decoded[1]
        return typed

    def cache(self, resource: GroupVersionResource | type[DeclaredKind]) -> CacheReader:
        """The cache of a resource this controller watches (primary, owned or watched),
        named by its resource or its kind (``ctx.cache(ConfigMap)``)."""
        if isinstance(resource, type):
            resource = _resource_of(resource)
        reader = self._caches.get(resource)
        if reader is None:
            known = ", ".join(sorted(str(r) for r in self._caches))
            raise LocalProtocolError(f"{resource} is not watched by {self.controller} ({known})")
        return reader

    # -- helpers every operator needs ------------------------------------------------------

    def owner_labels(self) -> dict[str, str]:
        """The labels an object this reconcile owns must carry: in a sharded controller,
        :data:`~kubemoon_core.sharding.OWNER_BUCKET_LABEL` with the primary's bucket (so the
        replica owning the primary watches it); nothing otherwise. :meth:`ensure` adds them.
        """
        if not self._sharded:
            return {}
        uid = self.owner_reference()["uid"]
        return {OWNER_BUCKET_LABEL: owner_bucket_label(uid)}

    def owner_reference(self) -> dict[str, Any]:
        """The ``ownerReferences`` entry making the primary the controller of an object."""
        obj = self.raw
        if obj is None or self._kind is None:
            raise LocalProtocolError(f"{self.key}: no cached primary (or no kind) to own with")
        uid = (obj.get("metadata") or {}).get("uid")
        return {
            "apiVersion": self._kind.api_version,
            "kind": self._kind.kind,
            "name": self.key.name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    @overload
    def owned(self, resource: GroupVersionResource) -> list[Mapping[str, Any]]: ...
    @overload
    def owned(self, resource: type[K]) -> list[K]: ...
    def owned(self, resource: GroupVersionResource | type[DeclaredKind]) -> list[Any]:
        """The cached objects of ``resource`` that the primary controls (via ``owns``).

        Given a kind (``ConfigMap``: a :class:`~kubemoon_core.typed.DeclaredKind`), they are
        decoded into it; any other class is refused by type checkers, and at run time with a
        :class:`~kubemoon_core.errors.SchemaError` naming it.
        """
        obj = self.raw
        uid = (obj.get("metadata") or {}).get("uid") if obj is not None else None
        if not isinstance(uid, str):
            return []
        if isinstance(resource, type):
            found = self.cache(_resource_of(resource)).by_index(CONTROLLER_UID_INDEX, uid)
            return [decode(resource, o) for o in found]
        return self.cache(resource).by_index(CONTROLLER_UID_INDEX, uid)

    @overload
    async def ensure(
        self, resource: GroupVersionResource, desired: Mapping[str, Any], *, owned: bool = True
    ) -> bool: ...
    @overload
    async def ensure(self, resource: DeclaredKind, *, owned: bool = True) -> bool: ...
    async def ensure(
        self,
        resource: GroupVersionResource | DeclaredKind,
        desired: Mapping[str, Any] | None = None,
        *,
        owned: bool = True,
    ) -> bool:
        """Create or patch an object so it looks as ``desired``; True if a write was made.

        ``ensure(CONFIGMAPS, {...})``, or with a declared object ``ensure(ConfigMap(...))``
        (its class names the resource). Compared with the cached object, so steady state
        makes no write. With ``owned``, the primary becomes its controller and the namespace
        defaults to the key's.
        """
        target: GroupVersionResource | APIResource
        if not isinstance(resource, GroupVersionResource):
            if desired is not None:
                raise LocalProtocolError("ensure(obj) takes a declared object and no desired")
            desired = encode(resource)
            target = resource_info(type(resource)).api_resource
            resource = target.gvr
        elif desired is None:
            raise LocalProtocolError(f"ensure({resource}) needs the desired object")
        else:
            target = resource
        wanted = dict(desired)
        metadata = dict(wanted.get("metadata") or {})
        if self.namespace:
            metadata.setdefault("namespace", self.namespace)
        if owned:
            metadata["ownerReferences"] = [self.owner_reference()]
            metadata["labels"] = {**(metadata.get("labels") or {}), **self.owner_labels()}
        wanted["metadata"] = metadata
        name = metadata.get("name")
        if not isinstance(name, str):
            raise LocalProtocolError("the desired object has no metadata.name")
        namespace = metadata.get("namespace") or ""
        if not namespace and isinstance(target, APIResource) and target.namespaced:
            raise NamespaceRequired(resource, target.kind, name, hint=self._no_namespace())
        existing = self.cache(resource).get(name, namespace)
        plan = plan_write(target, wanted, existing)
        if plan.action is WriteAction.NONE or plan.request is None:
            return False
        try:
            await self.client.request(plan.request)
        except AlreadyExists:
            # A sharded controller watches only its owner buckets: an object of its own
            # whose bucket label was changed or removed is out of its sight for good, so
            # look it up and write the label back (never someone else's object).
            if not (self._sharded and owned and plan.action is WriteAction.CREATE):
                raise
            live = await self.client.get(resource, name, namespace=namespace or None)
            ref = controller_of(live)
            if ref is None or ref.get("uid") != metadata["ownerReferences"][0]["uid"]:
                raise
            plan = plan_write(target, wanted, live)
            if plan.action is WriteAction.NONE or plan.request is None:
                return False
            self.log.warning(
                "%s %s was outside this replica's owner buckets: its labels are restored",
                resource.resource,
                name,
            )
            await self.client.request(plan.request)
        self.writes += 1
        self.log.info("%s %s (%s)", plan.action.value, name, ", ".join(plan.changed))
        return True

    def _no_namespace(self) -> str:
        """Where the namespace of an object to ensure was to come from."""
        if self.namespace:
            return "give metadata.namespace"
        primary = self._kind.kind if self._kind is not None else str(self.primary_resource)
        return (
            f"the primary {primary} {self.name!r} is cluster-scoped, so there is no namespace "
            "to default to: give metadata.namespace"
        )

    @overload
    async def delete(self, resource: GroupVersionResource, obj: Mapping[str, Any]) -> bool: ...
    @overload
    async def delete(self, resource: DeclaredKind) -> bool: ...
    async def delete(
        self,
        resource: GroupVersionResource | DeclaredKind,
        obj: Mapping[str, Any] | None = None,
    ) -> bool:
        """Delete a cached object (gone already is fine); True if this call deleted it.

        ``delete(CONFIGMAPS, child)``, or ``delete(child)`` with a declared object.
        """
        target: GroupVersionResource | APIResource
        if not isinstance(resource, GroupVersionResource):
            target = resource_info(type(resource)).api_resource
            obj = {"metadata": encode(resource.metadata)}
        elif obj is None:
            raise LocalProtocolError(f"delete({resource}) needs the object")
        else:
            target = resource
        metadata = obj.get("metadata") or {}
        try:
            await self.client.delete(
                target, metadata["name"], namespace=metadata.get("namespace") or None
            )
        except NotFound:
            return False
        self.writes += 1
        self.log.info("deleted %s", metadata["name"])
        return True

    def condition(
        self, type: str, status: bool | str, reason: str, message: str = ""
    ) -> list[Condition]:
        """The primary's ``status.conditions`` with ``type`` set, as typed conditions (for a
        typed status, or :meth:`update_status` of a mapping, which encodes them).

        ``lastTransitionTime`` changes only when the status flips; ``observedGeneration``
        is the primary's generation. A stored condition that is no ``metav1.Condition``
        raises :class:`~kubemoon_core.errors.TypedDecodeError` naming it
        (``[1].message: ...``); :meth:`condition_dicts` gives the mappings.
        """
        conditions = self.condition_dicts(type, status, reason, message)
        typed = []
        for index, condition in enumerate(conditions):
            try:
                typed.append(decode(Condition, condition))
            except TypedDecodeError as exc:
                where = f".status.conditions[{index}]{exc.path}"
                raise TypedDecodeError(exc.reason, path=where) from None
        return typed

    def condition_dicts(
        self, type: str, status: bool | str, reason: str, message: str = ""
    ) -> list[dict[str, Any]]:
        """:meth:`condition` as JSON mappings (what it returned before it was typed)."""
        obj = self.raw or {}
        value = status if isinstance(status, str) else ("True" if status else "False")
        return set_condition(
            (obj.get("status") or {}).get("conditions"),
            type,
            value,
            reason,
            message,
            observed_generation=int((obj.get("metadata") or {}).get("generation") or 0),
            wall=datetime.datetime.now(datetime.UTC),
        )

    async def write_all(
        self, requests: Sequence[Request], *, concurrency: int = DEFAULT_WRITE_CONCURRENCY
    ) -> list[Any]:
        """Send writes that do not depend on each other, at most ``concurrency`` at a time.

        Returns one result per request, in order: the decoded answer, or the
        :class:`~kubemoon_core.ApiError` the server answered with (a refused write does not
        stop the others, so each is judged on its own). Any other failure (the connection,
        a deadline) cancels the writes still in flight and is raised. Every write that
        succeeded counts in :attr:`writes`. Requests are started in order; with
        ``concurrency=1`` they are sent one after another.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise LocalProtocolError(f"concurrency must be a positive int, not {concurrency!r}")
        results: list[Any] = [_UNSENT] * len(requests)
        # One iterator shared by the workers: each takes the next request when it is free.
        pending = iter(enumerate(requests))

        async def send_next() -> None:
            for index, request in pending:
                try:
                    results[index] = await self.client.request(request)
                except ApiError as exc:
                    results[index] = exc

        workers = min(concurrency, len(requests))
        try:
            if workers <= 1:
                await send_next()
            else:
                try:
                    async with _backend.TaskGroup() as group:
                        for _ in range(workers):
                            group.start_soon(send_next)
                except ExceptionGroup as failures:
                    # Raised as itself, as a sequential write would raise it.
                    raise failures.exceptions[0] from None
        finally:
            # Counted once all are done: the workers may be threads.
            self.writes += sum(
                1 for r in results if r is not _UNSENT and not isinstance(r, ApiError)
            )
        return results

    async def update_status(self, status: Mapping[str, Any] | Declared) -> bool:
        """Patch the primary's status subresource if it differs; True if a write was made.

        ``status`` is a mapping or a declared object (``WidgetStatus(...)``), encoded first;
        declared objects inside a mapping (``{"conditions": ctx.condition(...)}``) too.
        """
        obj = self.raw
        if obj is None:
            return False
        if isinstance(status, type) or not (
            isinstance(status, Mapping) or dataclasses.is_dataclass(status)
        ):
            raise LocalProtocolError(f"a status is a mapping or a declared object, not {status!r}")
        plan = plan_status(self.primary_resource, _encoded(status), obj)
        if plan.action is WriteAction.NONE or plan.request is None:
            return False
        await self.client.request(plan.request)
        self.writes += 1
        return True
