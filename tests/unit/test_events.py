"""EventRecorder: events.k8s.io/v1 Events with series, spam filtering and bounded writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from kubemoon_core import EVENTS, Response
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import EventOutcome, EventRecorder, EventWrite

WALL = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
}
NODE: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
OK = Response(201, body=b"{}")


def _recorder(**kwargs: Any) -> EventRecorder:
    return EventRecorder("example.com/widgets", "widgets-7f9c", **kwargs)


def _body(write: EventWrite) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(write.request.body)
    return body


def test_first_occurrence_creates_an_event() -> None:
    r = _recorder()
    plan = r.record(POD, "Warning", "FailedSync", "it broke", action="Sync", now=0.0, wall=WALL)
    assert plan.outcome is EventOutcome.CREATED
    (write,) = plan.writes
    assert write.create
    assert (write.request.method, write.request.path) == (
        "POST",
        "/apis/events.k8s.io/v1/namespaces/ns/events",
    )
    event = _body(write)
    name = event["metadata"]["name"]
    assert name.startswith("web.")
    micros = (WALL - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert int(name[4:], 16) // 1000 == micros
    assert event == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "ns"},
        "eventTime": "2026-11-30T12:00:00.123456Z",
        "reportingController": "example.com/widgets",
        "reportingInstance": "widgets-7f9c",
        "action": "Sync",
        "reason": "FailedSync",
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "7",
        },
        "note": "it broke",
        "type": "Warning",
    }
    assert EVENTS.group == "events.k8s.io"


def test_cluster_scoped_objects_report_in_default_with_related_and_a_local_offset() -> None:
    r = _recorder()
    plus_two = WALL.astimezone(timezone(timedelta(hours=2)))
    plan = r.record(
        NODE, "Normal", "Drained", "", action="Drain", now=0.0, wall=plus_two, related=POD
    )
    event = _body(plan.writes[0])
    assert event["metadata"]["namespace"] == "default"
    assert event["eventTime"] == "2026-11-30T12:00:00.123456Z"
    assert event["related"]["name"] == "web"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}


def test_a_hundred_identical_warnings_in_a_minute_cost_two_writes() -> None:
    r = _recorder()
    writes: list[EventWrite] = []
    now = 0.0
    for i in range(100):
        now = i * 0.59
        wall = WALL + timedelta(seconds=now)
        pod = {**POD, "metadata": {**POD["metadata"], "resourceVersion": str(i)}}
        plan = r.record(pod, "Warning", "Failed", f"try {i}", action="Sync", now=now, wall=wall)
        assert plan.outcome is (EventOutcome.CREATED if i == 0 else EventOutcome.COUNTED)
        for write in plan.writes:
            writes.append(write)
            r.receive_response(write, OK, now)
    assert len(writes) == 1
    deadline = r.next_deadline()
    assert deadline == 60.0
    assert r.flush(59.9) == ()
    (update,) = r.flush(deadline)
    writes.append(update)
    assert r.next_deadline() is None  # in flight
    r.receive_response(update, Response(200), deadline)
    assert len(writes) == 2
    assert (update.request.method, update.request.header("Content-Type")) == (
        "PATCH",
        "application/merge-patch+json",
    )
    name = _body(writes[0])["metadata"]["name"]
    assert update.request.path == f"/apis/events.k8s.io/v1/namespaces/ns/events/{name}"
    assert _body(update) == {
        "series": {"count": 100, "lastObservedTime": "2026-11-30T12:00:58.533456Z"}
    }
    assert r.next_deadline() is None  # nothing new since
    assert r.flush(1000.0) == ()


def test_a_repeat_after_the_flush_interval_is_written_by_record() -> None:
    r = _recorder(flush_interval=10.0)
    (create,) = r.record(POD, "Normal", "Synced", "", action="Sync", now=0.0, wall=WALL).writes
    again = r.record(POD, "Normal", "Synced", "", action="Sync", now=1.0, wall=WALL)
    assert again.writes == ()  # the create has not been answered: nothing to update yet
    r.receive_response(create, OK, 2.0)
    assert r.next_deadline() == 12.0
    plan = r.record(POD, "Normal", "Synced", "", action="Sync", now=15.0, wall=WALL)
    assert plan.outcome is EventOutcome.COUNTED
    (update,) = plan.writes
    assert _body(update)["series"]["count"] == 3
    # A repeat while the update is in flight waits for it; the answer schedules the next.
    assert r.record(POD, "Normal", "Synced", "", action="Sync", now=16.0, wall=WALL).writes == ()
    r.receive_response(update, OK, 16.0)
    assert r.next_deadline() == 26.0


def test_different_reasons_actions_or_related_objects_are_different_events() -> None:
    r = _recorder()
    plans = [
        r.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL),
        r.record(POD, "Normal", "B", "", action="X", now=0.0, wall=WALL),
        r.record(POD, "Normal", "A", "", action="Y", now=0.0, wall=WALL),
        r.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL, related=NODE),
    ]
    assert [p.outcome for p in plans] == [EventOutcome.CREATED] * 4
    names = {_body(p.writes[0])["metadata"]["name"] for p in plans}
    assert len(names) == 4  # unique even within one microsecond
    assert r.cached_keys == 4


def test_a_series_ends_after_the_window_and_a_new_event_starts() -> None:
    r = _recorder(series_window=100.0, flush_interval=10.0)
    (create,) = r.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL).writes
    r.receive_response(create, OK, 0.0)
    assert r.flush(50.0) == ()
    assert r.cached_keys == 1
    assert r.flush(101.0) == ()  # quiet and fully written: forgotten
    assert r.cached_keys == 0
    r2 = _recorder(series_window=100.0)
    (create,) = r2.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL).writes
    r2.receive_response(create, OK, 0.0)
    plan = r2.record(POD, "Normal", "A", "", action="X", now=150.0, wall=WALL)
    assert plan.outcome is EventOutcome.CREATED  # the key's series had ended


def test_failed_writes_forget_the_key() -> None:
    r = _recorder(flush_interval=1.0)
    (create,) = r.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL).writes
    r.receive_response(create, Response(403, body=b"{}"), 0.0)
    assert r.cached_keys == 0
    again = r.record(POD, "Normal", "A", "", action="X", now=1.0, wall=WALL)
    assert again.outcome is EventOutcome.CREATED
    (create,) = again.writes
    r.receive_response(create, OK, 1.0)
    r.record(POD, "Normal", "A", "", action="X", now=1.5, wall=WALL)
    (update,) = r.flush(2.0)
    r.request_failed(update, 2.0)  # e.g. the Event was garbage-collected
    assert r.cached_keys == 0
    r.request_failed(update, 2.0)  # reported twice: ignored
    r.receive_response(update, OK, 2.0)  # unknown by now: ignored


def test_stale_answers_do_not_touch_a_newer_series() -> None:
    r = _recorder(series_window=10.0)
    (old,) = r.record(POD, "Normal", "A", "", action="X", now=0.0, wall=WALL).writes
    (new,) = r.record(POD, "Normal", "A", "", action="X", now=20.0, wall=WALL).writes
    r.receive_response(old, OK, 21.0)  # the old series was replaced
    r.request_failed(
        r.record(NODE, "Normal", "A", "", action="X", now=0.0, wall=WALL).writes[0], 21.0
    )
    r.receive_response(new, OK, 21.0)
    assert r.cached_keys == 1
    r.record(POD, "Normal", "A", "", action="X", now=22.0, wall=WALL)
    assert r.next_deadline() == 81.0


def test_spam_filter_allows_a_burst_then_one_per_five_minutes() -> None:
    r = _recorder()
    outcomes = [
        r.record(POD, "Normal", f"R{i}", "", action="X", now=0.0, wall=WALL).outcome
        for i in range(30)
    ]
    assert outcomes.count(EventOutcome.CREATED) == 25
    assert outcomes[25:] == [EventOutcome.SPAM] * 5
    spam = r.record(POD, "Normal", "Other", "", action="X", now=299.0, wall=WALL)
    assert spam.outcome is EventOutcome.SPAM
    assert spam.reason == "too many events for this object"
    ok = r.record(POD, "Normal", "Other", "", action="X", now=300.0, wall=WALL)
    assert ok.outcome is EventOutcome.CREATED
    # Another object has its own bucket; repeats of a known key are never filtered.
    assert r.record(NODE, "Normal", "R", "", action="X", now=300.0, wall=WALL).writes
    assert r.record(POD, "Normal", "R0", "", action="X", now=300.0, wall=WALL).outcome is (
        EventOutcome.COUNTED
    )
    # A clock that steps back refills nothing.
    assert r.record(POD, "Normal", "Z", "", action="X", now=0.0, wall=WALL).outcome is (
        EventOutcome.SPAM
    )


def test_state_is_bounded() -> None:
    r = _recorder(cache_size=3, burst=100)
    nodes = [{**NODE, "metadata": {"name": f"n{i}"}} for i in range(5)]
    for node in nodes:
        r.record(node, "Normal", "A", "", action="X", now=0.0, wall=WALL)
    assert r.cached_keys == 3
    # n0's bucket was evicted with the others: it starts full again.
    assert r.record(nodes[0], "Normal", "B", "", action="X", now=0.0, wall=WALL).writes
    for i in range(3):  # a refreshed key moves to the back
        r.record(nodes[4], "Normal", "A", "", action="X", now=float(i), wall=WALL)
    r.record(nodes[1], "Normal", "C", "", action="X", now=0.0, wall=WALL)
    assert r.cached_keys == 3


def test_long_notes_are_truncated_on_a_character_boundary() -> None:
    r = _recorder()
    note = "é" * 600  # 1200 bytes
    event = _body(r.record(POD, "Normal", "A", note, action="X", now=0.0, wall=WALL).writes[0])
    assert event["note"] == "é" * 512
    assert len(event["note"].encode()) == 1024


@pytest.mark.parametrize(
    ("obj", "kwargs", "message"),
    [
        (POD, {"type": "Error"}, "type must be Normal or Warning"),
        (POD, {"reason": ""}, "reason must be a non-empty string"),
        (POD, {"action": "x" * 129}, "action must have at most 128 characters"),
        (POD, {"note": None}, "note must be a string"),
        (POD, {"wall": datetime(2026, 1, 1)}, "timezone-aware"),
        (POD, {"now": float("nan")}, "now must be a finite number"),
        ({"kind": "Pod"}, {}, "the regarding object has no apiVersion"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": []}, {}, "has no name"),
        ([], {}, "the regarding object is not a mapping"),
        (POD, {"related": {"apiVersion": "v1"}}, "the related object has no kind"),
        ({**NODE, "metadata": {"name": "n" * 240}}, {}, "would exceed 253 characters"),
        ({**NODE, "metadata": {"name": "n", "namespace": "Bad_NS"}}, {}, "invalid namespace"),
    ],
)
def test_bad_input_is_never_raised(obj: Any, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "type": "Normal",
        "reason": "A",
        "note": "",
        "action": "X",
        "now": 0.0,
        "wall": WALL,
    }
    args.update(kwargs)
    plan = _recorder().record(obj, **args)
    assert plan.outcome is EventOutcome.INVALID
    assert plan.writes == ()
    assert message in plan.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reporting_controller": ""}, "reporting_controller"),
        ({"reporting_instance": "x" * 129}, "reporting_instance"),
        ({"series_window": 0}, "series_window"),
        ({"flush_interval": float("inf")}, "flush_interval"),
        ({"refill_seconds": "1"}, "refill_seconds"),
        ({"burst": 0}, "burst"),
        ({"cache_size": True}, "cache_size"),
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"reporting_controller": "c", "reporting_instance": "i"}
    args.update(kwargs)
    with pytest.raises(LocalProtocolError, match=message):
        EventRecorder(**args)
