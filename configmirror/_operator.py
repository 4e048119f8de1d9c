"""The ConfigMirror operator: informers, a controller and leader election, wired with trio.

Rules: every decision about what to write is :func:`~configmirror.plan_reconcile`'s; this
module reads the caches, performs the plan's writes in order and maps their failures to
outcomes (a 409 requeues, a 404 on a delete is success). Informers start at once, so a
standby replica has warm caches; the controller reconciles only while this replica leads
and only after every cache has synced, so a restart makes no duplicate writes.
"""

from __future__ import annotations

import datetime
import logging
import random
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from kubemoon_core import (
    AlreadyExists,
    ApiError,
    Change,
    Conflict,
    NotFound,
    ObjectKey,
)
from kubemoon_core._controller import (
    Controller,
    Outcome,
    Reconciled,
    Requeue,
    RequeueAfter,
    Source,
    WorkItem,
)
from kubemoon_core._leader import LeaderElector
from kubemoon_core._store import Store
from kubemoon_trio import Client
from kubemoon_trio._controller import ControllerRunner
from kubemoon_trio._informer import Informer
from kubemoon_trio._leader import LeaderElection

from ._plan import CONFIGMAPS, CONFIGMIRRORS, OWNER_UID_ANNOTATION, plan_reconcile
from ._probes import serve_probes

__all__ = ["ConfigMirrorOperator", "LeadershipLost", "OperatorOptions"]

logger = logging.getLogger("configmirror")

BY_UID, BY_SOURCE, BY_TARGET, BY_OWNER_UID = "uid", "source", "target", "owner-uid"


class LeadershipLost(Exception):
    """This replica stopped leading; it exits so that it restarts as a follower."""


@dataclass(frozen=True)
class OperatorOptions:
    """How the operator runs; the command line fills these in."""

    namespaces: tuple[str, ...] = ()  # where ConfigMirrors are watched; () is everywhere
    workers: int = 4
    probe_host: str | None = None
    probe_port: int = 8080
    leader_elect: bool = False
    lease_name: str = "kubemoon-configmirror"
    lease_namespace: str = "kubemoon-system"
    identity: str = field(
        default_factory=lambda: f"{socket.gethostname()}-{random.getrandbits(32):08x}"
    )
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    stall_margin: float = 30.0


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _mirror_uid(obj: Mapping[str, Any]) -> tuple[str, ...]:
    uid = _meta(obj).get("uid")
    return (uid,) if isinstance(uid, str) else ()


def _mirror_source(obj: Mapping[str, Any]) -> tuple[str, ...]:
    source = (obj.get("spec") or {}).get("source")
    return (f"{_meta(obj).get('namespace')}/{source}",) if isinstance(source, str) else ()


