"""LeaderElector: acquire, renew, expiry on the local clock, conflicts, release, misuse."""

from __future__ import annotations

import datetime
import json
import random
from typing import Any

import pytest

from kubemoon_core import ApiError, Request, Response
from kubemoon_core._leader import (
    JITTER_FACTOR,
    LEASES,
    LeaderElector,
    LeaderEvent,
    LeaderState,
    LeaseRecord,
    NewLeader,
    StartedLeading,
    StoppedLeading,
)
from kubemoon_core.errors import DecodeError, LocalProtocolError
from kubemoon_core.lowlevel import LeaderInput
from kubemoon_testing import json_response

PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/demo"
COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
EPOCH = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
ME = "me"


def wall(now: float) -> datetime.datetime:
    return EPOCH + datetime.timedelta(seconds=now)


def stamp(now: float) -> str:
    return wall(now).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(
    holder: str | None,
    rv: str,
    *,
    duration: int | None = 15,
    transitions: int | None = 0,
    acquire: str = "2020-01-01T00:00:00.000000Z",
    renew: str = "2020-01-01T00:00:00.000000Z",
    **extra_spec: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"acquireTime": acquire, "renewTime": renew, **extra_spec}
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    if transitions is not None:
        spec["leaseTransitions"] = transitions
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "demo", "namespace": "kube-system", "resourceVersion": rv},
        "spec": spec,
    }


def new_elector(seed: int = 7, **kwargs: Any) -> LeaderElector:
    return LeaderElector(
        name="demo", namespace="kube-system", identity=ME, rng=random.Random(seed), **kwargs
    )


def state(e: LeaderElector) -> LeaderState:
    """Read the state through a call: mypy would keep narrowing the property otherwise."""
    return e.state


def leader(e: LeaderElector) -> str | None:
    return e.leader


def deadline(e: LeaderElector) -> float:
    value = e.next_deadline()
    assert value is not None
    return value


def body(request: Request) -> dict[str, Any]:
    document = json.loads(request.body)
    assert isinstance(document, dict)
    return document


def send(e: LeaderElector, now: float, method: str) -> Request:
    request = e.next_request(now, wall(now))
    assert request is not None, f"expected a {method} at {now}"
    assert request.method == method
    return request


def answer(e: LeaderElector, now: float, status: int, document: Any) -> list[LeaderEvent]:
    return e.receive_response(json_response(status, document), now)


def acquired(seed: int = 7, **kwargs: Any) -> LeaderElector:
    """A candidate that created the lease at 0.0 and leads (lease rv "1")."""
    e = new_elector(seed, **kwargs)
    send(e, 0.0, "GET")
    assert answer(e, 0.0, 404, {"kind": "Status", "code": 404, "reason": "NotFound"}) == []
    send(e, 0.0, "POST")
    created = lease(ME, "1", acquire=stamp(0.0), renew=stamp(0.0))
    assert answer(e, 0.0, 201, created) == [NewLeader(ME), StartedLeading()]
    return e


# --- acquiring --------------------------------------------------------------------------


def test_creates_a_missing_lease_and_leads() -> None:
    e = new_elector()
    assert state(e) is LeaderState.FOLLOWING
    assert e.next_deadline() == float("-inf")  # the first GET is due at once
    get = send(e, 0.0, "GET")
    assert get.path == PATH
    assert e.next_request(0.0, wall(0.0)) is None  # one request at a time
    assert e.next_deadline() is None  # waiting for the answer
    answer(e, 0.0, 404, {"kind": "Status", "code": 404, "reason": "NotFound"})
    assert state(e) is LeaderState.CREATING
    assert e.leader is None
    post = send(e, 0.5, "POST")
    assert post.path == COLLECTION
    assert body(post)["metadata"] == {"name": "demo", "namespace": "kube-system"}
    assert body(post)["spec"] == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "acquireTime": stamp(0.5),
        "renewTime": stamp(0.5),
        "leaseTransitions": 0,
    }
    events = answer(e, 0.7, 201, lease(ME, "1"))
    assert events == [NewLeader(ME), StartedLeading()]
    assert e.is_leader
    assert leader(e) == ME
    assert e.identity == ME
    assert e.observed_record == LeaseRecord(
        "1", ME, 15, "2020-01-01T00:00:00.000000Z", "2020-01-01T00:00:00.000000Z", 0
    )
    # Renew every retry period; the renew deadline counts from when the write was sent.
    assert e.next_deadline() == pytest.approx(2.7)
    assert e._valid_until == pytest.approx(10.5)


