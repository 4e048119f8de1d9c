"""The controller builder, read as controller-runtime's: ``For``, ``Owns``, ``Watches``.

Rules: a builder only gathers what a controller follows; :meth:`ControllerBuilder.complete`
turns it into a :class:`RuntimeController` registered with the manager. Every resource is
read through the manager's shared informers, so two controllers that watch ConfigMaps share
one LIST and one WATCH. Mappers and predicates are user code: one that raises is logged
(naming the controller, the source and the object) and counted in the informer's
``handler_errors``; the informer keeps running. Every write a reconcile makes is gated
(``kubemoon_io.gated_writes``) by the authorities its work needs: the manager's leadership
when electing, and the membership Lease and range of the key when sharded; a write refused
by the gate (:class:`~kubemoon_core.errors.AuthorityLost`) ends the reconcile as a ``Requeue``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Generic

from kubemoon_core import (
    APIResource,
    Change,
    ChangeType,
    GroupVersionKind,
    GroupVersionResource,
    ObjectKey,
    Outcome,
    Reconciled,
    Requeue,
    Scope,
)
from kubemoon_core.errors import AuthorityLost, Conflict, LocalProtocolError
from kubemoon_core.lowlevel import (
    DEFAULT_GATE_MARGIN,
    LOW_PRIORITY,
    Controller,
    ControllerMetrics,
    Mapper,
    RateLimiter,
    Source,
    WorkItem,
    WriteGate,
)
from kubemoon_core.objects import controller_of
from kubemoon_core.predicates import Predicate
from kubemoon_core.typed import DeclaredKind, resource_info
from kubemoon_io import _tracing, gate_guard, gated_writes

from . import _backend
from ._cache import CacheReader
from ._context import CONTROLLER_UID_INDEX, ObjT, ReconcileContext
from ._controller import ControllerRunner
from ._informer import Informer
from ._runtime_protocols import Cluster
from ._sharded import ShardedControl, ShardingConfig, ShardStatus

Resource = GroupVersionResource | APIResource | type[DeclaredKind]
"""What a builder follows: a resource, discovered or named, or a kind (``ConfigMap``, a
:class:`~kubemoon_core.typed.DeclaredKind`)."""

__all__ = ["ControllerBuilder", "ReconcileFunction", "RuntimeController"]

logger = logging.getLogger("kubemoon.controller")


def _named(resource: Resource) -> GroupVersionResource | APIResource:
    """The resource of a declared class; a resource as it is."""
    return resource_info(resource).gvr if isinstance(resource, type) else resource


ReconcileFunction = Callable[[ReconcileContext], Awaitable[Outcome]]
"""A reconcile: given the context of one key, returns the core's outcome."""


def _controller_uid(obj: Mapping[str, Any]) -> tuple[str, ...]:
    ref = controller_of(obj)
    uid = ref.get("uid") if ref is not None else None
    return (uid,) if isinstance(uid, str) else ()


