"""Shard membership: which hash ranges a replica may work on, decided from Leases.

Each replica of a sharded controller holds one ``coordination.k8s.io/v1`` Lease labelled
with its group; in it (an annotation) it publishes the ranges it *claims*. Every replica
lists the group's Leases, computes the same assignment from the live members (the hash
space split equally by sorted identity, :func:`assign_ranges`) and works only on the
ranges it has *started*. :class:`ShardMember` is the pure state machine deciding when a
range may start and when it must stop, so that no object is worked on by two replicas at
once, through joins, leaves, crashes and partitions.

Rules (time comes in as ``now``, local monotonic seconds; the machine reads no clock):

- A range of the assignment is first CLAIMING: it is written into the replica's Lease.
  It becomes ACTIVE only on a read of the group's Leases *sent after* a write holding the
  claim was acknowledged, when in that read no other live record claims an overlapping
  range and the range is still assigned to this replica. The API server is linearizable,
  so of two replicas claiming overlapping ranges at least one sees the other's claim.
- Records naming the same holder are merged (claims united), so a copy cannot hide one.
- A record is live until its version has stayed unchanged for ``lease_duration`` local
  seconds since this replica first saw that version (leader election's rule); an expired
  or absent record claims nothing. A record marked leaving counts for claims but is no
  member of the assignment.
- A range that is no longer assigned is STOPPING: still claimed, until the caller says
  with :meth:`ShardMember.stopped` that its work stopped; then it is dropped from the next
  write. A claim is never removed from the Lease while its range may be worked on.
- The replica's own lease is valid for ``renew_deadline`` local seconds after it *sent*
  its last acknowledged write; past that it is LOST: every range stops at once (the caller
  must cancel its work by that deadline, :meth:`next_deadline` says when) and claims must
  be confirmed again by a new write and read.
- Joining settles first: with ``join_delay``, the replica's *first* range becomes ACTIVE
  only on a read sent at least ``join_delay`` after its first acknowledged write, whose
  assignment equals the previous read's (the membership stayed the same for one read). A
  replica started together with others so does not claim (and list) the whole space
  first. This only delays confirmations: safety is unchanged.
- Identities are unique. With an ``instance`` (a random id per process) the own Lease
  carries it in the annotation ``kubemoon.dev/holder-instance``, and the
  own Lease found with another instance (by a read, or by the GET before taking the Lease
  over, :meth:`ShardMember.observe_own`) was written by another process. Before this one's
  first acknowledged write it is an earlier process's (a restart's): taken over only once
  it expired (unchanged for ``lease_duration``) or once it was left with no claims, so its
  ranges are never worked on twice. Once this one has written its Lease (on a read sent
  after that write was acknowledged), or when that record changes while this one waits,
  two live processes share the identity: the machine stops for good in ``DUPLICATE``
  (every range dropped at once, nothing more written or read), so at most one keeps
  working and the two never fight over the Lease.
- Safety needs ``renew_deadline * (1 + clock_skew) ** 2 < lease_duration``, with every
  clock's rate within a factor ``1 + clock_skew`` of true time: the holder stops before
  anyone can judge its Lease expired. The constructor refuses timings that break it.

Transitions as data: the replica's standing moves only by ``_MEMBER_TRANSITIONS`` and each
range only by ``_RANGE_TRANSITIONS`` (published by :meth:`ShardMember.transitions` and
:meth:`ShardMember.range_transitions`); a move either table lacks is a bug of the machine,
an AssertionError naming the state and the input.

The Leases themselves (labels, annotations, writing and reading them) are in
``kubemoon_core._member_leases``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._errors import LocalProtocolError
from ._member_leases import MemberRecord, _check_instance
from ._shard import HASH_SPACE, ShardRange
from ._transitions import TransitionTable, _Deprecated

__all__ = [
    "MemberInput",
    "MemberState",
    "RangeInput",
    "RangeState",
    "ShardMember",
    "assign_ranges",
]


class MemberState(enum.Enum):
    """The replica's own standing in the group."""

    JOINING = "joining"  # no write acknowledged yet
    MEMBER = "member"  # its lease is valid
    LOST = "lost"  # the renew deadline passed: nothing may be worked on
    LEAVING = "leaving"  # stopping everything before deleting its lease
    LEFT = "left"  # every claim released; the lease may be deleted
    DUPLICATE = "duplicate"  # another live process has this identity: nothing more to do