def test_follower_polls_with_jitter_from_the_injected_rng() -> None:
    e = new_elector(seed=42)
    expected = random.Random(42)
    send(e, 0.0, "GET")
    assert answer(e, 0.0, 200, lease("other", "5")) == [NewLeader("other")]
    assert state(e) is LeaderState.FOLLOWING
    assert e.leader == "other"
    delay = deadline(e)
    assert delay == pytest.approx(2.0 * (1 + expected.random() * JITTER_FACTOR))
    assert 2.0 <= delay < 2.0 * (1 + JITTER_FACTOR)
    assert e.next_request(delay - 0.001, wall(0.0)) is None
    send(e, delay, "GET")
    assert answer(e, delay, 200, lease("other", "5")) == []  # same leader: no event


class NoJitter(random.Random):
    """Jitter factor 0: follower polls come exactly retry_period after each answer."""

    def random(self) -> float:
        return 0.0


def test_expiry_is_judged_on_the_local_clock_since_the_record_last_changed() -> None:
    e = LeaderElector(name="demo", namespace="kube-system", identity=ME, rng=NoJitter())
    # renewTime is years old; only the local observation time counts.
    send(e, 100.0, "GET")
    answer(e, 100.0, 200, lease("other", "5", transitions=3))
    send(e, 102.0, "GET")
    answer(e, 110.0, 200, lease("other", "6", transitions=3))  # renewed: observed at 110
    send(e, 112.0, "GET")
    answer(e, 124.9, 200, lease("other", "6", transitions=3))
    assert state(e) is LeaderState.FOLLOWING  # 14.9 s since the change
    assert e.next_deadline() == pytest.approx(126.9)
    send(e, 126.9, "GET")
    assert answer(e, 126.9, 200, lease("other", "6", transitions=3)) == []
    assert state(e) is LeaderState.ACQUIRING
    put = send(e, 126.9, "PUT")
    assert put.path == PATH
    assert body(put)["metadata"]["resourceVersion"] == "6"
    assert body(put)["spec"] == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "acquireTime": stamp(126.9),
        "renewTime": stamp(126.9),
        "leaseTransitions": 4,
    }
    events = answer(e, 127.0, 200, lease(ME, "7", transitions=4))
    assert events == [NewLeader(ME), StartedLeading()]


def test_expiry_boundary_is_exactly_the_lease_duration() -> None:
    e = LeaderElector(name="demo", namespace="kube-system", identity=ME, rng=NoJitter())
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("other", "5"))
    send(e, 2.0, "GET")
    answer(e, 14.75, 200, lease("other", "5"))
    assert state(e) is LeaderState.FOLLOWING
    send(e, 16.75, "GET")
    e.request_failed(17.0)
    send(e, 19.0, "GET")
    answer(e, 19.0, 200, lease("other", "5"))
    assert state(e) is LeaderState.ACQUIRING

    e = LeaderElector(name="demo", namespace="kube-system", identity=ME, rng=NoJitter())
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("other", "5"))
    send(e, 2.0, "GET")
    answer(e, 15.0, 200, lease("other", "5"))
    assert state(e) is LeaderState.ACQUIRING


def test_the_holders_own_lease_duration_counts() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("other", "5", duration=60))
    send(e, 20.0, "GET")
    answer(e, 20.0, 200, lease("other", "5", duration=60))
    assert state(e) is LeaderState.FOLLOWING
    # Without leaseDurationSeconds, this candidate's own duration applies.
    send(e, 30.0, "GET")
    answer(e, 30.0, 200, lease("other", "9", duration=None, transitions=None))
    send(e, 45.0, "GET")
    answer(e, 45.0, 200, lease("other", "9", duration=None, transitions=None))
    assert state(e) is LeaderState.ACQUIRING
    assert body(send(e, 45.0, "PUT"))["spec"]["leaseTransitions"] == 1


