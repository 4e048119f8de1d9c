"""The manager: one client, shared informers, controllers, leader election, probes,
metrics, Events and graceful shutdown, run together.

Rules:

- Informers start at once, so a standby replica keeps warm caches. Controllers reconcile
  only while this replica leads (when electing) and only once every cache has synced;
  then every cached primary object is queued once.
- A lost Lease stops every controller at once and :meth:`Manager.run` raises
  :class:`~kubemoon_core.errors.LeadershipLost`, so the process restarts as a follower.
- :meth:`Manager.stop` (also SIGTERM/SIGINT with ``handle_signals``) stops taking work,
  lets running reconciles finish within ``grace_period``, releases the Lease, and ends
  ``run``. A reconcile still running after the grace period is logged at ERROR (naming
  its controller and key) and cancelled; the Lease is then *not* released (a reconcile
  stuck in blocking code may still write, so the successor waits for the Lease to
  expire) and ``run`` returns without waiting for it (on the blocking adapter its thread
  is left behind, so the process can exit).
- ``run`` closes the client when it ends, however it ends, when the manager owns it: by
  default unless the client is open in its creator's ``async with`` block (then the
  creator closes it and may use it after the manager); ``close_client`` says it
  explicitly. Never while a stuck reconcile's thread was left behind: it may still use it.
- Failures are loud: every LIST, WATCH and Lease failure goes through the core
  :class:`~kubemoon_core.lowlevel.FailureReporter`, which logs a distinct error once, then with
  backoff; current problems are the reasons ``/readyz`` gives.
"""

# Longer than 700 lines because the Manager is the runtime's one wiring point (informers,
# controllers, election, probes, webhooks, metrics, the order of start and stop), each part
# in a module of its own; what remains is that wiring, kept in one file.

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import signal
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from prometheus_client import CollectorRegistry, generate_latest

from kubemoon_core import APIResource, GroupVersionResource
from kubemoon_core._rbac import PolicyRule
from kubemoon_core._reflector import ReflectorStats
from kubemoon_core.errors import LeaderElectionTimeout, LeadershipLost, LocalProtocolError
from kubemoon_core.lowlevel import ControllerMetrics, FailureReporter, LeaderElector, takeover_bound
from kubemoon_core.predicates import Predicate
from kubemoon_core.typed import DeclaredKind
from kubemoon_core.webhooks import CertificatePolicy, WebhookDeclarations
from kubemoon_io import MetricsSnapshot, RunSettings, RuntimeCollector, current_run_settings

from . import _backend, _permissions
from ._builder import ControllerBuilder, RuntimeController
from ._cache import CacheReader, SharedInformers
from ._client import Client
from ._events import EventRecorder
from ._informer import Informer
from ._leader import LeaderElection
from ._options import WebhookOptions, WebhookServerOptions
from ._probes import ProbeServer
from ._runtime_protocols import ControllerRunnable, Runnable
from ._sharded import ShardingConfig, ShardStatus
from ._webhook_manager import WebhookManager
from ._webhook_server import DEFAULT_INLINE_BODY_SIZE, WebhookServer

__all__ = ["LeaderElectionConfig", "Manager"]

logger = logging.getLogger("kubemoon.manager")
K = TypeVar("K", bound=DeclaredKind)


