"""Whole-system simulations: N replicas of an operator on one :class:`SimulatedCluster`,
under a seeded schedule of faults and a tenant's writes, on trio's virtual clock.

Rules: a :class:`FaultSchedule` is data (frozen steps with virtual times), so a failing
schedule prints as a replayable snippet; :meth:`FaultSchedule.generate` draws one from a
seed and nothing else. :func:`simulate` runs inside ``trio.run`` with a
``MockClock(autojump_threshold=0)`` (pytest-trio's ``autojump_clock``); it seeds trio's
scheduler (trio's deterministic-scheduling switch, the one pytest-trio's Hypothesis plugin
uses), gives every replica a seeded ``random.Random``, and so the same seed gives the same
``SimulatedCluster.trace``. A replica whose manager ends (a lost Lease) is started again
as a fresh process (new client, new manager, cold caches) after ``restart_delay``.
Checks of the recorded run (:func:`lease_violations`) read only the trace and the Lease
history the server stored.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from kubemoon_core import GroupVersionResource, KubeMoonError, Request, ResourcePath
from kubemoon_core.errors import NotFound
from kubemoon_core.sharding import CLAIMS_ANNOTATION, decode_claims
from kubemoon_trio import Client, Manager

from ._errors import NotModelled
from ._trio import LeaseRecord, RequestFault, SimulatedCluster, TraceEntry
from ._watchdog import DEFAULT_STALL_LIMIT, DEFAULT_WALL_LIMIT, SimulationStalled, Watchdog

__all__ = [
    "CompactHistory",
    "DropWatches",
    "ExpireWatches",
    "FailRequests",
    "FaultSchedule",
    "LeaseViolation",
    "Pause",
    "PauseOnWrite",
    "ReplicaFactory",
    "ShardViolation",
    "SimulationResult",
    "SimulationStalled",
    "TenantCreate",
    "TenantDelete",
    "TenantFlood",
    "TenantPatch",
    "lease_violations",
    "seed_trio_scheduler",
    "shard_violations",
    "simulate",
]

ReplicaFactory = Callable[[Client, str, random.Random], Manager]
"""Builds one replica's manager: ``(client, identity, rng) -> Manager`` (use ``identity`` as
its leader-election identity and ``rng`` as its ``rng``)."""


# -- the steps of a schedule ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pause:
    """Freeze ``replica`` at virtual time ``at`` for ``seconds`` (its network waits)."""

    at: float
    replica: str
    seconds: float


@dataclass(frozen=True, slots=True)
class PauseOnWrite:
    """From ``at``, freeze ``replica`` for ``seconds`` as its next write that is not a Lease
    request starts to go out (a process frozen between deciding a write and sending it)."""

    at: float
    replica: str
    seconds: float


@dataclass(frozen=True, slots=True)
class DropWatches:
    """Cut the open watch connections (of ``replica``, or all) at ``at``."""

    at: float
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class ExpireWatches:
    """At ``at``: compact the history and end every open watch with 410 ``Expired``."""

    at: float


@dataclass(frozen=True, slots=True)
class CompactHistory:
    """At ``at``: compact the history (resuming watches and continue tokens get 410)."""

    at: float


@dataclass(frozen=True, slots=True)
class FailRequests:
    """From ``at``, answer the next ``count`` matching requests with ``code`` (see
    :class:`~kubemoon_testing.sim.RequestFault`)."""

    at: float
    code: int
    count: int = 1
    replica: str | None = None
    method: str | None = None
    path: str = ""
    retry_after: int = 1


@dataclass(frozen=True, slots=True)
class TenantCreate:
    """At ``at``, a tenant creates ``body`` in ``namespace``: a mapping, or the JSON text of
    a hostile object (nested 10,000 levels, say) that no client library would encode."""

    at: float
    resource: GroupVersionResource
    namespace: str | None
    body: Mapping[str, Any] | bytes = field(hash=False)

    def __repr__(self) -> str:
        body = (
            f"<{len(self.body)} bytes of JSON>"
            if isinstance(self.body, bytes)
            else repr(dict(self.body))
        )
        return (
            f"TenantCreate(at={self.at!r}, resource={self.resource!r}, "
            f"namespace={self.namespace!r}, body={body})"
        )


@dataclass(frozen=True, slots=True)
class TenantPatch:
    """At ``at``, a tenant (a user editing by hand) sends ``patch`` as a JSON merge patch
    to ``name``: a spec edit, a changed label, data overwritten. An object that is absent
    then is left so (the 404 is in the trace)."""

    at: float
    resource: GroupVersionResource
    namespace: str | None
    name: str
    patch: Mapping[str, Any] = field(hash=False)

    def __repr__(self) -> str:
        return (
            f"TenantPatch(at={self.at!r}, resource={self.resource!r}, "
            f"namespace={self.namespace!r}, name={self.name!r}, patch={dict(self.patch)!r})"
        )


@dataclass(frozen=True, slots=True)
class TenantDelete:
    """At ``at``, a tenant deletes ``name`` (background propagation); an object that is
    absent then is left so (the 404 is in the trace)."""

    at: float
    resource: GroupVersionResource
    namespace: str | None
    name: str


@dataclass(frozen=True, slots=True)
class TenantFlood:
    """At ``at``, a tenant updates one ConfigMap ``count`` times back to back (each update a
    request; created first if absent)."""

    at: float
    namespace: str
    name: str
    count: int


Step = (
    Pause
    | PauseOnWrite
    | DropWatches
    | ExpireWatches
    | CompactHistory
    | FailRequests
    | TenantCreate
    | TenantPatch
    | TenantDelete
    | TenantFlood
)


@dataclass(frozen=True, slots=True)
class FaultSchedule:
    """Steps to apply, each at its virtual time (from the start of :func:`simulate`)."""

    steps: tuple[Step, ...] = ()

    def __repr__(self) -> str:
        lines = ",\n    ".join(repr(step) for step in self.steps)
        return f"FaultSchedule(steps=(\n    {lines},\n))" if self.steps else "FaultSchedule()"

    @classmethod
    def generate(
        cls,
        seed: int,
        replicas: Sequence[str],
        *,
        steps: int = 8,
        duration: float = 60.0,
        pause_seconds: tuple[float, float] = (20.0, 40.0),
    ) -> FaultSchedule:
        """Draw ``steps`` faults over ``duration`` seconds from ``seed``: pauses (timed and
        at a write), dropped and expired watches, compactions, and 409/429/500 answers."""
        rng = random.Random(seed)
        drawn: list[Step] = []
        for _ in range(steps):
            at = round(rng.uniform(0.0, duration), 3)
            replica = rng.choice(list(replicas))
            kind = rng.randrange(7)
            seconds = round(rng.uniform(*pause_seconds), 3)
            if kind == 0:
                drawn.append(Pause(at, replica, seconds))
            elif kind == 1:
                drawn.append(PauseOnWrite(at, replica, seconds))
            elif kind == 2:
                drawn.append(DropWatches(at, rng.choice([None, replica])))
            elif kind == 3:
                drawn.append(ExpireWatches(at))
            elif kind == 4:
                drawn.append(CompactHistory(at))
            else:
                code = rng.choice((409, 429, 500, 503))
                method = "PUT" if code == 409 else rng.choice((None, "GET", "PUT", "POST"))
                drawn.append(
                    FailRequests(at, code, count=rng.randint(1, 3), replica=replica, method=method)
                )
        return cls(tuple(sorted(drawn, key=lambda step: step.at)))


# -- checks --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseViolation:
    """A gated write the server received while its sender did not hold the Lease."""

    write: TraceEntry
    lease: LeaseRecord | None

    def __str__(self) -> str:
        held = (
            "no Lease stored yet"
            if self.lease is None
            else f"the Lease held by {self.lease.holder!r} since {self.lease.time:.3f} "
            f"(for {self.lease.duration} s)"
        )
        w = self.write
        return f"{w.identity} sent {w.method} {w.path} at {w.time:.3f} s: {held}"


def lease_violations(
    trace: Sequence[TraceEntry],
    history: Sequence[LeaseRecord],
    lease: str,
    identities: Sequence[str],
) -> list[LeaseViolation]:
    """Every write of ``identities`` (not a Lease request) that reached the server at a time
    when the Lease ``lease`` (``namespace/name``) was not theirs: its latest stored record
    names another holder, or its duration since that record had passed. Requests are
    ordered by their place in the trace, so a renewal right after a write at the same
    virtual instant does not cover it."""
    records = [record for record in history if record.lease == lease]
    found = []
    for entry in trace:
        if entry.identity not in identities or not entry.is_write or entry.is_lease:
            continue
        current = None
        for record in records:
            if record.seq < entry.seq:
                current = record
            else:
                break
        valid = (
            current is not None
            and current.holder == entry.identity
            and entry.time < current.time + (current.duration or 0.0)
        )
        if not valid:
            found.append(LeaseViolation(entry, current))
    return found


@dataclass(frozen=True, slots=True)
class ShardViolation:
    """A write the server received for a key outside its sender's live claims."""

    write: TraceEntry
    lease: LeaseRecord | None
    key_hash: int

    def __str__(self) -> str:
        w = self.write
        held = (
            "no membership Lease stored yet"
            if self.lease is None
            else f"its membership Lease stored at {self.lease.time:.3f} claims "
            f"{dict(self.lease.annotations).get(CLAIMS_ANNOTATION, '')!r} "
            f"(for {self.lease.duration} s)"
        )
        return (
            f"{w.identity} sent {w.method} {w.path} ({w.name}, hash {self.key_hash:x}) at "
            f"{w.time:.3f} s: {held}"
        )