def test_a_lease_with_no_holder_is_taken_at_once() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    assert answer(e, 0.0, 200, lease(None, "5", duration=1)) == [NewLeader("")]
    assert state(e) is LeaderState.ACQUIRING
    assert e.leader == ""


def test_a_lease_naming_this_candidate_is_renewed_at_once_keeping_its_acquire_time() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease(ME, "5", transitions=2, acquire="then"))
    assert state(e) is LeaderState.ACQUIRING
    spec = body(send(e, 0.0, "PUT"))["spec"]
    assert spec["acquireTime"] == "then"
    assert spec["leaseTransitions"] == 2


def test_losing_the_acquire_race_goes_back_to_following() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("", "5"))
    send(e, 0.0, "PUT")
    conflict = {"kind": "Status", "code": 409, "reason": "Conflict"}
    assert answer(e, 0.1, 409, conflict) == []
    assert state(e) is LeaderState.FOLLOWING
    assert isinstance(e.last_error, ApiError)
    assert e.last_error.code == 409
    due = deadline(e)
    assert 2.1 <= due < 2.1 + 2.0 * JITTER_FACTOR


def test_losing_the_create_race_or_failing_to_create() -> None:
    for status, reason in [(409, "AlreadyExists"), (403, "Forbidden")]:
        e = new_elector()
        send(e, 0.0, "GET")
        answer(e, 0.0, 404, {"kind": "Status", "code": 404})
        send(e, 0.0, "POST")
        assert answer(e, 0.0, status, {"kind": "Status", "code": status, "reason": reason}) == []
        assert state(e) is LeaderState.FOLLOWING


def test_get_errors_and_lost_answers_retry_with_jitter() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 500, {"kind": "Status", "code": 500, "reason": "InternalError"})
    assert state(e) is LeaderState.FOLLOWING
    assert isinstance(e.last_error, ApiError)
    due = deadline(e)
    send(e, due, "GET")
    assert e.request_failed(due + 1.0) == []
    assert state(e) is LeaderState.FOLLOWING


@pytest.mark.parametrize(
    "document",
    [
        b"not json",
        [],
        {"metadata": "x"},
        {"metadata": {"resourceVersion": ""}},
        {"metadata": {"resourceVersion": "1"}, "spec": []},
        {"metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": 3}},
        {"metadata": {"resourceVersion": "1"}, "spec": {"leaseDurationSeconds": True}},
        {"metadata": {"resourceVersion": "1"}, "spec": {"leaseTransitions": "2"}},
    ],
)
def test_malformed_leases_count_as_failures(document: Any) -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    assert e.receive_response(Response(200, (), raw), 0.0) == []
    assert state(e) is LeaderState.FOLLOWING
    assert isinstance(e.last_error, DecodeError)


def test_a_lease_without_spec_has_no_holder() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, {"metadata": {"resourceVersion": "3"}})
    assert state(e) is LeaderState.ACQUIRING
    put = body(send(e, 0.0, "PUT"))
    assert put["spec"]["holderIdentity"] == ME
    assert put["spec"]["leaseTransitions"] == 1


# --- leading ----------------------------------------------------------------------------


def test_renews_every_retry_period_with_the_last_resource_version() -> None:
    e = acquired()
    assert e.next_request(1.9, wall(1.9)) is None
    put = send(e, 2.0, "PUT")
    spec = body(put)["spec"]
    assert body(put)["metadata"]["resourceVersion"] == "1"
    assert spec["acquireTime"] == stamp(0.0)
    assert spec["renewTime"] == stamp(2.0)
    assert answer(e, 2.1, 200, lease(ME, "2", acquire=stamp(0.0), renew=stamp(2.0))) == []
    assert e.next_deadline() == pytest.approx(4.1)
    assert e._valid_until == pytest.approx(12.0)
    assert body(send(e, 4.1, "PUT"))["metadata"]["resourceVersion"] == "2"


def test_stops_leading_renew_deadline_after_the_last_successful_send() -> None:
    e = acquired()  # its successful CREATE was sent at 0.0
    for sent in (2.0, 4.25, 6.5, 8.75):
        send(e, sent, "PUT")
        assert e.request_failed(sent + 0.25) == []  # renewals time out
        assert e.is_leader
        assert e.next_deadline() == min(sent + 2.25, 10.0)
    assert e.tick(9.99) == []
    assert e.tick(10.0) == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.FOLLOWING
    assert not e.is_leader
    assert e.tick(11.0) == []


