"""Sharded list and watch and shard membership on the trio adapter.

Rules: the decisions are the core's (:func:`kubemoon_core.sharding.shard_probe_request`,
:func:`kubemoon_core.sharding.sharding_enabled`,
:class:`kubemoon_core.sharding.ShardMember`); this module
only performs requests, feeds back their outcomes with ``current_time()`` and sleeps until
``next_deadline()``. Each membership request is bounded by the renew deadline, so a hung
request never keeps a replica working past it.
"""

from __future__ import annotations

import datetime
import logging
import math
import random
from collections.abc import Callable
from typing import Any

from kubemoon_core import (
    GroupVersionResource,
    KubeMoonError,
    ListOptions,
    create_request,
    get_request,
    list_request,
    replace_request,
)
from kubemoon_core.errors import Conflict, LocalProtocolError, NotFound
from kubemoon_core.sharding import (
    GROUP_LABEL,
    MemberRecord,
    MemberState,
    ShardMember,
    ShardRange,
    ShardSelector,
    member_lease,
    member_record_from_lease,
    shard_probe_request,
    sharding_enabled,
)
from kubemoon_io import TransportError

from . import _backend
from ._client import Client

__all__ = ["ShardMembership", "detect_sharded_list_and_watch"]

logger = logging.getLogger("kubemoon.sharding")

LEASES = GroupVersionResource("coordination.k8s.io", "v1", "leases")


async def detect_sharded_list_and_watch(client: Client) -> bool:
    """Whether the API server applies ``shardSelector`` (the ``ShardedListAndWatch`` gate).

    One LIST of namespaces with ``limit=1`` and a one-hash range: False means the server
    ignores selectors, so shards are only filtered client-side (each replica still
    receives the whole collection). With several apiservers behind a balancer the answer
    is one server's; clients filter client-side regardless.
    """
    return sharding_enabled(await client.request(shard_probe_request()))


