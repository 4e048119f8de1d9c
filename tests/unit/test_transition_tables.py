"""Transitions as data (issue 33): each machine's table is complete and the only way it moves.

Every move a machine makes goes through its table's ``step``; the tests below record those
steps while random and scripted drives run, and check that

- the machine never changes its state except along a chain of recorded table edges (no
  move outside the table), and never asks the table for a pair it lacks (an AssertionError
  would end the drive), so the table is complete for every (state, input) reached;
- every edge of the table is taken by some drive (no edge is dead data).
"""

from __future__ import annotations

import enum
import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from kubemoon_core import ApiError, Response
from kubemoon_core.errors import DecodeError
from kubemoon_core.lowlevel import (
    Discovery,
    DiscoveryInput,
    DiscoveryState,
    LeaderElector,
    LeaderInput,
    LeaderState,
    Reflector,
    ReflectorInput,
    ReflectorState,
    RelistReason,
    Transition,
    TransitionTable,
)
from kubemoon_core.sharding import (
    HASH_SPACE,
    MemberInput,
    MemberRecord,
    MemberState,
    RangeInput,
    RangeState,
    ShardMember,
    ShardRange,
)

Step = tuple[str, Any, Any]  # (machine, source state, input)


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[Step]:
    """Every ``TransitionTable.step`` call made while the test runs, in order."""
    taken: list[Step] = []
    original = TransitionTable.step

    def recording(self: TransitionTable[Any, Any], state: Any, event: Any) -> Any:
        taken.append((self.machine, state, event))
        return original(self, state, event)

    monkeypatch.setattr(TransitionTable, "step", recording)
    return taken


def _explained(
    table: TransitionTable[Any, Any], before: Any, after: Any, taken: list[Step]
) -> None:
    """``before`` became ``after`` along the table edges recorded for ``table``, or not at
    all."""
    state = before
    for machine, source, event in taken:
        if machine != table.machine:
            continue
        assert source is state, f"{table.machine} stepped from {source}, but was in {state}"
        state = table[(source, event)].target
    assert state is after, f"{table.machine} moved {before} -> {after} outside its table"


# -- the table itself --------------------------------------------------------------------


class _Light(enum.Enum):
    RED = "red"
    GREEN = "green"


class _Push(enum.Enum):
    GO = "go"
    STOP = "stop"


def test_a_table_is_a_read_only_mapping_that_names_a_missing_move() -> None:
    table = TransitionTable.from_targets(
        "Light",
        _Light.RED,
        _Push,
        {(_Light.RED, _Push.GO): _Light.GREEN, (_Light.GREEN, _Push.STOP): None},
        {(_Light.RED, _Push.GO): "honk"},
    )
    assert len(table) == 2 and list(table) == [(_Light.RED, _Push.GO), (_Light.GREEN, _Push.STOP)]
    assert table.states == (_Light.RED, _Light.GREEN) and table.inputs == (_Push.GO, _Push.STOP)
    assert table.initial is _Light.RED and table.machine == "Light"
    assert table.step(_Light.RED, _Push.GO) == Transition(
        _Light.RED, _Push.GO, _Light.GREEN, "honk"
    )
    with pytest.raises(AssertionError, match="Light: no transition from GREEN on GO"):
        table.step(_Light.GREEN, _Push.GO)
    with pytest.raises(TypeError):
        table[(_Light.RED, _Push.STOP)] = table[(_Light.RED, _Push.GO)]  # type: ignore[index]
    assert table.diagram() == (
        "stateDiagram-v2\n    [*] --> RED\n    RED --> GREEN: go / honk\n    GREEN --> [*]: stop\n"
    )
    assert repr(table) == "<TransitionTable Light: 2 transitions>"
    edge = Transition(_Light.RED, _Push.GO, _Light.GREEN)
    with pytest.raises(ValueError, match="two transitions from RED on GO"):
        TransitionTable("Light", _Light.RED, _Push, [edge, edge])