def test_deadline_with_a_renew_in_flight_deposes_and_the_answer_only_informs() -> None:
    e = acquired()
    send(e, 9.0, "PUT")
    assert e.tick(10.0) == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.DEPOSED
    assert e.next_deadline() is None
    # The late success answer does not restore leadership: the candidate polls again.
    assert answer(e, 11.0, 200, lease(ME, "2")) == []
    assert state(e) is LeaderState.FOLLOWING
    send(e, 20.0, "GET")
    answer(e, 20.0, 200, lease(ME, "2"))
    assert state(e) is LeaderState.ACQUIRING
    send(e, 20.0, "PUT")
    assert answer(e, 20.1, 200, lease(ME, "3")) == [StartedLeading()]


def test_an_answer_after_the_deadline_cannot_extend_it() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    events = answer(e, 10.0, 200, lease(ME, "2"))  # sent in time, answered too late
    assert events == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.FOLLOWING


def test_leader_past_its_deadline_gets_no_request_until_tick() -> None:
    e = acquired()
    assert e.next_request(10.0, wall(10.0)) is None
    assert e.is_leader
    assert e.tick(10.0) == [StoppedLeading("renew deadline passed")]


def test_renew_conflict_then_confirm_the_lease_is_still_ours() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    e.request_failed(3.0)  # the renew landed, but its answer was lost
    assert e.next_deadline() == pytest.approx(5.0)
    send(e, 5.0, "PUT")
    assert answer(e, 5.1, 409, {"kind": "Status", "code": 409}) == []
    assert state(e) is LeaderState.CONFIRMING
    assert e.is_leader
    send(e, 5.1, "GET")
    assert answer(e, 5.2, 200, lease(ME, "2", acquire=stamp(0.0))) == []
    assert state(e) is LeaderState.LEADING
    put = send(e, 5.2, "PUT")
    assert body(put)["metadata"]["resourceVersion"] == "2"
    assert answer(e, 5.3, 200, lease(ME, "3")) == []
    assert e._valid_until == pytest.approx(15.2)


def test_renew_conflict_and_another_holder_stops_leading() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    send(e, 2.1, "GET")
    events = answer(e, 2.2, 200, lease("usurper", "9"))
    assert events == [StoppedLeading("lease held by another candidate"), NewLeader("usurper")]
    assert state(e) is LeaderState.FOLLOWING


def test_confirming_sees_the_lease_deleted_freed_or_unreachable() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 404, {"kind": "Status", "code": 404})  # deleted under us: like a conflict
    assert state(e) is LeaderState.CONFIRMING
    send(e, 2.1, "GET")
    assert answer(e, 2.2, 404, {"kind": "Status", "code": 404}) == [StoppedLeading("lease deleted")]
    assert state(e) is LeaderState.CREATING
    assert body(send(e, 2.2, "POST"))["spec"]["leaseTransitions"] == 0
    assert answer(e, 2.3, 201, lease(ME, "1")) == [StartedLeading()]

    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    send(e, 2.1, "GET")
    e.request_failed(2.5)
    assert state(e) is LeaderState.CONFIRMING
    assert e.next_deadline() == pytest.approx(4.5)
    send(e, 4.5, "GET")
    events = answer(e, 4.6, 200, lease("", "4", duration=1))
    assert events == [StoppedLeading("lease lost"), NewLeader("")]
    assert state(e) is LeaderState.ACQUIRING


def test_confirming_until_the_deadline() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    assert e.tick(10.0) == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.FOLLOWING

    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    send(e, 2.1, "GET")
    assert e.tick(10.0) == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.DEPOSED
    assert e.request_failed(10.5) == []
    assert state(e) is LeaderState.FOLLOWING


def test_other_renew_errors_retry_after_the_retry_period() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    assert answer(e, 2.1, 500, {"kind": "Status", "code": 500}) == []
    assert state(e) is LeaderState.LEADING
    assert e.next_deadline() == pytest.approx(4.1)