def shard_violations(
    trace: Sequence[TraceEntry],
    history: Sequence[LeaseRecord],
    *,
    group: str,
    namespace: str,
    identities: Sequence[str],
    key_hash: Callable[[TraceEntry], int | None],
) -> list[ShardViolation]:
    """Every write of ``identities`` (not a Lease request) whose key -- ``key_hash(write)``,
    None for a write no shard gates -- was not in its sender's claims, as its membership
    Lease ``namespace/<group>-<identity>`` stood when the server received the write (the
    latest record, still within its duration)."""
    found = []
    for entry in trace:
        if entry.identity not in identities or not entry.is_write or entry.is_lease:
            continue
        value = key_hash(entry)
        if value is None:
            continue
        lease = f"{namespace}/{group}-{entry.identity}"
        current = None
        for record in history:
            if record.lease != lease:
                continue
            if record.seq > entry.seq:
                break
            current = record
        valid = False
        if (
            current is not None
            and current.holder == entry.identity
            and entry.time < current.time + (current.duration or 0.0)
        ):
            claims = decode_claims(dict(current.annotations).get(CLAIMS_ANNOTATION, ""))
            valid = any(claim.contains_hash(value) for claim in claims)
        if not valid:
            found.append(ShardViolation(entry, current, value))
    return found


