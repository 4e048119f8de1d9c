"""The priority queue (issue 25, item 3): work from a first list or a resync waits behind
changes that arrive later, and every other queue guarantee holds."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, ObjectKey, Response
from kubemoon_core._changes import Change, ChangeType, initial_change
from kubemoon_core._controller import Controller, Failed, Reconciled, Source
from kubemoon_core._queue import WorkQueue
from kubemoon_core._reflector import Reflector
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import LOW_PRIORITY, NORMAL_PRIORITY

CM = GroupVersionResource("", "v1", "configmaps")
CACHED = 3000


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}}


def restart(controller: Controller) -> Reflector:
    """A reflector's first list of CACHED objects, fed to the controller; watch started."""
    reflector = Reflector(CM, rng=random.Random(0), namespace="ns", page_size=CACHED)
    reflector.next_request(0.0)
    body = {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "5000"},
        "items": [cm(f"old-{n:05d}", str(n + 1)) for n in range(CACHED)],
    }
    changes = reflector.receive_response(Response(200, (), json.dumps(body).encode()), 0.0)
    assert len(changes) == CACHED and all(c.initial for c in changes)
    controller.receive("primary", changes, 0.0)
    reflector.next_request(0.0)
    reflector.receive_watch_head(200, (), 0.0)
    return reflector


def rank_of(controller: Controller, key: ObjectKey) -> int:
    """The position (1-based) at which ``key`` is handed out."""
    for rank in range(1, len(controller.queue) + 1):
        item = controller.next_work(1.0)
        assert item is not None
        controller.report(item, Reconciled(), 1.0)
        if item.key == key:
            return rank
    raise AssertionError(f"{key} never handed out")


def test_after_a_restart_a_new_object_is_reconciled_first() -> None:
    controller = Controller([Source.primary()], workers=1)
    reflector = restart(controller)
    event = {"type": "ADDED", "object": cm("new", "5001")}
    changes = reflector.receive_watch_data(json.dumps(event).encode() + b"\n", 0.5)
    assert [c.initial for c in changes] == [False]
    controller.receive("primary", changes, 0.5)
    assert len(controller.queue) == CACHED + 1
    assert rank_of(controller, ObjectKey("ns", "new")) == 1


def test_without_priorities_the_new_object_would_be_last() -> None:
    """The same arrival order through a queue given one priority: rank CACHED + 1."""
    queue: WorkQueue[str] = WorkQueue()
    for n in range(CACHED):
        queue.add(f"old-{n}")
    queue.add("new")
    handed = [queue.get(1.0) for _ in range(CACHED + 1)]
    assert handed.index("new") == CACHED


def test_a_controller_without_the_priority_queue_reconciles_the_new_object_last() -> None:
    """``priority_queue=False``: the first list and the new event share one FIFO."""
    controller = Controller([Source.primary()], workers=1, priority_queue=False)
    reflector = restart(controller)
    event = {"type": "ADDED", "object": cm("new", "5001")}
    controller.receive(
        "primary", reflector.receive_watch_data(json.dumps(event).encode() + b"\n", 0.5), 0.5
    )
    assert rank_of(controller, ObjectKey("ns", "new")) == CACHED + 1


def test_without_the_priority_queue_enqueue_ignores_a_low_priority() -> None:
    controller = Controller([Source.primary()], workers=1, priority_queue=False)
    controller.enqueue(ObjectKey("ns", "cached"), priority=LOW_PRIORITY)
    controller.enqueue(ObjectKey("ns", "event"))
    first = controller.next_work(0.0)
    assert first is not None and first.key == ObjectKey("ns", "cached")
    assert controller.queue.priority_of(first.key) == NORMAL_PRIORITY


@pytest.mark.parametrize("bad", [0, 1, None, "no"])
def test_a_priority_queue_switch_that_is_no_bool_is_refused(bad: Any) -> None:
    with pytest.raises(LocalProtocolError, match="priority_queue must be a bool"):
        Controller([Source.primary()], priority_queue=bad)