def test_updates_keep_fields_this_machine_does_not_own() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    observed = lease("", "5", strategy="OldestEmulationVersion")
    observed["metadata"]["labels"] = {"team": "infra"}
    answer(e, 0.0, 200, observed)
    put = body(send(e, 0.0, "PUT"))
    assert put["metadata"]["labels"] == {"team": "infra"}
    assert put["spec"]["strategy"] == "OldestEmulationVersion"

    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, {"metadata": {"resourceVersion": "3"}, "spec": None})
    assert body(send(e, 0.0, "PUT"))["spec"]["holderIdentity"] == ME


def test_fractional_lease_duration_is_written_rounded_up() -> None:
    e = acquired(lease_duration=12.5)
    assert body(send(e, 2.0, "PUT"))["spec"]["leaseDurationSeconds"] == 13


# --- releasing --------------------------------------------------------------------------


def test_release_stops_leading_first_then_clears_the_holder() -> None:
    e = acquired()
    assert e.release(1.0) == [StoppedLeading("released")]
    assert state(e) is LeaderState.RELEASING
    put = send(e, 1.0, "PUT")
    assert body(put)["metadata"]["resourceVersion"] == "1"
    assert body(put)["spec"] == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp(1.0),
        "renewTime": stamp(1.0),
        "leaseTransitions": 0,
    }
    assert e.release(1.0) == []  # idempotent while the release is in flight
    assert answer(e, 1.1, 200, lease("", "2", duration=1)) == [NewLeader("")]
    assert state(e) is LeaderState.STOPPED
    assert e.next_request(5.0, wall(5.0)) is None
    assert e.next_deadline() is None
    assert e.release(6.0) == []


def test_release_twice_before_the_write_is_sent() -> None:
    e = acquired()
    e.release(1.0)
    assert e.release(1.5) == []
    assert state(e) is LeaderState.RELEASING


def test_release_with_a_renew_in_flight_waits_for_its_answer() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    assert e.release(2.1) == [StoppedLeading("released")]
    assert state(e) is LeaderState.RELEASE_PENDING
    assert e.next_request(2.1, wall(2.1)) is None
    assert e.release(2.2) == []
    assert answer(e, 2.3, 200, lease(ME, "2")) == []  # the renew landed: release it
    assert state(e) is LeaderState.RELEASING
    send(e, 2.3, "PUT")
    assert e.request_failed(3.0) == []  # a failed release is not retried
    assert state(e) is LeaderState.STOPPED


def _released(request: Request, rv: str) -> None:
    """Assert ``request`` is the release write, conditional on resourceVersion ``rv``."""
    assert request.method == "PUT"
    assert body(request)["metadata"]["resourceVersion"] == rv
    assert body(request)["spec"]["holderIdentity"] == ""
    assert body(request)["spec"]["leaseDurationSeconds"] == 1


def test_release_with_a_renew_in_flight_that_fails_is_still_written() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    assert e.release(2.1) == [StoppedLeading("released")]
    assert e.request_failed(3.0) == []  # the renew was lost: it may or may not have landed
    assert state(e) is LeaderState.RELEASE_CHECKING
    assert e.release(3.0) == []
    send(e, 3.0, "GET")  # so look before releasing
    assert e.release(3.05) == []  # asking again changes nothing
    assert answer(e, 3.1, 200, lease(ME, "2")) == []  # it landed: still ours, at rv 2
    assert state(e) is LeaderState.RELEASING
    _released(send(e, 3.1, "PUT"), "2")
    answer(e, 3.2, 200, lease("", "3", duration=1))
    assert state(e) is LeaderState.STOPPED


def test_release_with_a_renew_in_flight_that_conflicts_is_still_written() -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    e.release(2.1)
    assert answer(e, 2.2, 409, {"kind": "Status", "code": 409}) == []
    assert state(e) is LeaderState.RELEASE_CHECKING
    send(e, 2.2, "GET")
    answer(e, 2.3, 200, lease(ME, "5"))  # an earlier renew had landed
    _released(send(e, 2.3, "PUT"), "5")


@pytest.mark.parametrize(
    ("found", "status"),
    [(lease("other", "6"), 200), (lease("", "6"), 200), ({"kind": "Status", "code": 404}, 404)],
)
def test_no_release_is_written_over_a_lease_that_is_no_longer_ours(
    found: dict[str, Any], status: int
) -> None:
    e = acquired()
    send(e, 2.0, "PUT")
    e.release(2.1)
    e.request_failed(3.0)
    send(e, 3.0, "GET")
    answer(e, 3.1, status, found)
    assert state(e) is LeaderState.STOPPED
    assert e.next_request(3.1, wall(3.1)) is None