class MemberInput(enum.Enum):
    """What moves the replica's standing."""

    WRITTEN = "own lease written in time"
    WRITTEN_LEAVING = "own lease written in time, leaving"
    RELEASED = "own lease written with no claims, leaving"
    EXPIRED = "own lease past its renew deadline"
    LEAVE = "leave() was called"
    DUPLICATE = "another process holds the own lease under this identity"


_M, _MI = MemberState, MemberInput
_MEMBER_TRANSITIONS: dict[tuple[MemberState, MemberInput], MemberState] = {
    (_M.JOINING, _MI.WRITTEN): _M.MEMBER,
    (_M.JOINING, _MI.WRITTEN_LEAVING): _M.LEAVING,
    (_M.JOINING, _MI.LEAVE): _M.JOINING,  # leaves once its first write is acknowledged
    (_M.MEMBER, _MI.WRITTEN): _M.MEMBER,
    (_M.MEMBER, _MI.EXPIRED): _M.LOST,
    (_M.MEMBER, _MI.LEAVE): _M.LEAVING,
    (_M.LOST, _MI.WRITTEN): _M.MEMBER,
    (_M.LOST, _MI.WRITTEN_LEAVING): _M.LEAVING,
    (_M.LOST, _MI.LEAVE): _M.LOST,  # leaves once a write is acknowledged again
    (_M.LEAVING, _MI.WRITTEN_LEAVING): _M.LEAVING,
    (_M.LEAVING, _MI.RELEASED): _M.LEFT,
    (_M.LEAVING, _MI.EXPIRED): _M.LOST,
    (_M.LEAVING, _MI.LEAVE): _M.LEAVING,
    (_M.LEFT, _MI.LEAVE): _M.LEFT,
    (_M.DUPLICATE, _MI.LEAVE): _M.DUPLICATE,
    # A second live process with this identity: stop for good, whatever the standing (a
    # read sent before this one left may still show it).
    (_M.JOINING, _MI.DUPLICATE): _M.DUPLICATE,
    (_M.MEMBER, _MI.DUPLICATE): _M.DUPLICATE,
    (_M.LOST, _MI.DUPLICATE): _M.DUPLICATE,
    (_M.LEAVING, _MI.DUPLICATE): _M.DUPLICATE,
    (_M.LEFT, _MI.DUPLICATE): _M.DUPLICATE,
    (_M.DUPLICATE, _MI.DUPLICATE): _M.DUPLICATE,
}
del _M, _MI
_MEMBER_TABLE = TransitionTable.from_targets(
    "ShardMember", MemberState.JOINING, MemberInput, _MEMBER_TRANSITIONS
)


class RangeState(enum.Enum):
    """One range of the replica's."""

    CLAIMING = "claiming"  # written (or to be written) in the lease; not worked on
    ACTIVE = "active"  # worked on
    STOPPING = "stopping"  # must stop; still claimed until the caller confirms


class RangeInput(enum.Enum):
    """What moves a range."""

    CONFIRMED = "confirmed by a read after the claim was written"
    UNASSIGNED = "no longer assigned"
    STOPPED = "caller stopped its work"
    LOST = "own lease past its renew deadline"
    DUPLICATE = "another process holds the own lease under this identity"


_R, _I = RangeState, RangeInput
# None as a target means: the range is dropped (no longer claimed).
_RANGE_TRANSITIONS: dict[tuple[RangeState, RangeInput], RangeState | None] = {
    (_R.CLAIMING, _I.CONFIRMED): _R.ACTIVE,
    (_R.CLAIMING, _I.UNASSIGNED): None,
    (_R.CLAIMING, _I.LOST): _R.CLAIMING,
    (_R.ACTIVE, _I.UNASSIGNED): _R.STOPPING,
    (_R.ACTIVE, _I.LOST): _R.CLAIMING,
    (_R.STOPPING, _I.STOPPED): None,
    (_R.STOPPING, _I.LOST): None,
    # A second live process with this identity: stop everything at once, for good.
    (_R.CLAIMING, _I.DUPLICATE): None,
    (_R.ACTIVE, _I.DUPLICATE): None,
    (_R.STOPPING, _I.DUPLICATE): None,
}
del _R, _I
_RANGE_TABLE = TransitionTable.from_targets(
    "ShardMember range", RangeState.CLAIMING, RangeInput, _RANGE_TRANSITIONS
)


_BUCKETS = 256  # kubemoon_core._sharded.OWNER_BUCKETS