def _default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{random.getrandbits(24):06x}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives and its timings (client-go's defaults)."""

    name: str
    namespace: str
    identity: str = field(default_factory=_default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @property
    def takeover_bound(self) -> float:
        """The longest a standby takes to lead after the leader dies without releasing the
        Lease (see :func:`~kubemoon_core.lowlevel.takeover_bound`): 23.8 s with the defaults."""
        return takeover_bound(self.lease_duration, self.retry_period)


class Manager:
    """Runs controllers on shared caches, with leader election, probes, metrics and Events.

    Informers start at once, so a standby replica keeps warm caches; controllers reconcile
    only while this replica leads (with ``leader_election``) and once every cache has
    synced. A lost Lease stops every controller and :meth:`run` raises
    :class:`~kubemoon_core.errors.LeadershipLost`. :meth:`stop` (also SIGTERM/SIGINT with
    ``handle_signals``) stops taking work, lets running reconciles finish within
    ``grace_period`` seconds, releases the Lease and ends :meth:`run`. LIST, WATCH and
    Lease failures are logged once, then with backoff, and are the reasons ``/readyz``
    gives.

    ``probe_address`` (host, port) serves ``/healthz``, ``/readyz`` and ``/metrics``
    (port 0: any free port, see :attr:`probe_port`). ``name`` is the Events'
    reporting controller. :meth:`run` closes ``client`` when it ends if the manager owns
    it: ``close_client=None`` (the default) means it does unless the client is open in an
    ``async with`` block of its creator (``Manager(Client.from_environment())`` is owned);
    ``True`` or ``False`` says so explicitly. ``compact_cache`` (default) keeps informers'
    objects as JSON bytes (``Store(compact=True)``: a third of the memory, syncs peaking at
    the store, a read decodes a fresh copy). ``check_permissions`` (on by default) asks, with
    SelfSubjectAccessReviews (in batches, within ``permission_check_timeout``
    seconds), for every RBAC rule derived from the declarations: when some are missing, or
    the reviews go unanswered, all is said in one ERROR and on ``/readyz``, and the replica
    neither campaigns, joins a shard group nor reconciles until a check (every 30 s) passes. A
    Manager built under ``kubemoon run`` takes its command line's
    :class:`~kubemoon_io.RunSettings` (leader election, probes, sharding, webhook serving)
    over these arguments.
    """

    def __init__(
        self,
        client: Client,
        *,
        name: str = "kubemoon",
        leader_election: LeaderElectionConfig | None = None,
        probe_address: tuple[str, int] | None = None,
        grace_period: float = 30.0,
        registry: CollectorRegistry | None = None,
        rng: random.Random | None = None,
        stall_margin: float = 30.0,
        close_client: bool | None = None,
        compact_cache: bool = True,
        check_permissions: bool = True,
    ) -> None:
        self.run_settings = run = current_run_settings()
        if run is not None:
            probe_address = run.probe_address or probe_address
            if run.no_permission_check:
                check_permissions = False
            if run.leader_elect:
                leader_election = LeaderElectionConfig(
                    run.lease_name or RunSettings.lease_name_for(name),
                    run.lease_namespace,
                    identity=run.identity or _default_identity(),
                )
        self.client = client
        self.close_client = close_client
        self.name = name
        self.grace_period = grace_period
        self._rng = rng if rng is not None else random.Random()
        self.failures = FailureReporter()
        self.informers = SharedInformers(
            client,
            on_failure=self._informer_failed,
            stall_margin=stall_margin,
            rng=self._rng,
            compact=compact_cache,
        )
        self.controllers: list[RuntimeController] = []
        identity = leader_election.identity if leader_election else _default_identity()
        self.identity = identity
        self.events = EventRecorder(client, name, identity)
        self.election: LeaderElection | None = None
        self.lease_name: str | None = None
        if leader_election is not None:
            elector = LeaderElector(
                name=leader_election.name,
                namespace=leader_election.namespace,
                identity=identity,
                rng=self._rng,
                lease_duration=leader_election.lease_duration,
                renew_deadline=leader_election.renew_deadline,
                retry_period=leader_election.retry_period,
                # A random id per process: a second process with this identity is found.
                instance=f"{random.SystemRandom().getrandbits(64):016x}",
            )
            self.election = LeaderElection(client, elector, on_result=self._lease_result)
            self.lease_name = f"{leader_election.namespace}/{leader_election.name}"
        self.probe_address = probe_address
        self._loop = _backend.LoopHandle()  # the one the state belongs to (scrapes)
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.registry.register(RuntimeCollector(self))
        self.probes = ProbeServer(
            healthy=self.health_problems,
            ready=self.readiness_problems,
            metrics=lambda: generate_latest(self.registry),
            notes=self.readiness_notes,
        )
        self.webhook_servers: list[WebhookServer] = []
        self.webhooks: WebhookManager | None = None
        # Rules the declarations cannot know (a reconcile writing a kind it only watches,
        # a GET outside the caches): merged into the derived RBAC (_permissions.py).
        self.rbac_extra: list[PolicyRule] = []
        # Access reviews of the derived rules before campaigning or reconciling (_permissions).
        self.check_permissions = check_permissions
        self.permission_check_timeout = 30.0
        self.permissions = _permissions.PermissionGate()  # the check's outcome
        self.reconciling = False
        self._stop = _backend.Event()
        self._stopping = False

    def __repr__(self) -> str:
        return f"<Manager {self.name} controllers={len(self.controllers)}>"

    # -- building ------------------------------------------------------------------------

    @overload
    def controller(
        self,
        name: str,
        resource: GroupVersionResource | APIResource,
        *,
        kind: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        predicate: Predicate | None = None,
    ) -> ControllerBuilder: ...
    @overload
    def controller(
        self,
        name: str,
        resource: type[K],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        predicate: Predicate | None = None,
    ) -> ControllerBuilder[K]: ...
    def controller(
        self,
        name: str,
        resource: GroupVersionResource | APIResource | type[DeclaredKind],
        *,
        kind: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        predicate: Predicate | None = None,
    ) -> ControllerBuilder[Any]:
        """Start describing a controller of ``resource`` (its primary, ``For`` in Go).

        ``resource`` may be a declared class (``Widget``, or a built-in kind such as
        ``kubemoon_core.builtin.ConfigMap``): its resource, kind and scope come from the
        declaration, and the reconcile is given a ``ReconcileContext[Widget]``.
        """
        if any(c.name == name for c in self.controllers):
            raise LocalProtocolError(f"a controller is already named {name!r}")
        builder = ControllerBuilder(
            self,
            name,
            resource,
            kind=kind,
            namespace=namespace,
            label_selector=label_selector,
            predicate=predicate,
            register=self.add,
        )
        run = self.run_settings
        if run is not None and run.sharded:  # kubemoon run --sharded: every controller
            builder.sharded(ShardingConfig(identity=run.identity, namespace=run.lease_namespace))
        return builder

    def add_webhook_server(self, server: WebhookServer) -> None:
        """Serve ``server`` (admission and conversion reviews) while the manager runs.

        Webhooks are served on every replica, leader or not: the API server calls any.
        """
        self.webhook_servers.append(server)

    def serve_webhooks(
        self,
        declarations: WebhookDeclarations,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        service: tuple[str, str] | None = None,
        service_port: int = 443,
        advertise_host: str | None = None,
        secret: tuple[str, str] | None = None,
        cert_dir: str | os.PathLike[str] | None = None,
        policy: CertificatePolicy | None = None,
        refresh: float = 10.0,
        resync: float = 60.0,
        client_ca_file: str | os.PathLike[str] | None = None,
        max_connections: int = 64,
        max_handshakes: int = 64,
        first_request_timeout: float = 10.0,
        request_timeout: float = 30.0,
        handler_threads: int = 4,
        inline_body_size: int = DEFAULT_INLINE_BODY_SIZE,
        options: WebhookOptions | None = None,
    ) -> WebhookManager:
        """Serve ``declarations`` on every replica and register them from the leader.

        The library keeps the certificates (a CA and serving certificate in ``secret``,
        renewed and rotated; or the files of ``cert_dir``), the webhook configurations, the
        CRDs' ``spec.conversion`` and every caBundle; see :class:`WebhookManager`.
        ``client_ca_file`` turns on mutual TLS and the remaining keywords are the
        :class:`WebhookServer`'s limits, with its defaults. ``options`` (a
        :class:`WebhookOptions`) says all of that in one object instead of the keywords.
        """
        if self.webhooks is not None:
            raise LocalProtocolError("this manager already serves webhooks")
        keyword_options = WebhookOptions(
            service=service,
            service_port=service_port,
            advertise_host=advertise_host,
            secret=secret,
            cert_dir=cert_dir,
            policy=policy,
            refresh=refresh,
            resync=resync,
            server=WebhookServerOptions(
                host=host,
                port=port,
                client_ca_file=client_ca_file,
                max_connections=max_connections,
                max_handshakes=max_handshakes,
                first_request_timeout=first_request_timeout,
                request_timeout=request_timeout,
                handler_threads=handler_threads,
                inline_body_size=inline_body_size,
            ),
        )
        if options is None:
            options = keyword_options
        elif keyword_options != WebhookOptions():
            raise LocalProtocolError("serve_webhooks: pass options or keywords, not both")
        if self.run_settings is not None:
            options = _with_run_settings(options, self.run_settings)
        self.webhooks = WebhookManager(self, declarations, options)
        return self.webhooks

    def add(self, controller: RuntimeController) -> None:
        """Register a built controller (done by :meth:`ControllerBuilder.complete`)."""
        self.controllers.append(controller)

    def cache(
        self,
        resource: GroupVersionResource | APIResource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
    ) -> CacheReader:
        """A read-only cache of ``resource``, shared with every controller that watches it."""
        informer = self.informers.get(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            metadata_only=metadata_only,
        )
        return self.informers.reader(informer)

    # -- what it runs --------------------------------------------------------------------

    @property
    def runnables(self) -> list[Runnable]:
        """Everything the manager runs: its controllers, then its self-managed webhooks."""
        hooks: list[Runnable] = [self.webhooks] if self.webhooks is not None else []
        return [*self.controllers, *hooks]

    @property
    def _controllers(self) -> Sequence[ControllerRunnable]:
        # The manager sees its controllers through this interface only.
        return self.controllers

    # -- state ---------------------------------------------------------------------------

    @property
    def probe_port(self) -> int | None:
        """The port the probes server listens on, once started."""
        return self.probes.port

    @property
    def is_leader(self) -> bool:
        """True while this replica may reconcile (always, when not electing)."""
        return self.election is None or self.election.is_leader

    def health_problems(self) -> list[str]:
        """Why the process is not healthy (``/healthz``): nothing while it runs."""
        return ["stopping"] if self._stopping else []

    def readiness_problems(self) -> list[str]:
        """Why the process is not ready (``/readyz``): unsynced caches and current failures."""
        reasons = [problem.message for problem in self.failures.current_problems()]
        reasons += [f"{i.name}: cache not synced" for i in self.informers.not_synced()]
        for runnable in self.runnables:
            reasons += runnable.readiness_problems()
        reasons += [self.permission_problem] if self.permission_problem else []
        if self._stopping:
            reasons.append("stopping")
        return reasons

    def readiness_notes(self) -> list[str]:
        """Lines ``/readyz?verbose`` adds that explain, not fail: how each sharded
        controller shards (server-side, or client-side when the gate is off), and the
        objects each informer keeps out of its cache. A kept-out object never fails
        readiness: it is one tenant's, and an unready replica would stop serving every
        other tenant (its webhooks leave the Service)."""
        notes = [note for runnable in self.runnables for note in runnable.readiness_notes()]
        for informer in self.informers:
            kept = informer.kept_out
            if kept:
                # Bounded: the first few by name, then how many more.
                named = "; ".join(str(record) for record in kept[:3])
                more = f"; and {len(kept) - 3} more" if len(kept) > 3 else ""
                notes.append(
                    f"{informer.name}: {len(kept)} object(s) kept out of the cache and not "
                    f"reconciled: {named}{more}"
                )
        return notes

    # -- metrics source ------------------------------------------------------------------

    def shard_status(self) -> Sequence[ShardStatus]:
        """The status of every sharded controller (for metrics)."""
        found = (c.shard_status() for c in self._controllers)
        return [status for status in found if status is not None]

    def metrics_snapshot(self) -> MetricsSnapshot:
        """Every figure the metrics collector reads, taken at once on the manager's loop:
        a scrape from another thread (prometheus_client's own server) waits for it, so it
        reads the loop's clock and a consistent state; before and after :meth:`run`, here."""
        return self._loop.call(lambda now: MetricsSnapshot.of(self, now))

    def controller_metrics(
        self, now: float | None = None
    ) -> Sequence[tuple[str, ControllerMetrics]]:
        """(name, snapshot) of every controller, at ``now`` (by default the loop's clock)."""
        now = _backend.current_time() if now is None else now
        return [(c.name, c.metrics(now)) for c in self._controllers]

    def informer_stats(self) -> Sequence[tuple[str, ReflectorStats]]:
        """(name, counters) of every informer."""
        return [(i.name, i.reflector.stats) for i in self.informers]

    def leader_status(self) -> tuple[str, bool] | None:
        """(lease, leading) when electing."""
        if self.election is None or self.lease_name is None:
            return None
        return self.lease_name, self.election.is_leader

    def request_counts(self) -> Mapping[tuple[str, str, str], int]:
        """Requests made by the client, by (code, method, host)."""
        return self.client.request_counts

    def stale_reads_avoided(self) -> Mapping[str, int]:
        """Cache reads answered with this runtime's own write, by resource (``plural.group``)."""
        return {
            f"{r.resource}.{r.group}" if r.group else r.resource: count
            for r, count in self.informers.stale_reads_avoided().items()
        }

    # -- failures ------------------------------------------------------------------------

    def _informer_failed(self, informer: Informer, verb: str, error: BaseException | None) -> None:
        source = f"{informer.name} {verb}"
        resource = informer.resource.resource
        now = _backend.current_time()
        if error is None:
            report = self.failures.succeeded(source, now=now)
        else:
            report = self.failures.failed(
                source, verb, resource, error, now=now, namespace=informer.namespace
            )
        if report is not None:
            logger.log(int(report.level), "%s", report.message)

    def _lease_result(self, verb: str, error: BaseException | None) -> None:
        source = f"lease {self.lease_name} {verb}"
        now = _backend.current_time()
        if error is None:
            report = self.failures.succeeded(source, now=now)
        else:
            namespace = self.lease_name.split("/")[0] if self.lease_name else None
            report = self.failures.failed(
                source, verb, "leases", error, now=now, namespace=namespace
            )
        if report is not None:
            logger.log(int(report.level), "%s", report.message)

    # -- running -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking work, let running reconciles finish, release the Lease, end ``run``."""
        if self._stopping:
            return
        self._stopping = True
        logger.info(
            "stopping: no new work; waiting up to %g s for running reconciles", self.grace_period
        )
        for controller in self._controllers:
            controller.stop()
        self._stop.set()

    async def wait_leading(self, timeout: float | None = None) -> None:
        """Wait until this replica leads (when not electing: until it may work).

        With ``timeout``, raise :class:`~kubemoon_core.errors.LeaderElectionTimeout` carrying the
        last Lease error. A replica whose start-up check failed never campaigns: the wait
        ends with :class:`~kubemoon_core.errors.MissingPermissions` naming every missing rule,
        or :class:`~kubemoon_core.errors.PermissionCheckFailed` (the check went unanswered).
        """
        deadline = None if timeout is None else _backend.current_time() + timeout
        if self.election is None:
            if self.check_permissions:
                await _backend.wait_event(self.permissions.known, deadline)
            self.permissions.raise_if_refused()
            return
        leading = self.election.leading_event
        while not leading.is_set():
            self.permissions.raise_if_refused()
            step = _backend.current_time() + 0.1  # the check's answer is seen within 0.1 s
            until = step if deadline is None else min(step, deadline)
            timed_out = not await _backend.wait_event(leading, until)
            if timed_out and deadline is not None and _backend.current_time() >= deadline:
                self.permissions.raise_if_refused()
                raise LeaderElectionTimeout(
                    f"not leading {self.lease_name} after {timeout:g} s",
                    last_error=self.election.elector.last_error,
                )

    async def wait_permitted(self) -> None:
        """Wait until the start-up check passed (at once without one; it is made again
        every 30 s while it fails): a replica that cannot work writes nothing."""
        await self.permissions.permitted.wait()

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every cache has synced; with ``timeout``, raise
        :class:`~kubemoon_core.errors.CacheSyncTimeout` carrying the last error."""
        await self.informers.wait_synced(timeout)

    async def run(
        self,
        *,
        handle_signals: bool = False,
        task_status: _backend.TaskStatus[None] = _backend.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until :meth:`stop` (or a signal, with ``handle_signals``) or a lost Lease."""
        restore = (
            _backend.install_signal_handlers((signal.SIGTERM, signal.SIGINT), self.stop)
            if handle_signals
            else None
        )
        self._loop = _backend.LoopHandle()  # this loop's, whichever one made the manager
        abandoned = False
        try:
            abandoned = await self._run(task_status)
        except BaseExceptionGroup as group:
            raise _first_leaf(group) from None
        finally:
            if restore is not None:
                restore()
            owned = self.close_client
            if owned is None:
                owned = not self.client.in_context
            if owned and not abandoned:
                await self.client.aclose()

    def run_forever(self) -> None:
        """Run on a new event loop until SIGTERM or SIGINT (see :meth:`run`)."""
        _backend.run_loop(self.run, handle_signals=True)

    async def _run(self, task_status: _backend.TaskStatus[None]) -> bool:
        """Run everything; True when a stuck reconcile was left behind, still running."""
        async with _backend.TaskGroup() as tasks:
            if self.probe_address is not None:
                host, port = self.probe_address
                await tasks.start(self.probes.serve, host, port)
            for server in self.webhook_servers:
                await tasks.start(server.serve)
            for runnable in self.runnables:  # a webhook server starts once it has a certificate
                if not runnable.needs_leader_election:
                    tasks.start_soon(runnable.run)
            self.informers.start(tasks)
            tasks.start_soon(self.events.run)
            if self.check_permissions:
                tasks.start_soon(self._check_then_lead)
            else:
                self.permissions.report(None)
                self._lead(tasks)
            task_status.started(None)
            await self._stop.wait()
            if await self._drain():
                self._report_stuck()
                tasks.abandon()
            else:
                for controller in self._controllers:  # hand the shard ranges over at once
                    await controller.leave()
                if self.election is not None and self.election.is_leader:
                    await self.election.release()
                tasks.cancel()
        return tasks.left_behind

    async def _drain(self) -> bool:
        """Wait for running reconciles within the grace period; True if some are left."""
        if not self.reconciling:
            return False
        deadline = _backend.current_time() + self.grace_period
        while not all(c.drained for c in self._controllers):
            if _backend.current_time() >= deadline:
                return True
            await _backend.sleep(0.02)
        return False

    def _report_stuck(self) -> None:
        lease = (
            f"; the Lease {self.lease_name} is not released (the reconcile may still write): "
            "a successor takes over when it expires"
            if self.election is not None and self.election.is_leader
            else ""
        )
        now = _backend.current_time()
        for controller in self._controllers:
            for item in controller.running_items():
                logger.error(
                    "controller %s: reconcile of %s still running after the %g s grace period "
                    "(started %.1f s ago): cancelled, not waited for%s",
                    controller.name,
                    item.key,
                    self.grace_period,
                    now - item.started,
                    lease,
                    extra={
                        "controller": controller.name,
                        "key": str(item.key),
                        "reconcile_id": item.reconcile_id,
                    },
                )

    @property
    def permission_problem(self) -> str | None:
        """What the start-up check found (a missing rule, or no answer), for ``/readyz``."""
        return self.permissions.problem

    def _lead(self, tasks: _backend.TaskGroup) -> None:
        """Start what takes work: the election, the shard memberships, the reconcilers."""
        if self.election is not None:
            tasks.start_soon(self.election.run)
        for controller in self._controllers:  # shard memberships, on every replica
            tasks.start_soon(controller.run_background)
        tasks.start_soon(self._reconcile_while_leading)

    async def _check_then_lead(self) -> None:
        """The start-up check, then :meth:`_lead`: a replica that cannot work leads nothing."""
        timeout = self.permission_check_timeout
        permitted = await _permissions.check_until_answered(self, self.permissions, timeout=timeout)
        if permitted and not self._stopping:
            async with _backend.TaskGroup() as tasks:  # a child never starts in its parent's
                self._lead(tasks)

    async def _reconcile_while_leading(self) -> None:
        if self.election is not None:
            await self.election.wait_leading()
        await self.informers.wait_synced()
        if self._stopping:
            return
        for controller in self._controllers:
            controller.enqueue_cached()
        logger.info("caches synced; running %d controller(s)", len(self.controllers))
        self.reconciling = True
        async with _backend.TaskGroup() as workers:
            for runnable in self.runnables:
                if runnable.needs_leader_election:
                    workers.start_soon(runnable.run)
            if self.election is not None:
                workers.start_soon(self._watch_leadership, self.election)
            # Runners end once stopped and drained; run() cancels what is left.
            await _backend.sleep_until(math.inf)

    async def _watch_leadership(self, election: LeaderElection) -> None:
        await election.wait_lost()
        if self._stopping:
            return
        for controller in self._controllers:
            controller.stop()
        raise LeadershipLost(
            f"lost the lease {self.lease_name}; stopping so a fresh replica can follow"
        )


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first non-group exception of ``group`` (a task group's errors, unwrapped)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _with_run_settings(options: WebhookOptions, run: RunSettings) -> WebhookOptions:
    """``options`` with what ``kubemoon run --webhook-*`` gave: the command line wins."""
    server = options.server
    server = dataclasses.replace(
        server,
        host=run.webhook_host or server.host,
        port=run.webhook_port if run.webhook_port is not None else server.port,
        client_ca_file=run.webhook_client_ca_file or server.client_ca_file,
    )
    changes: dict[str, Any] = {"server": server}
    if run.webhook_cert_dir is not None:  # mounted files: not the code's Secret
        changes.update(cert_dir=run.webhook_cert_dir, secret=None)
    if run.webhook_service is not None:
        changes.update(service=run.webhook_service[:2], service_port=run.webhook_service[2])
    if run.webhook_secret is not None:  # self-managed: not the code's directory
        changes.update(secret=run.webhook_secret, cert_dir=None)
    if run.webhook_advertise_host:
        changes.update(advertise_host=run.webhook_advertise_host)
    return dataclasses.replace(options, **changes)