def test_when_the_check_fails_too_the_release_is_written_with_the_last_version() -> None:
    # The resourceVersion guards it: if the lost renew landed, this write gets a 409.
    e = acquired()
    send(e, 2.0, "PUT")
    e.release(2.1)
    e.request_failed(3.0)
    send(e, 3.0, "GET")
    assert e.request_failed(4.0) == []
    assert state(e) is LeaderState.RELEASING
    _released(send(e, 4.0, "PUT"), "1")
    assert e.request_failed(5.0) == []  # a failed release is not retried
    assert state(e) is LeaderState.STOPPED


def test_a_follower_whose_poll_fails_during_release_writes_nothing() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    e.release(0.1)
    e.request_failed(1.0)
    send(e, 1.0, "GET")
    e.request_failed(2.0)  # never saw the lease: nothing of ours to release
    assert state(e) is LeaderState.STOPPED
    assert e.next_request(2.0, wall(2.0)) is None

    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("other", "4"))
    send(e, 5.0, "GET")
    e.release(5.1)
    e.request_failed(6.0)
    send(e, 6.0, "GET")
    e.request_failed(7.0)  # last seen held by another: never written over
    assert state(e) is LeaderState.STOPPED


def test_an_acquire_in_flight_that_fails_during_release_is_checked() -> None:
    # The lost write may have taken the lease: look, and give it back if it did.
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("", "4"))
    send(e, 0.0, "PUT")
    e.release(0.1)
    e.request_failed(1.0)
    send(e, 1.0, "GET")
    answer(e, 1.1, 200, lease(ME, "5"))
    _released(send(e, 1.1, "PUT"), "5")


def test_release_of_a_follower() -> None:
    e = new_elector()
    assert e.release(0.0) == []
    assert state(e) is LeaderState.STOPPED
    assert e.next_request(0.0, wall(0.0)) is None

    e = new_elector()
    send(e, 0.0, "GET")
    assert e.release(0.1) == []
    assert state(e) is LeaderState.RELEASE_PENDING
    answer(e, 0.2, 200, lease("other", "4"))
    assert state(e) is LeaderState.STOPPED


def test_release_while_acquiring_gives_up_a_lease_just_won() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("", "4"))
    send(e, 0.0, "PUT")
    assert e.release(0.1) == []
    assert answer(e, 0.2, 200, lease(ME, "5")) == [NewLeader(ME)]  # never StartedLeading
    assert state(e) is LeaderState.RELEASING
    send(e, 0.2, "PUT")
    assert answer(e, 0.3, 409, {"kind": "Status", "code": 409}) == []
    assert state(e) is LeaderState.STOPPED


def test_release_before_a_due_create_or_acquire_is_sent() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 404, {"kind": "Status", "code": 404})
    assert e.release(0.1) == []
    assert state(e) is LeaderState.STOPPED

    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, lease("", "4"))
    assert e.release(0.1) == []
    assert state(e) is LeaderState.STOPPED


def test_release_while_deposed_or_confirming() -> None:
    e = acquired()
    send(e, 9.0, "PUT")
    e.tick(10.0)
    assert e.release(10.5) == []
    assert state(e) is LeaderState.RELEASE_PENDING
    e.request_failed(11.0)
    assert state(e) is LeaderState.RELEASE_CHECKING  # the lease may still be ours
    send(e, 11.0, "GET")
    answer(e, 11.1, 200, lease(ME, "1"))
    _released(send(e, 11.1, "PUT"), "1")

    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    assert e.release(2.2) == [StoppedLeading("released")]
    assert state(e) is LeaderState.RELEASING

    e = acquired()
    send(e, 2.0, "PUT")
    answer(e, 2.1, 409, {"kind": "Status", "code": 409})
    send(e, 2.1, "GET")
    assert e.release(2.2) == [StoppedLeading("released")]
    answer(e, 2.3, 200, lease(ME, "2"))  # still ours: release it
    assert state(e) is LeaderState.RELEASING