@pytest.mark.parametrize(
    ("get", "states", "inputs"),
    [
        (Reflector.transitions, ReflectorState, ReflectorInput),
        (LeaderElector.transitions, LeaderState, LeaderInput),
        (ShardMember.transitions, MemberState, MemberInput),
        (ShardMember.range_transitions, RangeState, RangeInput),
        (Discovery.transitions, DiscoveryState, DiscoveryInput),
    ],
)
def test_every_machine_publishes_its_table(
    get: Callable[[], TransitionTable[Any, Any]],
    states: type[enum.Enum],
    inputs: type[enum.Enum],
) -> None:
    table = get()
    assert isinstance(table, TransitionTable) and get() is table
    assert table.states == tuple(states) and table.inputs == tuple(inputs)
    # Every state is a source or reachable, every input labels an edge.
    reached = {table.initial} | {edge.target for edge in table.edges}
    assert set(table.states) <= reached | {source for source, _ in table}
    assert {event for _, event in table} == set(table.inputs)


def test_the_reflectors_edges_carry_the_actions_it_takes() -> None:
    """The reflector's table is drawn from the edges it moves by (``_EDGES``), actions
    included, so the diagram cannot drift from what it does; and the actions are whole:
    every move into a ``*_DUE`` state says when the next request is due, every relist
    goes to SYNC_DUE with a rule for its sync, every watch resume to WATCH_DUE."""
    from kubemoon_core._reflector_states import _DUE, _EDGES, _RELISTS, _Delay

    table = Reflector.transitions()
    assert list(table) == list(_EDGES)
    for key, edge in _EDGES.items():
        assert table[key].target is edge.target and table[key].action == edge.action
        assert (edge.delay is not _Delay.NONE) is (edge.target in _DUE), key
        if edge.relist is not None:
            assert edge.target is ReflectorState.SYNC_DUE and edge.relist in _RELISTS, key
        if edge.resume_watch:
            assert edge.target is ReflectorState.WATCH_DUE and edge.relist is None, key
    assert set(_RELISTS) == set(RelistReason)
    assert {edge.relist for edge in _EDGES.values()} - {None} == set(RelistReason)