class ShardMembership:
    """One replica's membership Lease in ``group`` and the hash ranges it may work on.

    ``await membership.run()`` writes the Lease ``<group>-<identity>`` in ``namespace``,
    lists the group's Leases and drives :class:`~kubemoon_core.sharding.ShardMember` until
    cancelled. Work only on :meth:`active` ranges (:attr:`selector` as a shard selector);
    ``on_change`` is called whenever they or the stopping ranges change: stop the work of
    every range in :meth:`stopping`, then call :meth:`stopped` for it. :meth:`leave`
    stops everything, releases the claims and deletes nothing (the Lease stays, marked
    leaving, for others to see; it expires).

    ``instance`` (default: a random id) names this process in its Lease: a second process
    found running with the same identity makes the later one stop for good, with an ERROR
    (:attr:`~kubemoon_core.sharding.ShardMember.duplicate`); :meth:`run` then returns.
    """

    def __init__(
        self,
        client: Client,
        *,
        group: str,
        identity: str,
        namespace: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock_skew: float = 0.2,
        on_change: Callable[[ShardMembership], object] | None = None,
        join_delay: float = 0.0,
        instance: str | None = None,
    ) -> None:
        if instance is None:
            instance = f"{random.SystemRandom().getrandbits(64):016x}"
        self.member = ShardMember(
            identity,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            clock_skew=clock_skew,
            join_delay=join_delay,
            instance=instance,
        )
        member_lease(
            group,
            identity,
            (),
            namespace=namespace,
            wall_time=datetime.datetime.now(datetime.UTC),
        )  # validates the names once
        self.client = client
        self.group = group
        self.identity = identity
        self.namespace = namespace
        self._duration = lease_duration
        self._timeout = renew_deadline / 2
        self._on_change = on_change
        self._rv: str | None = None
        self._seen: tuple[tuple[ShardRange, ...], tuple[ShardRange, ...]] = ((), ())
        self._changed = _backend.Event()
        self._refused = False
        self._missing_reported = False
        self._duplicate_reported = False
        self.last_error: BaseException | None = None
        """The last failed write or read of the membership Leases (None after a success)."""

    def __repr__(self) -> str:
        return f"<ShardMembership {self.group}/{self.identity} {self.member.state.name}>"

    def active(self) -> tuple[ShardRange, ...]:
        """The ranges that may be worked on now."""
        return self.member.active(_backend.current_time())

    def stopping(self) -> tuple[ShardRange, ...]:
        """Ranges whose work must stop (then call :meth:`stopped`)."""
        return self.member.stopping()

    @property
    def selector(self) -> ShardSelector | None:
        """The active ranges as a shard selector, or None while there is none."""
        active = self.active()
        return ShardSelector(active) if active else None

    def stopped(self, shard: ShardRange) -> None:
        """The work of a stopping range has stopped."""
        self.member.stopped(shard, _backend.current_time())
        self._notify()

    def leave(self) -> None:
        """Leave the group: every range stops; the claims are released by :meth:`run`."""
        self.member.leave(_backend.current_time())
        self._notify()

    async def wait_changed(self) -> None:
        """Return at the next change of the active or stopping ranges."""
        await self._changed.wait()

    def _notify(self) -> None:
        now = _backend.current_time()
        seen = (self.member.working(now), self.member.stopping())
        if seen != self._seen:
            self._seen = seen
            self._changed.set()
            self._changed = _backend.Event()
            if self._on_change is not None:
                try:
                    self._on_change(self)
                except Exception:  # user code must not stop the membership loop
                    logger.exception("on_change of %s failed", self)

    async def run(self) -> None:
        """Renew, observe and decide until cancelled, or until the replica has left."""
        member = self.member
        while member.state not in (MemberState.LEFT, MemberState.DUPLICATE):
            now = _backend.current_time()
            member.tick(now)
            self._notify()
            claims = member.write_due(now)
            if claims is not None:
                member.write_finished(_backend.current_time(), await self._write(claims))
                self._notify()
                continue
            if member.read_due(now):
                member.read_started(now)
                records = await self._read()
                if records is None:
                    member.read_failed(_backend.current_time())
                else:
                    member.observe(records, _backend.current_time())
                self._notify()
                continue
            deadline = member.next_deadline()
            await _backend.sleep_until(math.inf if deadline is None else deadline)
        self._notify()
        if member.duplicate and not self._duplicate_reported:
            self._duplicate_reported = True
            self.last_error = LocalProtocolError(
                f"another process runs with the identity {self.identity} in shard group "
                f"{self.group} (its instance {member.twin}, this one's {member.instance}): "
                "replica identities must be unique"
            )
            logger.error(
                "membership Lease %s/%s-%s: %s; this replica stops working in the group for good",
                self.namespace,
                self.group,
                self.identity,
                self.last_error,
            )

    async def _send(self, request: Any) -> Any:
        # A request never outlives the renew deadline: the ranges stop on time.
        limit = self._timeout
        valid_until = self.member.valid_until
        if valid_until is not None:
            limit = max(0.001, min(limit, valid_until - _backend.current_time()))
        async with _backend.fail_after(limit):
            return await self.client.request(request)

    async def _write(self, claims: tuple[ShardRange, ...]) -> bool:
        lease = member_lease(
            self.group,
            self.identity,
            claims,
            namespace=self.namespace,
            wall_time=datetime.datetime.now(datetime.UTC),
            lease_duration=self._duration,
            leaving=self.member.leaving,
            resource_version=self._rv,
            instance=self.member.instance,
        )
        try:
            if self._rv is None:
                try:
                    stored = await self._send(create_request(LEASES, lease))
                except Conflict:  # it exists (a restart): learn its version, write again
                    current = await self._send(
                        get_request(LEASES, lease["metadata"]["name"], namespace=self.namespace)
                    )
                    if not self._mine(current):
                        self.last_error = LocalProtocolError(
                            f"the Lease {lease['metadata']['name']} is another member's"
                        )
                        return False
                    if not self._may_take_over(current):
                        return False
                    lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    stored = await self._send(replace_request(LEASES, lease))
            else:
                stored = await self._send(replace_request(LEASES, lease))
        except Conflict:
            self._rv = None  # someone else wrote it: read it again next time
            logger.warning("membership Lease of %s was changed by someone else", self.identity)
            return False
        except (KubeMoonError, TransportError, TimeoutError) as exc:
            self.last_error = exc
            if isinstance(exc, NotFound) and not self._missing_reported:
                self._missing_reported = True
                logger.error(
                    "membership Lease of %s cannot be created: does the namespace %r exist? %s",
                    self.identity,
                    self.namespace,
                    exc,
                )
            else:
                logger.info("membership Lease write failed: %s", exc)
            return False
        self._rv = stored["metadata"]["resourceVersion"]
        self.last_error = None
        return True

    def _may_take_over(self, current: Any) -> bool:
        """Whether the existing own Lease may be written over now (the core decides: an
        earlier process's is waited out; a second live process's makes it a duplicate)."""
        try:
            record: MemberRecord | None = member_record_from_lease(current)
        except KubeMoonError:
            record = None  # undecodable: it names no other process
        if self.member.observe_own(record, _backend.current_time()):
            return True
        if not self.member.duplicate:
            assert record is not None
            self.last_error = LocalProtocolError(
                f"the Lease {self.namespace}/{self.group}-{self.identity} was written by "
                f"another process (instance {record.instance}): waiting for it to expire"
            )
            logger.info("membership Lease of %s: %s", self.identity, self.last_error)
        return False

    def _mine(self, current: Any) -> bool:
        """Whether an existing Lease of this name is this member's own (a restart's).

        ``<group>-<identity>`` can name the Lease of another group or holder (group
        ``a-b`` with identity ``c`` and group ``a`` with identity ``b-c``): taking it over
        would hide that member's claims from its group, so it is never written.
        """
        metadata = current.get("metadata") if isinstance(current, dict) else None
        spec = current.get("spec") if isinstance(current, dict) else None
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        holder = spec.get("holderIdentity") if isinstance(spec, dict) else None
        group = labels.get(GROUP_LABEL) if isinstance(labels, dict) else None
        if holder == self.identity and group == self.group:
            return True
        if not self._refused:
            self._refused = True
            logger.error(
                "membership Lease %s/%s belongs to holder %r of group %r, not to %s of %s: "
                "not taking it over; this replica cannot join (choose another identity)",
                self.namespace,
                (metadata or {}).get("name"),
                holder,
                group,
                self.identity,
                self.group,
            )
        return False

    async def _read(self) -> list[MemberRecord] | None:
        options = ListOptions(label_selector=f"{GROUP_LABEL}={self.group}")
        try:
            answer = await self._send(
                list_request(LEASES, namespace=self.namespace, options=options)
            )
        except (KubeMoonError, TransportError, TimeoutError) as exc:
            self.last_error = exc
            logger.info("membership Lease list failed: %s", exc)
            return None
        records = []
        for item in answer.get("items") or []:
            try:
                records.append(member_record_from_lease(item))
            except KubeMoonError as exc:  # a tenant's garbage Lease claims nothing
                logger.warning("ignoring a malformed membership Lease: %s", exc)
        return records