# -- running -------------------------------------------------------------------------------


def seed_trio_scheduler(seed: int | None) -> bool:
    """Make trio's scheduling order depend on ``seed`` only (trio's own switch for
    deterministic scheduling, the one pytest-trio's Hypothesis plugin turns on); ``None``
    turns the switch off. Returns whether it was on before."""
    from trio._core import _run  # noqa: PLC0415 - private, but the only switch trio has

    if not hasattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING") or not hasattr(_run, "_r"):
        raise NotModelled(f"deterministic scheduling on trio {trio.__version__}")
    before = bool(_run._ALLOW_DETERMINISTIC_SCHEDULING)
    # Final in trio's annotations; setattr is how a test switch is flipped.
    setattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING", seed is not None)  # noqa: B010
    if seed is not None:
        _run._r.seed(seed)
    return before


@dataclass(slots=True)
class SimulationResult:
    """What a run recorded: the cluster (its trace, Lease history, objects), every
    replica's manager runs in order, and how each ended."""

    cluster: SimulatedCluster
    managers: dict[str, list[Manager]]
    endings: list[tuple[float, str, str]]  # (virtual time, replica, why)

    @property
    def trace(self) -> list[TraceEntry]:
        """Every request the server answered."""
        return self.cluster.trace


async def _apply(cluster: SimulatedCluster, step: Step, tenant: Client) -> None:
    if isinstance(step, Pause):
        cluster.pause(step.replica, step.seconds)
    elif isinstance(step, PauseOnWrite):
        cluster.pause_on_write(step.replica, step.seconds)
    elif isinstance(step, DropWatches):
        cluster.drop_watches(step.replica)
    elif isinstance(step, ExpireWatches):
        cluster.expire_watches()
    elif isinstance(step, CompactHistory):
        cluster.server.compact()
        cluster.notify()
    elif isinstance(step, FailRequests):
        cluster.fail_requests(
            RequestFault(
                step.code,
                step.count,
                identity=step.replica,
                method=step.method,
                path=step.path,
                start=cluster.now(),
                retry_after=step.retry_after,
            )
        )
    elif isinstance(step, TenantCreate):
        if isinstance(step.body, bytes):
            path = ResourcePath(step.resource, step.namespace).render()
            headers = (("Content-Type", "application/json"),)
            response = await tenant.send(Request("POST", path, headers=headers, body=step.body))
            if not response.ok:
                raise NotModelled(f"the tenant's create was answered {response.status_code}")
        else:
            await tenant.create(step.resource, dict(step.body), namespace=step.namespace)
    elif isinstance(step, TenantPatch):
        with contextlib.suppress(NotFound):
            await tenant.patch(step.resource, step.name, dict(step.patch), namespace=step.namespace)
    elif isinstance(step, TenantDelete):
        with contextlib.suppress(NotFound):
            await tenant.delete(step.resource, step.name, namespace=step.namespace)
    else:
        await _flood(tenant, step)