class RuntimeController:
    """A controller wired to shared informers and run by the manager.

    It uses only the :class:`~kubemoon_trio.Cluster` interface of what
    hosts it, and is run as a
    :class:`~kubemoon_trio.ControllerRunnable`.
    """

    # It reconciles only while this replica leads (and once the caches synced).
    needs_leader_election = True

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        sources: list[tuple[Source, Informer]],
        reconcile: Callable[[ReconcileContext[Any]], Awaitable[Outcome]],
        *,
        kind: GroupVersionKind | None,
        workers: int,
        rate_limiter: RateLimiter | None,
        cls: type[Any] | None = None,
        priority_queue: bool = True,
        sharding: ShardingConfig | None = None,
        bucketed: Sequence[tuple[Informer, str | None]] = (),
    ) -> None:
        self.name = name
        # What the controller reads, by source name, for RBAC derivation (_permissions.py).
        self.sources = [(source.name, informer) for source, informer in sources]
        self.sharding_config = sharding
        # How its reconcile writes the primary's status: ctx.update_status PATCHes it; set
        # ("update",) for a reconcile that PUTs it, so the derived RBAC matches.
        self.status_verbs: tuple[str, ...] = ("patch",)
        self._kind = kind
        self._cls = cls
        self.cluster = cluster
        self.controller = Controller(
            [source for source, _ in sources],
            workers=workers,
            rate_limiter=rate_limiter,
            priority_queue=priority_queue,
        )
        self.runner = ControllerRunner(
            self.controller,
            self._reconcile_item,
            name=name,
            on_report=self._reported,
            cancellable=sharding is not None,
        )
        self._reconcile = reconcile
        self.primary_informer = sources[0][1]
        self.primary = cluster.informers.reader(self.primary_informer)
        self.sharding: ShardedControl | None = None
        if sharding is not None:
            namespace = sharding.namespace or (
                cluster.lease_name.split("/")[0] if cluster.lease_name else "default"
            )
            self.sharding = ShardedControl(
                name,
                sharding,
                controller=self.controller,
                runner=self.runner,
                client=cluster.client,
                namespace=namespace,
                primary=self.primary_informer,
                owned=[i for s, i in sources[1:] if s.name.startswith("owns:")],
                reads=[i for _, i in sources],
            )
            self.controller.set_admission(self.sharding.keys.admits)
            for informer, selector in bucketed:
                self.sharding.follow_owner_buckets(informer, selector)
        self._caches: dict[GroupVersionResource, CacheReader] = {}
        for source, informer in sources:
            self._caches.setdefault(informer.resource, cluster.informers.reader(informer))
            informer.add_handler(self._receiver(source.name, informer))

    def __repr__(self) -> str:
        return f"<RuntimeController {self.name}>"

    # -- as the manager runs it (ControllerRunnable) ---------------------------------------

    async def run(self) -> None:
        """Reconcile until stopped and drained (the manager starts it once leading)."""
        await self.runner.run()

    async def run_background(self) -> None:
        """The shard membership, on every replica from the start (nothing when unsharded)."""
        if self.sharding is not None:
            await self.sharding.run()

    async def leave(self) -> None:
        """Hand this replica's ranges over at a clean stop (nothing when unsharded)."""
        if self.sharding is not None:
            await self.sharding.leave(self.sharding.config.renew_deadline)

    def readiness_problems(self) -> list[str]:
        """Why the controller is not ready: a shard group it cannot join."""
        return [] if self.sharding is None else self.sharding.problems()

    def readiness_notes(self) -> list[str]:
        """How a sharded controller shards (server-side, or client-side when the gate is off)."""
        return [] if self.sharding is None else [self.sharding.note()]

    def shard_status(self) -> ShardStatus | None:
        """The shard status of a sharded controller (for metrics), else None."""
        return None if self.sharding is None else self.sharding.status()

    def running_items(self) -> Sequence[WorkItem]:
        """The reconciles running now."""
        return list(self.controller.running)

    def metrics(self, now: float) -> ControllerMetrics:
        """The controller's metrics snapshot."""
        return self.controller.metrics(now)

    def _receiver(self, source: str, informer: Informer) -> Callable[[Change], None]:
        keys = self.sharding.keys if self.sharding is not None and source == "primary" else None

        def receive(change: Change) -> None:
            if keys is not None:
                busy = change.type is ChangeType.DELETED and any(
                    item.key == change.key for item in self.controller.running
                )
                if not keys.observe(change, busy=busy):
                    return  # outside this replica's ranges: leaving them is no deletion
            try:
                added = self.controller.receive(source, change, now=_backend.current_time())
            except Exception:  # a mapper or predicate (user code) must not stop the informer
                informer.handler_errors += 1
                logger.exception(
                    "controller %s: the %s mapper or predicate failed on a change of %s",
                    self.name,
                    source,
                    change.key,
                    extra={"controller": self.name, "key": str(change.key)},
                )
                return
            if added:
                self.runner.wake()

        return receive

    def enqueue(self, key: ObjectKey) -> None:
        """Reconcile ``key`` (an external trigger)."""
        self.controller.enqueue(key, now=_backend.current_time())
        self.runner.wake()

    def enqueue_cached(self) -> None:
        """Queue every primary object already cached: each is looked at once after a start,
        at low priority (like a first list: later events go first)."""
        for key in list(self.primary_informer.store):
            self.controller.enqueue(key, now=_backend.current_time(), priority=LOW_PRIORITY)
        self.runner.wake()

    def _reported(self, item: WorkItem) -> None:
        sharding = self.sharding
        if sharding is None:
            return
        if item.key not in self.primary_informer.store:
            sharding.keys.forget(item.key)  # gone: nothing of it is left to reconcile
        sharding.check_stopping()

    def stop(self) -> None:
        """Hand out no new work; running reconciles finish."""
        self.runner.stop()

    @property
    def drained(self) -> bool:
        """True once stopped and no reconcile is running."""
        return self.controller.is_drained

    def write_gate(self, key: ObjectKey) -> WriteGate | None:
        """The gate of a reconcile of ``key``'s writes: the manager's leadership (when
        electing) and this replica's membership Lease and the key's range (when sharded);
        None when nothing gates them."""
        authorities = []
        deadlines: list[float] = []
        election = self.cluster.election
        if election is not None:
            elector = election.elector
            authorities.append((f"leadership of the Lease {elector.lease}", elector.valid_until))
            deadlines.append(elector.renew_deadline)
        if self.sharding is not None:
            member = self.sharding.membership.member
            # The hash is taken now, while the key's object is known: a key forgotten
            # later (it left the shard) must not make the gate skip the range check (an
            # Event's series update may be sent long after its reconcile ended).
            hashed = self.sharding.keys.hash_of(key)
            authorities.append(
                (
                    f"range of {key} in {member.identity}'s membership Lease",
                    lambda now: None if hashed is None else member.write_deadline(now, hashed),
                )
            )
            deadlines.append(self.sharding.config.renew_deadline)
        if not authorities:
            return None
        # Kept back for the way to the API server; a tenth of a short renew deadline.
        return WriteGate(authorities, margin=min(DEFAULT_GATE_MARGIN, min(deadlines) / 10))

    @_tracing.traced_reconcile
    async def _reconcile_item(self, item: WorkItem) -> Outcome:
        kept = self.primary_informer.reflector.kept_out
        if kept and item.key in kept:
            # The object exists but cannot be decoded: it is neither current nor deleted,
            # so nothing may be done about it (the informer logged it at ERROR).
            return Reconciled()
        context = ReconcileContext(
            controller=self.name,
            item=item,
            client=self.cluster.client,
            primary=self.primary,
            primary_resource=self.primary_informer.resource,
            primary_kind=self._kind,
            caches=self._caches,
            events=self.cluster.events,
            cls=self._cls,
            sharded=self.sharding is not None,
        )
        gate = self.write_gate(item.key)
        try:
            with gated_writes(None if gate is None else gate_guard(gate, _backend.current_time)):
                return await self._reconcile(context)
        except AuthorityLost as exc:
            # Paused or partitioned past the renew deadline: another replica may own the
            # key now. Nothing was sent; the runtime is stopping this work.
            context.log.warning("%s; requeued", exc)
            return Requeue()
        except Conflict as exc:
            # A stale cache or a concurrent writer: look again with fresh data.
            context.log.info("conflict, requeueing: %s", exc)
            return Requeue()


