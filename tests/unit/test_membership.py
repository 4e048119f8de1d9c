"""Shard membership (issue 25, item 2): the Lease codec, the assignment and the rules of
:class:`ShardMember` one at a time (the simulation is in tests/property)."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core.errors import DecodeError, LocalProtocolError
from kubemoon_core.sharding import (
    CLAIMS_ANNOTATION,
    GROUP_LABEL,
    HASH_SPACE,
    LEAVING_ANNOTATION,
    MemberRecord,
    MemberState,
    RangeInput,
    RangeState,
    ShardMember,
    ShardRange,
    assign_ranges,
    decode_claims,
    encode_claims,
    member_lease,
    member_record_from_lease,
)

WHOLE = ShardRange(0, HASH_SPACE)


def lease(holder: Any = "a", rv: Any = "7", **annotations: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "g-a", "resourceVersion": rv, "annotations": annotations},
        "spec": {"holderIdentity": holder},
    }


def test_assignment_is_an_equal_split_by_sorted_identity() -> None:
    got = assign_ranges(["c", "a", "b", "a"])
    assert list(got) == ["a", "b", "c"]
    assert got["a"].start == 0 and got["c"].end == HASH_SPACE
    assert got["a"].end == got["b"].start and got["b"].end == got["c"].start
    assert assign_ranges([]) == {}


def test_claims_round_trip_and_bad_ones_are_decode_errors() -> None:
    claims = (ShardRange(0, 16), ShardRange(1 << 63, HASH_SPACE))
    assert decode_claims(encode_claims(claims)) == claims
    assert decode_claims("") == ()
    for bad in ["0-", "-5", "x-5", "5-3", "0-10000000000000001", "A-B", "1", "0-1,,"]:
        with pytest.raises(DecodeError, match=CLAIMS_ANNOTATION):
            decode_claims(bad)
    with pytest.raises(DecodeError, match="too long"):
        decode_claims("0-1," * 5000)
    with pytest.raises(DecodeError, match="more than"):
        decode_claims(",".join(["0-1"] * 257))
    with pytest.raises(DecodeError):
        decode_claims(5)  # type: ignore[arg-type]


def test_a_membership_lease_is_read_and_garbage_is_refused() -> None:
    record = member_record_from_lease(
        lease(**{CLAIMS_ANNOTATION: "0-10", LEAVING_ANNOTATION: "true"})
    )
    assert record == MemberRecord("a", "7", (ShardRange(0, 16),), leaving=True)
    assert member_record_from_lease(lease()).claims == ()
    for bad in [
        [],
        {"metadata": {}},
        lease(holder=""),
        lease(holder=3),
        lease(rv=None),
        {"metadata": {"resourceVersion": "1", "annotations": []}, "spec": {"holderIdentity": "a"}},
        lease(**{CLAIMS_ANNOTATION: "zz"}),
    ]:
        with pytest.raises(DecodeError):
            member_record_from_lease(bad)  # type: ignore[arg-type]


def join(m: ShardMember, now: float = 0.0, others: tuple[MemberRecord, ...] = ()) -> float:
    """Read, write the claim, read again: return the time after."""
    m.read_started(now)
    m.observe(others, now)
    assert m.write_due(now) is not None
    m.write_finished(now + 0.1, True)
    assert m.read_due(now + 0.2)
    m.read_started(now + 0.2)
    m.observe(others, now + 0.2)
    return now + 0.2


def test_a_new_member_makes_the_holder_stop_before_releasing() -> None:
    """The newcomer's half stays claimed by the holder until its work stopped."""
    m = ShardMember("a")
    t = join(m)
    assert m.active(t) == (WHOLE,)
    assert m.next_deadline() == pytest.approx(t + 1.8)  # the next renewal
    newcomer = MemberRecord("b", "1")
    m.read_started(t + 2)
    m.observe([newcomer], t + 2)
    half = ShardRange(0, HASH_SPACE // 2)
    assert m.ranges() == {WHOLE: RangeState.STOPPING, half: RangeState.CLAIMING}
    assert m.working(t + 2) == (WHOLE,)
    # The stopping range stays claimed until the caller says its work stopped.
    assert m.write_due(t + 2) == (half, WHOLE)
    m.write_finished(t + 2.1, True)
    m.read_started(t + 2.2)
    m.observe([newcomer], t + 2.2)
    # Its own stopping range does not block it (one replica never races itself).
    assert m.active(t + 2.2) == (half,)
    assert m.working(t + 2.2) == (half, WHOLE)
    with pytest.raises(LocalProtocolError, match="not stopping"):
        m.stopped(half, t + 2.3)
    m.stopped(WHOLE, t + 2.3)
    assert m.write_due(t + 2.3) == (half,)
    m.write_finished(t + 2.4, True)
    assert m.working(t + 2.5) == (half,)
    assert m.assignment()["b"] == ShardRange(HASH_SPACE // 2, HASH_SPACE)


def test_leaving_stops_everything_then_releases() -> None:
    m = ShardMember("a")
    t = join(m)
    m.leave(t)
    assert m.leaving and m.state is MemberState.LEAVING
    assert m.stopping() == (WHOLE,)
    m.stopped(WHOLE, t)
    assert m.write_due(t) == ()
    m.write_finished(t + 0.1, True)
    assert m.state is MemberState.LEFT
    assert m.write_due(t + 5) is None and not m.read_due(t + 5)
    assert m.next_deadline() is None


def test_misuse_is_a_local_protocol_error() -> None:
    m = ShardMember("a")
    with pytest.raises(LocalProtocolError):
        m.write_finished(0.0, True)
    with pytest.raises(LocalProtocolError):
        m.observe([], 0.0)
    with pytest.raises(LocalProtocolError):
        m.read_failed(0.0)
    m.read_started(0.0)
    with pytest.raises(LocalProtocolError):
        m.read_started(0.0)
    with pytest.raises(LocalProtocolError, match="MemberRecord"):
        m.observe(["b"], 0.0)  # type: ignore[list-item]
    with pytest.raises(LocalProtocolError):
        ShardMember("a", lease_duration=-1)
    assert set(ShardMember.range_transitions()) >= {(RangeState.ACTIVE, RangeInput.LOST)}


def test_a_failed_write_waits_a_retry_period_and_a_failed_read_is_retried() -> None:
    m = ShardMember("a")
    m.read_started(0.0)
    m.read_failed(0.5)
    assert not m.read_due(1.0) and m.read_due(2.0)
    m.read_started(2.0)
    m.observe([], 2.0)
    assert m.write_due(2.0) == (WHOLE,)
    m.write_finished(2.5, False)
    assert m.state is MemberState.JOINING
    assert m.write_due(3.0) is None
    assert m.next_deadline() == 4.0
    assert m.write_due(4.0) == (WHOLE,)


def test_a_member_lease_round_trips_and_bad_names_are_refused() -> None:
    import datetime

    when = datetime.datetime(2026, 12, 1, 13, 0, tzinfo=datetime.UTC)
    claims = (ShardRange(0, HASH_SPACE // 2),)
    lease_doc = member_lease(
        "g", "r1", claims, namespace="ns", wall_time=when, leaving=True, resource_version="9"
    )
    assert lease_doc["metadata"]["name"] == "g-r1"
    assert lease_doc["metadata"]["labels"] == {GROUP_LABEL: "g"}
    assert lease_doc["spec"]["renewTime"] == "2026-12-01T13:00:00.000000Z"
    assert lease_doc["spec"]["leaseDurationSeconds"] == 15
    assert member_record_from_lease(lease_doc) == MemberRecord("r1", "9", claims, leaving=True)
    with pytest.raises(LocalProtocolError, match="group"):
        member_lease("", "r1", (), namespace="ns", wall_time=when)
    with pytest.raises(LocalProtocolError, match="timezone"):
        member_lease("g", "r1", (), namespace="ns", wall_time=datetime.datetime(2026, 1, 1))


def test_a_second_lease_naming_a_holder_cannot_hide_its_claim() -> None:
    """An attacker's copy of member b's Lease, with no claims, listed after the real one."""
    m = ShardMember("a")
    real = MemberRecord("b", "5", (WHOLE,))
    forged = MemberRecord("b", "6", ())
    m.read_started(0.0)
    m.observe([real, forged], 0.0)
    m.write_due(0.0)
    m.write_finished(0.1, True)
    m.read_started(0.2)
    m.observe([real, forged], 0.2)
    assert m.active(0.2) == ()  # b's real claim still blocks


# --- duplicate identities (issue 31, defect 12) ----------------------------------------


def test_the_instance_goes_into_the_lease_and_is_read_back() -> None:
    import datetime

    when = datetime.datetime(2026, 12, 1, 13, 0, tzinfo=datetime.UTC)
    doc = member_lease("g", "a", (), namespace="ns", wall_time=when, instance="i1")
    assert doc["metadata"]["annotations"]["kubemoon.dev/holder-instance"] == "i1"
    doc["metadata"]["resourceVersion"] = "3"
    assert member_record_from_lease(doc) == MemberRecord("a", "3", instance="i1")
    # A value that is no instance of ours (not text, too long) reads as none.
    assert member_record_from_lease(lease(**{"kubemoon.dev/holder-instance": "x" * 257})) == (
        MemberRecord("a", "7")
    )
    for bad in ["", 5, "x" * 257]:
        with pytest.raises(LocalProtocolError, match="instance"):
            member_lease("g", "a", (), namespace="ns", wall_time=when, instance=bad)  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError, match="instance"):
            ShardMember("a", instance=bad)  # type: ignore[arg-type]


def test_the_own_lease_renewed_by_another_instance_stops_everything_for_good() -> None:
    """Two processes with one identity: the one that finds its Lease written by the other
    after its own write drops every range at once and never writes or reads again."""
    m = ShardMember("a", instance="mine")
    assert m.instance == "mine" and not m.duplicate and m.twin is None
    t = join(m, others=(MemberRecord("a", "1", (), instance="mine"),))
    assert m.active(t) == (WHOLE,) and m.may_write(t, 5)
    # A read sent after the acknowledged write shows the own Lease with another instance.
    m.read_started(t + 1)
    m.observe([MemberRecord("a", "9", (WHOLE,), instance="twin")], t + 1.1)
    assert m.state is MemberState.DUPLICATE and m.duplicate and m.twin == "twin"
    assert m.ranges() == {} and m.active(t + 1.2) == () and m.working(t + 1.2) == ()
    assert not m.may_write(t + 1.2) and m.write_deadline(t + 1.2, 5) is None
    assert m.valid_until is None and m.assignment() == {}
    # It does not fight: no write (not even a leaving one), no read, nothing due.
    assert m.write_due(t + 5) is None and not m.read_due(t + 5)
    assert m.next_deadline() is None
    m.leave(t + 6)
    m.tick(t + 60)
    assert m.state is MemberState.DUPLICATE and m.write_due(t + 60) is None


def test_a_write_that_finds_the_own_lease_taken_by_another_instance_is_a_duplicate() -> None:
    m = ShardMember("a", instance="mine")
    t = join(m)
    assert m.active(t) == (WHOLE,)
    # Its renew conflicted; the adapter read the Lease before writing again.
    assert m.write_due(t + 2) == (WHOLE,)
    assert m.observe_own(MemberRecord("a", "9", (), instance="twin"), t + 2.1) is False
    m.write_finished(t + 2.2, False)
    assert m.duplicate and m.twin == "twin" and m.active(t + 2.2) == ()
    assert m.write_due(t + 10) is None
    # A read in flight meanwhile changes nothing.
    m.read_started(t + 2.3)
    m.observe([MemberRecord("b", "1")], t + 2.4)
    assert m.duplicate and m.assignment() == {} and m.ranges() == {}
    with pytest.raises(LocalProtocolError, match="without a write"):
        m.observe_own(None, t + 3)


def test_an_earlier_processes_lease_is_taken_once_expired_or_left() -> None:
    """A restart finds its Lease written by the process before it: it waits until that
    Lease expired unless it was left with no claims; renewed meanwhile, it is a twin."""
    old = MemberRecord("a", "5", (WHOLE,), instance="old")
    m = ShardMember("a", instance="new")
    assert m.write_due(0.0) == ()
    assert m.observe_own(old, 0.1) is False and not m.duplicate
    m.write_finished(0.2, False)
    # A read sent before this process wrote its Lease shows the old one: not a twin.
    m.read_started(1.0)
    m.observe([old], 1.1)
    assert not m.duplicate and m.state is MemberState.JOINING
    assert m.write_due(2.2) is not None
    assert m.observe_own(old, 14.9) is False  # 14.8 s unchanged: not yet expired
    m.write_finished(15.0, False)
    assert m.write_due(17.0) is not None
    assert m.observe_own(old, 17.0) is True  # unchanged for lease_duration: taken
    m.write_finished(17.1, True)
    assert m.state is MemberState.MEMBER
    # Left with no claims (a graceful stop): taken at once.
    left = MemberRecord("a", "6", (), leaving=True, instance="old")
    m = ShardMember("a", instance="new")
    m.write_due(0.0)
    assert m.observe_own(left, 0.1) is True
    # The old Lease renewed while this one waits: another live process has the identity.
    m = ShardMember("a", instance="late")
    m.write_due(0.0)
    assert m.observe_own(old, 0.1) is False
    m.write_finished(0.2, False)
    m.write_due(3.0)
    assert m.observe_own(MemberRecord("a", "8", (WHOLE,), instance="old"), 3.1) is False
    assert m.duplicate and m.twin == "old"
    # Its own instance, none at all, or no instance of its own: the identity alone counts.
    for member, record in [
        (ShardMember("a", instance="new"), MemberRecord("a", "5", instance="new")),
        (ShardMember("a", instance="new"), MemberRecord("a", "5")),
        (ShardMember("a"), old),
    ]:
        member.write_due(0.0)
        assert member.observe_own(record, 0.1) is True
        assert member.observe_own(None, 0.1) is True  # an undecodable Lease: overwritten
    m = ShardMember("a", instance="new")
    m.write_due(0.0)
    with pytest.raises(LocalProtocolError, match="of 'a', not of 'b'"):
        m.observe_own(MemberRecord("b", "1"), 0.1)
    with pytest.raises(LocalProtocolError, match="MemberRecord"):
        m.observe_own("a", 0.1)  # type: ignore[arg-type]
