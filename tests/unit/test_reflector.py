"""Reflector: each rule of the state machine, driven step by step on a virtual clock."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kubemoon_core import (
    APIResource,
    GroupVersionKind,
    GroupVersionResource,
    Request,
    Response,
    Scope,
)
from kubemoon_core._backoff import Backoff
from kubemoon_core._changes import ChangeType
from kubemoon_core._reflector import ERROR_BODY_LIMIT, MAX_RETRY_AFTER, Reflector, ReflectorStats
from kubemoon_core._reflector_states import ReflectorInput, ReflectorState, RelistReason
from kubemoon_core._store import Store, namespace_indexer
from kubemoon_core.errors import (
    DecodeError,
    LocalProtocolError,
    RemoteProtocolError,
    TooManyRequests,
)

CM = GroupVersionResource("", "v1", "configmaps")
PATH = "/api/v1/namespaces/ns/configmaps"
State = ReflectorState


def cm(name: str, rv: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "data": data,
    }


def item(name: str, rv: str) -> dict[str, Any]:
    """A list item as the server sends it: without apiVersion and kind."""
    obj = cm(name, rv)
    del obj["apiVersion"], obj["kind"]
    return obj


def page(items: list[dict[str, Any]], rv: str, token: str | None = None) -> Response:
    metadata: dict[str, Any] = {"resourceVersion": rv}
    if token is not None:
        metadata["continue"] = token
    body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata, "items": items}
    return Response(200, (), json.dumps(body).encode())


def status(code: int, reason: str, *headers: tuple[str, str]) -> Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "code": code,
        "reason": reason,
        "status": "Failure",
        "message": reason,
    }
    return Response(code, headers, json.dumps(body).encode())


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(rv: str, *, end: bool = False) -> bytes:
    metadata: dict[str, Any] = {"resourceVersion": rv}
    if end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return line("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata})


def expired() -> bytes:
    return line(
        "ERROR",
        {
            "kind": "Status",
            "apiVersion": "v1",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version",
        },
    )


def make(**kwargs: Any) -> Reflector:
    kwargs.setdefault("rng", random.Random(1))
    kwargs.setdefault("namespace", "ns")
    return Reflector(CM, **kwargs)


def state(r: Reflector) -> ReflectorState:
    """The state, read through a call so that mypy does not narrow it between steps."""
    return r.state


def relist_time(r: Reflector, now: float) -> float:
    """After a watch 410: a relist is due after the first backoff step (0.6 to 0.8 s)."""
    assert state(r) is State.SYNC_DUE
    deadline = r.next_deadline()
    assert deadline is not None
    assert now + 0.6 <= deadline <= now + 0.8
    assert r.next_request(now) is None
    return deadline


def has_synced(r: Reflector) -> bool:
    return r.has_synced


def request(r: Reflector, now: float = 0.0) -> Request:
    req = r.next_request(now)
    assert req is not None, r.state
    return req


def synced(objects: tuple[tuple[str, str], ...] = (), rv: str = "10") -> Reflector:
    """A reflector that listed ``objects`` at ``rv`` and has its watch open."""
    r = make()
    request(r)
    r.receive_response(page([item(n, v) for n, v in objects], rv), 0.0)
    watch = request(r)
    assert watch.stream
    r.receive_watch_head(200, (), 0.0)
    return r


def stored(r: Reflector) -> dict[str, str]:
    return {k.name: o["metadata"]["resourceVersion"] for k, o in r.store.items()}


# -- LIST --------------------------------------------------------------------------------------


def test_the_first_sync_is_a_consistent_paginated_list() -> None:
    r = make()
    assert state(r) is State.SYNC_DUE
    assert r.next_deadline() == float("-inf")
    assert not has_synced(r)
    assert r.resource_version == ""
    first = request(r, 5.0)
    assert (first.method, first.path, first.stream) == ("GET", PATH, False)
    assert dict(first.query) == {"limit": "500"}  # no resourceVersion: the newest state
    assert state(r) is State.LISTING
    assert r.next_request(5.0) is None  # busy
    assert r.next_deadline() is None

    assert r.receive_response(page([item("a", "3")], "10", token="t1"), 6.0) == []
    assert state(r) is State.PAGE_DUE
    assert len(r.store) == 0  # never a partial list
    second = request(r, 6.0)
    assert dict(second.query) == {"limit": "500", "continue": "t1"}

    changes = r.receive_response(page([item("b", "4")], "10"), 7.0)
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.ADDED, "a"),
        (ChangeType.ADDED, "b"),
    ]
    assert has_synced(r)
    assert r.resource_version == "10"
    assert state(r) is State.WATCH_DUE
    assert r.next_deadline() == 7.0
    # List items get the apiVersion and kind of the list.
    assert r.store.objects()[0] == cm("a", "3")
    assert r.stats.syncs == 1
    assert r.stats.relists == 0


def test_items_keep_their_own_kind_and_odd_lists_are_tolerated() -> None:
    r = make(page_size=2)
    req = request(r)
    assert req.query_value("limit") == "2"
    own = {"apiVersion": "x/v1", "kind": "Other", "metadata": {"name": "a", "resourceVersion": "1"}}
    body = {"kind": "Mystery", "metadata": {"resourceVersion": "5"}, "items": [own]}
    r.receive_response(Response(200, (), json.dumps(body).encode()), 0.0)
    assert r.store.objects() == [own]
    r2 = make()
    request(r2)
    r2.receive_response(
        Response(200, (), b'{"metadata": {"resourceVersion": "5"}, "items": null}'), 0.0
    )
    assert r2.has_synced
    assert len(r2.store) == 0


def test_a_relist_replaces_the_store_only_after_its_last_page() -> None:
    r = synced((("a", "1"), ("b", "2")))
    r.receive_watch_data(expired(), 1.0)
    assert r.poll(1.0)
    r.watch_ended(1.0)
    t = relist_time(r, 1.0)
    first = request(r, t)
    assert dict(first.query) == {
        "limit": "500",
        "resourceVersion": "10",
        "resourceVersionMatch": "NotOlderThan",
    }
    r.receive_response(page([item("a", "1")], "20", token="t"), t)
    assert stored(r) == {"a": "1", "b": "2"}
    request(r, t)
    changes = r.receive_response(page([item("c", "15")], "20"), t)
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.ADDED, "c"),
        (ChangeType.DELETED, "b"),
    ]
    assert stored(r) == {"a": "1", "c": "15"}
    assert r.resource_version == "20"


def test_a_410_on_a_list_at_a_resource_version_lists_the_newest_state() -> None:
    r = synced((("a", "1"),))
    r.receive_watch_data(expired(), 1.0)
    r.watch_ended(1.0)
    assert request(r, relist_time(r, 1.0)).query_value("resourceVersion") == "10"
    r.receive_response(status(410, "Expired"), 2.0)
    assert state(r) is State.SYNC_DUE
    assert r.next_deadline() == 2.0  # at once
    req = request(r, 2.0)
    assert req.query_value("resourceVersion") is None
    assert req.query_value("resourceVersionMatch") is None
    stats = r.stats
    assert stats.relists == 2
    assert dict(stats.relist_reasons) == {
        RelistReason.WATCH_EXPIRED: 1,
        RelistReason.LIST_EXPIRED: 1,
    }
    assert stats.last_relist_reason is RelistReason.LIST_EXPIRED


def test_an_expired_continue_token_restarts_the_list_from_scratch() -> None:
    r = synced((("old", "1"),))
    r.receive_watch_data(expired(), 1.0)
    r.watch_ended(1.0)
    request(r, relist_time(r, 1.0))
    r.receive_response(page([item("a", "1")], "20", token="t"), 1.9)
    req = request(r, 1.9)
    assert req.query_value("continue") == "t"
    assert r.receive_response(status(410, "Expired"), 2.0) == []
    assert stored(r) == {"old": "1"}  # the partial list was dropped
    assert r.stats.last_relist_reason is RelistReason.CONTINUE_EXPIRED
    req = request(r, 2.0)
    assert dict(req.query) == {"limit": "500"}
    r.receive_response(page([item("b", "30")], "30"), 3.0)
    assert stored(r) == {"b": "30"}


@pytest.mark.parametrize(
    "response",
    [
        status(429, "TooManyRequests"),
        status(500, "InternalError"),
        status(503, "ServiceUnavailable"),
        status(403, "Forbidden"),  # the first page: retried, there is no list to restart
        status(410, "Expired"),  # at no resourceVersion: a server quirk, retried
        Response(200, (), b"not json"),
        Response(200, (), b"[]"),
        Response(200, (), b"{}"),
        Response(200, (), b'{"metadata": {}}'),
        Response(200, (), b'{"metadata": {"resourceVersion": "1", "continue": 5}}'),
        Response(200, (), b'{"metadata": {"resourceVersion": "1"}, "items": {}}'),
        Response(200, (), b'{"metadata": {"resourceVersion": "1"}, "items": [1]}'),
        Response(200, (), b'{"metadata": {"resourceVersion": "1"}, "items": [{}]}'),
    ],
)
def test_a_failed_page_is_retried_after_a_backoff(response: Response) -> None:
    r = make()
    request(r, 100.0)
    assert r.receive_response(response, 100.0) == []
    assert state(r) is State.PAGE_DUE
    deadline = r.next_deadline()
    assert deadline is not None
    assert 100.0 + 0.6 <= deadline <= 100.8
    assert r.next_request(100.5) is None
    assert request(r, deadline).query == (("limit", "500"),)
    assert r.stats.failures == 1
    assert r.stats.relists == 0
    assert r.last_error is not None


def test_retry_after_is_honoured_and_capped() -> None:
    r = make()
    request(r)
    r.receive_response(status(429, "TooManyRequests", ("Retry-After", "7")), 10.0)
    assert isinstance(r.last_error, TooManyRequests)
    assert r.next_deadline() == 17.0
    request(r, 17.0)
    r.receive_response(status(503, "ServiceUnavailable", ("Retry-After", "99999")), 20.0)
    assert r.next_deadline() == 20.0 + MAX_RETRY_AFTER


def test_a_connection_error_keeps_the_continue_token() -> None:
    r = make()
    request(r)
    r.receive_response(page([item("a", "1")], "10", token="t"), 0.0)
    request(r)
    error = ConnectionResetError("reset")
    r.request_failed(0.0, error)
    assert r.last_error is error
    deadline = r.next_deadline()
    assert deadline is not None
    assert request(r, deadline).query_value("continue") == "t"
    r.request_failed(deadline)  # no error object: still a failure
    assert r.stats.failures == 2


def test_a_refused_later_page_restarts_the_list_after_a_backoff() -> None:
    r = synced((("a", "1"),))
    r.receive_watch_data(expired(), 1.0)
    r.watch_ended(1.0)
    request(r, relist_time(r, 1.0))
    r.receive_response(page([item("a", "1")], "20", token="t"), 1.9)
    request(r, 1.9)
    r.receive_response(status(400, "BadRequest"), 2.0)
    assert state(r) is State.SYNC_DUE
    deadline = r.next_deadline()
    assert deadline is not None
    assert deadline > 2.0
    assert r.stats.last_relist_reason is RelistReason.LIST_FAILED
    # The restart keeps asking for the last resourceVersion it knew.
    assert request(r, deadline).query_value("resourceVersion") == "10"


# -- WATCH -------------------------------------------------------------------------------------


def test_the_watch_starts_from_the_list_with_bookmarks_and_a_random_timeout() -> None:
    timeouts = set()
    for seed in range(30):
        r = make(rng=random.Random(seed))
        request(r)
        r.receive_response(page([], "10"), 0.0)
        watch = request(r)
        query = dict(watch.query)
        assert watch.stream
        assert query["watch"] == "1"
        assert query["resourceVersion"] == "10"
        assert query["allowWatchBookmarks"] == "true"
        assert "resourceVersionMatch" not in query
        timeout = int(query["timeoutSeconds"])
        assert 300 <= timeout <= 600
        timeouts.add(timeout)
        assert state(r) is State.WATCH_CONNECTING
        assert r.next_deadline() == 0.0 + timeout + 30.0
    assert len(timeouts) > 20
    # The same seed gives the same timeout.
    r1, r2 = make(rng=random.Random(3)), make(rng=random.Random(3))
    for r in (r1, r2):
        request(r)
        r.receive_response(page([], "1"), 0.0)
    assert request(r1).query == request(r2).query


def test_events_change_the_store_and_move_the_resume_point() -> None:
    r = synced((("a", "1"),))
    stream = (
        line("ADDED", cm("b", "11"))
        + line("MODIFIED", cm("a", "12"))
        + line("DELETED", cm("b", "13"))
        + bookmark("14")
        + line("MODIFIED", cm("a", "12"))
    )
    changes = []
    for i in range(0, len(stream), 7):
        changes += r.receive_watch_data(stream[i : i + 7], 1.0)
        assert not r.poll(1.0)
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.ADDED, "b"),
        (ChangeType.MODIFIED, "a"),
        (ChangeType.DELETED, "b"),
    ]
    assert stored(r) == {"a": "12"}
    assert r.resource_version == "12"  # the replayed event moves it back to what it says
    stats = r.stats
    assert (stats.events, stats.bookmarks) == (4, 1)


def test_stats_count_the_bytes_of_list_pages_and_watch_bodies() -> None:
    r = make()
    request(r)
    first = page([item("a", "3")], "10", token="t1")
    r.receive_response(first, 0.0)
    request(r)
    failed = status(500, "InternalError")
    r.receive_response(failed, 0.0)  # a failed page's body was received too
    assert r.stats.list_bytes == len(first.body) + len(failed.body)
    assert r.stats.watch_bytes == 0

    w = synced((("a", "1"),))
    listed = w.stats.list_bytes
    stream = line("ADDED", cm("b", "11")) + bookmark("12")
    for i in range(0, len(stream), 5):  # chunk boundaries do not matter
        w.receive_watch_data(stream[i : i + 5], 1.0)
    assert (w.stats.watch_bytes, w.stats.list_bytes) == (len(stream), listed)


def test_a_bookmark_moves_the_resume_point_without_a_change() -> None:
    r = synced((("a", "1"),))
    assert r.receive_watch_data(bookmark("50"), 1.0) == []
    assert r.resource_version == "50"
    r.watch_ended(2.0)
    assert request(r, 2.0).query_value("resourceVersion") == "50"


def test_a_clean_end_rewatches_at_once_without_relisting() -> None:
    r = synced((("a", "1"),))
    r.receive_watch_data(line("MODIFIED", cm("a", "11")), 1.0)
    r.watch_ended(400.0)
    assert state(r) is State.WATCH_DUE
    assert r.next_deadline() == 400.0
    watch = request(r, 400.0)
    assert watch.query_value("resourceVersion") == "11"
    assert r.stats.watch_restarts == 1
    assert r.stats.relists == 0
    assert r.stats.failures == 0


def test_a_watch_that_ends_at_once_with_nothing_backs_off() -> None:
    r = synced()
    r.watch_ended(0.5)
    deadline = r.next_deadline()
    assert deadline is not None
    assert deadline > 0.5
    assert r.stats.failures == 1


def test_a_watch_cut_inside_an_event_backs_off() -> None:
    r = synced()
    r.receive_watch_data(bookmark("11") + b'{"type": "ADD', 100.0)
    r.watch_ended(200.0)
    assert isinstance(r.last_error, RemoteProtocolError)
    deadline = r.next_deadline()
    assert deadline is not None
    assert deadline > 200.0
    assert request(r, deadline).query_value("resourceVersion") == "11"


def test_a_dropped_watch_backs_off_and_resumes() -> None:
    r = synced((("a", "1"),))
    r.receive_watch_data(line("ADDED", cm("b", "11")), 1.0)
    r.watch_ended(2.0, ConnectionResetError("reset"))
    assert state(r) is State.WATCH_DUE
    deadline = r.next_deadline()
    assert deadline is not None
    assert 2.6 <= deadline <= 2.8
    watch = request(r, deadline)
    assert watch.query_value("resourceVersion") == "11"
    assert r.stats.relists == 0


def test_a_dropped_connection_before_the_head() -> None:
    r = make()
    request(r)
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.watch_ended(1.0, OSError("refused"))
    assert state(r) is State.WATCH_DUE
    assert r.stats.failures == 1


def test_a_410_event_relists_at_the_last_resource_version() -> None:
    r = synced((("a", "1"),))
    stream = line("ADDED", cm("b", "11")) + expired() + line("ADDED", cm("c", "12"))
    changes = r.receive_watch_data(stream, 1.0)
    assert [c.key.name for c in changes] == ["b"]  # nothing after the ERROR counts
    assert state(r) is State.WATCH_EXPIRED
    assert r.poll(1.0)
    assert r.next_deadline() is None
    assert r.receive_watch_data(b"more", 1.0) == []
    r.watch_ended(1.5)
    req = request(r, relist_time(r, 1.5))
    assert req.query_value("resourceVersion") == "11"
    assert req.query_value("resourceVersionMatch") == "NotOlderThan"
    assert stored(r) == {"a": "1", "b": "11"}  # kept until the relist completes
    assert r.stats.last_relist_reason is RelistReason.WATCH_EXPIRED


def test_relists_that_repeat_back_off_more_no_relist_storm() -> None:
    r = make(backoff=Backoff(random.Random(0), jitter=0.0))
    now = 0.0
    delays = []
    for rv in ("10", "20", "30"):
        request(r, now)
        r.receive_response(page([], rv), now)
        request(r, now)
        r.receive_watch_head(200, (), now)
        r.receive_watch_data(expired(), now)
        r.watch_ended(now)
        deadline = r.next_deadline()
        assert deadline is not None
        delays.append(deadline - now)
        now = deadline
    assert delays == pytest.approx([0.8, 1.6, 3.2])
    # After two healthy minutes the first relist is quick again.
    request(r, now)
    r.receive_response(page([], "40"), now)
    request(r, now)
    r.receive_watch_head(200, (), now)
    r.receive_watch_data(expired(), now + 121.0)
    r.watch_ended(now + 121.0)
    assert r.next_deadline() == pytest.approx(now + 121.0 + 0.8)


def test_a_410_head_relists_too() -> None:
    r = make()
    request(r)
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.receive_watch_head(410, (("Content-Type", "application/json"),), 1.0)
    assert state(r) is State.WATCH_REJECTED
    r.receive_watch_data(status(410, "Gone").body, 1.0)
    r.watch_ended(1.0)
    assert request(r, relist_time(r, 1.0)).query_value("resourceVersion") == "10"


def test_429_and_5xx_on_a_watch_back_off_without_relisting() -> None:
    r = make()
    request(r)
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.receive_watch_head(429, (("Retry-After", "12"),), 1.0)
    body = status(429, "TooManyRequests").body
    r.receive_watch_data(body[:10], 1.0)
    r.receive_watch_data(body[10:], 1.0)
    r.watch_ended(1.0)
    assert state(r) is State.WATCH_DUE
    assert r.next_deadline() == 13.0
    assert isinstance(r.last_error, TooManyRequests)
    request(r, 13.0)
    r.receive_watch_head(500, (), 13.0)
    r.receive_watch_data(b"x" * (ERROR_BODY_LIMIT + 10), 13.0)
    r.receive_watch_data(b"more", 13.0)
    r.watch_ended(13.0)
    assert state(r) is State.WATCH_DUE
    assert r.stats.relists == 0
    assert r.stats.watch_restarts == 2
    error = r.last_error
    assert error is not None
    assert getattr(error, "code", None) == 500


@pytest.mark.parametrize(
    "bad",
    [
        b"garbage\n",
        line("ADDED", {"metadata": {"resourceVersion": "11"}}),  # no name
        line("ADDED", {"metadata": {"name": "a"}}),  # no resourceVersion
        line("BOOKMARK", {"metadata": {}}),
        line("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError"}),
    ],
)
def test_bad_data_or_an_error_event_abandons_the_watch_and_backs_off(bad: bytes) -> None:
    r = synced((("a", "1"),))
    assert len(r.receive_watch_data(line("ADDED", cm("b", "11")), 1.0)) == 1
    assert r.receive_watch_data(bad + line("ADDED", cm("c", "12")), 1.0) == []
    assert state(r) is State.WATCH_CLOSING
    assert r.poll(1.0)
    r.watch_ended(1.0)
    assert state(r) is State.WATCH_DUE
    deadline = r.next_deadline()
    assert deadline is not None
    assert deadline > 1.0
    assert request(r, deadline).query_value("resourceVersion") == "11"
    assert r.stats.relists == 0


def test_events_before_a_bad_event_in_the_same_chunk_still_count() -> None:
    r = synced()
    bad = line("ADDED", {"metadata": {"name": "x"}})  # valid JSON, but no resourceVersion
    changes = r.receive_watch_data(line("ADDED", cm("b", "11")) + bad, 1.0)
    assert [c.key.name for c in changes] == ["b"]
    assert r.resource_version == "11"
    assert state(r) is State.WATCH_CLOSING


def test_events_before_malformed_json_in_the_same_chunk_still_count() -> None:
    # As if the chunk had been cut just before the bad line: the events before it apply.
    r = synced()
    chunk = line("ADDED", cm("b", "11")) + b"{oops}\n" + line("ADDED", cm("c", "12"))
    changes = r.receive_watch_data(chunk, 1.0)
    assert [c.key.name for c in changes] == ["b"]
    assert r.resource_version == "11"
    assert state(r) is State.WATCH_CLOSING
    assert isinstance(r.last_error, DecodeError)
    assert r.receive_watch_data(line("ADDED", cm("d", "13")), 1.0) == []
    assert stored(r) == {"b": "11"}


def test_a_line_over_the_limit_abandons_the_watch() -> None:
    r = make(max_line_length=100)
    request(r)
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.receive_watch_head(200, (), 0.0)
    assert r.receive_watch_data(b"x" * 101, 1.0) == []
    assert state(r) is State.WATCH_CLOSING
    assert isinstance(r.last_error, DecodeError)


def test_an_error_event_with_retry_after() -> None:
    r = synced()
    error = {
        "kind": "Status",
        "code": 429,
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 40},
    }
    r.receive_watch_data(line("ERROR", error), 1.0)
    r.watch_ended(1.0)
    assert r.next_deadline() == 41.0


def test_a_stall_abandons_the_watch() -> None:
    r = make()
    request(r)
    r.receive_response(page([], "10"), 0.0)
    timeout = int(request(r).query_value("timeoutSeconds") or 0)
    r.receive_watch_head(200, (), 0.0)
    r.receive_watch_data(bookmark("11"), 100.0)
    deadline = r.next_deadline()
    assert deadline == 100.0 + timeout + 30.0
    assert not r.poll(deadline - 0.001)
    assert r.poll(deadline)
    assert state(r) is State.WATCH_CLOSING
    assert r.stats.stalls == 1
    r.watch_ended(deadline)
    assert state(r) is State.WATCH_DUE
    later = r.next_deadline()
    assert later is not None
    request(r, later)
    # Stalls are also detected before the head arrives.
    assert r.poll(later + 1000.0)
    r.watch_ended(later + 1000.0)
    assert r.stats.stalls == 2


def test_a_stall_while_reading_a_refusal() -> None:
    r = make()
    request(r)
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.receive_watch_head(503, (), 0.0)
    assert r.poll(10_000.0)
    r.watch_ended(10_000.0)
    assert state(r) is State.WATCH_DUE


# -- streaming lists ---------------------------------------------------------------------------


def stream_started(**kwargs: Any) -> tuple[Reflector, Request]:
    r = make(streaming_list=True, **kwargs)
    req = request(r)
    r.receive_watch_head(200, (), 0.0)
    return r, req


def test_a_streaming_list_replaces_the_store_at_the_end_bookmark() -> None:
    store = Store()
    store.upsert(cm("stale", "1"))
    r, req = stream_started(store=store)
    assert req.stream
    query = dict(req.query)
    assert query["sendInitialEvents"] == "true"
    assert query["resourceVersionMatch"] == "NotOlderThan"
    assert query["resourceVersion"] == ""
    assert query["allowWatchBookmarks"] == "true"
    assert state(r) is State.STREAMING
    initial = (
        line("ADDED", cm("a", "5"))
        + line("ADDED", cm("b", "6"))
        + bookmark("7")
        + line("DELETED", cm("b", "8"))
    )
    assert r.receive_watch_data(initial, 1.0) == []
    assert stored(r) == {"stale": "1"}  # nothing visible before the end bookmark
    assert not has_synced(r)
    assert r.resource_version == ""
    changes = r.receive_watch_data(bookmark("9", end=True) + line("ADDED", cm("c", "10")), 2.0)
    assert [(c.type, c.key.name) for c in changes] == [
        (ChangeType.ADDED, "a"),
        (ChangeType.DELETED, "stale"),
        (ChangeType.ADDED, "c"),
    ]
    assert state(r) is State.WATCHING  # the same connection goes on as the watch
    assert has_synced(r)
    assert r.resource_version == "10"
    assert r.stats.syncs == 1


def test_a_refused_streaming_list_falls_back_to_list_and_watch_for_good() -> None:
    r = make(streaming_list=True)
    request(r)
    r.receive_watch_head(422, (), 0.0)
    r.receive_watch_data(status(422, "Invalid").body, 0.0)
    r.watch_ended(0.0)
    assert not r.streaming_list
    assert state(r) is State.SYNC_DUE
    assert r.stats.last_relist_reason is RelistReason.STREAM_REFUSED
    listing = request(r, 0.0)
    assert not listing.stream
    r.receive_response(page([], "10"), 0.0)
    request(r)
    r.receive_watch_head(200, (), 0.0)
    r.receive_watch_data(expired(), 1.0)
    r.watch_ended(1.0)
    assert not request(r, relist_time(r, 1.0)).stream  # still LIST


def test_a_stream_that_ends_before_its_end_bookmark_lists_once() -> None:
    r, _ = stream_started()
    r.receive_watch_data(line("ADDED", cm("a", "5")), 1.0)
    r.watch_ended(300.0)
    assert state(r) is State.SYNC_DUE
    assert r.next_deadline() == 300.0  # a clean end: at once
    assert r.stats.last_relist_reason is RelistReason.STREAM_FAILED
    assert len(r.store) == 0
    listing = request(r, 300.0)
    assert not listing.stream
    r.receive_response(page([item("a", "5")], "10"), 300.0)
    request(r, 300.0)
    r.receive_watch_head(200, (), 300.0)
    r.receive_watch_data(expired(), 301.0)
    r.watch_ended(301.0)
    again = request(r, relist_time(r, 301.0))  # the next sync streams again, at the last RV
    assert again.stream
    assert again.query_value("sendInitialEvents") == "true"
    assert again.query_value("resourceVersion") == "10"


@pytest.mark.parametrize("how", ["dropped", "connecting", "stall", "broken", "503", "410 at ''"])
def test_a_failed_stream_backs_off_then_lists(how: str) -> None:
    r = make(streaming_list=True)
    request(r)
    if how == "connecting":
        r.watch_ended(0.0, OSError("refused"))
    elif how == "503":
        r.receive_watch_head(503, (), 0.0)
        r.watch_ended(0.0)
    else:
        r.receive_watch_head(200, (), 0.0)
        if how == "dropped":
            r.watch_ended(0.0, ConnectionResetError())
        elif how == "stall":
            assert r.poll(1e6)
            r.watch_ended(1e6)
        elif how == "broken":
            r.receive_watch_data(b"garbage\n", 0.0)
            assert state(r) is State.STREAM_CLOSING
            assert r.receive_watch_data(b"ignored", 0.0) == []
            r.watch_ended(0.0)
        else:
            r.receive_watch_data(expired(), 0.0)  # no resourceVersion to fall back from
            assert state(r) is State.STREAM_CLOSING
            r.watch_ended(0.0)
    assert state(r) is State.SYNC_DUE
    assert r.stats.last_relist_reason is RelistReason.STREAM_FAILED
    assert r.stats.failures == 1
    deadline = r.next_deadline()
    assert deadline is not None
    assert not request(r, deadline + 1e6).stream
    assert r.streaming_list  # only this sync falls back


def relisting_stream(**kwargs: Any) -> Reflector:
    """A streaming reflector whose watch got a 410: its next sync streams at RV 9."""
    r, _ = stream_started(**kwargs)
    r.receive_watch_data(bookmark("9", end=True) + expired(), 0.0)
    r.watch_ended(0.0)
    req = request(r, relist_time(r, 0.0))
    assert req.query_value("resourceVersion") == "9"
    assert req.query_value("sendInitialEvents") == "true"
    return r


def test_a_410_on_a_stream_at_a_resource_version_streams_the_newest_state() -> None:
    r = relisting_stream()
    r.receive_watch_head(200, (), 0.0)
    r.receive_watch_data(expired(), 0.0)
    assert state(r) is State.STREAM_EXPIRED
    assert r.receive_watch_data(b"x", 0.0) == []
    r.watch_ended(1.0)
    assert r.stats.last_relist_reason is RelistReason.STREAM_EXPIRED
    assert r.next_deadline() == 1.0  # at once
    assert request(r, 1.0).query_value("resourceVersion") == ""


def test_a_410_head_on_a_stream_at_a_resource_version() -> None:
    r = relisting_stream()
    r.receive_watch_head(410, (), 0.0)
    r.watch_ended(1.0, ConnectionResetError())  # the body never came: the code decides
    assert r.stats.last_relist_reason is RelistReason.STREAM_EXPIRED
    assert request(r, 1.0).query_value("resourceVersion") == ""


def test_a_stream_stall_before_its_head() -> None:
    r = make(streaming_list=True)
    request(r)
    assert state(r) is State.STREAM_CONNECTING
    assert r.poll(1e6)
    assert state(r) is State.STREAM_CLOSING
    r.watch_ended(1e6)
    assert r.stats.last_relist_reason is RelistReason.STREAM_FAILED


def test_a_stream_stall_while_reading_a_refusal() -> None:
    r = make(streaming_list=True)
    request(r)
    r.receive_watch_head(400, (), 0.0)
    assert r.poll(1e6)
    r.watch_ended(1e6)
    assert r.stats.last_relist_reason is RelistReason.STREAM_FAILED
    assert r.streaming_list


# -- the API contract --------------------------------------------------------------------------


def test_calls_the_state_does_not_accept_raise() -> None:
    r = make()
    with pytest.raises(LocalProtocolError, match="receive_response.*SYNC_DUE"):
        r.receive_response(page([], "1"), 0.0)
    with pytest.raises(LocalProtocolError):
        r.receive_watch_head(200, (), 0.0)
    with pytest.raises(LocalProtocolError):
        r.watch_ended(0.0)
    with pytest.raises(LocalProtocolError):
        r.receive_watch_data(b"x", 0.0)
    request(r)
    with pytest.raises(LocalProtocolError):
        r.watch_ended(0.0)
    r.receive_response(page([], "1"), 0.0)
    with pytest.raises(LocalProtocolError):
        r.request_failed(0.0)
    request(r)
    with pytest.raises(LocalProtocolError, match="receive_watch_data"):
        r.receive_watch_data(b"x", 0.0)  # before the head
    r.receive_watch_head(200, (), 0.0)
    with pytest.raises(LocalProtocolError, match="watch_ended"):
        r.receive_watch_data(b"", 0.0)
    assert not r.poll(0.0)
    assert r.next_request(0.0) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rng": None},
        {"page_size": 0},
        {"page_size": True},
        {"stall_margin": -1.0},
        {"label_selector": "a\x00b"},
        {"namespace": "Not_Valid"},
        {"max_line_length": 0},
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError):
        make(**kwargs)


def test_selectors_an_api_resource_and_a_custom_backoff_and_store() -> None:
    resource = APIResource(CM, "ConfigMap", Scope.NAMESPACED)
    store = Store(indexers={"namespace": namespace_indexer})
    r = Reflector(
        resource,
        rng=random.Random(0),
        label_selector="app=web",
        field_selector="metadata.name!=x",
        store=store,
        backoff=Backoff(random.Random(0), jitter=0.0, initial=2.0),
    )
    assert r.store is store
    assert repr(r) == "<Reflector configmaps.v1 SYNC_DUE rv='' objects=0>"
    req = request(r)
    assert req.path == "/api/v1/configmaps"
    assert req.query_value("labelSelector") == "app=web"
    assert req.query_value("fieldSelector") == "metadata.name!=x"
    r.request_failed(10.0)
    assert r.next_deadline() == 12.0
    assert GroupVersionKind("", "v1", "ConfigMap") == resource.gvk


def test_stats_are_a_plain_snapshot() -> None:
    r = synced((("a", "1"),))
    assert repr(r) == "<Reflector configmaps.v1 WATCHING rv='10' objects=1>"
    before = r.stats
    r.receive_watch_data(bookmark("11"), 0.0)
    assert before.bookmarks == 0
    assert r.stats.bookmarks == 1
    assert isinstance(before, ReflectorStats)
    with pytest.raises(TypeError):
        before.relist_reasons[RelistReason.LIST_FAILED] = 1  # type: ignore[index]


def test_the_transition_table_is_data_and_draws_a_diagram() -> None:
    table = Reflector.transitions()
    with pytest.raises(TypeError):
        table[(State.SYNC_DUE, ReflectorInput.DATA)] = None  # type: ignore[index]
    sources = {source for source, _ in table}
    targets = {edge.target for edge in table.values()}
    assert sources == set(State) == targets | {State.SYNC_DUE}
    diagram = table.diagram()
    assert diagram.startswith("stateDiagram-v2\n    [*] --> SYNC_DUE\n")
    assert "    WATCHING --> WATCH_EXPIRED: 410\n" in diagram
    assert diagram.count("-->") == len(table) + 1


@pytest.mark.parametrize("bad", [(-1, 5), (10, 5), (1.5, 3), (True, 3)])
def test_watch_timeout_range_is_validated(bad: tuple[int, int]) -> None:
    import random

    from kubemoon_core import GroupVersionResource
    from kubemoon_core.errors import LocalProtocolError
    from kubemoon_core.lowlevel import Reflector

    with pytest.raises(LocalProtocolError, match="watch_timeout"):
        Reflector(
            GroupVersionResource("", "v1", "configmaps"), rng=random.Random(0), watch_timeout=bad
        )


def test_watch_timeout_is_drawn_from_the_given_range() -> None:
    import random

    from kubemoon_core import GroupVersionResource, Response
    from kubemoon_core.lowlevel import Reflector

    reflector = Reflector(
        GroupVersionResource("", "v1", "configmaps"), rng=random.Random(0), watch_timeout=(7, 7)
    )
    listing = reflector.next_request(0.0)
    assert listing is not None
    reflector.receive_response(
        Response(
            200, (), b'{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[]}'
        ),
        0.0,
    )
    watch = reflector.next_request(0.0)
    assert watch is not None
    assert watch.query_value("timeoutSeconds") == "7"
