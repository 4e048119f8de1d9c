"""Shard membership (issue 25, item 2): a virtual-time simulation of replicas and a
linearizable Lease store, driven by Hypothesis.

Each replica runs :class:`ShardMember` on its own clock (rate within ``1 ± CLOCK_SKEW`` of
true time, any offset). The store applies a write at a random moment between its send and
its answer (or not at all, when the network drops it) and answers a read with a snapshot
taken between its send and its answer. Hypothesis draws the replicas, their clocks, the
delays and drops, and the churn: joins, graceful leaves, crashes, partitions, restarts
(a crashed replica's identity started again as a new process) and twins (a second live
process started with a running replica's identity, issue 31 defect 12). Writes are
conditional on the version last written, as the adapter's are: a create that finds the
Lease reads it and asks :meth:`ShardMember.observe_own` before writing over it.

Safety, checked at every step: no two processes work on overlapping ranges at the same
true time (a crashed replica works on nothing; twins count as two). Liveness: once churn,
drops and partitions stop and answers come within half a second, every hash is worked on
by exactly one process within a bounded time (four lease durations), and of twins one
stopped as a duplicate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubemoon_core._member_leases import MemberRecord
from kubemoon_core._membership import MemberState, RangeState, ShardMember, assign_ranges
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.sharding import HASH_SPACE, ShardRange

CLOCK_SKEW = 0.2
DT = 0.25
LEASE, RENEW, RETRY = 15.0, 10.0, 2.0


@dataclass
class Store:
    """A linearizable map identity -> record, versioned like resourceVersions."""

    records: dict[str, MemberRecord] = field(default_factory=dict)
    version: int = 0

    def write(
        self,
        identity: str,
        claims: tuple[ShardRange, ...],
        leaving: bool,
        instance: str,
        expected: str | None,
    ) -> str | None:
        """Create (``expected`` None) or replace at version ``expected``; the new version,
        or None for a conflict (it exists, or it changed)."""
        current = self.records.get(identity)
        if (current is None) != (expected is None):
            return None
        if current is not None and current.version != expected:
            return None
        self.version += 1
        version = str(self.version)
        self.records[identity] = MemberRecord(identity, version, claims, leaving, instance)
        return version

    def delete(self, identity: str) -> None:
        self.records.pop(identity, None)


@dataclass
class Replica:
    name: str
    member: ShardMember
    rate: float
    offset: float
    instance: str = ""
    rv: str | None = None  # the version of the Lease this process last wrote
    crashed: bool = False
    gone: bool = False
    partitioned_until: float = -1.0
    # (true time, action) pairs pending for this replica's I/O and its caller.
    pending: list[tuple[float, str, object]] = field(default_factory=list)
    stop_at: dict[ShardRange, float] = field(default_factory=dict)

    def local(self, t: float) -> float:
        return self.offset + self.rate * t


@dataclass(frozen=True)
class Churn:
    at: float
    kind: str  # join, leave, crash, partition
    length: float = 0.0


def _overlaps(a: ShardRange, b: ShardRange) -> bool:
    return a.start < b.end and b.start < a.end


class Sim:
    def __init__(self, rng: random.Random, drop: float, max_delay: float) -> None:
        self.rng = rng
        self.drop = drop
        self.max_delay = max_delay
        self.store = Store()
        self.replicas: list[Replica] = []
        self.count = 0
        self.calm_after = 0.0  # no drops, and short delays, after this true time
        self.now = 0.0

    def add(self, name: str | None = None) -> Replica:
        """A new process, with a new identity or (a restart, a twin) ``name``."""
        self.count += 1
        name = name or f"r{self.count:02d}"
        rate = self.rng.uniform(1 / (1 + CLOCK_SKEW), 1 + CLOCK_SKEW)
        instance = f"i{self.count:02d}"
        replica = Replica(
            name,
            ShardMember(
                name,
                lease_duration=LEASE,
                renew_deadline=RENEW,
                retry_period=RETRY,
                clock_skew=CLOCK_SKEW,
                join_delay=self.rng.choice([0.0, RETRY]),
                instance=instance,
            ),
            rate,
            self.rng.uniform(0, 1000),
            instance,
        )
        self.replicas.append(replica)
        return replica

    def _delay(self) -> float:
        # Once calm, the network is healthy too: answers within half a second.
        calm = self.now >= self.calm_after
        return self.rng.uniform(0, min(self.max_delay, 0.5) if calm else self.max_delay)

    def _lost(self, replica: Replica, t: float) -> bool:
        if t < replica.partitioned_until:
            return True
        return t < self.calm_after and self.rng.random() < self.drop

    def step(self, t: float) -> None:
        self.now = t
        for replica in self.replicas:
            if replica.crashed:
                # A crashed process does nothing, but what it sent may still land.
                for p in [p for p in replica.pending if p[0] <= t and p[1] == "apply"]:
                    self._apply(replica, p[2][:3], answer=None)  # type: ignore[index]
                replica.pending = [p for p in replica.pending if p[0] > t or p[1] != "apply"]
                continue
            if not replica.gone:
                self._drive(replica, t)

    def _apply(self, replica: Replica, payload: tuple[object, ...], answer: float | None) -> None:
        """A write reaches the store; its answer (when not lost) comes at ``answer``."""
        claims, leaving, expected = payload
        version = self.store.write(
            replica.name,
            claims,  # type: ignore[arg-type]
            leaving,  # type: ignore[arg-type]
            replica.instance,
            expected,  # type: ignore[arg-type]
        )
        if answer is None:
            return
        if version is not None:
            replica.pending.append((answer, "write-ok", version))
        elif expected is None:
            # The create found the Lease: the adapter reads it before writing over it.
            current = self.store.records.get(replica.name)
            replica.pending.append((answer, "write-get", (claims, leaving, current)))
        else:
            replica.pending.append((answer, "write-conflict", None))

    def _drive(self, replica: Replica, t: float) -> None:
        m, now = replica.member, replica.local(t)
        due = [p for p in replica.pending if p[0] <= t]
        replica.pending = [p for p in replica.pending if p[0] > t]
        for _, kind, payload in sorted(due, key=lambda p: p[0]):
            if kind == "apply":
                assert isinstance(payload, tuple)
                self._apply(replica, payload[:3], payload[3])
            elif kind == "write-ok":
                assert isinstance(payload, str)
                replica.rv = payload
                m.write_finished(now, True)
            elif kind == "write-get":
                assert isinstance(payload, tuple)
                claims, leaving, current = payload
                if current is None or m.observe_own(current, now):
                    expected = None if current is None else current.version
                    applied_at = t + self._delay()
                    answer = applied_at + self._delay()
                    replica.pending.append(
                        (applied_at, "apply", (claims, leaving, expected, answer))
                    )
                else:
                    m.write_finished(now, False)
            elif kind == "write-conflict":
                replica.rv = None  # changed by someone else: create (and read) next time
                m.write_finished(now, False)
            elif kind == "write-failed":
                m.write_finished(now, False)
            elif kind == "snapshot":
                replica.pending.append(
                    (t + self._delay(), "read-ok", tuple(self.store.records.values()))
                )
            elif kind == "read-ok":
                m.observe(payload, now)  # type: ignore[arg-type]
            elif kind == "read-failed":
                m.read_failed(now)
        m.tick(now)
        # The caller stops the work of stopping ranges after a short while.
        for r in m.stopping():
            at = replica.stop_at.setdefault(r, t + self.rng.uniform(0, 1.0))
            if t >= at:
                m.stopped(r, now)
                del replica.stop_at[r]
        if m.state is MemberState.LEFT:
            self.store.delete(replica.name)
            replica.gone = True
            return
        claims = m.write_due(now)
        if claims is not None:
            applied_at = t + self._delay()
            answer_at = applied_at + self._delay()
            write = (claims, m.leaving, replica.rv)
            if self._lost(replica, t):
                partitioned = t < replica.partitioned_until
                if not partitioned and self.rng.random() < 0.5:  # applied, answer lost
                    replica.pending.append((applied_at, "apply", (*write, None)))
                replica.pending.append((answer_at + 1.0, "write-failed", None))
            else:
                replica.pending.append((applied_at, "apply", (*write, answer_at)))
        if m.read_due(now):
            m.read_started(now)
            if self._lost(replica, t):
                replica.pending.append((t + self._delay() + 1.0, "read-failed", None))
            else:
                replica.pending.append((t + self._delay(), "snapshot", None))

    def check_safety(self, t: float) -> None:
        working = [
            (replica.instance, r)
            for replica in self.replicas
            if not (replica.crashed or replica.gone)
            for r in replica.member.working(replica.local(t))
        ]
        for i, (name_a, a) in enumerate(working):
            for name_b, b in working[i + 1 :]:
                assert name_a == name_b or not _overlaps(a, b), (
                    f"t={t:.1f}: processes {name_a} and {name_b} both work on {a} / {b}"
                )

    def coverage(self, t: float) -> int:
        covered = 0
        for replica in self.replicas:
            if replica.crashed or replica.gone:
                continue
            for r in replica.member.active(replica.local(t)):
                covered += r.size
        return covered


churn_event = st.builds(
    Churn,
    at=st.floats(min_value=0, max_value=60),
    kind=st.sampled_from(["join", "leave", "crash", "partition", "restart", "twin"]),
    length=st.floats(min_value=0.5, max_value=30),
)


@settings(max_examples=max(100, settings().max_examples), deadline=None)
@given(
    seed=st.integers(0, 2**32),
    initial=st.integers(1, 4),
    churn=st.lists(churn_event, max_size=6),
    drop=st.sampled_from([0.0, 0.1, 0.4]),
    max_delay=st.sampled_from([0.05, 0.5, 3.0]),
)
def test_no_two_replicas_work_on_one_hash_and_every_hash_is_owned_when_calm(
    seed: int, initial: int, churn: list[Churn], drop: float, max_delay: float
) -> None:
    rng = random.Random(seed)
    sim = Sim(rng, drop, max_delay)
    for _ in range(initial):
        sim.add()
    events = sorted(churn, key=lambda c: c.at)
    calm = max([c.at + c.length for c in events], default=0.0)
    sim.calm_after = calm
    end = calm + 4 * LEASE
    t = 0.0
    while t < end:
        while events and events[0].at <= t:
            event = events.pop(0)
            alive = [r for r in sim.replicas if not (r.crashed or r.gone)]
            if event.kind == "join" or not alive:
                sim.add()
                continue
            victim = rng.choice(alive)
            if event.kind == "leave":
                victim.member.leave(victim.local(t))
            elif event.kind == "crash":
                victim.crashed = True
            elif event.kind == "restart":  # the process dies; its identity starts again
                victim.crashed = True
                sim.add(victim.name)
            elif event.kind == "twin":  # a second live process with the same identity
                sim.add(victim.name)
            else:
                victim.partitioned_until = t + event.length
        sim.step(t)
        sim.check_safety(t)
        t += DT
    alive = [r for r in sim.replicas if not (r.crashed or r.gone) and not r.member.leaving]
    # Of the processes sharing an identity, all but one stopped as duplicates (for good:
    # all of them, when the one that went on has left or crashed since).
    for name in {r.name for r in alive}:
        twins = [r for r in alive if r.name == name]
        ended = [r for r in sim.replicas if r.name == name and all(r is not x for x in twins)]
        working = sum(not r.member.duplicate for r in twins)
        assert working == 1 or (ended and working == 0), [r.member for r in twins]
        for r in twins:
            if r.member.duplicate:
                assert r.member.twin in {o.instance for o in sim.replicas if o is not r}
    alive = [r for r in alive if not r.member.duplicate]
    if alive:
        assert sim.coverage(t) == HASH_SPACE, [r.member for r in alive]
        owners = assign_ranges(r.name for r in alive)
        for replica in alive:
            assert replica.member.active(replica.local(t)) == (owners[replica.name],)


def test_unsafe_timings_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="unsafe timings"):
        ShardMember("a", lease_duration=15, renew_deadline=10, clock_skew=0.25)
    with pytest.raises(LocalProtocolError, match="retry_period"):
        ShardMember("a", retry_period=10)
    with pytest.raises(LocalProtocolError, match="identity"):
        ShardMember("")


def test_a_claim_is_confirmed_only_by_a_read_sent_after_its_write_was_acknowledged() -> None:
    m = ShardMember("a")
    m.read_started(0.0)
    m.observe([], 0.1)
    whole = ShardRange(0, HASH_SPACE)
    assert m.ranges() == {whole: RangeState.CLAIMING}
    assert m.write_due(0.2) == (whole,)
    m.read_started(0.3)  # sent before the write's answer
    m.write_finished(0.4, True)
    m.observe([], 0.5)
    assert m.active(0.5) == ()
    m.read_started(0.6)
    m.observe([], 0.7)
    assert m.active(0.7) == (whole,)
    # Past the renew deadline of the write sent at 0.2, nothing is worked on.
    assert m.next_deadline() is not None
    assert m.active(10.2) == ()
    assert m.state is MemberState.LOST


def test_another_live_claim_blocks_and_an_expired_one_does_not() -> None:
    m = ShardMember("b")
    whole = ShardRange(0, HASH_SPACE)
    other = MemberRecord("a", "1", (ShardRange(0, 10),), leaving=True)
    m.read_started(0.0)
    m.observe([other], 0.0)  # "a" is leaving: no member, but its claim counts
    assert m.write_due(0.0) == (whole,)
    m.write_finished(0.1, True)
    m.read_started(0.2)
    m.observe([other], 0.2)
    assert m.active(0.2) == ()
    # Unchanged for the lease duration since first seen: expired, its claim is void.
    for at in (8.0, 14.0):
        assert m.write_due(at) == (whole,)
        m.write_finished(at + 0.1, True)
    m.read_started(15.1)
    m.observe([other], 15.2)
    assert m.active(15.2) == (whole,)


def _start(m: ShardMember, at: float) -> None:
    """The first write (no claims yet), acknowledged."""
    assert m.write_due(at) == ()
    m.write_finished(at + 0.1, True)


def test_a_joining_member_waits_for_the_join_delay_before_its_first_range() -> None:
    m = ShardMember("a", join_delay=2.0)
    _start(m, 0.0)
    whole = ShardRange(0, HASH_SPACE)
    m.read_started(0.2)
    m.observe([], 0.3)
    assert m.write_due(0.3) == (whole,)
    m.write_finished(0.4, True)
    m.read_started(0.5)
    m.observe([], 0.6)
    assert m.active(0.6) == ()  # confirmed but for the join delay
    assert m.ranges() == {whole: RangeState.CLAIMING}
    m.read_started(2.0)
    m.observe([], 2.1)
    assert m.active(2.1) == (whole,)


def test_a_joining_member_starts_only_once_the_membership_held_for_one_read() -> None:
    m = ShardMember("a", join_delay=2.0)
    _start(m, 0.0)
    m.read_started(0.2)
    m.observe([], 0.3)  # alone, so far: it claims the whole space
    assert m.write_due(0.3) == (ShardRange(0, HASH_SPACE),)
    m.write_finished(0.4, True)
    b = MemberRecord("b", "1")
    m.read_started(2.2)
    m.observe([b], 2.3)  # "b" started meanwhile: the whole space is not claimed first
    assert m.active(2.3) == ()
    half = assign_ranges(["a", "b"])["a"]
    assert m.write_due(2.3) == (half,)
    m.write_finished(2.4, True)
    m.read_started(2.5)
    m.observe([b], 2.6)  # the same membership as the read before: settled
    assert m.active(2.6) == (half,)
    # Settled once, later changes are confirmed on the first read that allows it.
    c = MemberRecord("c", "1")
    m.read_started(4.6)
    m.observe([b, c], 4.7)
    third = assign_ranges(["a", "b", "c"])["a"]
    assert m.ranges()[half] is RangeState.STOPPING
    m.stopped(half, 4.7)
    assert m.write_due(4.7) == (third,)
    m.write_finished(4.8, True)
    m.read_started(4.9)
    m.observe([b, c], 5.0)
    assert m.active(5.0) == (third,)


def test_a_negative_join_delay_is_refused() -> None:
    with pytest.raises(LocalProtocolError, match="join_delay"):
        ShardMember("a", join_delay=-1.0)
