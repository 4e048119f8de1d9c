"""Sharded controllers: one controller's primary objects split across replicas.

Rules: the decisions are the core's -- which ranges this replica may work on
(:class:`~kubemoon_core.sharding.ShardMember`, driven by :class:`ShardMembership`), which keys are
admitted (:class:`~kubemoon_core.sharding.ShardedKeys`), which owner buckets a range holds
(:func:`~kubemoon_core.sharding.owner_bucket_selector`). This module wires them to a controller:

- The primary informer lists and watches with the active ranges as its shard selector
  (server-side with the ``ShardedListAndWatch`` gate, client-side without it) and is
  switched (relisted) whenever they change; the owned objects' informers, and any other
  informer registered with :meth:`ShardedControl.follow_owner_buckets`, watch the
  ranges' owner buckets with a label selector.
- A key is queued and handed out only while its object's hash is in an active range;
  objects leaving the range leave the cache and their keys are dropped, never reconciled
  as deletions.
- A range gained after this replica's Lease lapsed (it was LOST: paused, partitioned) is
  held behind a :class:`~kubemoon_core.sharding.FreshnessBarrier`: no key of it is admitted
  until every informer the controller reads has caught up with the API server's
  resourceVersion as of the gain (one LIST ``limit=1`` per resource; an informer still
  behind after the grace is relisted), so a thawed replica never writes from the view it
  had before its pause.
- A range that must stop is reported stopped to the membership only once no reconcile of
  its objects is running, so its claim stays in this replica's Lease until then and no
  other replica can start it: no object is reconciled by two replicas at once.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from kubemoon_core import KubeMoonError, Request
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import LOW_PRIORITY, Controller
from kubemoon_core.sharding import (
    CacheProgress,
    FreshnessBarrier,
    ShardedKeys,
    ShardRange,
    ShardSelector,
    fnv1a_64,
    owner_bucket_selector,
)
from kubemoon_io import TransportError

from . import _backend
from ._client import Client
from ._controller import ControllerRunner
from ._informer import Informer
from ._sharding import ShardMembership, detect_sharded_list_and_watch

__all__ = ["ShardStatus", "ShardedControl", "ShardingConfig", "default_shard_identity"]

logger = logging.getLogger("kubemoon.sharding")

_UNSAFE = re.compile(r"[^a-z0-9-]+")
_BARRIER_POLL = 0.1  # seconds between looks at the informers while the barrier is closed


def _dns_part(text: str, limit: int) -> str:
    """``text`` as lower-case DNS label characters, at most ``limit`` long; a longer one
    keeps a hash of the whole, so names that differ only at the end stay distinct."""
    part = _UNSAFE.sub("-", text.lower()).strip("-")
    if len(part) > limit:
        digest = f"{fnv1a_64(text.encode('utf-8', 'surrogatepass')):016x}"[:8]
        part = f"{part[: limit - 9].strip('-')}-{digest}"
    return part or "x"


def _and(first: str | None, second: str | None) -> str | None:
    """Two label selectors that must both match (a comma joins requirements)."""
    if first and second:
        return f"{first},{second}"
    return first or second


def default_shard_identity() -> str:
    """This process's member identity: ``POD_NAME`` when set (a pod keeps its Lease across
    restarts of its container), else the host name and the process id."""
    pod = os.environ.get("POD_NAME")
    if pod:
        return _dns_part(pod, 100)
    return f"{_dns_part(socket.gethostname(), 90)}-{os.getpid()}"


@dataclass(frozen=True)
class ShardingConfig:
    """How a sharded controller's replica joins its group.

    ``identity`` (default: :func:`default_shard_identity`) names this
    replica; its Lease ``<group>-<identity>`` lives in ``namespace`` (default: the
    Manager's leader-election namespace, else ``default``). ``group`` (default: the
    controller's name) is shared by every replica of the controller. The timings are the
    membership's (:class:`~kubemoon_core.sharding.ShardMember`). ``join_delay`` (default: the
    retry period) holds this replica's first range until a read at least that long after
    its Lease was first written finds the membership unchanged since the read before, so
    replicas started together split the space at once instead of the first one claiming
    (and listing) all of it; 0 starts on the first read that allows it.
    """

    identity: str | None = None
    namespace: str | None = None
    group: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    clock_skew: float = 0.2
    join_delay: float | None = None


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """What a sharded controller reports: for metrics and ``/readyz?verbose``."""

    controller: str
    identity: str
    server_side: bool | None  # None until detected
    ranges: tuple[ShardRange, ...]
    dropped: int

    @property
    def fraction(self) -> float:
        """The share of the hash space this replica works on now."""
        return ShardSelector(self.ranges).fraction if self.ranges else 0.0


class ShardedControl:
    """Drives one sharded controller: membership, informer selectors, key admission."""

    def __init__(
        self,
        name: str,
        config: ShardingConfig,
        *,
        controller: Controller,
        runner: ControllerRunner,
        client: Client,
        namespace: str,
        primary: Informer,
        owned: Sequence[Informer],
        reads: Sequence[Informer] = (),
    ) -> None:
        self.name = name
        self.controller = controller  # the core machine: its queue and running items
        self.runner = runner
        self.client = client
        self.config = config
        identity = config.identity or default_shard_identity()
        group = config.group or _dns_part(name, 40)
        self.keys = ShardedKeys()
        self.primary = primary
        self.owned = list(owned)
        # Informers whose bucket selector follows the ranges, with their own base selector.
        self._bucketed: list[tuple[Informer, str | None]] = []
        self._label_selector = primary.label_selector
        self.server_side: bool | None = None
        self._active: tuple[ShardRange, ...] = ()
        self._left = _backend.Event()
        # Every informer the controller reads, named for the freshness barrier.
        self._reads: dict[str, Informer] = {}
        for informer in (primary, *owned, *reads):
            if all(informer is not i for i in self._reads.values()):
                self._reads[f"{len(self._reads)}:{informer.name}"] = informer
        self.barrier = FreshnessBarrier(
            {name: (i.resource, i.namespace) for name, i in self._reads.items()}
        )
        self._lapses = 0  # the membership's lapses when the barrier was last armed
        self._armed = _backend.Event()
        try:
            self.membership = ShardMembership(
                client,
                group=group,
                identity=identity,
                namespace=namespace,
                lease_duration=config.lease_duration,
                renew_deadline=config.renew_deadline,
                retry_period=config.retry_period,
                clock_skew=config.clock_skew,
                on_change=self._changed,
                join_delay=config.retry_period if config.join_delay is None else config.join_delay,
            )
        except KubeMoonError as exc:
            raise LocalProtocolError(f"controller {name}: sharding: {exc}") from None

    def __repr__(self) -> str:
        return f"<ShardedControl {self.name} {self.membership!r}>"

    @property
    def identity(self) -> str:
        """This replica's member identity."""
        return self.membership.identity

    def status(self) -> ShardStatus:
        """The current status."""
        return ShardStatus(
            self.name,
            self.identity,
            self.server_side,
            self._active,
            self.controller.metrics(_backend.current_time()).dropped,
        )

    def problems(self) -> list[str]:
        """Why this replica cannot work (for ``/readyz``): it holds no range and its last
        membership request failed."""
        error = self.membership.last_error
        if self._active or error is None:
            return []
        return [f"controller {self.name}: cannot join its shard group: {error}"]

    def note(self) -> str:
        """One line for ``/readyz?verbose``."""
        status = self.status()
        if status.server_side is None:
            mode = "gate not detected yet"
        elif status.server_side:
            mode = "server-side (ShardedListAndWatch)"
        else:
            mode = (
                "client-side: the API server lacks ShardedListAndWatch, so this replica "
                "receives the whole collection and filters it"
            )
        return (
            f"controller {status.controller}: sharded as {status.identity}, "
            f"{len(status.ranges)} range(s), {status.fraction:.1%} of the objects, {mode}"
        )

    async def run(self) -> None:
        """Detect the gate, then run the membership until cancelled or left."""
        try:
            async with _backend.fail_after(self.config.renew_deadline):
                self.server_side = await detect_sharded_list_and_watch(self.client)
        except (KubeMoonError, TransportError, TimeoutError) as exc:
            logger.warning(
                "controller %s: could not tell whether the API server shards lists (%s); "
                "filtering client-side",
                self.name,
                exc,
            )
            self.server_side = False
        else:
            if not self.server_side:
                logger.warning(
                    "controller %s: the API server lacks the ShardedListAndWatch feature "
                    "gate: shards are filtered client-side (every replica receives the "
                    "whole collection)",
                    self.name,
                )
        try:
            async with _backend.TaskGroup() as group:
                group.start_soon(self._hold_until_fresh)
                await self.membership.run()
                group.cancel()
        finally:
            self._left.set()

    async def leave(self, timeout: float) -> None:
        """Stop every range, release the claims and wait (at most ``timeout`` seconds)
        for the Lease to say so, so the others take over at once."""
        self.membership.leave()
        await _backend.wait_event(self._left, _backend.current_time() + timeout)

    def follow_owner_buckets(self, informer: Informer, label_selector: str | None = None) -> None:
        """Make ``informer`` watch only the objects of this replica's owner buckets.

        Whenever the ranges change, the informer is reselected with ``label_selector``
        AND ``shard.kubemoon.io/owner-bucket in (<this replica's buckets>)`` (just
        ``label_selector`` while the replica holds every bucket), exactly as the
        :meth:`~ControllerBuilder.owns` informers are. For objects the controller writes
        itself (not through :meth:`ReconcileContext.ensure`) and labels with
        :func:`~kubemoon_core.sharding.owner_bucket_label` of their owner's uid. The informer
        should start held (``SharedInformers.get(sharded_for=...)``) so it lists nothing
        before the first ranges are known.
        """
        if not isinstance(informer, Informer):
            raise LocalProtocolError(
                f"controller {self.name}: follow_owner_buckets() takes an Informer"
            )
        if label_selector is not None and not isinstance(label_selector, str):
            raise LocalProtocolError(
                f"controller {self.name}: a label selector is a string, got {label_selector!r}"
            )
        self._bucketed.append((informer, label_selector or None))
        if self._active:
            informer.reselect(None, _and(label_selector, owner_bucket_selector(self._active)))

    # -- ranges ---------------------------------------------------------------------------

    def _changed(self, membership: ShardMembership) -> None:
        active = membership.active()
        gained = [r for r in active if r not in self._active]
        self._active = active
        lapses = membership.member.lapses
        if gained and lapses != self._lapses:
            # Regained after the Lease lapsed: the caches may hold the world as it was
            # before the pause. Nothing of the ranges is handed out until they caught up.
            self._lapses = lapses
            self.barrier.arm(_backend.current_time())
            self._armed.set()
            self._armed = _backend.Event()
            logger.info(
                "controller %s: %s regained ranges after its Lease lapsed: holding their "
                "work until its caches catch up",
                self.name,
                self.identity,
            )
        newly = self.keys.admit(active if self.barrier.open else ())
        if active:
            self.primary.reselect(ShardSelector(active), self._label_selector)
            buckets = owner_bucket_selector(active)
            for informer in self.owned:
                informer.reselect(None, buckets)
            for informer, base in self._bucketed:
                informer.reselect(None, _and(base, buckets))
        if gained:
            logger.info(
                "controller %s: %s starts %d range(s): %.1f%% of the objects",
                self.name,
                self.identity,
                len(active),
                100 * ShardSelector(active).fraction,
            )
        if newly:
            now = _backend.current_time()
            for key in newly:
                self.controller.enqueue(key, now, priority=LOW_PRIORITY)
        self._cancel_unworked()
        self.check_stopping()
        self.runner.wake()

    # -- the freshness barrier ------------------------------------------------------------

    def _progress(self) -> dict[str, CacheProgress]:
        return {
            name: CacheProgress(i.reflector.resource_version, i.reflector.stats.syncs)
            for name, i in self._reads.items()
        }

    async def _hold_until_fresh(self) -> None:
        """Drive the freshness barrier: send its reads, relist the informers it names and
        admit the ranges once it opens. Runs beside the membership until it ends."""
        barrier = self.barrier
        while True:
            if barrier.open:
                await self._armed.wait()
                continue
            for key, request in barrier.reads():
                barrier.read_finished(key, await self._floor_read(request))
            now = _backend.current_time()
            for name in barrier.relists_due(now, self._progress()):
                logger.info(
                    "controller %s: %s relists %s: not caught up after its Lease lapsed",
                    self.name,
                    self.identity,
                    self._reads[name].name,
                )
                self._reads[name].relist()
            if barrier.update(self._progress()):
                self._opened()
                continue
            deadline = barrier.next_deadline()
            await _backend.sleep_until(
                min(now + _BARRIER_POLL, math.inf if deadline is None else deadline)
            )

    async def _floor_read(self, request: Request) -> object | None:
        try:
            async with _backend.fail_after(self.config.renew_deadline):
                answer: object = await self.client.request(request)
        except (KubeMoonError, TransportError, TimeoutError) as exc:
            logger.info(
                "controller %s: freshness read %s failed (%s): relisting instead",
                self.name,
                request.path,
                exc,
            )
            return None
        return answer

    def _opened(self) -> None:
        """The barrier opened: admit the active ranges and queue their keys."""
        active = self.membership.active()
        newly = self.keys.admit(active)
        logger.info(
            "controller %s: %s caches caught up: its %d range(s) are worked on again",
            self.name,
            self.identity,
            len(active),
        )
        now = _backend.current_time()
        for key in newly:
            self.controller.enqueue(key, now, priority=LOW_PRIORITY)
        self.runner.wake()

    def _cancel_unworked(self) -> None:
        """Cancel the running reconciles of ranges that may no longer be worked on at all:
        past the renew deadline (LOST) or once another process was found running with this
        identity (DUPLICATE) the membership dropped them without waiting."""
        working = self.membership.member.working(_backend.current_time())
        doomed = []
        for item in self.controller.running:
            value = self.keys.hash_of(item.key)
            if value is None or not any(r.contains_hash(value) for r in working):
                doomed.append(item)
        if doomed:
            count = self.runner.cancel(doomed)
            why = (
                "another process runs with its identity"
                if self.membership.member.duplicate
                else "its Lease passed the renew deadline"
            )
            logger.warning(
                "controller %s: %s lost its ranges (%s): cancelled %d running reconcile(s)",
                self.name,
                self.identity,
                why,
                count,
            )

    def check_stopping(self) -> None:
        """Report stopped every stopping range none of whose reconciles still runs."""
        membership = self.membership
        stopping = membership.stopping()
        if not stopping:
            return
        running = [item.key for item in self.controller.running]
        for shard in stopping:
            if shard not in membership.stopping():
                continue  # reported by a nested call
            if not self.keys.keys_in(shard, running):
                logger.info("controller %s: %s stopped range %s", self.name, self.identity, shard)
                membership.stopped(shard)