def _mirror_targets(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    source, targets = spec.get("source"), spec.get("targetNamespaces") or []
    if not isinstance(source, str):
        return []
    return [f"{t}/{source}" for t in targets if isinstance(t, str)]


def _owner_uid(obj: Mapping[str, Any]) -> tuple[str, ...]:
    value = (_meta(obj).get("annotations") or {}).get(OWNER_UID_ANNOTATION)
    return (value,) if isinstance(value, str) else ()


def _drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class ConfigMirrorOperator:
    """One replica of the operator. ``await run()`` until cancelled or leadership is lost."""

    def __init__(self, client: Client, options: OperatorOptions | None = None) -> None:
        self.client = client
        self.options = options or OperatorOptions()
        opts = self.options
        rng = random.Random()
        self.configmaps = Informer(
            client,
            CONFIGMAPS,
            store=Store(indexers={BY_OWNER_UID: _owner_uid}, transform=_drop_managed_fields),
            on_change=self._configmap_changed,
            stall_margin=opts.stall_margin,
            rng=rng,
        )
        mirror_indexers = {
            BY_UID: _mirror_uid,
            BY_SOURCE: _mirror_source,
            BY_TARGET: _mirror_targets,
        }
        self.mirrors = [
            Informer(
                client,
                CONFIGMIRRORS,
                namespace=namespace,
                store=Store(indexers=mirror_indexers, transform=_drop_managed_fields),
                on_change=self._mirror_changed,
                stall_margin=opts.stall_margin,
                rng=rng,
            )
            for namespace in (opts.namespaces or (None,))
        ]
        self.controller = Controller(
            [Source.primary("mirrors"), Source.mapped("configmaps", self._mirrors_of_configmap)],
            workers=opts.workers,
        )
        self.runner = ControllerRunner(self.controller, self._reconcile)
        self.election: LeaderElection | None = None
        if opts.leader_elect:
            elector = LeaderElector(
                name=opts.lease_name,
                namespace=opts.lease_namespace,
                identity=opts.identity,
                rng=rng,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
            )
            self.election = LeaderElection(client, elector)
        self.writes = 0
        self.reconciling = False
        self.probe_port: int | None = None
        self._stopping = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Metrics(self))

    # -- caches and mapping ---------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once every informer has applied its first complete list."""
        return self.configmaps.has_synced and all(m.has_synced for m in self.mirrors)

    def _mirror_store(self, namespace: str) -> Store | None:
        if not self.options.namespaces:
            return self.mirrors[0].store
        for informer, watched in zip(self.mirrors, self.options.namespaces, strict=True):
            if watched == namespace:
                return informer.store
        return None

    def _mirror_keys(self, index: str, values: Iterable[str]) -> list[ObjectKey]:
        keys: list[ObjectKey] = []
        for informer in self.mirrors:
            for value in values:
                keys.extend(informer.store.keys_by_index(index, value))
        return keys

    def _mirrors_of_configmap(self, change: Change) -> list[ObjectKey]:
        keys: list[ObjectKey] = []
        for obj in (change.old, change.new):
            if obj is None:
                continue
            where = f"{change.key.namespace}/{change.key.name}"
            keys += self._mirror_keys(BY_UID, _owner_uid(obj))
            keys += self._mirror_keys(BY_SOURCE, (where,))
            keys += self._mirror_keys(BY_TARGET, (where,))
        return list(dict.fromkeys(keys))

    def _configmap_changed(self, change: Change) -> None:
        if self.controller.receive("configmaps", change):
            self.runner.wake()

    def _mirror_changed(self, change: Change) -> None:
        if self.controller.receive("mirrors", change):
            self.runner.wake()

    # -- reconcile ------------------------------------------------------------------------

    async def _reconcile(self, item: WorkItem) -> Outcome:
        key = item.key
        store = self._mirror_store(key.namespace)
        mirror = store.get(key) if store is not None else None
        if mirror is None:
            return Reconciled()  # gone: the finalizer already cleaned up
        spec = mirror.get("spec") or {}
        source_name = spec.get("source", "")
        cms = self.configmaps.store
        source = cms.get(ObjectKey(key.namespace, source_name))
        copies = {}
        for target in spec.get("targetNamespaces") or ():
            existing = cms.get(ObjectKey(target, source_name))
            if existing is not None:
                copies[target] = existing
        managed = cms.by_index(BY_OWNER_UID, _meta(mirror)["uid"])
        now_iso = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        plan = plan_reconcile(mirror, source, copies, managed, now_iso)
        context = {"key": str(key), "reconcile_id": item.reconcile_id}
        for request in plan.writes:
            try:
                await self.client.request(request)
            except NotFound:
                if request.method != "DELETE":
                    raise
            except (Conflict, AlreadyExists) as exc:
                # Someone wrote first, or the cache was behind: look again with fresh data.
                logger.info("write conflict, requeueing: %s", exc, extra=context)
                return Requeue()
            except ApiError:
                raise
            self.writes += 1
            logger.info("%s %s", request.method, request.path, extra=context)
        if plan.wait_for_deletions:
            return RequeueAfter(1.0)
        return Reconciled()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; raises :class:`LeadershipLost` if leadership is lost."""
        opts = self.options
        async with trio.open_nursery() as nursery:
            if opts.probe_host is not None:
                self.probe_port = await nursery.start(self._serve_probes)
            nursery.start_soon(self.configmaps.run)
            for informer in self.mirrors:
                nursery.start_soon(informer.run)
            if self.election is not None:
                nursery.start_soon(self.election.run)
            task_status.started()
            if self.election is not None:
                await self.election.wait_leading()
            await self.configmaps.wait_synced()
            for informer in self.mirrors:
                await informer.wait_synced()
            # Everything already cached is a key to look at once.
            for informer in self.mirrors:
                for mirror_key in informer.store:
                    self.controller.enqueue(mirror_key)
            logger.info("caches synced; reconciling with %d worker(s)", opts.workers)
            self.reconciling = True
            if self.election is not None:
                nursery.start_soon(self._watch_leadership, self.election)
            await self.runner.run()
            nursery.cancel_scope.cancel()

    async def _watch_leadership(self, election: LeaderElection) -> None:
        await election.wait_lost()
        if not self._stopping:
            raise LeadershipLost("lost the lease; stopping so a fresh replica can follow")

    async def shutdown(self) -> None:
        """Stop taking work, let running reconciles finish, then release the lease."""
        self._stopping = True
        self.runner.stop()
        with trio.move_on_after(30):
            while not self.controller.is_drained:
                await trio.sleep(0.05)
        if self.election is not None and self.election.is_leader:
            await self.election.release()

    async def _serve_probes(self, task_status: trio.TaskStatus[int]) -> None:
        assert self.options.probe_host is not None
        await serve_probes(
            self.options.probe_host,
            self.options.probe_port,
            healthy=lambda: True,
            ready=lambda: self.synced,
            metrics=lambda: generate_latest(self.registry),
            task_status=task_status,
        )


class _Metrics(Collector):
    """Exports the controller's, informers' and elector's plain-data counters."""

    def __init__(self, operator: ConfigMirrorOperator) -> None:
        self.operator = operator

    def collect(self) -> Iterable[Any]:
        """Build the metric families from a fresh snapshot."""
        op = self.operator
        snapshot = op.controller.metrics(trio.current_time() if _in_trio() else 0.0)
        reconciles = CounterMetricFamily(
            "configmirror_reconcile", "Reconciles by result.", labels=["result"]
        )
        for result, count in snapshot.reconciles.items():
            reconciles.add_metric([result.value], count)
        yield reconciles
        duration = HistogramMetricFamily(
            "configmirror_reconcile_duration_seconds", "Reconcile time."
        )
        duration.add_metric(
            [],
            [(str(b), c) for b, c in snapshot.duration_buckets]
            + [("+Inf", snapshot.duration_count)],
            snapshot.duration_sum,
        )
        yield duration
        yield GaugeMetricFamily(
            "configmirror_queue_depth", "Keys waiting.", value=snapshot.queue_depth
        )
        yield CounterMetricFamily(
            "configmirror_retries", "Rate-limited requeues.", value=snapshot.retries
        )
        yield CounterMetricFamily("configmirror_writes", "Writes made.", value=op.writes)
        informers = [("configmaps", op.configmaps)] + [("configmirrors", m) for m in op.mirrors]
        restarts = CounterMetricFamily(
            "configmirror_watch_restarts", "Watches resumed without a relist.", labels=["resource"]
        )
        relists = CounterMetricFamily("configmirror_relists", "Relists.", labels=["resource"])
        for name, informer in informers:
            stats = informer.reflector.stats
            restarts.add_metric([name], stats.watch_restarts)
            relists.add_metric([name], stats.relists)
        yield restarts
        yield relists
        leading = 1 if op.election is None or op.election.is_leader else 0
        yield GaugeMetricFamily("configmirror_leader", "1 while this replica leads.", value=leading)


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