class ControllerBuilder(Generic[ObjT]):
    """Describes a controller: its primary resource, what it owns and what it watches.

    Get one from :meth:`Manager.controller`; finish with :meth:`complete`. A builder of a
    declared class (``ControllerBuilder[Widget]``) gives its reconcile a
    ``ReconcileContext[Widget]``.
    """

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        resource: Resource,
        *,
        kind: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        predicate: Predicate | None = None,
        register: Callable[[RuntimeController], None] | None = None,
    ) -> None:
        self._cluster = cluster
        # Called with the built controller by complete() (the Manager's ``add``).
        self._register = register
        self._name = name
        self._cls: type[Any] | None = None
        if isinstance(resource, type):
            info = resource_info(resource)
            self._cls, kind, resource = resource, info.kind, info.gvr
            self._declared_scope: Scope | None = info.scope
        else:
            self._declared_scope = None
        self._resource = resource
        gvr = resource.gvr if isinstance(resource, APIResource) else resource
        self._gvr = gvr
        if kind is None and isinstance(resource, APIResource):
            kind = resource.kind
        self._kind = kind
        self._scope = resource.scope if isinstance(resource, APIResource) else Scope.NAMESPACED
        if self._declared_scope is not None:
            self._scope = self._declared_scope
        self._namespace = namespace
        self._label_selector = label_selector
        self._primary_source = Source.primary("primary", predicate=predicate)
        self._primary_informer: Informer | None = None
        self._sharding: ShardingConfig | None = None
        self._sources: list[tuple[Source, Informer]] = []
        self._bucketed: list[tuple[Informer, str | None]] = []
        self._workers = 1
        self._rate_limiter: RateLimiter | None = None
        self._priority_queue = True
        self._done = False

    def _source_name(self, resource: GroupVersionResource, what: str) -> str:
        base = (
            f"{what}:{resource.resource}.{resource.group}"
            if resource.group
            else f"{what}:{resource.resource}"
        )
        taken = {"primary"} | {source.name for source, _ in self._sources}
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}#{suffix}"
        return name

    def owns(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        predicate: Predicate | None = None,
        metadata_only: bool = False,
    ) -> ControllerBuilder[ObjT]:
        """Also reconcile the primary that controls (``ownerReferences``) a changed object.

        With ``metadata_only`` the cache of ``resource`` holds metadata only (enough for
        owner references, labels and annotations; much less memory).
        """
        if self._kind is None:
            raise LocalProtocolError(
                f"{self._name}: owns() needs the primary's kind: pass the primary as an "
                "APIResource or give kind="
            )
        resource = _named(resource)
        gvr = resource.gvr if isinstance(resource, APIResource) else resource
        owner = GroupVersionKind(self._gvr.group, self._gvr.version, self._kind)
        source = Source.owned(
            self._source_name(gvr, "owns"), owner, owner_scope=self._scope, predicate=predicate
        )
        informer = self._cluster.informers.get(
            resource,
            namespace=namespace or self._namespace,
            indexers={CONTROLLER_UID_INDEX: _controller_uid},
            metadata_only=metadata_only,
            sharded_for=self._name if self._sharding is not None else None,
        )
        self._sources.append((source, informer))
        return self

    def sharded(
        self,
        config: ShardingConfig | None = None,
        *,
        indexers: Mapping[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] | None = None,
    ) -> ControllerBuilder[ObjT]:
        """Split the primary objects across the replicas that run this controller.

        Call it first, before :meth:`owns` and :meth:`watches`. This replica joins the
        controller's group with a Lease of its own (:class:`ShardingConfig`) and reconciles
        only the objects whose uid hashes into its ranges: its primary informer lists and
        watches only those (server-side with the ``ShardedListAndWatch`` gate, else
        filtered client-side). Objects written through :meth:`ReconcileContext.ensure`
        carry their owner's bucket label (:data:`~kubemoon_core.sharding.OWNER_BUCKET_LABEL`) and
        the :meth:`owns` informers watch only this replica's buckets. Mapped keys
        (:meth:`watches`) are reconciled only when their primary is in the ranges.
        ``indexers`` index the primary cache (see :meth:`primary_cache`).
        """
        if self._sharding is not None:
            raise LocalProtocolError(
                f"{self._name}: sharded() was already called (under kubemoon run --sharded, "
                "every controller is sharded: drop the flag or the call)"
            )
        if self._sources or self._primary_informer is not None:
            raise LocalProtocolError(
                f"{self._name}: call sharded() before owns(), watches() and primary_cache()"
            )
        if config is not None and not isinstance(config, ShardingConfig):
            raise LocalProtocolError(f"{self._name}: sharded() takes a ShardingConfig")
        self._sharding = config if config is not None else ShardingConfig()
        self._primary_informer = self._cluster.informers.get(
            self._resource,
            namespace=self._namespace,
            label_selector=self._label_selector,
            indexers=indexers,
            sharded_for=self._name,
        )
        return self

    def primary_cache(self) -> CacheReader:
        """The cache of the primary resource this controller reconciles (a sharded one
        holds only this replica's ranges): for mappers given to :meth:`watches`."""
        return CacheReader(self._primary())

    def _primary(self) -> Informer:
        if self._primary_informer is None:
            self._primary_informer = self._cluster.informers.get(
                self._resource, namespace=self._namespace, label_selector=self._label_selector
            )
        return self._primary_informer

    def watches(
        self,
        resource: Resource,
        mapper: Callable[[Change], Iterable[ObjectKey]],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        predicate: Predicate | None = None,
        metadata_only: bool = False,
        sharded_by_owner_bucket: bool = False,
        indexers: Mapping[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] | None = None,
    ) -> ControllerBuilder[ObjT]:
        """Also reconcile the keys ``mapper`` returns for each change of ``resource``
        (metadata only, if the mapper needs no more).

        With ``sharded_by_owner_bucket`` (a :meth:`sharded` controller only) the informer
        is this controller's own and watches only the objects labelled with this
        replica's owner buckets (:data:`~kubemoon_core.sharding.OWNER_BUCKET_LABEL`, AND
        ``label_selector``), reselected whenever the ranges change: for objects the
        reconcile writes itself and labels with
        :func:`~kubemoon_core.sharding.owner_bucket_label` of the primary's uid. Read its cache
        with :meth:`watched_cache`. ``indexers`` index the watched cache.
        """
        resource = _named(resource)
        gvr = resource.gvr if isinstance(resource, APIResource) else resource
        mapping: Mapper = mapper
        if sharded_by_owner_bucket and self._sharding is None:
            raise LocalProtocolError(
                f"{self._name}: watches(sharded_by_owner_bucket=True) needs sharded() first"
            )
        source = Source.mapped(self._source_name(gvr, "watches"), mapping, predicate=predicate)
        informer = self._cluster.informers.get(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            metadata_only=metadata_only,
            indexers=indexers,
            sharded_for=self._name if sharded_by_owner_bucket else None,
        )
        if sharded_by_owner_bucket:
            self._bucketed.append((informer, label_selector))
        self._sources.append((source, informer))
        return self

    def watched_cache(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
        sharded_by_owner_bucket: bool = False,
    ) -> CacheReader:
        """The cache of an informer :meth:`watches` set up with these arguments (with
        ``sharded_by_owner_bucket``, it holds only this replica's owner buckets); it sees
        this runtime's own writes."""
        resource = _named(resource)
        informer = self._cluster.informers.get(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            metadata_only=metadata_only,
            sharded_for=self._name if sharded_by_owner_bucket else None,
        )
        return self._cluster.informers.reader(informer)

    def with_workers(self, workers: int) -> ControllerBuilder[ObjT]:
        """Run at most ``workers`` reconciles at once (never two for one key)."""
        self._workers = workers
        return self

    def with_rate_limiter(self, rate_limiter: RateLimiter) -> ControllerBuilder[ObjT]:
        """Decide the delays of failed keys with ``rate_limiter``."""
        self._rate_limiter = rate_limiter
        return self

    def with_priority_queue(self, enabled: bool) -> ControllerBuilder[ObjT]:
        """With ``enabled`` (the default) work from a first list or a resync waits behind
        later events; ``False`` serves every key in the order it was queued."""
        if not isinstance(enabled, bool):
            raise LocalProtocolError(f"{self._name}: with_priority_queue takes a bool")
        self._priority_queue = enabled
        return self

    def complete(
        self, reconcile: Callable[[ReconcileContext[ObjT]], Awaitable[Outcome]]
    ) -> RuntimeController:
        """Build the controller with ``reconcile`` and register it with the manager."""
        if self._done:
            raise LocalProtocolError(f"{self._name}: complete() was already called")
        self._done = True
        controller = RuntimeController(
            self._cluster,
            self._name,
            [(self._primary_source, self._primary()), *self._sources],
            reconcile,
            kind=None
            if self._kind is None
            else GroupVersionKind(self._gvr.group, self._gvr.version, self._kind),
            workers=self._workers,
            rate_limiter=self._rate_limiter,
            cls=self._cls,
            priority_queue=self._priority_queue,
            sharding=self._sharding,
            bucketed=self._bucketed,
        )
        if self._register is not None:
            self._register(controller)
        return controller