async def _flood(tenant: Client, step: TenantFlood) -> None:
    configmaps = GroupVersionResource("", "v1", "configmaps")
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": step.name},
        "data": {"n": "0"},
    }
    try:
        current = await tenant.create(configmaps, body, namespace=step.namespace)
    except KubeMoonError:
        current = await tenant.get(configmaps, step.name, namespace=step.namespace)
    for index in range(step.count):
        current["data"] = {"n": str(index + 1)}
        current = await tenant.replace(configmaps, current, namespace=step.namespace)


async def simulate(
    cluster: SimulatedCluster,
    replicas: Mapping[str, ReplicaFactory],
    schedule: FaultSchedule = FaultSchedule(),
    *,
    duration: float,
    seed: int = 0,
    restart_delay: float = 1.0,
    until: Callable[[SimulationResult], bool] | None = None,
    client_options: Mapping[str, Any] | None = None,
    wall_limit: float | None = DEFAULT_WALL_LIMIT,
    stall_limit: float | None = DEFAULT_STALL_LIMIT,
) -> SimulationResult:
    """Run ``replicas`` (name -> factory) on ``cluster`` for ``duration`` virtual seconds
    (or until ``until(result)`` holds, checked every virtual second after the schedule's
    last step), applying ``schedule``; the tenant's steps use a client of identity
    ``"tenant"``; ``client_options`` are passed to every replica's ``Client`` (for example
    ``max_body_size``). Every pause is lifted and every replica stopped at the end.

    The run is bounded in wall-clock time: it is cancelled and raises
    :class:`~kubemoon_testing.sim.SimulationStalled` once it has taken ``wall_limit`` wall
    seconds (60 by default), or once virtual time has stood still for ``stall_limit`` wall
    seconds (20 by default) while tasks kept running -- a task that loops without ever
    waiting holds a ``MockClock`` still, so the run would otherwise never end. The error
    names the virtual time reached, the requests served, the busiest tasks and where every
    task was. ``None`` turns a bound off."""
    was_seeded = seed_trio_scheduler(seed)
    watchdog = Watchdog(
        wall_limit=wall_limit, stall_limit=stall_limit, requests=lambda: len(cluster.trace)
    )
    try:
        with trio.CancelScope() as scope:
            watchdog.start(scope)
            try:
                result = await _simulate(
                    cluster,
                    replicas,
                    schedule,
                    duration=duration,
                    seed=seed,
                    restart_delay=restart_delay,
                    until=until,
                    client_options=client_options,
                )
            except BaseException as exc:
                watchdog.raise_if_tripped(exc)
                raise
            finally:
                watchdog.stop()
        watchdog.raise_if_tripped()
        return result
    finally:
        if not was_seeded:
            seed_trio_scheduler(None)


async def _simulate(
    cluster: SimulatedCluster,
    replicas: Mapping[str, ReplicaFactory],
    schedule: FaultSchedule,
    *,
    duration: float,
    seed: int,
    restart_delay: float,
    until: Callable[[SimulationResult], bool] | None,
    client_options: Mapping[str, Any] | None,
) -> SimulationResult:
    result = SimulationResult(cluster, {name: [] for name in replicas}, [])
    start = cluster.now()

    async def replica(name: str, factory: ReplicaFactory) -> None:
        rng = random.Random(f"{seed}/{name}")
        while True:
            async with cluster.client(identity=name, **(client_options or {})) as client:
                manager = factory(client, name, rng)
                result.managers[name].append(manager)
                try:
                    await manager.run()
                    why = "stopped"
                except KubeMoonError as exc:
                    why = f"{type(exc).__name__}: {exc}"
            result.endings.append((cluster.now() - start, name, why))
            await trio.sleep(restart_delay)

    async def driver(tenant: Client) -> None:
        for step in sorted(schedule.steps, key=lambda s: s.at):
            await trio.sleep_until(start + step.at)
            await _apply(cluster, step, tenant)

    async with cluster.client(identity="tenant") as tenant, trio.open_nursery() as nursery:
        for name, factory in replicas.items():
            nursery.start_soon(replica, name, factory)
        nursery.start_soon(driver, tenant)
        end = start + duration
        last = max((step.at for step in schedule.steps), default=0.0)
        await trio.sleep_until(min(end, start + last))
        while cluster.now() < end:
            if until is not None and until(result):
                break
            await trio.sleep(min(1.0, end - cluster.now()))
        cluster.resume()
        nursery.cancel_scope.cancel()
    return result