def assign_ranges(members: Iterable[str]) -> dict[str, ShardRange]:
    """The split of the hash space among ``members``, in sorted identity order.

    Ranges are as equal as whole owner buckets (1/256 of the space each) allow, so each is
    exactly a set of buckets; with more than 256 members the last ones get no range.
    """
    ordered = sorted(set(members))
    count = len(ordered)
    if not count:
        return {}
    # Cut at owner-bucket boundaries (the top 8 bits), so a range is a whole set of
    # buckets and the owned objects' label selector is exact; beyond 256 members the
    # last ones get nothing.
    size = HASH_SPACE // _BUCKETS
    cuts = [_BUCKETS * i // count * size for i in range(count + 1)]
    return {
        identity: ShardRange(cuts[i], cuts[i + 1])
        for i, identity in enumerate(ordered)
        if cuts[i] < cuts[i + 1]
    }


def _sorted(ranges: Iterable[ShardRange]) -> tuple[ShardRange, ...]:
    return tuple(sorted(ranges, key=lambda r: (r.start, r.end)))


def _overlap(a: ShardRange, b: ShardRange) -> bool:
    return a.start < b.end and b.start < a.end


@dataclass(slots=True)
class _Seen:
    version: str
    since: float  # local time this version was first seen (receipt of the read)
    record: MemberRecord = field(repr=False)


class ShardMember:
    """One replica's view of its group, and the ranges it may work on; see the module rules.

    Driving it (one write and one read in flight at most):

    1. ``claims = m.write_due(now)``: when not None, write the own Lease with these claims
       (and :attr:`leaving`), then call :meth:`write_finished` with whether it succeeded.
    2. ``m.read_due(now)``: when True, call :meth:`read_started`, LIST the group's Leases
       with a consistent read (no resourceVersion), and give the records (every Lease of
       the group, this replica's own included or not) to :meth:`observe`.
    3. Work only on :meth:`active` ranges; stop the work of every range in
       :meth:`stopping`, then call :meth:`stopped`. Call :meth:`tick` at
       :meth:`next_deadline`: past the renew deadline, every range stops.

    With an ``instance``, write it into the own Lease, and before overwriting an existing
    own Lease (a create that conflicted) read it and ask :meth:`observe_own`; once
    :attr:`duplicate`, stop: another process runs with this identity.
    """

    RANGE_TRANSITIONS = _Deprecated(
        MappingProxyType(_RANGE_TRANSITIONS), "ShardMember.range_transitions()"
    )

    @classmethod
    def transitions(cls) -> TransitionTable[MemberState, MemberInput]:
        """The transition table of the replica's standing (:attr:`state`)."""
        return _MEMBER_TABLE

    @classmethod
    def range_transitions(cls) -> TransitionTable[RangeState, RangeInput]:
        """The transition table of each range (:meth:`ranges`); a transition to None
        drops the range (no longer claimed)."""
        return _RANGE_TABLE

    def __init__(
        self,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock_skew: float = 0.2,
        join_delay: float = 0.0,
        instance: str | None = None,
    ) -> None:
        if not isinstance(identity, str) or not identity:
            raise LocalProtocolError("identity must be a non-empty string")
        _check_instance(instance)
        for name, value in (
            ("lease_duration", lease_duration),
            ("renew_deadline", renew_deadline),
            ("retry_period", retry_period),
            ("clock_skew", clock_skew),
            ("join_delay", join_delay),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise LocalProtocolError(f"{name} must be a non-negative number, got {value!r}")
        if retry_period <= 0 or retry_period >= renew_deadline:
            raise LocalProtocolError("retry_period must be positive and below renew_deadline")
        if not renew_deadline * (1 + clock_skew) ** 2 < lease_duration:
            raise LocalProtocolError(
                f"unsafe timings: renew_deadline * (1 + clock_skew)**2 = "
                f"{renew_deadline * (1 + clock_skew) ** 2:g} must be below lease_duration "
                f"{lease_duration:g}"
            )
        self.identity = identity
        self._duration = float(lease_duration)
        self._deadline = float(renew_deadline)
        self._retry = float(retry_period)
        self._state = MemberState.JOINING
        self._ranges: dict[ShardRange, RangeState] = {}
        self._confirm_after: dict[ShardRange, float] = {}  # claim acked at this local time
        self._seen: dict[str, _Seen] = {}
        self._assignment: dict[str, ShardRange] = {}
        self._valid_until = float("-inf")
        self._writing: tuple[float, tuple[ShardRange, ...]] | None = None
        self._reading: float | None = None
        self._last_write = float("-inf")
        self._last_read = float("-inf")
        self._dirty = True  # the claims changed since the last acknowledged write
        self._failed = False  # the last write failed: the next waits a retry period
        self._read_soon = False  # a claim was acknowledged: confirm it without waiting
        self._leaving = False
        self._join_delay = float(join_delay)
        self._joined_at: float | None = None  # the first acknowledged write's send time
        self._settled = False  # a range was confirmed once: joining is over
        self._instance = instance
        self._acked_at: float | None = None  # when the first write's success was received
        # The own Lease as last seen written by another process: (record, first seen at).
        self._other: tuple[MemberRecord, float] | None = None
        self._twin: str | None = None  # the other live process's instance, once found
        self._lapses = 0

    def __repr__(self) -> str:
        ranges = {str(r.start): s.name for r, s in self._ranges.items()}
        return f"<ShardMember {self.identity} {self._state.name} {ranges}>"

    # -- reading --------------------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        """The replica's standing."""
        return self._state

    @property
    def instance(self) -> str | None:
        """This process's instance id (written into the own Lease), if it has one."""
        return self._instance

    @property
    def duplicate(self) -> bool:
        """True once another live process was found writing the own Lease (identity)."""
        return self._state is MemberState.DUPLICATE

    @property
    def twin(self) -> str | None:
        """The instance id of the other process found running with this identity."""
        return self._twin

    @property
    def lapses(self) -> int:
        """How many times the own lease passed its renew deadline (LOST): a caller that
        gains a range after a lapse must not trust caches from before it (see
        :class:`~kubemoon_core.sharding.FreshnessBarrier`)."""
        return self._lapses

    @property
    def leaving(self) -> bool:
        """True once :meth:`leave` was called (write it into the Lease)."""
        return self._leaving

    @property
    def valid_until(self) -> float | None:
        """The local time the own lease stops being valid (its renew deadline), if it is."""
        if self._state in (MemberState.MEMBER, MemberState.LEAVING):
            return self._valid_until
        return None

    def write_deadline(self, now: float, shard_hash: int | None = None) -> float | None:
        """The local time writes on behalf of this replica's ranges must stop (its renew
        deadline), or None when it may not write at ``now``: its lease is not valid, or
        ``shard_hash`` (an object's hash) lies in no range whose work may run (active or
        stopping). A pure query: it changes nothing (call :meth:`tick` to act on expiry)."""
        if self._state not in (MemberState.MEMBER, MemberState.LEAVING):
            return None
        if not now < self._valid_until:
            return None
        if shard_hash is not None and not any(
            r.contains_hash(shard_hash)
            for r, s in self._ranges.items()
            if s in (RangeState.ACTIVE, RangeState.STOPPING)
        ):
            return None
        return self._valid_until

    def may_write(self, now: float, shard_hash: int | None = None) -> bool:
        """Whether work of this replica (of the object hashing to ``shard_hash``) may write
        at ``now``; see :meth:`write_deadline`."""
        return self.write_deadline(now, shard_hash) is not None

    def ranges(self) -> Mapping[ShardRange, RangeState]:
        """Every range of this replica and its state."""
        return MappingProxyType(dict(self._ranges))

    def active(self, now: float) -> tuple[ShardRange, ...]:
        """The ranges that may be worked on at ``now`` (sorted)."""
        self.tick(now)
        return _sorted(r for r, s in self._ranges.items() if s is RangeState.ACTIVE)

    def working(self, now: float) -> tuple[ShardRange, ...]:
        """Ranges whose work may still run: active and stopping ones (sorted)."""
        self.tick(now)
        return _sorted(
            r for r, s in self._ranges.items() if s in (RangeState.ACTIVE, RangeState.STOPPING)
        )

    def stopping(self) -> tuple[ShardRange, ...]:
        """Ranges whose work must stop, then be confirmed with :meth:`stopped`."""
        return _sorted(r for r, s in self._ranges.items() if s is RangeState.STOPPING)

    def assignment(self) -> Mapping[str, ShardRange]:
        """The assignment computed from the last read."""
        return MappingProxyType(dict(self._assignment))

    def next_deadline(self) -> float | None:
        """The earliest time something is due: the renew deadline, a write or a read."""
        if self._state in (MemberState.LEFT, MemberState.DUPLICATE):
            return None
        times = []
        if self._writing is None:
            times.append(self._write_at())
        if self._reading is None:
            times.append(self._last_read if self._read_soon else self._last_read + self._retry)
        if self._state in (MemberState.MEMBER, MemberState.LEAVING):
            times.append(self._valid_until)
        return min(times) if times else None

    # -- time -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Apply the renew deadline: past it, every range stops and claims need confirming."""
        if self._state in (MemberState.MEMBER, MemberState.LEAVING) and now >= self._valid_until:
            self._move(MemberInput.EXPIRED)
            self._lapses += 1
            for r in list(self._ranges):
                self._range(r, RangeInput.LOST)
            self._confirm_after.clear()

    def _move(self, event: MemberInput) -> None:
        target = _MEMBER_TABLE.step(self._state, event).target
        assert target is not None  # the replica's standing never ends
        self._state = target

    def _range(self, r: ShardRange, event: RangeInput) -> None:
        target = _RANGE_TABLE.step(self._ranges[r], event).target
        if target is None:
            del self._ranges[r]
            self._confirm_after.pop(r, None)
            self._dirty = True
        else:
            self._ranges[r] = target

    # -- writes ---------------------------------------------------------------------------

    def write_due(self, now: float) -> tuple[ShardRange, ...] | None:
        """The claims to write into the own Lease now, or None (one write at a time)."""
        self.tick(now)
        if self._writing is not None or self._state in (MemberState.LEFT, MemberState.DUPLICATE):
            return None
        if now < self._write_at():
            return None
        claims = _sorted(self._ranges)
        self._writing = (now, claims)
        self._last_write = now
        return claims

    def _write_at(self) -> float:
        if self._dirty and not self._failed:
            return self._last_write
        return self._last_write + self._retry

    def write_finished(self, now: float, ok: bool) -> None:
        """The outcome of the write :meth:`write_due` asked for."""
        if self._writing is None:
            raise LocalProtocolError("write_finished() without a write in flight")
        sent, claims = self._writing
        self._writing = None
        self.tick(now)
        self._failed = not ok
        if not ok or self._state is MemberState.DUPLICATE:
            self._dirty = True
            return
        self._valid_until = sent + self._deadline
        if self._joined_at is None:
            self._joined_at = sent
        if self._acked_at is None:
            self._acked_at = now
        if now >= self._valid_until:
            return
        self._move(MemberInput.WRITTEN_LEAVING if self._leaving else MemberInput.WRITTEN)
        if _sorted(self._ranges) == claims:
            self._dirty = False
        for r in claims:
            if self._ranges.get(r) is RangeState.CLAIMING and r not in self._confirm_after:
                self._confirm_after[r] = now
                self._read_soon = True
        if self._leaving and not claims:
            self._move(MemberInput.RELEASED)

    # -- reads ----------------------------------------------------------------------------

    def read_due(self, now: float) -> bool:
        """Whether to LIST the group's Leases now."""
        due = self._last_read if self._read_soon else self._last_read + self._retry
        done = self._state in (MemberState.LEFT, MemberState.DUPLICATE)
        return self._reading is None and not done and now >= due

    def read_started(self, now: float) -> None:
        """A consistent LIST of the group's Leases was sent at ``now``."""
        if self._reading is not None:
            raise LocalProtocolError("read_started() while a read is in flight")
        self._reading = now
        self._last_read = now
        self._read_soon = False

    def read_failed(self, now: float) -> None:
        """The LIST failed."""
        if self._reading is None:
            raise LocalProtocolError("read_failed() without a read in flight")
        self._reading = None
        self.tick(now)

    def observe(self, records: Iterable[MemberRecord], now: float) -> None:
        """The records the LIST sent by :meth:`read_started` returned, received at ``now``."""
        if self._reading is None:
            raise LocalProtocolError("observe() without a read in flight")
        sent, self._reading = self._reading, None
        current: dict[str, MemberRecord] = {}
        own: list[MemberRecord] = []
        for record in records:
            if not isinstance(record, MemberRecord):
                raise LocalProtocolError(f"observe() takes MemberRecord values, got {record!r}")
            if record.identity == self.identity:
                own.append(record)
                continue
            # Two Leases naming one holder (a copy someone wrote) must not hide a claim:
            # merge them, claims united, changed when either changes.
            twin = current.get(record.identity)
            current[record.identity] = (
                record
                if twin is None
                else MemberRecord(
                    record.identity,
                    f"{twin.version},{record.version}",
                    twin.claims + record.claims,
                    twin.leaving and record.leaving,
                )
            )
        seen: dict[str, _Seen] = {}
        for identity, record in current.items():
            old = self._seen.get(identity)
            if old is not None and old.version == record.version:
                seen[identity] = _Seen(old.version, old.since, record)
            else:
                seen[identity] = _Seen(record.version, now, record)
        self._seen = seen
        self.tick(now)
        for record in own:
            # A read sent after this process's write was acknowledged reflects it: the
            # own Lease naming another instance then means a second live process.
            self._check_own(
                record, now, written=self._acked_at is not None and sent >= self._acked_at
            )
        if self._state is MemberState.DUPLICATE:
            return
        # Live records as of the read's send time (earlier is the cautious side).
        live = [s.record for s in seen.values() if sent - s.since < self._duration]
        members = [r.identity for r in live if not r.leaving]
        if self._state is not MemberState.LOST and not self._leaving:
            members.append(self.identity)
        previous, self._assignment = self._assignment, assign_ranges(members)
        self._reassign()
        if self._state is not MemberState.MEMBER:
            return
        if not self._settled and (
            self._joined_at is None
            or sent < self._joined_at + self._join_delay
            or (self._join_delay and previous != self._assignment)
        ):
            return  # still joining: the membership may not have settled yet
        for r, state in list(self._ranges.items()):
            if state is not RangeState.CLAIMING:
                continue
            acked = self._confirm_after.get(r)
            if acked is None or sent < acked:
                continue  # this read may predate the claim
            if any(_overlap(r, c) for other in live for c in other.claims):
                continue
            self._range(r, RangeInput.CONFIRMED)
            self._settled = True

    def observe_own(self, record: MemberRecord | None, now: float) -> bool:
        """The own Lease as read (received at ``now``) before the write in flight
        overwrites it; None when it could not be decoded. True when it may be overwritten
        now: it names this instance or none, or it is an earlier process's that expired
        or was left with no claims. False otherwise: then fail the write
        (:meth:`write_finished` with ``ok=False``); check :attr:`duplicate`."""
        if self._writing is None:
            raise LocalProtocolError("observe_own() without a write in flight")
        if record is not None and not isinstance(record, MemberRecord):
            raise LocalProtocolError(f"observe_own() takes a MemberRecord, got {record!r}")
        if record is None or self._state is MemberState.DUPLICATE:
            return self._state is not MemberState.DUPLICATE
        if record.identity != self.identity:
            raise LocalProtocolError(
                f"observe_own() takes the Lease of {self.identity!r}, not of {record.identity!r}"
            )
        return self._check_own(record, now, written=self._acked_at is not None)

    def _check_own(self, record: MemberRecord, now: float, *, written: bool) -> bool:
        """Whether the own Lease ``record`` may be written over; DUPLICATE when it shows a
        second live process (``written``: this process's write preceded the read)."""
        if self._instance is None or not record.instance or record.instance == self._instance:
            return True
        other = self._other
        renewed = (
            other is not None
            and other[0].instance == record.instance
            and other[0].version != record.version
        )
        if written or renewed:
            self._twin = record.instance
            self._move(MemberInput.DUPLICATE)
            for r in list(self._ranges):
                self._range(r, RangeInput.DUPLICATE)
            self._confirm_after.clear()
            self._assignment = {}
            return False
        if other is None or other[0] != record:
            self._other = other = (record, now)
        # An earlier process's Lease: taken once it expired or was left with no claims.
        return (record.leaving and not record.claims) or now - other[1] >= self._duration

    def _reassign(self) -> None:
        mine = self._assignment.get(self.identity)
        for r in list(self._ranges):
            if r != mine and self._ranges[r] is not RangeState.STOPPING:
                self._range(r, RangeInput.UNASSIGNED)
        if mine is not None and mine not in self._ranges and self._state is not MemberState.LEFT:
            self._ranges[mine] = RangeState.CLAIMING
            self._dirty = True

    # -- the caller's work ----------------------------------------------------------------

    def stopped(self, r: ShardRange, now: float) -> None:
        """The work of a STOPPING range has stopped: its claim may be released."""
        if self._ranges.get(r) is not RangeState.STOPPING:
            raise LocalProtocolError(f"stopped({r}) for a range that is not stopping")
        self._range(r, RangeInput.STOPPED)
        self.tick(now)

    def leave(self, now: float) -> None:
        """Leave the group: every range stops; once released, :attr:`state` is LEFT."""
        self._leaving = True
        self._move(MemberInput.LEAVE)
        if self._state is MemberState.DUPLICATE:
            return
        self._assignment = {}
        self._reassign()
        self._dirty = True
        self.tick(now)