def test_release_after_the_deadline_passed_unnoticed() -> None:
    e = acquired()
    assert e.release(12.0) == [StoppedLeading("renew deadline passed")]
    assert state(e) is LeaderState.STOPPED


# --- misuse and configuration -----------------------------------------------------------


def test_answers_without_a_request_and_time_going_backwards() -> None:
    e = new_elector()
    with pytest.raises(LocalProtocolError, match="in flight"):
        answer(e, 0.0, 200, lease("x", "1"))
    with pytest.raises(LocalProtocolError, match="in flight"):
        e.request_failed(0.0)
    e.tick(5.0)
    with pytest.raises(LocalProtocolError, match="backwards"):
        e.tick(4.0)
    with pytest.raises(LocalProtocolError, match="backwards"):
        e.tick(float("nan"))
    with pytest.raises(LocalProtocolError, match="timezone"):
        e.next_request(6.0, datetime.datetime(2025, 1, 1))  # naive
    with pytest.raises(LocalProtocolError, match="timezone"):
        e.next_request(6.0, "2025-01-01T00:00:00Z")  # type: ignore[arg-type]


def test_wall_time_in_another_zone_is_written_in_utc() -> None:
    e = new_elector()
    send(e, 0.0, "GET")
    answer(e, 0.0, 404, {"kind": "Status", "code": 404})
    zone = datetime.timezone(datetime.timedelta(hours=2))
    request = e.next_request(0.0, datetime.datetime(2025, 1, 1, 2, 0, 0, 5, tzinfo=zone))
    assert request is not None
    assert body(request)["spec"]["renewTime"] == "2025-01-01T00:00:00.000005Z"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"identity": ""},
        {"rng": 3},
        {"lease_duration": 0},
        {"lease_duration": float("inf")},
        {"renew_deadline": True},
        {"lease_duration": 10.0, "renew_deadline": 10.0},
        {"renew_deadline": 2.4, "retry_period": 2.0},
        {"name": "Bad/Name"},
        {"namespace": "Not_A_Label"},
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any]) -> None:
    options: dict[str, Any] = {
        "name": "demo",
        "namespace": "ns",
        "identity": "me",
        "rng": random.Random(0),
    }
    with pytest.raises(LocalProtocolError):
        LeaderElector(**{**options, **kwargs})


def test_the_lease_resource() -> None:
    assert (LEASES.group, LEASES.version, LEASES.resource) == (
        "coordination.k8s.io",
        "v1",
        "leases",
    )


def test_the_transition_table_covers_every_input_each_state_can_receive() -> None:
    answers_to_get = {
        LeaderInput.ABSENT,
        LeaderInput.MINE,
        LeaderInput.FREE,
        LeaderInput.HELD,
        LeaderInput.FAILED,
        LeaderInput.DUPLICATE,
    }
    answers_to_write = {LeaderInput.WRITTEN, LeaderInput.CONFLICT, LeaderInput.FAILED}
    leader_timers = {LeaderInput.EXPIRED, LeaderInput.EXPIRED_BUSY}
    release = {LeaderInput.RELEASE, LeaderInput.RELEASE_BUSY}
    S = LeaderState
    expected = {
        S.FOLLOWING: answers_to_get | release,
        S.CREATING: answers_to_write | release,
        S.ACQUIRING: answers_to_write | release,
        S.LEADING: answers_to_write | leader_timers | release,
        S.CONFIRMING: answers_to_get | leader_timers | release,
        S.DEPOSED: answers_to_get | answers_to_write | {LeaderInput.RELEASE_BUSY},
        S.RELEASE_PENDING: answers_to_get | answers_to_write | {LeaderInput.RELEASE_BUSY},
        S.RELEASE_CHECKING: answers_to_get | release,
        S.RELEASING: answers_to_write | release,
        S.STOPPED: {LeaderInput.RELEASE},
        S.DUPLICATE: {LeaderInput.RELEASE},
    }
    actual: dict[LeaderState, set[LeaderInput]] = {state: set() for state in LeaderState}
    for state, event in LeaderElector.transitions():
        actual[state].add(event)
    assert actual == expected