def test_the_old_accessors_warn_and_still_work() -> None:
    with pytest.warns(DeprecationWarning, match=r"Reflector.transitions\(\)"):
        old = Reflector.TRANSITIONS
    assert {key: edge.target for key, edge in Reflector.transitions().items()} == dict(old)
    with pytest.warns(DeprecationWarning, match=r"transitions\(\).diagram\(\)"):
        assert Reflector.diagram() == Reflector.transitions().diagram()
    with pytest.warns(DeprecationWarning, match=r"ShardMember.range_transitions\(\)"):
        ranges = ShardMember.RANGE_TRANSITIONS
    assert dict(ranges) == {k: e.target for k, e in ShardMember.range_transitions().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ShardMember.transitions()


# -- membership ----------------------------------------------------------------------------

_PEERS = ("a", "c")


def _records(rng: random.Random, now: float) -> list[MemberRecord]:
    out = []
    for peer in _PEERS:
        if rng.random() < 0.4:
            version = str(rng.randrange(3))
            claims = (ShardRange(0, HASH_SPACE // 2),) if rng.random() < 0.05 else ()
            out.append(MemberRecord(peer, version, claims, leaving=rng.random() < 0.2))
    if rng.random() < 0.15:
        instance = rng.choice(["mine", "twin"])
        out.append(MemberRecord("b", str(rng.randrange(3)), (), instance=instance))
    return out


def _drive_member(seed: int, steps: list[Step], taken: set[Step]) -> None:
    rng = random.Random(seed)
    m = ShardMember("b", instance="mine", join_delay=rng.choice([0.0, 1.0]))
    now, writing, reading = 0.0, False, False
    for _ in range(120):
        now += 16.0 if rng.random() < 0.03 else rng.choice([0.0, 0.1, 0.3, 0.6, 1.0])
        before = m.state
        steps.clear()
        op = rng.randrange(9)
        if op in (0, 1) and not writing:
            writing = m.write_due(now) is not None
        elif op == 2 and writing:
            own = rng.choice([None, MemberRecord("b", "5", (), instance="twin")])
            m.observe_own(own, now)
        elif op in (3, 4) and writing:
            m.write_finished(now, rng.random() < 0.85)
            writing = False
        elif op == 5 and not reading and m.read_due(now):
            m.read_started(now)
            reading = True
        elif op == 6 and reading:
            if rng.random() < 0.9:
                m.observe(_records(rng, now), now)
            else:
                m.read_failed(now)
            reading = False
        elif op == 7:
            for r in m.stopping()[: rng.randrange(2)]:
                m.stopped(r, now)
            m.tick(now)
        elif op == 8 and rng.random() < 0.3:
            m.leave(now)
        _explained(ShardMember.transitions(), before, m.state, steps)
        taken.update(steps)


def test_membership_moves_only_along_its_tables_and_takes_every_edge(steps: list[Step]) -> None:
    taken: set[Step] = set()
    for seed in range(1500):
        _drive_member(seed, steps, taken)
    for table in (ShardMember.transitions(), ShardMember.range_transitions()):
        used = {(source, event) for machine, source, event in taken if machine == table.machine}
        assert used == set(table), f"{table.machine}: never taken: {set(table) - used}"


# -- discovery -----------------------------------------------------------------------------

_CORE = {"kind": "APIVersions", "versions": ["v1"]}
_GROUPS = {
    "kind": "APIGroupList",
    "groups": [
        {
            "name": "apps",
            "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
        }
    ],
}
_AGGREGATED = {"kind": "APIGroupDiscoveryList", "items": []}


def _resources(group_version: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "groupVersion": group_version, "resources": []}


def _answer(path: str, plan: dict[str, Any]) -> Response:
    import json

    body = plan.get(path)
    if isinstance(body, int):
        return Response(body, (), b'{"kind":"Status","code":%d}' % body)
    if body == "garbage":
        return Response(200, (), b'{"kind": "APIResourceList", "resources": 5}')
    return Response(200, (), json.dumps(body).encode())


_PLANS: list[dict[str, Any]] = [
    {"/api": _AGGREGATED, "/apis": _AGGREGATED},
    {"/api": _CORE, "/apis": _GROUPS, "/api/v1": _resources("v1"), "/apis/apps/v1": 503},
    {"/api": _CORE, "/apis": _GROUPS, "/api/v1": "garbage", "/apis/apps/v1": 503},
    {"/api": 500, "/apis": _AGGREGATED},
    {"/api": "garbage", "/apis": _AGGREGATED},
]


def _running(walk: Discovery) -> bool:
    return walk.state is DiscoveryState.RUNNING


@pytest.mark.parametrize("reverse", [False, True])
def test_discovery_moves_only_along_its_table_and_takes_every_edge(
    steps: list[Step], reverse: bool
) -> None:
    taken: set[Step] = set()
    for plan in _PLANS:
        walk = Discovery()
        while _running(walk):
            requests = walk.next_requests()
            for request in reversed(requests) if reverse else requests:
                before = walk.state
                steps.clear()
                try:
                    walk.receive_response(request, _answer(request.path, plan))
                except (ApiError, DecodeError):
                    pass
                _explained(Discovery.transitions(), before, walk.state, steps)
                taken.update(steps)
                if not _running(walk):
                    break
    used = {(source, event) for _, source, event in taken}
    assert used == set(Discovery.transitions())


def test_a_discovery_state_cannot_be_assigned() -> None:
    walk = Discovery()
    with pytest.raises(AttributeError):
        setattr(walk, "state", DiscoveryState.DONE)  # noqa: B010 - a read-only property
    assert len(walk.next_requests()) == 2  # still running: /api and /apis
