"""The ConfigMirror operator, wired on the KubeMoon runtime with public names only.

Rules: every decision about what to write is :func:`~configmirror.plan_reconcile`'s; the
reconcile reads the shared caches, performs the plan's writes in order, maps their
failures to outcomes (a 409 requeues, a 404 on a delete is success) and records the
plan's Events. The :class:`~kubemoon_trio.Manager` brings the informers, leader election,
probes, metrics and graceful shutdown. Namespaces are watched through the target
selector, so the namespace cache holds exactly the namespaces that accept copies and a
label change re-reconciles the mirrors that target that namespace.

No ConfigMap is cached with its data, not even the copies: their label
(``app.kubernetes.io/managed-by=kubemoon-configmirror``) is no proof, as any tenant may put
it on its own ConfigMaps, so a cache selected by it would hold whatever a tenant labels.
Every ConfigMap is cached as metadata only (a few hundred bytes each, whatever their size).
A change of a source still reaches its mirrors (by its resourceVersion); the reconcile reads
the source's data with one GET, kept in a small memory bounded in bytes and valid only at
the resourceVersion it was read at.

A copy's data is known without caching it: each copy carries the digest of the data the
operator wrote (``kubemoon.dev/data-sha256``), and the :class:`CopyMemory` remembers, per
copy, the digest of the data it held at the resourceVersion the operator last wrote or read
(a few hundred bytes each). A copy at another resourceVersion -- someone else wrote it, or
the operator restarted -- whose annotation says it is in sync is read once with a GET and
the answer dropped once its digest is taken; one whose annotation differs from the source
is simply written again. An immutable copy is learned from the 422 its update gets: it is
deleted and created again.

Sharded, the ConfigMaps are watched in two parts: the copies of this replica's owner
buckets only -- every copy carries its mirror's :data:`~kubemoon_core.sharding.OWNER_BUCKET_LABEL`
-- and every other ConfigMap (the sources), both as metadata. A copy this replica
cannot see (another replica's bucket, a label changed by hand) makes its create fail with
AlreadyExists: the reconcile then reads it from the API server and plans again, so
conflicts are still reported and a mislabelled copy of its own is repaired.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import random
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter

from kubemoon_core import (
    ApiError,
    ListOptions,
    ObjectKey,
    Outcome,
    Reconciled,
    Request,
    Requeue,
    RequeueAfter,
)
from kubemoon_core.errors import AlreadyExists, Conflict, NotFound
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.rbac import PolicyRule
from kubemoon_trio import (
    CacheReader,
    Client,
    Informer,
    LeaderElectionConfig,
    Manager,
    ReconcileContext,
    ShardingConfig,
    WebhookManager,
    WebhookServer,
)

from ._authority import author_refusals, copy_deletes, copy_writes
from ._indexes import (
    BY_OWNER_UID,
    MIRROR_INDEXERS,
    mirrors_of_configmap,
    mirrors_targeting,
    owner_uid_index,
    source_of,
)
from ._memory import CopyMemory, MadeCopies, SourceMemory, as_metadata
from ._options import OperatorOptions
from ._plan import (
    CONFIGMAPS,
    CONFIGMIRRORS_V1BETA1,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAMESPACES,
    CopyData,
    Plan,
    _claimed_digest,
    _deleting,
    _meta,
    _metadata_only,
    _owner_uid,
    data_digest,
    is_copy,
    mirror_targets,
    namespace_labels,
    plan_reconcile,
)
from ._webhooks import (
    DECISION_TTL,
    REVIEW_CONNECTIONS,
    AccessReviews,
    ConfigMirrorWebhooks,
    webhook_declarations,
)

__all__ = ["ConfigMirrorOperator"]

COPIES_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
# How many look-alikes (mirror UID, namespace/name) are remembered to be logged only once.
_IGNORED_REMEMBERED = 10_000
# Also matches ConfigMaps without the label at all: the sources (and anything else).
NOT_COPIES_SELECTOR = f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}"


# (cache, whether it holds data): every ConfigMap cache of the operator is metadata only.
Caches = tuple[tuple[CacheReader, bool], ...]


def _lookup(caches: Caches, name: str, namespace: str) -> tuple[Mapping[str, Any] | None, bool]:
    """``namespace/name`` from the first of ``caches`` that holds it, and whether that
    cache holds data (else it is metadata only)."""
    for cache, full in caches:
        found = cache.get(name, namespace)
        if found is not None:
            return found, full
    return None, False


class _FullSources:
    """The sources in full, for the change mappers: from a cache holding data, or from
    the memory at the cached resourceVersion; None when neither knows the data."""

    def __init__(self, caches: Caches, memory: SourceMemory) -> None:
        self._caches = caches
        self._memory = memory

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        found, full = _lookup(self._caches, name, namespace)
        if found is None or full:
            return found
        return self._memory.get(found)


# What the declarations cannot show: the planner writes the ConfigMaps it only watches (POST
# a copy, PUT it conditionally, DELETE it with preconditions), the reconcile reads a
# source's data (and a copy whose data it does not know) with a GET because every
# ConfigMap is cached as metadata only, and the validating webhook asks a
# SubjectAccessReview per target namespace; so does the operator before it writes a copy
# for a mirror's recorded author.
RBAC_EXTRA = (
    PolicyRule("", "configmaps", frozenset({"get", "create", "update", "delete"})),
    PolicyRule("authorization.k8s.io", "subjectaccessreviews", frozenset({"create"})),
)


class ConfigMirrorOperator:
    """One replica: a :class:`~kubemoon_trio.Manager` running the ConfigMirror controller.

    ``await operator.manager.run()`` runs it (see :meth:`Manager.run` for stopping,
    signals and a lost Lease). With several watched namespaces there is one controller
    per namespace, all on the same shared ConfigMap and Namespace caches. ``rng`` is the
    Manager's source of jitter (a seeded one makes a simulated run repeat exactly).
    """

    def __init__(
        self,
        client: Client,
        options: OperatorOptions | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.options = opts = options or OperatorOptions()
        self.manager = Manager(
            client,
            name="kubemoon.dev/configmirror",
            leader_election=opts.leader_election,
            probe_address=opts.probe_address,
            grace_period=opts.grace_period,
            stall_margin=opts.stall_margin,
            check_permissions=opts.check_permissions,
            rng=rng,
        )
        self.manager.rbac_extra.extend(RBAC_EXTRA)
        self.writes = 0
        # The author's rights, re-checked before a copy is written (see _authority).
        self.author_reviews = AccessReviews(
            client, decision_ttl=DECISION_TTL, concurrency=REVIEW_CONNECTIONS, cache_allowed=False
        )
        # ConfigMaps carrying a mirror's UID that are not its copies (see is_copy): never
        # written, each logged once (up to _IGNORED_REMEMBERED of them) and counted.
        self.ignored_lookalikes = 0
        self._ignored_seen: set[tuple[str, str]] = set()
        self._ignored_counter = Counter(
            "kubemoon_configmirror_ignored_lookalikes",
            "ConfigMaps carrying a ConfigMirror's owner UID that are not its copies, left alone",
            registry=self.manager.registry,
        )
        self.webhook_server: WebhookServer | None = None
        self.webhooks: WebhookManager | None = None
        # The access reviews' own pool, when the Manager serves the declared webhooks:
        # closed by aclose() (a server made by ConfigMirrorWebhooks.server closes its own).
        self._reviews: ConfigMirrorWebhooks | None = None
        if opts.webhook_address is not None and opts.webhook_self_managed:
            host, port = opts.webhook_address
            service = opts.webhook_service
            self._reviews = ConfigMirrorWebhooks(client)
            self.webhooks = self.manager.serve_webhooks(
                webhook_declarations(self._reviews),
                host=host,
                port=port,
                service=service[:2] if service else None,
                service_port=service[2] if service else 443,
                secret=opts.webhook_secret,
                advertise_host=opts.webhook_advertise_host,
                client_ca_file=opts.webhook_client_ca_file,
                resync=opts.webhook_resync,
            )
            self.webhook_server = self.webhooks.server
        elif opts.webhook_address is not None:  # served on every replica, leader or not
            self.webhook_server = ConfigMirrorWebhooks(client).server(
                opts.webhook_address,
                opts.webhook_cert_file,
                opts.webhook_key_file,
                self.manager.registry,
                client_ca_file=opts.webhook_client_ca_file,
            )
            self.manager.add_webhook_server(self.webhook_server)
        informers = self.manager.informers
        indexers = {BY_OWNER_UID: owner_uid_index}
        sharded = opts.sharding is not None
        # Metadata only: what is kept of a ConfigMap does not grow with it, whatever its labels.
        if sharded:
            # Sources (and any ConfigMap that is no copy) cluster-wide; copies per shard.
            self.configmaps: Informer = informers.get(
                CONFIGMAPS,
                label_selector=NOT_COPIES_SELECTOR,
                indexers=indexers,
                metadata_only=True,
            )
        else:
            self.configmaps = informers.get(CONFIGMAPS, indexers=indexers, metadata_only=True)
        configmap_cache = self.manager.informers.reader(self.configmaps)
        # Sharded: controller name -> the cache of its replica's copies.
        self._copies: dict[str, CacheReader] = {}
        self._sources = configmap_cache
        self.source_memory = SourceMemory()
        # What each copy held when last written or read (the caches hold no data).
        self.copy_memory = CopyMemory()
        # The copies this process created: the only ones known to be its own (see _authority).
        self.made_copies = MadeCopies()
        # GETs of copies whose data was not known (someone else wrote them, or a restart).
        self.copy_reads = 0
        full_sources = _FullSources(((configmap_cache, False),), self.source_memory)
        selector = opts.target_namespace_selector
        self.namespaces: Informer = informers.get(NAMESPACES, label_selector=selector)
        for namespace in opts.namespaces or (None,):
            name = f"configmirror-{namespace}" if len(opts.namespaces) > 1 else "configmirror"
            builder = self.manager.controller(name, CONFIGMIRRORS_V1BETA1, namespace=namespace)
            if opts.sharding is not None:
                # This replica's mirrors only: the mappers find them in its shard's cache.
                sharding = opts.sharding
                if len(opts.namespaces) > 1 and sharding.group:
                    sharding = dataclasses.replace(sharding, group=f"{sharding.group}-{namespace}")
                builder.sharded(sharding, indexers=MIRROR_INDEXERS)
            else:
                informers.get(CONFIGMIRRORS_V1BETA1, namespace=namespace, indexers=MIRROR_INDEXERS)
            mirrors = builder.primary_cache()
            mapper = functools.partial(
                mirrors_of_configmap,
                mirrors,
                full_sources,
                sharded=sharded,
                known=self.copy_memory.get,
            )
            if sharded:
                builder.watches(
                    CONFIGMAPS,
                    mapper,
                    label_selector=COPIES_SELECTOR,
                    sharded_by_owner_bucket=True,
                    indexers=indexers,
                    metadata_only=True,
                )
                self._copies[name] = builder.watched_cache(
                    CONFIGMAPS,
                    label_selector=COPIES_SELECTOR,
                    sharded_by_owner_bucket=True,
                    metadata_only=True,
                )
                builder.watches(
                    CONFIGMAPS, mapper, label_selector=NOT_COPIES_SELECTOR, metadata_only=True
                )
            else:
                builder.watches(CONFIGMAPS, mapper, metadata_only=True)
            builder.watches(
                NAMESPACES,
                functools.partial(mirrors_targeting, mirrors),
                label_selector=selector,
            )
            controller = builder.with_workers(opts.workers).complete(self.reconcile)
            controller.status_verbs = ("update",)  # its planner PUTs the status

    def copies_cache(self, controller: str = "configmirror") -> CacheReader:
        """The cache (metadata only) where a controller of this replica finds its copies:
        sharded, only the copies of the mirrors in its owner buckets; unsharded, every
        ConfigMap."""
        return self._copies.get(controller, self._sources)

    async def aclose(self) -> None:
        """Close what the operator opened besides the client (the access reviews' pool)."""
        if self._reviews is not None:
            await self._reviews.aclose()

    async def __aenter__(self) -> ConfigMirrorOperator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def reconcile(self, ctx: ReconcileContext) -> Outcome:
        """Plan from the caches, perform the writes, record the Events."""
        mirror = ctx.obj
        if mirror is None:
            return Reconciled()  # gone: the finalizer already cleaned up
        copies_cache = self._copies.get(ctx.controller)
        sharded = copies_cache is not None
        sources = self._sources
        caches: Caches
        if copies_cache is not None:
            caches = ((copies_cache, False), (sources, False))
            source_caches: Caches = ((sources, False), *caches)
            managed_caches: tuple[CacheReader, ...] = (copies_cache, sources)
        else:
            # The metadata of every ConfigMap (it sees this runtime's writes at once) is
            # where copies are found, and their deletion; what they hold is in copy_memory.
            caches = ((sources, False),)
            source_caches = caches
            managed_caches = (sources,)
        source_name = "".join(source_of(mirror))
        labels = namespace_labels(ctx.cache(NAMESPACES).objects())
        targets = mirror_targets(mirror, labels)
        uid = _meta(mirror)["uid"]
        memory = self.copy_memory
        # Read from the API server (kept as metadata): copies whose data was not known, and
        # ConfigMaps a sharded replica's caches cannot hold.
        fetched: dict[str, Mapping[str, Any]] = {}
        # Every copy of this mirror the API server holds, once a cleanup asked for them.
        listed: list[Mapping[str, Any]] | None = None
        # Targets the mirror's author may not write now: nothing is written there.
        unauthorized: dict[str, str] = {}
        # Copies this process did not create and the author may not delete: left in place.
        undeletable: dict[str, str] = {}
        # Targets whose ConfigMap of the source's name cannot be decoded (kept out of the
        # caches, or of a LIST): nothing is written there, and the status says so.
        unreadable = self._unreadable(source_name, targets)
        source = await self._read_source(ctx, source_caches, source_name)
        if source is not None:
            digest = data_digest(source)
            for target in targets:
                found, _ = _lookup(caches, source_name, target)
                if found is None or not self._unknown_in_sync(found, uid, source_name, digest):
                    continue
                read = await self._read_copy(ctx, source_name, target)
                if read is None:
                    return Requeue()  # deleted meanwhile: plan again from the caches
                fetched[target] = read

        def copies_now() -> dict[str, Mapping[str, Any]]:
            return {
                t: c for t in targets if (c := fetched.get(t) or _lookup(caches, source_name, t)[0])
            }

        def plan_now() -> Plan:
            copies = copies_now()
            managed = {
                ObjectKey(_meta(c).get("namespace", ""), _meta(c).get("name", "")): c
                for cache in managed_caches
                for c in cache.by_index(BY_OWNER_UID, uid)
            }
            for c in (*fetched.values(), *(listed or ())):
                if _owner_uid(c) == uid:
                    managed[ObjectKey(_meta(c)["namespace"], _meta(c)["name"])] = c
            return plan_reconcile(
                mirror,
                source,
                copies,
                managed.values(),
                datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                allowed_namespaces=labels.keys(),
                target_selector=self.options.target_namespace_selector,
                namespace_labels=labels,
                sharded=sharded,
                copies_listed=listed is not None,
                unauthorized=unauthorized,
                undeletable=undeletable,
                unreadable=unreadable,
                known={t: k for t, c in copies.items() if (k := memory.get(c)) is not None},
                made=self.made_copies,
            )

        outcome: Outcome | None = Requeue()  # if every attempt needed another
        # A create refused as AlreadyExists: sharded, another replica's copy (or one whose
        # bucket label changed); either way, maybe one kept out of the caches.
        read_unseen = True
        for _attempt in range(5):
            plan = plan_now()
            if plan.list_copies:
                # The finalizer would go: first read every copy from the API server, so
                # one the caches miss (its labels changed by hand) is deleted, not orphaned.
                listed = await self._list_copies(ctx, uid)
                plan = plan_now()
            refusals = await author_refusals(self.author_reviews, mirror, copy_writes(plan))
            if refusals:
                unauthorized.update(refusals)
                plan = plan_now()
            # A copy's marks prove nothing: one this process did not create is deleted only
            # where the author may delete it.
            unproven = [ns for ns, c in copy_deletes(plan).items() if c not in self.made_copies]
            if unproven:
                verbs = dict.fromkeys(unproven, "delete")
                kept = await author_refusals(self.author_reviews, mirror, verbs, read_source=False)
                if kept:
                    undeletable.update(kept)
                    plan = plan_now()
            self._report_ignored(ctx, uid, plan)
            before = ctx.writes
            try:
                outcome, unseen, frozen, created = await self._write(
                    ctx, plan, read_unseen=read_unseen
                )
            finally:
                self.writes += ctx.writes - before
            # The status records every copy's UID (cleanup deletes no other outside the
            # targets): the next plan sees the copies just created.
            fetched.update(created)
            if created and not (frozen or unseen):
                outcome = Requeue()
                continue
            if frozen:
                # Updates refused because the copy is immutable: so the plan learns, and
                # replaces those copies (deleted now, created again on the next reconcile).
                copies = copies_now()
                for namespace in frozen:
                    if (c := copies.get(namespace)) is not None:
                        cm = _meta(c)
                        refused = CopyData(cm["uid"], cm["resourceVersion"], "", immutable=True)
                        memory.put(c, refused)
                outcome = Requeue()
                continue
            if not unseen:
                break
            read_unseen = False
            # Creates refused as AlreadyExists: ConfigMaps these caches do not hold (another
            # replica's copy, a copy whose bucket label was changed): read them and replan.
            # (A LIST by name: the generated RBAC grants list and watch, not get.)
            by_name = ListOptions(field_selector=f"metadata.name={source_name}")
            found_any = False
            for namespace in unseen:
                items = ctx.client.list(CONFIGMAPS, namespace=namespace, options=by_name)
                async for found in items:
                    memory.put(found)
                    fetched[namespace] = as_metadata(found)
                    found_any = True
                for record in items.kept_out:
                    unreadable[namespace] = f"ConfigMap {record}"
                    found_any = True
            if not found_any:
                return Requeue()  # deleted meanwhile: plan again from the caches
            outcome = Requeue()
        if outcome is not None:
            return outcome
        if ctx.writes:
            ctx.log.info("%d write(s)", ctx.writes)
        for event in plan.events:
            ctx.events.record(mirror, event.type, event.reason, event.note)
        return RequeueAfter(1.0) if plan.wait_for_deletions else Reconciled()

    def _unreadable(self, name: str, targets: Iterable[str]) -> dict[str, str]:
        """Target -> why, for the targets whose ConfigMap ``name`` the ConfigMap cache keeps
        out (too deeply nested to decode: a receiving tenant may make its copy so)."""
        wanted = set(targets)
        return {
            record.key.namespace: f"ConfigMap {record}"
            for record in self.configmaps.kept_out
            if record.key is not None and record.key.name == name and record.key.namespace in wanted
        }

    def _unknown_in_sync(
        self, found: Mapping[str, Any], uid: str, source_name: str, digest: str
    ) -> bool:
        """Whether ``found`` (cached, metadata only) is a copy of this mirror that says it
        holds the source's data, at a version whose data this replica does not know: it
        must be read to tell. (One that says otherwise is written again anyway.)"""
        return (
            _metadata_only(found)
            and is_copy(found, uid, source_name)
            and not _deleting(found)
            and _claimed_digest(found) == digest
            and self.copy_memory.get(found) is None
        )

    async def _read_copy(
        self, ctx: ReconcileContext, name: str, namespace: str
    ) -> Mapping[str, Any] | None:
        """GET one copy, remember what it holds, and keep only its metadata (None if gone)."""
        try:
            found = await ctx.client.get(CONFIGMAPS, name, namespace=namespace)
        except NotFound:
            return None
        self.copy_reads += 1
        self.copy_memory.put(found)
        return as_metadata(found)

    def _report_ignored(self, ctx: ReconcileContext, uid: str, plan: Plan) -> None:
        """Log at WARNING, once each, the look-alikes the plan left alone, and count them."""
        for where in plan.ignored:
            key = (uid, where)
            if key in self._ignored_seen:
                continue
            if len(self._ignored_seen) < _IGNORED_REMEMBERED:
                self._ignored_seen.add(key)
            self.ignored_lookalikes += 1
            self._ignored_counter.inc()
            ctx.log.warning(
                "ConfigMap %s carries this mirror's owner UID but is not its copy (name or "
                "managed-by label differs, or it is outside the mirror's targets and its UID "
                "was never recorded, or this process did not create it and the mirror's "
                "author may not delete it): never written or deleted",
                where,
            )

    async def _read_source(
        self, ctx: ReconcileContext, caches: Caches, name: str
    ) -> Mapping[str, Any] | None:
        """The mirror's source in full: from a cache holding data, from the source memory
        at the cached resourceVersion, else read with one GET (and remembered)."""
        found, full = _lookup(caches, name, ctx.namespace)
        if found is None or full:
            return found
        known = self.source_memory.get(found)
        if known is not None:
            return known
        try:
            read = await ctx.client.get(CONFIGMAPS, name, namespace=ctx.namespace)
        except NotFound:
            return None  # deleted since the cache saw it: its deletion maps here again
        self.source_memory.put(read)
        return read

    async def _list_copies(self, ctx: ReconcileContext, uid: str) -> list[Mapping[str, Any]]:
        """The ConfigMaps annotated with owner ``uid`` that the API server holds with the
        managed-by label, across namespaces and whatever their other labels: a copy whose
        owner-bucket label was changed is in no cache of its mirror's replica. (One without
        the managed-by label is no copy: the planner leaves it alone, see ``is_copy``.)
        Metadata only: a tenant's ConfigMaps carrying the label cost no more than theirs."""
        options = ListOptions(label_selector=COPIES_SELECTOR)
        listed = ctx.client.list(CONFIGMAPS, options=options, metadata_only=True)
        return [c async for c in listed if _owner_uid(c) == uid]

    async def _write(
        self, ctx: ReconcileContext, plan: Plan, *, read_unseen: bool = False
    ) -> tuple[Outcome | None, list[str], list[str], dict[str, Mapping[str, Any]]]:
        """The plan's copy writes together, then the mirror's own in order; a Requeue if
        one of them lost a race (someone wrote first, or the cache was behind). Instead of
        the mirror's writes, it returns (and nothing else is written): with
        ``read_unseen``, the namespaces of creates refused as AlreadyExists; those of
        updates refused because the copy is immutable; else the copies created (metadata
        only, by namespace), for a plan whose status records them. What each copy written
        holds is remembered."""
        results = await ctx.write_all(plan.copies, concurrency=self.options.write_concurrency)
        self._remember(plan.copies, results)
        pairs = list(zip(plan.copies, results, strict=True))
        created: dict[str, Mapping[str, Any]] = {
            _namespace_of(request): as_metadata(result)
            for request, result in pairs
            if request.method == "POST" and isinstance(result, Mapping)
        }
        unseen = [
            _namespace_of(request)
            for request, result in pairs
            if read_unseen and isinstance(result, AlreadyExists) and request.method == "POST"
        ]
        if unseen:
            return None, unseen, [], created
        frozen = [
            _namespace_of(request)
            for request, result in pairs
            if request.method == "PUT" and _refused_as_immutable(result)
        ]
        if frozen:
            return None, [], frozen, created
        for request, result in pairs:
            if isinstance(result, NotFound) and request.method == "DELETE":
                continue  # gone already: what the delete wanted
            if isinstance(result, Conflict | AlreadyExists):
                ctx.log.info("write conflict, requeueing: %s", result)
                return Requeue(), [], [], {}
            if isinstance(result, ApiError):
                raise result
            ctx.log.debug("%s %s", request.method, request.path)
        if created:
            return None, [], [], created
        for request in plan.mirror:
            try:
                await ctx.client.request(request)
            except Conflict as exc:
                ctx.log.info("write conflict, requeueing: %s", exc)
                return Requeue(), [], [], {}
            ctx.writes += 1
            ctx.log.debug("%s %s", request.method, request.path)
        return None, [], [], {}

    def _remember(self, requests: Iterable[Request], results: Iterable[Any]) -> None:
        """Keep what each copy written holds (the answer is the copy as stored)."""
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, ApiError) and not isinstance(result, NotFound):
                continue
            if request.method == "DELETE":
                parts = request.path.split("/")  # .../namespaces/<ns>/configmaps/<name>
                self.copy_memory.forget(parts[-3], parts[-1])
            elif isinstance(result, Mapping) and result.get("kind") == "ConfigMap":
                self.copy_memory.put(result)
                uid = _meta(result).get("uid")
                if request.method == "POST" and isinstance(uid, str):
                    self.made_copies.add(uid)


