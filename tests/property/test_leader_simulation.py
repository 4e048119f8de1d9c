"""Two or three LeaderElectors against one pure Lease model, on a discrete-event clock.

The model of the API server keeps one Lease with a resourceVersion: CREATE of an existing
lease is 409 AlreadyExists, an UPDATE whose resourceVersion is not the current one is 409
Conflict, an UPDATE of a missing lease is 404. The network delays each message by up to
``max_delay`` seconds and loses requests or responses with some probability; a lost message
is reported to its candidate ``TIMEOUT`` seconds after it was sent (the adapter's request
timeout). Each candidate reads its monotonic clock as ``offset + rate * t`` of the true time
``t``, with the rate within ``1 ± DRIFT``; its wall clock has its own offset.

Safety asserted: leadership windows (StartedLeading to StoppedLeading, or to a crash) of
different candidates never overlap at all. Why zero, not "a little": the old leader stops
``renew_deadline`` (10) local seconds after *sending* its last successful write, i.e. at
most ``10 / (1 - DRIFT)`` true seconds after that write reached the server; a new leader
must have seen that record unchanged for ``lease_duration`` (15) local seconds, i.e. at
least ``15 / (1 + DRIFT)`` true seconds after it was written. With DRIFT = 0.1 that is
11.1 s against 13.6 s, so the windows cannot meet. (Past DRIFT = 0.2 they can; a test
below shows the checker catches exactly that.)

Liveness asserted: after the leader crashes at ``T`` (and the network stops losing
messages), some live candidate starts leading by ``T + REPLACEMENT_BOUND``, where, in true
seconds, with ``rho = 1 / (1 - DRIFT)`` (the longest a local second can take),
``d = max_delay`` and ``P = 2.2 * retry_period * rho + 4 * d`` (one follower cycle: the
longest jittered wait, client-go's JitterFactor 1.2, plus a GET and a failed write):

    TIMEOUT            a follower may first wait out a message lost before the crash,
    + d                the crashed leader's last renew may still land after T,
    + P + d            the first poll that sees that last record (observed time starts),
    + 15 * rho         the lease runs out on the follower's own clock,
    + P                the next poll after that finds it expired,
    + 2 * d            and the taking UPDATE goes and comes back.

That is lease duration + two jittered retry periods + delays: the record a follower judges
may change just after one of its polls, and expiry is only noticed at a poll.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import Request, Response
from kubemoon_core._leader import LeaderElector, StartedLeading, StoppedLeading
from kubemoon_testing import json_response

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/sim"
COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
EPOCH = datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC)
DRIFT = 0.1
MAX_DELAY = 0.5
TIMEOUT = 1.0
LEASE, RETRY = 15.0, 2.0
RHO = 1 / (1 - DRIFT)
CYCLE = 2.2 * RETRY * RHO + 4 * MAX_DELAY
REPLACEMENT_BOUND = TIMEOUT + MAX_DELAY + CYCLE + MAX_DELAY + LEASE * RHO + CYCLE + 2 * MAX_DELAY


def status(code: int, reason: str) -> Response:
    return json_response(code, {"kind": "Status", "code": code, "reason": reason})


@dataclass
class LeaseServer:
    """The API server's view of one Lease: optimistic concurrency by resourceVersion."""

    lease: dict[str, Any] | None = None
    version: int = 0

    def handle(self, request: Request) -> Response:
        if request.method == "GET":
            assert request.path == LEASE_PATH
            return json_response(200, self.lease) if self.lease else status(404, "NotFound")
        document = json.loads(request.body)
        if request.method == "POST":
            assert request.path == COLLECTION
            if self.lease is not None:
                return status(409, "AlreadyExists")
            return json_response(201, self.store(document))
        assert request.method == "PUT"
        assert request.path == LEASE_PATH
        if self.lease is None:
            return status(404, "NotFound")
        if document["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            return status(409, "Conflict")
        return json_response(200, self.store(document))

    def store(self, document: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        document["metadata"]["resourceVersion"] = str(self.version)
        self.lease = document
        return document


@dataclass
class Candidate:
    """One process: an elector, its clocks, its leadership windows."""

    name: str
    elector: LeaderElector
    offset: float
    rate: float
    wall_offset: float
    alive: bool = True
    partitioned: bool = False  # every message it sends is lost
    token: int = 0  # the wake-up that counts; older ones are stale
    windows: list[list[float]] = field(default_factory=list)  # [start, end] in true time

    def local(self, t: float) -> float:
        return self.offset + self.rate * t

    def wall(self, t: float) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=t + self.wall_offset)

    @property
    def leading(self) -> bool:
        return bool(self.windows) and self.windows[-1][1] == float("inf")


class Simulation:
    """A discrete-event run of several candidates, one server and a lossy network."""

    def __init__(
        self,
        clocks: list[tuple[float, float, float]],
        *,
        seed: int,
        loss: float,
        max_delay: float = MAX_DELAY,
        lose: Callable[[Candidate, float], bool] | None = None,
        renew_deadline: float = 10.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.server = LeaseServer()
        self.loss, self.max_delay, self.lose = loss, max_delay, lose
        # Like lose, for the response: the server acts on the request, the answer is lost.
        self.lose_response: Callable[[Candidate, float], bool] | None = None
        self.lossy_until = float("inf")
        self.time = 0.0
        self.events: list[tuple[float, int, str, int, Any]] = []
        self.sequence = itertools.count()
        self.candidates = [
            Candidate(
                f"c{i}",
                LeaderElector(
                    name="sim",
                    namespace="kube-system",
                    identity=f"c{i}",
                    rng=random.Random(seed + i + 1),
                    lease_duration=LEASE,
                    renew_deadline=renew_deadline,
                    retry_period=RETRY,
                ),
                offset,
                rate,
                wall_offset,
            )
            for i, (offset, rate, wall_offset) in enumerate(clocks)
        ]
        for i in range(len(self.candidates)):
            self.schedule(0.0, "wake", i, 0)

    def schedule(self, t: float, kind: str, who: int, payload: Any = None) -> None:
        heapq.heappush(self.events, (t, next(self.sequence), kind, who, payload))

    def record(self, c: Candidate, events: list[Any], t: float) -> None:
        for event in events:
            if isinstance(event, StartedLeading):
                assert not c.leading
                c.windows.append([t, float("inf")])
            elif isinstance(event, StoppedLeading):
                assert c.leading
                c.windows[-1][1] = t

    def drive(self, c: Candidate, t: float) -> None:
        """Let a candidate act at true time t: deadlines, then its next request."""
        self.record(c, c.elector.tick(c.local(t)), t)
        request = c.elector.next_request(c.local(t), c.wall(t))
        if request is not None:
            self.send(c, request, t)
        deadline = c.elector.next_deadline()
        c.token += 1
        if deadline is not None:
            wake = max(t, (deadline - c.offset) / c.rate) + 1e-9
            self.schedule(wake, "wake", self.candidates.index(c), c.token)

    def send(self, c: Candidate, request: Request, t: float) -> None:
        who = self.candidates.index(c)
        lossy = t < self.lossy_until
        forced = c.partitioned or (self.lose is not None and self.lose(c, t))
        lost_request = forced or (lossy and self.rng.random() < self.loss)
        lost_response = (lossy and self.rng.random() < self.loss) or (
            self.lose_response is not None and self.lose_response(c, t)
        )
        if lost_request:
            self.schedule(t + TIMEOUT, "failed", who)
            return
        arrive = t + self.rng.uniform(0, self.max_delay)
        self.schedule(arrive, "arrive", who, (request, lost_response, t))

    def run(self, until: float, *, crash_at: float | None = None) -> Candidate | None:
        """Run to ``until``; at ``crash_at`` kill whoever leads and stop losing messages."""
        crashed: Candidate | None = None
        if crash_at is not None:
            self.schedule(crash_at, "crash", -1)
        while self.events and self.events[0][0] <= until:
            t, _, kind, who, payload = heapq.heappop(self.events)
            if kind == "crash":
                self.lossy_until = t
                for c in self.candidates:
                    if c.leading:
                        c.alive, c.windows[-1][1], crashed = False, t, c
                continue
            if kind in ("partition", "heal"):
                for c in self.candidates:
                    c.partitioned = kind == "partition" and c.leading
                continue
            c = self.candidates[who]
            if kind == "arrive":  # the server acts even for a crashed sender
                request, lost_response, sent = payload
                response = self.server.handle(request)
                if lost_response:
                    self.schedule(sent + TIMEOUT, "failed", who)
                else:
                    self.schedule(
                        t + self.rng.uniform(0, self.max_delay), "response", who, response
                    )
                continue
            if not c.alive:
                continue
            if kind == "wake":
                if payload == c.token:
                    self.drive(c, t)
            elif kind == "response":
                self.record(c, c.elector.receive_response(payload, c.local(t)), t)
                self.drive(c, t)
            elif kind == "failed":
                self.record(c, c.elector.request_failed(c.local(t)), t)
                self.drive(c, t)
            else:
                assert kind == "release"
                self.record(c, c.elector.release(c.local(t)), t)
                self.drive(c, t)
        self.time = until
        return crashed

    def windows(self) -> list[tuple[float, float, str]]:
        """Every leadership window; one still open ends at the time run so far."""
        return sorted(
            (start, min(end, self.time), c.name)
            for c in self.candidates
            for start, end in c.windows
        )

    def overlap(self) -> float:
        """The longest time two different candidates both believed they led."""
        worst = 0.0
        spans = self.windows()
        for i, (start, end, name) in enumerate(spans):
            for other_start, other_end, other in spans[i + 1 :]:
                if other != name:
                    worst = max(worst, min(end, other_end) - max(start, other_start))
        return worst


clock = st.tuples(
    st.floats(-1e4, 1e4),  # monotonic clock offset
    st.floats(1 - DRIFT, 1 + DRIFT),  # monotonic clock rate
    st.floats(-3600, 3600),  # wall clock offset (only written, never read)
)


@given(
    clocks=st.lists(clock, min_size=2, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    loss=st.sampled_from([0.0, 0.05, 0.2]) | st.floats(0.0, 0.4),
    max_delay=st.sampled_from([0.0, MAX_DELAY]) | st.floats(0.0, MAX_DELAY),
    crash_at=st.floats(20.0, 90.0),
    release=st.none() | st.tuples(st.integers(0, 2), st.floats(5.0, 80.0)),
)
def test_leadership_never_overlaps_and_a_crashed_leader_is_replaced(
    *,
    clocks: list[tuple[float, float, float]],
    seed: int,
    loss: float,
    max_delay: float,
    crash_at: float,
    release: tuple[int, float] | None,
) -> None:
    sim = Simulation(clocks, seed=seed, loss=loss, max_delay=max_delay)
    campaigning = set(range(len(clocks)))
    if release is not None and len(clocks) == 3 and release[1] < crash_at:
        # A graceful shutdown of one candidate (leader or not) before the crash.
        sim.schedule(release[1], "release", release[0])
        campaigning.discard(release[0])
    end = crash_at + REPLACEMENT_BOUND + 1.0
    crashed = sim.run(end, crash_at=crash_at)
    assert sim.overlap() <= 0.0, sim.windows()
    successors = [
        start
        for i in campaigning
        for start, _ in sim.candidates[i].windows
        if sim.candidates[i] is not crashed and start >= crash_at
    ]
    assert successors, f"nobody led after the crash at {crash_at}: {sim.windows()}"
    assert min(successors) <= crash_at + REPLACEMENT_BOUND


@given(
    clocks=st.lists(clock, min_size=2, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    max_delay=st.sampled_from([0.0, MAX_DELAY]) | st.floats(0.0, MAX_DELAY),
    partition_at=st.floats(5.0, 60.0),
    heal_after=st.sampled_from([REPLACEMENT_BOUND]) | st.floats(0.0, 60.0),
)
def test_a_partitioned_leader_steps_down_before_a_successor_starts(
    *,
    clocks: list[tuple[float, float, float]],
    seed: int,
    max_delay: float,
    partition_at: float,
    heal_after: float,
) -> None:
    """Unlike a crashed one, a cut-off leader lives on and believes it leads until its
    renew deadline: the closest the windows can come. After the partition heals, the old
    leader follows the new one."""
    sim = Simulation(clocks, seed=seed, loss=0.0, max_delay=max_delay)
    sim.schedule(partition_at, "partition", -1)
    sim.schedule(partition_at + heal_after, "heal", -1)
    sim.run(partition_at + heal_after + REPLACEMENT_BOUND + 30.0)
    assert sim.overlap() <= 0.0, sim.windows()
    if heal_after >= REPLACEMENT_BOUND:  # cut off that long, the old leader must be replaced
        starts = [start for start, _, _ in sim.windows() if start >= partition_at]
        assert starts, sim.windows()
        assert min(starts) <= partition_at + REPLACEMENT_BOUND
    leading = [c.name for c in sim.candidates if c.leading]
    assert len(leading) == 1  # one leader once the network is whole again
    lease = sim.server.lease
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == leading[0]


@given(
    clocks=st.lists(clock, min_size=2, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    loss=st.floats(0.0, 0.4),
)
def test_leadership_never_overlaps_on_a_lossy_network(
    clocks: list[tuple[float, float, float]], seed: int, loss: float
) -> None:
    sim = Simulation(clocks, seed=seed, loss=loss)
    sim.run(200.0)
    assert sim.overlap() <= 0.0, sim.windows()


def test_a_stable_network_elects_exactly_one_leader_for_good() -> None:
    sim = Simulation([(0.0, 1.0, 0.0), (500.0, 1.05, 9.0), (-7.0, 0.95, -4.0)], seed=1, loss=0)
    sim.run(300.0)
    assert len(sim.windows()) == 1
    start, end, _ = sim.windows()[0]
    assert start < 1.0  # the first GET finds no lease and the CREATE wins at once
    assert end == 300.0
    lease = sim.server.lease
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] == 0


def test_a_released_lease_is_taken_over_without_waiting_for_expiry() -> None:
    sim = Simulation([(0.0, 1.0, 0.0), (0.0, 1.0, 0.0)], seed=3, loss=0)
    sim.run(30.0)
    leader = next(i for i, c in enumerate(sim.candidates) if c.leading)
    sim.schedule(30.0, "release", leader)
    sim.run(60.0)
    other = sim.candidates[1 - leader]
    assert sim.candidates[leader].windows[-1][1] == 30.0
    assert other.windows
    # The follower takes the released lease at its next poll: well before 15 s expiry.
    assert other.windows[0][0] <= 30.0 + 2.2 * RETRY + 2 * MAX_DELAY
    assert sim.overlap() <= 0.0


@pytest.mark.parametrize("lost", ["request", "response"])
def test_a_release_asked_during_a_lost_renew_is_still_written(lost: str) -> None:
    """The leader's renew is lost (before the server, or after it applied the write) and
    release() is asked while it is in flight: once the renew times out the release is
    still written, so the follower need not wait out the 15 s lease."""
    sim = Simulation([(0.0, 1.0, 0.0), (0.0, 1.0, 0.0)], seed=3, loss=0)
    sim.run(30.0)
    leader = next(i for i, c in enumerate(sim.candidates) if c.leading)
    sent: list[float] = []

    def lose_first_renew_after_30(c: Candidate, t: float) -> bool:
        if c is sim.candidates[leader] and t >= 30.0 and not sent:
            sent.append(t)
            sim.schedule(t + 0.1, "release", leader)
            return True
        return False

    if lost == "request":
        sim.lose = lose_first_renew_after_30
    else:
        sim.lose_response = lose_first_renew_after_30
    sim.run(60.0)
    renew = sent[0]
    other = sim.candidates[1 - leader]
    assert sim.candidates[leader].windows[-1][1] == renew + 0.1
    lease = sim.server.lease
    assert lease is not None
    assert other.windows
    # The renew times out, one GET and the release go and come back, and the follower takes
    # the lease at its next poll: far sooner than the 15 s the lease would take to expire.
    released = renew + TIMEOUT + 4 * MAX_DELAY
    assert other.windows[0][0] <= released + 2.2 * RETRY + 2 * MAX_DELAY < renew + LEASE
    assert lease["spec"]["holderIdentity"] == other.name
    assert sim.overlap() <= 0.0


def test_the_checker_sees_overlap_when_clocks_drift_past_the_bound() -> None:
    """Not vacuous: a leader whose clock runs at half speed, cut off from the server,
    believes it leads for 20 true seconds after its last renew, longer than the lease."""
    overlaps = []
    for seed in range(20):
        sim = Simulation(
            [(0.0, 0.5, 0.0), (0.0, 1.0, 0.0)],
            seed=seed,
            loss=0.0,
            lose=lambda c, t: c.name == "c0" and t >= 20.0,
        )
        sim.run(80.0)
        if sim.candidates[0].windows and sim.candidates[1].windows:
            overlaps.append(sim.overlap())
    assert overlaps
    assert max(overlaps) > 0.0
