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

import datetime
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubemoon_core import (
    AlreadyExists,
    Change,
    Conflict,
    NotFound,
    ObjectKey,
    Outcome,
    Reconciled,
    Requeue,
    RequeueAfter,
)
from kubemoon_trio import (
    CacheReader,
    Client,
    Informer,
    LeaderElectionConfig,
    Manager,
    ReconcileContext,
    WebhookServer,
)

from ._plan import (
    ACCEPT_MIRRORS_SELECTOR,
    CONFIGMAPS,
    CONFIGMIRRORS_V1BETA1,
    NAMESPACES,
    _meta,
    _selector,
    mirror_targets,
    plan_reconcile,
)
from ._plan import _owner_uid as owner_uid
from ._webhooks import ConfigMirrorWebhooks

__all__ = ["ConfigMirrorOperator", "OperatorOptions"]

BY_UID, BY_SOURCE, BY_TARGET = "configmirror/uid", "configmirror/source", "configmirror/target"
BY_TARGET_NAMESPACE, BY_OWNER_UID = "configmirror/target-namespace", "configmirror/owner-uid"
# The BY_TARGET_NAMESPACE key of mirrors with a namespaceSelector: any Namespace change
# may concern them. (No namespace name contains a "*".)
_SELECTING = "*"


@dataclass(frozen=True)
class OperatorOptions:
    """How the operator runs; the command line fills these in."""

    namespaces: tuple[str, ...] = ()  # where ConfigMirrors are watched; () is everywhere
    workers: int = 4
    probe_address: tuple[str, int] | None = None
    leader_election: LeaderElectionConfig | None = None
    target_namespace_selector: str = ACCEPT_MIRRORS_SELECTOR
    stall_margin: float = 30.0
    grace_period: float = 30.0
    # The webhooks (validating, mutating, conversion) are served when an address is given;
    # the certificate and key are PEM files, reloaded when they change.
    webhook_address: tuple[str, int] | None = None
    webhook_cert_file: str = ""
    webhook_key_file: str = ""


def _one(value: object) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else ()


def _targets(obj: Mapping[str, Any]) -> list[str]:
    return mirror_targets(obj)  # the named ones: selected namespaces need the cache


def _target_namespaces(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return (*_targets(obj), *((_SELECTING,) if _selector(obj) is not None else ()))


def _source(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return _one((obj.get("spec") or {}).get("source"))


MIRROR_INDEXERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] = {
    BY_UID: lambda obj: _one(_meta(obj).get("uid")),
    BY_SOURCE: lambda obj: tuple(f"{_meta(obj).get('namespace')}/{s}" for s in _source(obj)),
    BY_TARGET: lambda obj: tuple(f"{t}/{s}" for s in _source(obj) for t in _targets(obj)),
    BY_TARGET_NAMESPACE: _target_namespaces,
}


def _owner_uid(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return _one(owner_uid(obj))


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
        if opts.webhook_address is not None:
            host, port = opts.webhook_address
            self.webhook_server = WebhookServer(
                ConfigMirrorWebhooks(client).app(),
                cert_file=opts.webhook_cert_file,
                key_file=opts.webhook_key_file,
                host=host,
                port=port,
                registry=self.manager.registry,
            )
            # Served on every replica, leader or not: the API server calls any of them.
            self.manager.add_webhook_server(self.webhook_server)
        informers = self.manager.informers
        self.configmaps: Informer = informers.get(CONFIGMAPS, indexers={BY_OWNER_UID: _owner_uid})
        selector = opts.target_namespace_selector
        self.namespaces: Informer = informers.get(NAMESPACES, label_selector=selector)
        for namespace in opts.namespaces or (None,):
            informers.get(CONFIGMIRRORS_V1BETA1, namespace=namespace, indexers=MIRROR_INDEXERS)
            mirrors = self.manager.cache(CONFIGMIRRORS_V1BETA1, namespace=namespace)
            name = f"configmirror-{namespace}" if len(opts.namespaces) > 1 else "configmirror"
            builder = self.manager.controller(name, CONFIGMIRRORS_V1BETA1, namespace=namespace)
            builder.watches(CONFIGMAPS, functools.partial(_mirrors_of_configmap, mirrors))
            builder.watches(
                NAMESPACES,
                functools.partial(_mirrors_targeting, mirrors),
                label_selector=selector,
            )
            builder.with_workers(opts.workers).complete(self.reconcile)

    async def reconcile(self, ctx: ReconcileContext) -> Outcome:
        """Plan from the caches, perform the writes, record the Events."""
        mirror = ctx.obj
        if mirror is None:
            return Reconciled()  # gone: the finalizer already cleaned up
        source_name = "".join(_source(mirror))
        cms = ctx.cache(CONFIGMAPS)
        accepting = ctx.cache(NAMESPACES)
        labels = {
            str(_meta(ns).get("name")): dict(_meta(ns).get("labels") or {})
            for ns in accepting.objects()
        }
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
        for request in plan.writes:
            try:
                await ctx.client.request(request)
            except NotFound:
                if request.method != "DELETE":
                    raise
            except (Conflict, AlreadyExists) as exc:
                # Someone wrote first, or the cache was behind: look again with fresh data.
                ctx.log.info("write conflict, requeueing: %s", exc)
                return Requeue()
            self.writes += 1
            ctx.log.info("%s %s", request.method, request.path)
        for event in plan.events:
            ctx.events.record(mirror, event.type, event.reason, event.note)
        return RequeueAfter(1.0) if plan.wait_for_deletions else Reconciled()


def _mirrors_of_configmap(mirrors: CacheReader, change: Change) -> Iterable[ObjectKey]:
    """The mirrors a ConfigMap change concerns: its owner, and those using its name."""
    where = f"{change.key.namespace}/{change.key.name}"
    keys = mirrors.keys_by_index(BY_SOURCE, where) + mirrors.keys_by_index(BY_TARGET, where)
    for obj in (change.old, change.new):
        for uid in _owner_uid(obj) if obj is not None else ():
            keys += mirrors.keys_by_index(BY_UID, uid)
    return dict.fromkeys(keys)


def _mirrors_targeting(mirrors: CacheReader, change: Change) -> list[ObjectKey]:
    """The mirrors that target a Namespace that started or stopped accepting copies."""
    named = mirrors.keys_by_index(BY_TARGET_NAMESPACE, change.key.name)
    return list(dict.fromkeys(named + mirrors.keys_by_index(BY_TARGET_NAMESPACE, _SELECTING)))