def test_the_documented_takeover_bound_is_the_one_computed_from_the_defaults() -> None:
    import re
    from pathlib import Path

    import kubemoon_asyncio
    import kubemoon_sync
    import kubemoon_trio
    from kubemoon_core.lowlevel import JITTER_FACTOR, takeover_bound

    defaults = kubemoon_trio.LeaderElectionConfig("lease", "ns")
    bound = defaults.takeover_bound
    assert bound == pytest.approx(
        defaults.lease_duration + 2 * defaults.retry_period * (1 + JITTER_FACTOR)
    )
    assert bound == pytest.approx(takeover_bound())
    for module in (kubemoon_asyncio, kubemoon_sync):
        assert module.LeaderElectionConfig("lease", "ns").takeover_bound == bound
    poll = defaults.retry_period * (1 + JITTER_FACTOR)
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in ("tutorial.rst", "runtime.rst"):
        text = " ".join((docs / page).read_text().split())
        stated = re.findall(r"\*\*(?:within )?([0-9.]+) s\*\*", text)
        assert stated == [f"{bound:g}"], page
        assert f"{poll:g} s" in text, page
        assert f"{defaults.lease_duration:g} s" in text, page
    # Other timings: the bound follows them.
    assert takeover_bound(lease_duration=60, retry_period=5) == pytest.approx(82.0)


def test_the_elector_names_its_lease_for_log_lines() -> None:
    e = LeaderElector(name="demo", namespace="kube-system", identity=ME, rng=NoJitter())
    assert e.lease == "kube-system/demo"


# --- duplicate identities (issue 31, defect 12) ----------------------------------------


def instanced(holder: str, rv: str, instance: str) -> dict[str, Any]:
    document = lease(holder, rv)
    document["metadata"]["annotations"] = {"kubemoon.dev/holder-instance": instance}
    return document


def test_a_leader_stops_for_good_when_another_process_holds_its_identity() -> None:
    e = new_elector(instance="mine")
    send(e, 0.0, "GET")
    answer(e, 0.0, 404, {"kind": "Status", "code": 404, "reason": "NotFound"})
    post = send(e, 0.0, "POST")
    assert body(post)["metadata"]["annotations"] == {"kubemoon.dev/holder-instance": "mine"}
    answer(e, 0.0, 201, instanced(ME, "1", "mine"))
    assert e.is_leader
    # The twin renewed over this one's version: the next renew conflicts, the GET shows it.
    put = send(e, 2.0, "PUT")
    assert body(put)["metadata"]["annotations"]["kubemoon.dev/holder-instance"] == "mine"
    answer(e, 2.0, 409, {"kind": "Status", "code": 409, "reason": "Conflict"})
    send(e, 2.0, "GET")
    events = answer(e, 2.0, 200, instanced(ME, "3", "twin"))
    assert StoppedLeading("another process holds the lease under this identity") in events
    assert e.state is LeaderState.DUPLICATE and e.duplicate and not e.is_leader
    assert "also held by another process" in str(e.last_error)
    assert e.next_request(10.0, wall(10.0)) is None and e.next_deadline() is None
    assert e.release(11.0) == [] and e.state is LeaderState.DUPLICATE


def test_a_follower_waits_out_an_earlier_process_and_stops_on_a_live_twin() -> None:
    # A restart: the Lease names this identity with an old instance, unchanged: taken
    # once it expired, as another holder's would be.
    e = new_elector(instance="new")
    send(e, 0.0, "GET")
    answer(e, 0.0, 200, instanced(ME, "5", "old"))
    assert e.state is LeaderState.FOLLOWING
    send(e, 15.0, "GET")
    answer(e, 15.0, 200, instanced(ME, "5", "old"))
    assert e.state is LeaderState.ACQUIRING
    # A live twin: its record changes while this one follows.
    t = new_elector(instance="late")
    send(t, 0.0, "GET")
    answer(t, 0.0, 200, instanced(ME, "5", "twin"))
    send(t, 3.0, "GET")
    answer(t, 3.0, 200, instanced(ME, "6", "twin"))
    assert t.state is LeaderState.DUPLICATE
    # Without an instance (or a Lease without the annotation) the identity alone counts.
    plain = new_elector()
    send(plain, 0.0, "GET")
    answer(plain, 0.0, 200, instanced(ME, "5", "other"))
    assert plain.state is LeaderState.ACQUIRING
    with pytest.raises(LocalProtocolError, match="instance"):
        new_elector(instance="")
