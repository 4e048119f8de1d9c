"""The ConfigMirror operator, wired on the KubeMoon runtime with public names only.

Rules: every decision about what to write is :func:`~configmirror.plan_reconcile`'s; the
reconcile reads the shared caches, performs the plan's writes in order, maps their
failures to outcomes (a 409 requeues, a 404 on a delete is success) and records the
plan's Events. The :class:`~kubemoon_trio.Manager` brings the informers, leader election,
probes, metrics and graceful shutdown. Namespaces are watched through the target
selector, so the namespace cache holds exactly the namespaces that accept copies and a
label change re-reconciles the mirrors that target that namespace.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools

from kubemoon_core import (
    AlreadyExists,
    ApiError,
    Conflict,
    NotFound,
    Outcome,
    Reconciled,
    Requeue,
    RequeueAfter,
)
from kubemoon_trio import (
    Client,
    Informer,
    Manager,
    ReconcileContext,
    WebhookManager,
    WebhookServer,
)

from ._indexes import (
    BY_OWNER_UID,
    MIRROR_INDEXERS,
    mirrors_of_configmap,
    mirrors_targeting,
    owner_uid_index,
    source_of,
)
from ._options import OperatorOptions
from ._plan import (
    CONFIGMAPS,
    CONFIGMIRRORS_V1BETA1,
    NAMESPACES,
    Plan,
    _meta,
    mirror_targets,
    namespace_labels,
    plan_reconcile,
)
from ._webhooks import ConfigMirrorWebhooks, webhook_declarations

__all__ = ["ConfigMirrorOperator"]


class ConfigMirrorOperator:
    """One replica: a :class:`~kubemoon_trio.Manager` running the ConfigMirror controller.

    ``await operator.manager.run()`` runs it (see :meth:`Manager.run` for stopping,
    signals and a lost Lease). With several watched namespaces there is one controller
    per namespace, all on the same shared ConfigMap and Namespace caches.
    """

    def __init__(self, client: Client, options: OperatorOptions | None = None) -> None:
        self.options = opts = options or OperatorOptions()
        self.manager = Manager(
            client,
            name="kubemoon.dev/configmirror",
            leader_election=opts.leader_election,
            probe_address=opts.probe_address,
            grace_period=opts.grace_period,
            stall_margin=opts.stall_margin,
        )
        self.writes = 0
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
        self.configmaps: Informer = informers.get(
            CONFIGMAPS, indexers={BY_OWNER_UID: owner_uid_index}
        )
        configmap_cache = self.manager.cache(CONFIGMAPS)
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
            builder.watches(
                CONFIGMAPS, functools.partial(mirrors_of_configmap, mirrors, configmap_cache)
            )
            builder.watches(
                NAMESPACES,
                functools.partial(mirrors_targeting, mirrors),
                label_selector=selector,
            )
            builder.with_workers(opts.workers).complete(self.reconcile)

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
        source_name = "".join(source_of(mirror))
        cms = ctx.cache(CONFIGMAPS)
        labels = namespace_labels(ctx.cache(NAMESPACES).objects())
        targets = mirror_targets(mirror, labels)
        copies = {t: c for t in targets if (c := cms.get(source_name, t)) is not None}
        plan = plan_reconcile(
            mirror,
            cms.get(source_name, ctx.namespace),
            copies,
            cms.by_index(BY_OWNER_UID, _meta(mirror)["uid"]),
            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            allowed_namespaces=labels.keys(),
            target_selector=self.options.target_namespace_selector,
            namespace_labels=labels,
        )
        try:
            outcome = await self._write(ctx, plan)
        finally:
            self.writes += ctx.writes
        if outcome is not None:
            return outcome
        if ctx.writes:
            ctx.log.info("%d write(s)", ctx.writes)
        for event in plan.events:
            ctx.events.record(mirror, event.type, event.reason, event.note)
        return RequeueAfter(1.0) if plan.wait_for_deletions else Reconciled()

    async def _write(self, ctx: ReconcileContext, plan: Plan) -> Outcome | None:
        """The plan's copy writes together, then the mirror's own in order; a Requeue if
        one of them lost a race (someone wrote first, or the cache was behind)."""
        results = await ctx.write_all(plan.copies, concurrency=self.options.write_concurrency)
        for request, result in zip(plan.copies, results, strict=True):
            if isinstance(result, NotFound) and request.method == "DELETE":
                continue  # gone already: what the delete wanted
            if isinstance(result, Conflict | AlreadyExists):
                ctx.log.info("write conflict, requeueing: %s", result)
                return Requeue()
            if isinstance(result, ApiError):
                raise result
            ctx.log.debug("%s %s", request.method, request.path)
        for request in plan.mirror:
            try:
                await ctx.client.request(request)
            except Conflict as exc:
                ctx.log.info("write conflict, requeueing: %s", exc)
                return Requeue()
            ctx.writes += 1
            ctx.log.debug("%s %s", request.method, request.path)
        return None