def _namespace_of(request: Request) -> str:
    """The namespace of a write of a copy (POST .../namespaces/<namespace>/configmaps, PUT
    and DELETE .../namespaces/<namespace>/configmaps/<name>)."""
    parts = request.path.split("/")
    return parts[-2] if request.method == "POST" else parts[-3]


def _refused_as_immutable(result: object) -> bool:
    """Whether a write was refused (422) because the ConfigMap is ``immutable: true``."""
    return (
        isinstance(result, ApiError)
        and result.code == 422
        and any("immutable" in cause.message for cause in result.causes)
    )


def rbac_manager() -> Manager:
    """The operator's Manager as deployed with cert-manager (leader-elected or sharded in
    kubemoon-system), built without connecting: ``kubemoon rbac generate
    configmirror._operator:rbac_manager`` derives deploy/overlays/cert-manager/rbac.yaml
    from it."""
    options = OperatorOptions(
        leader_election=LeaderElectionConfig(name="configmirror", namespace="kubemoon-system"),
        sharding=ShardingConfig(),
    )
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    return ConfigMirrorOperator(client, options).manager


def rbac_manager_self_managed() -> Manager:
    """The Manager of the self-managed overlay: leader-elected, keeping its webhook
    certificate Secret and registering its webhooks (deploy/overlays/self-managed/rbac.yaml)."""
    options = OperatorOptions(
        leader_election=LeaderElectionConfig(name="configmirror", namespace="kubemoon-system"),
        webhook_address=("0.0.0.0", 9443),
        webhook_self_managed=True,
        webhook_service=("kubemoon-system", "configmirror-webhook", 443),
    )
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    return ConfigMirrorOperator(client, options).manager
