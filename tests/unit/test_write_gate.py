"""Write gates (issue 31, defect 3): a write a Lease authorises is refused once the Lease's
validity ended on the local monotonic clock -- the pure pieces: WriteGate, the elector's
and the shard member's validity queries."""

from __future__ import annotations

import pytest
from test_leader import acquired, answer, lease, send, stamp
from test_membership import join

from kubemoon_core import KubeMoonError
from kubemoon_core._leader import LeaderState
from kubemoon_core.errors import AuthorityLost, LocalProtocolError
from kubemoon_core.lowlevel import WriteGate
from kubemoon_core.sharding import HASH_SPACE, MemberRecord, MemberState, ShardMember, ShardRange


def test_a_gate_refuses_at_the_margin_and_past_the_end() -> None:
    gate = WriteGate([("leadership of ns/l", lambda now: 10.0)], margin=1.0)
    assert gate.may_write(8.999)
    gate.check(8.999, "PUT /x")
    assert gate.valid_until(0.0) == 9.0
    assert not gate.may_write(9.0)
    with pytest.raises(AuthorityLost, match=r"PUT /x.*leadership of ns/l.*margin"):
        gate.check(9.5, "PUT /x")
    with pytest.raises(AuthorityLost, match=r"ended 2\.000 s ago"):
        gate.check(12.0, "PUT /x")
    assert issubclass(AuthorityLost, KubeMoonError)


def test_every_authority_of_a_gate_must_hold() -> None:
    held: dict[str, float | None] = {"a": 20.0, "b": 5.0}
    gate = WriteGate([("A", lambda now: held["a"]), ("B", lambda now: held["b"])], margin=0.0)
    assert gate.valid_until(0.0) == 5.0
    assert gate.may_write(4.9) and not gate.may_write(5.0)
    held["b"] = None
    assert gate.valid_until(0.0) is None and not gate.may_write(0.0)
    with pytest.raises(AuthorityLost, match="does not hold the B"):
        gate.check(0.0)
    assert WriteGate([], margin=0.5).may_write(1e9)  # nothing gates it
    for bad in (-1, float("inf"), float("nan"), True, "1"):
        with pytest.raises(LocalProtocolError, match="margin"):
            WriteGate([], margin=bad)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="pair"):
        WriteGate([("A", 5)])  # type: ignore[list-item]
    assert "A" in repr(WriteGate([("A", lambda now: 1.0)]))


def test_a_leader_may_write_until_its_renew_deadline_from_the_send_time() -> None:
    e = acquired()  # the CREATE was sent at 0.0 and acknowledged
    assert e.valid_until(0.0) == 10.0 and e.may_write(9.99)
    assert not e.may_write(10.0)  # a query: it changes nothing
    assert e.state is LeaderState.LEADING
    # A renew sent at 2.0 but answered at 7.0 counts from 2.0 (the server may have
    # applied it at once).
    send(e, 2.0, "PUT")
    answer(e, 7.0, 200, lease("me", "2", acquire=stamp(0.0), renew=stamp(2.0)))
    assert e.valid_until(7.0) == 12.0
    assert e.renew_deadline == 10.0
    # Paused past the deadline: the gate refuses before anything acts on the expiry.
    gate = WriteGate([("leadership", e.valid_until)], margin=1.0)
    assert gate.may_write(10.9) and not gate.may_write(11.0)
    with pytest.raises(AuthorityLost, match="does not hold the leadership"):
        gate.check(25.0, "PATCH /y")
    e.tick(25.0)
    assert not e.is_leader and e.valid_until(25.0) is None


def test_a_follower_never_may_write() -> None:
    e = acquired()
    e.release(1.0)
    assert e.valid_until(1.0) is None and not e.may_write(1.0)


def test_a_member_may_write_only_its_working_ranges_before_its_renew_deadline() -> None:
    m = ShardMember("a")
    assert m.write_deadline(0.0) is None and not m.may_write(0.0)  # not joined yet
    t = join(m)  # the claim write was sent at 0.0
    assert m.state is MemberState.MEMBER
    assert m.write_deadline(t) == 10.0
    assert m.may_write(t, 12345)
    # Another member joins: the whole range is stopping (still worked on), the first
    # half claiming; writes of the stopping range's objects may still go out.
    m.read_started(t + 1)
    m.observe([MemberRecord("b", "1")], t + 1)
    upper = HASH_SPACE - 1
    assert m.may_write(t + 1, upper)
    m.stopped(ShardRange(0, HASH_SPACE), t + 1.1)
    assert not m.may_write(t + 1.1, upper)  # b's half now: no write for its objects
    assert not m.may_write(t + 1.1, 5)  # a's half is only claimed, not active yet
    # Past the renew deadline, nothing, and the query did not move the machine.
    assert not m.may_write(10.0)
    assert m.state is MemberState.MEMBER
    m.tick(10.0)
    assert m.state is MemberState.LOST and m.write_deadline(10.0) is None


def test_a_send_is_reported_only_when_its_authority_lapsed_during_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``report_late_send`` asks the armed guard again after the bytes went out: silent
    while the authority holds or nothing is armed, a WARNING and a count once it lapsed."""
    import contextvars

    from kubemoon_io import LATE_SENDS, arm_send_guard, gate_guard, report_late_send

    clock = [10.0]
    gate = WriteGate([("leadership of the Lease ns/demo", lambda now: 12.0)], margin=0.5)
    guard = gate_guard(gate, lambda: clock[0])

    def run() -> list[str]:
        before = LATE_SENDS.count
        with caplog.at_level("WARNING", logger="kubemoon.gate"):
            report_late_send()  # nothing armed: nothing to say
            arm_send_guard(guard, "PUT /api/v1/namespaces/ns/configmaps/c")
            report_late_send()  # still valid at 10.0
            clock[0] = 20.0  # frozen inside the send until past the Lease
            report_late_send()
        assert LATE_SENDS.count == before + 1
        return [r.getMessage() for r in caplog.records if r.name == "kubemoon.gate"]

    messages = contextvars.copy_context().run(run)
    assert len(messages) == 1, messages
    assert "PUT /api/v1/namespaces/ns/configmaps/c" in messages[0]
    assert "ended 8.000 s ago" in messages[0]