def test_a_resync_waits_and_a_later_relist_does_not() -> None:
    controller = Controller([Source.primary()], workers=1)
    old = cm("a", "7")
    resync = Change(ChangeType.MODIFIED, ObjectKey("ns", "a"), old, old)
    changed = Change(ChangeType.MODIFIED, ObjectKey("ns", "b"), cm("b", "7"), cm("b", "8"))
    controller.receive("primary", [resync, changed], 0.0)
    assert rank_of(controller, ObjectKey("ns", "b")) == 1


def test_a_relist_after_a_410_is_not_initial() -> None:
    reflector = restart(Controller([Source.primary()]))
    gone = {"kind": "Status", "apiVersion": "v1", "code": 410, "reason": "Expired"}
    reflector.receive_watch_data(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n", 1)
    reflector.watch_ended(1.0)
    request = reflector.next_request(100.0)
    assert request is not None and not request.stream
    body = {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "6000"},
        "items": [cm("old-00000", "5999"), cm("fresh", "5998")],
    }
    changes = reflector.receive_response(Response(200, (), json.dumps(body).encode()), 100.0)
    assert len(changes) == CACHED + 1  # two listed, CACHED - 1 deleted
    assert not any(c.initial for c in changes)


def test_a_retry_keeps_its_priority_and_an_event_raises_a_queued_key() -> None:
    controller = Controller([Source.primary()], workers=1)
    low = initial_change(Change(ChangeType.ADDED, ObjectKey("ns", "low"), None, cm("low", "1")))
    controller.receive("primary", low, 0.0)
    item = controller.next_work(0.0)
    assert item is not None and controller.queue.priority_of(item.key) == LOW_PRIORITY
    controller.report(item, Failed(RuntimeError("x")), 0.0)
    controller.receive(
        "primary", Change(ChangeType.ADDED, ObjectKey("ns", "x"), None, cm("x", "2"))
    )
    assert controller.next_work(10.0) is not None  # "x" first: the retry stayed low
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("b", priority=LOW_PRIORITY)
    queue.add("b")  # an event for a queued key raises it
    assert queue.get_with_priority(0.0) == ("b", NORMAL_PRIORITY)
    assert queue.get_with_priority(0.0) == ("a", LOW_PRIORITY)
    assert len(queue) == 0
    assert low == Change(ChangeType.ADDED, ObjectKey("ns", "low"), None, cm("low", "1"))


def test_a_key_added_while_processing_is_requeued_once_with_its_highest_priority() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("k", priority=LOW_PRIORITY)
    assert queue.get(0.0) == "k"
    queue.add("k", priority=LOW_PRIORITY)
    queue.add("k", priority=5)
    queue.add("k", priority=LOW_PRIORITY)
    queue.add("other")
    assert queue.get(0.0) == "other"
    assert queue.get(0.0) is None  # "k" is processing: never handed out twice at once
    queue.done("k")
    assert queue.get_with_priority(0.0) == ("k", 5)
    queue.done("k")
    assert queue.get(0.0) is None


def test_delayed_adds_keep_the_highest_priority() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("k", 2.0, 0.0, priority=LOW_PRIORITY)
    queue.add_after("k", 5.0, 0.0, priority=7)  # later deadline ignored, priority kept
    queue.add("n")
    assert queue.get(2.0) == "k"  # promoted at 2.0 with priority 7, ahead of "n"
    assert queue.priority_of("k") == 7


@pytest.mark.parametrize("bad", [1.5, "high", True, None])
def test_a_priority_that_is_no_int_is_refused(bad: Any) -> None:
    queue: WorkQueue[str] = WorkQueue()
    with pytest.raises(LocalProtocolError, match="priority"):
        queue.add("k", priority=bad)
    with pytest.raises(LocalProtocolError, match="priority"):
        queue.add_after("k", 1.0, 0.0, priority=bad)
