"""Controller core: sources, predicates, workers, outcomes, metrics, and FakeTransport runs."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kubemoon_core import (
    ApiError,
    GroupVersionKind,
    GroupVersionResource,
    ObjectKey,
    Scope,
    decode_response,
    get_request,
    replace_request,
)
from kubemoon_core._changes import Change, ChangeType
from kubemoon_core._controller import (
    DURATION_BUCKETS,
    Controller,
    Failed,
    FailedTerminally,
    Outcome,
    Reconciled,
    ReconcileResult,
    Requeue,
    RequeueAfter,
    Source,
    WorkItem,
    all_of,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
    negate,
)
from kubemoon_core._ratelimit import ExponentialRateLimiter
from kubemoon_core.errors import LocalProtocolError, NotFound
from kubemoon_testing import FakeTransport, json_response

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
APP = GroupVersionKind("example.com", "v1", "App")


def obj(
    name: str,
    namespace: str = "default",
    *,
    rv: str = "1",
    generation: int = 1,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "resourceVersion": rv,
        "generation": generation,
    }
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def added(o: dict[str, Any]) -> Change:
    return Change(ChangeType.ADDED, ObjectKey.of(o), None, o)


def modified(old: dict[str, Any], new: dict[str, Any]) -> Change:
    return Change(ChangeType.MODIFIED, ObjectKey.of(new), old, new)


def deleted(o: dict[str, Any]) -> Change:
    return Change(ChangeType.DELETED, ObjectKey.of(o), o, None)


def owner(
    name: str, *, api_version: str = "example.com/v1", kind: str = "App", ctl: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": ctl,
    }


# --- predicates -------------------------------------------------------------------------


def test_generation_changed_judges_only_modifications() -> None:
    a, b = obj("x", generation=1), obj("x", generation=2, rv="2")
    status_only = obj("x", generation=1, rv="3")
    assert generation_changed(added(a))
    assert generation_changed(deleted(a))
    assert generation_changed(modified(a, b))
    assert not generation_changed(modified(a, status_only))
    assert generation_changed(Change(ChangeType.MODIFIED, ObjectKey("default", "x"), None, a))


def test_labels_and_annotations_changed() -> None:
    a = obj("x", labels={"app": "a"}, annotations={"n": "1"})
    relabelled = obj("x", labels={"app": "b"}, annotations={"n": "1"})
    annotated = obj("x", labels={"app": "a"}, annotations={"n": "2"})
    assert labels_changed(modified(a, relabelled))
    assert not labels_changed(modified(a, annotated))
    assert annotations_changed(modified(a, annotated))
    assert not annotations_changed(modified(a, relabelled))
    no_metadata = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "garbage"}
    change = Change(ChangeType.MODIFIED, ObjectKey("default", "x"), no_metadata, a)
    assert labels_changed(change)


def test_predicate_combinators() -> None:
    a = obj("x", generation=1, labels={"l": "1"})
    relabelled = obj("x", generation=1, labels={"l": "2"})
    change = modified(a, relabelled)
    assert not generation_changed(change)
    assert any_of(generation_changed, labels_changed)(change)
    assert not all_of(generation_changed, labels_changed)(change)
    assert negate(generation_changed)(change)
    assert not any_of()(change)
    assert all_of()(change)


# --- sources ----------------------------------------------------------------------------


def test_primary_source_maps_to_own_key_with_predicate() -> None:
    c = Controller([Source.primary(predicate=generation_changed)])
    a = obj("web", generation=1)
    assert c.receive("primary", added(a)) == 1
    assert c.receive("primary", [modified(a, obj("web", generation=1, rv="2"))]) == 0
    assert c.receive("primary", [modified(a, obj("web", generation=2, rv="3"))]) == 1
    assert len(c.queue) == 1  # de-duplicated


def test_owned_source_maps_through_controller_owner_references() -> None:
    c = Controller([Source.primary(), Source.owned("pods", APP)])
    pod = obj(
        "web-1",
        "prod",
        owners=[
            owner("web"),
            owner("other-app", ctl=False),  # not the controller: skipped
            owner("rs", api_version="apps/v1", kind="ReplicaSet"),  # other kind
            owner("web2", api_version="other.io/v1"),  # other group
            owner("bad", api_version="Bad_Group/v1"),  # malformed: matches nothing
        ],
    )
    assert c.receive("pods", added(pod)) == 1
    assert c.next_work(0.0) == WorkItem(ObjectKey("prod", "web"), 1, 0.0, 0)


def test_owned_source_any_version_both_states_and_cluster_owner() -> None:
    source = Source.owned("pods", APP, controller_only=False)
    old = obj("p", owners=[owner("a", api_version="example.com/v1beta1", ctl=False)])
    new = obj("p", rv="2", owners=[owner("b"), owner("a", ctl=False)])
    assert list(source.map(modified(old, new))) == [
        ObjectKey("default", "a"),
        ObjectKey("default", "b"),
    ]
    assert list(source.map(deleted(new))) == [ObjectKey("default", "b"), ObjectKey("default", "a")]
    cluster = Source.owned("pods", APP, owner_scope=Scope.CLUSTER)
    assert list(cluster.map(added(new))) == [ObjectKey("", "b")]


def test_mapped_source() -> None:
    def by_label(change: Change) -> list[ObjectKey]:
        app = change.object["metadata"].get("labels", {}).get("app")
        return [ObjectKey(change.key.namespace, app)] if app else []

    c = Controller([Source.mapped("cms", by_label, predicate=labels_changed)])
    assert c.receive("cms", [added(obj("a", labels={"app": "web"})), added(obj("b"))]) == 1
    assert c.next_work(0.0) is not None


def test_invalid_controllers_and_sources() -> None:
    with pytest.raises(LocalProtocolError, match="at least one source"):
        Controller([])
    with pytest.raises(LocalProtocolError, match="two sources"):
        Controller([Source.primary("x"), Source.primary("x")])
    with pytest.raises(LocalProtocolError, match="workers"):
        Controller([Source.primary()], workers=0)
    with pytest.raises(LocalProtocolError, match="workers"):
        Controller([Source.primary()], workers=True)
    c = Controller([Source.primary()])
    with pytest.raises(LocalProtocolError, match="no source"):
        c.receive("nope", [])


# --- work and outcomes ------------------------------------------------------------------


def test_workers_limit_and_no_concurrent_key() -> None:
    c = Controller([Source.primary()], workers=2)
    for name in "abc":
        c.enqueue(ObjectKey("ns", name))
    first, second = c.next_work(0.0), c.next_work(0.0)
    assert first is not None
    assert second is not None
    assert c.next_work(0.0) is None  # both workers busy
    assert c.workers == 2
    assert c.running == (first, second)
    c.enqueue(first.key)  # changes while running: dirty
    c.report(first, Reconciled(), 1.0)
    third = c.next_work(1.0)
    assert third is not None
    assert third.key == ObjectKey("ns", "c")
    c.report(second, Reconciled(), 1.0)
    fourth = c.next_work(1.0)
    assert fourth is not None
    assert fourth.key == first.key
    assert fourth.reconcile_id == 4


def test_outcomes_requeue_as_they_say() -> None:
    c = Controller([Source.primary()], rate_limiter=ExponentialRateLimiter(1.0, 100.0))
    key = ObjectKey("ns", "a")

    def run(now: float, outcome: Outcome) -> WorkItem:
        item = c.next_work(now)
        assert item is not None
        assert item.key == key
        c.report(item, outcome, now)
        return item

    c.enqueue(key)
    run(0.0, Failed("boom"))  # rate limited: 1 s
    assert c.next_work(0.5) is None
    assert c.next_deadline() == 1.0
    assert run(1.0, Requeue()).requeues == 1  # rate limited again: 2 s
    assert c.next_deadline() == 3.0
    run(3.0, RequeueAfter(10.0))  # forgets the backoff
    assert c.queue.num_requeues(key) == 0
    assert c.next_work(12.9) is None
    run(13.0, RequeueAfter(0))  # immediately again
    run(13.0, FailedTerminally("invalid spec"))
    assert c.next_work(1000.0) is None
    assert c.next_deadline() is None
    counts = c.metrics(1000.0).reconciles
    assert counts[ReconcileResult.ERROR] == 1
    assert counts[ReconcileResult.REQUEUE] == 1
    assert counts[ReconcileResult.REQUEUE_AFTER] == 2
    assert counts[ReconcileResult.TERMINAL_ERROR] == 1
    assert counts[ReconcileResult.SUCCESS] == 0
    assert c.metrics(1000.0).errors == 2


def test_report_misuse() -> None:
    c = Controller([Source.primary()])
    c.enqueue(ObjectKey("ns", "a"))
    item = c.next_work(5.0)
    assert item is not None
    with pytest.raises(LocalProtocolError, match="before it started"):
        c.report(item, Reconciled(), 4.0)
    with pytest.raises(LocalProtocolError, match="not a reconcile outcome"):
        c.report(item, "ok", 6.0)  # type: ignore[arg-type]
    c.report(item, Reconciled(), 6.0)
    with pytest.raises(LocalProtocolError, match="not running"):
        c.report(item, Reconciled(), 6.0)
    with pytest.raises(LocalProtocolError, match="delay"):
        RequeueAfter(-1.0)
    with pytest.raises(LocalProtocolError, match="delay"):
        RequeueAfter(float("nan"))


def test_metrics_are_plain_data() -> None:
    c = Controller([Source.primary()], workers=3)
    for name in "abcd":
        c.enqueue(ObjectKey("ns", name))
    a, b, slow = c.next_work(0.0), c.next_work(0.0), c.next_work(1.0)
    assert a is not None
    assert b is not None
    assert slow is not None
    c.report(a, Reconciled(), 0.004)
    c.report(b, Failed(), 0.7)
    m = c.metrics(3.0)
    assert m.queue_depth == 1
    assert m.waiting == 1  # b waits out its backoff
    assert m.active_workers == 1
    assert m.adds == 4
    assert m.retries == 1
    assert m.duration_count == 2
    assert m.duration_sum == pytest.approx(0.704)
    assert m.duration_max == pytest.approx(0.7)
    buckets = dict(m.duration_buckets)
    assert buckets[0.005] == 1
    assert buckets[0.5] == 1
    assert buckets[1.0] == 2
    assert buckets[DURATION_BUCKETS[-1]] == 2
    assert m.longest_running == pytest.approx(2.0)
    assert m.unfinished_work == pytest.approx(2.0)
    c.report(slow, Reconciled(), 100.0)  # beyond the last bucket: only in the count
    m = c.metrics(100.0)
    assert m.duration_count == 3
    assert dict(m.duration_buckets)[DURATION_BUCKETS[-1]] == 2
    assert m.longest_running == 0.0


def drained(c: Controller) -> bool:
    return c.is_drained  # read through a call: mypy keeps property narrowings otherwise


def test_shutdown_stops_handing_out_work_and_drains() -> None:
    c = Controller([Source.primary()])
    c.enqueue(ObjectKey("ns", "a"))
    c.enqueue(ObjectKey("ns", "b"))
    item = c.next_work(0.0)
    assert item is not None
    c.shutdown()
    assert c.next_work(0.0) is None
    assert c.next_deadline() is None
    assert not c.is_drained
    c.report(item, Failed(), 1.0)  # requeue refused after shutdown
    assert drained(c)
    assert c.receive("primary", added(obj("c"))) == 1  # accepted, and ignored by the queue
    assert len(c.queue) == 1  # "b" stays queued; nothing hands it out


# --- against the strict fake transport --------------------------------------------------


def configmap(name: str, rv: str, data: Mapping[str, str] | None = None) -> dict[str, Any]:
    o = obj(name, rv=rv)
    if data is not None:
        o["data"] = dict(data)
    return o


def reconcile_configmap(
    transport: FakeTransport, key: ObjectKey, after_write: Callable[[], None] = lambda: None
) -> Outcome:
    """GET the ConfigMap, mark it reconciled at the version it saw, PUT it back."""
    try:
        current = decode_response(
            transport.handle(get_request(CONFIGMAPS, key.name, namespace=key.namespace))
        )
    except NotFound:
        return Reconciled()
    except ApiError as exc:
        return Failed(exc)
    current["data"] = {"reconciled-at": current["metadata"]["resourceVersion"]}
    try:
        decode_response(
            transport.handle(replace_request(CONFIGMAPS, current, namespace=key.namespace))
        )
    except ApiError as exc:
        return Failed(exc)
    after_write()
    return Reconciled()


def test_key_changed_during_reconcile_is_reconciled_once_more_not_twice() -> None:
    path = "/api/v1/namespaces/default/configmaps/web"
    transport = (
        FakeTransport()
        .expect("GET", path, json_response(200, configmap("web", "1")))
        .expect("PUT", path, json_response(200, configmap("web", "2")), check=put_body("1"))
        .expect("GET", path, json_response(200, configmap("web", "3")))
        .expect("PUT", path, json_response(200, configmap("web", "4")), check=put_body("3"))
    )
    c = Controller([Source.primary()], workers=2)
    v1, v2, v3 = configmap("web", "1"), configmap("web", "2"), configmap("web", "3")
    c.receive("primary", added(v1))

    def changes_arrive() -> None:
        # While the first reconcile is still running, the watch delivers its own write (v2)
        # and another writer's change (v3); a second worker asking for work gets nothing.
        c.receive("primary", [modified(v1, v2), modified(v2, v3)])
        assert c.next_work(0.1) is None

    reconciled: list[WorkItem] = []
    with transport:
        now = 0.0
        while (item := c.next_work(now)) is not None:
            reconciled.append(item)
            hook = changes_arrive if len(reconciled) == 1 else (lambda: None)
            c.report(item, reconcile_configmap(transport, item.key, hook), now + 0.2)
            now += 1.0
    assert [item.key for item in reconciled] == [ObjectKey("default", "web")] * 2
    assert c.metrics(now).reconciles[ReconcileResult.SUCCESS] == 2
    assert c.next_deadline() is None


def put_body(rv: str) -> Callable[[Any], bool]:
    """A FakeTransport check: the PUT carries the resourceVersion it read and the marker."""

    def check(request: Any) -> bool:
        body = json.loads(request.body)
        return bool(
            body["metadata"]["resourceVersion"] == rv and body["data"] == {"reconciled-at": rv}
        )

    return check


def test_erroring_key_backs_off_exponentially_while_others_proceed() -> None:
    bad = "/api/v1/namespaces/default/configmaps/bad"
    good = "/api/v1/namespaces/default/configmaps/good"
    failure = json_response(500, {"kind": "Status", "code": 500, "reason": "InternalError"})
    transport = FakeTransport()
    # The script, in the order a single worker on a virtual clock must produce it.
    timeline: list[tuple[float, str]] = []
    bad_times = [0.0, 0.005, 0.015, 0.035, 0.075, 0.155]  # 5 ms, then doubling
    good_times = [0.001, 0.02, 0.1]
    for when, name in sorted([(t, "bad") for t in bad_times] + [(t, "good") for t in good_times]):
        timeline.append((when, name))
    bad_attempt = 0
    for _, name in timeline:
        if name == "good":
            transport.expect("GET", good, json_response(200, configmap("good", "7")))
            transport.expect("PUT", good, json_response(200, configmap("good", "8")))
        else:
            bad_attempt += 1
            if bad_attempt < len(bad_times):
                transport.expect("GET", bad, failure)  # fails five times...
            else:
                transport.expect("GET", bad, json_response(200, configmap("bad", "3")))
                transport.expect("PUT", bad, json_response(200, configmap("bad", "4")))

    c = Controller([Source.primary()])
    changes = [(0.0, added(configmap("bad", "1")))] + [
        (t, added(configmap("good", "7"))) for t in good_times
    ]
    seen: list[tuple[float, str, int]] = []
    with transport:
        now = 0.0
        while True:
            while changes and changes[0][0] <= now:
                c.receive("primary", changes.pop(0)[1])
            while (item := c.next_work(now)) is not None:
                seen.append((now, item.key.name, item.requeues))
                c.report(item, reconcile_configmap(transport, item.key), now)
            upcoming = [t for t in (c.next_deadline(), changes[0][0] if changes else None) if t]
            if not upcoming:
                break
            now = min(upcoming)
    bad_seen = [(t, requeues) for t, name, requeues in seen if name == "bad"]
    assert [t for t, _ in bad_seen] == pytest.approx(bad_times)
    assert [requeues for _, requeues in bad_seen] == [0, 1, 2, 3, 4, 5]
    gaps = [b - a for a, b in itertools.pairwise(bad_times)]
    assert gaps == pytest.approx([0.005 * 2**i for i in range(5)])
    # The good key was reconciled at the moment of each change, never held up.
    assert [t for t, name, _ in seen if name == "good"] == good_times
    m = c.metrics(now)
    assert m.reconciles[ReconcileResult.ERROR] == 5
    assert m.reconciles[ReconcileResult.SUCCESS] == 4
    assert c.queue.num_requeues(ObjectKey("default", "bad")) == 0  # forgotten on success


def test_no_deadline_while_every_worker_is_busy() -> None:
    # A key due while the only worker is busy cannot be handed out until that reconcile
    # reports (which wakes the runner). A deadline already past would make the runner's
    # loop spin: on a real clock it burned a core until the reconcile ended, and on the
    # simulator's virtual clock it never ended (found by make fuzz, test_widgets_long).
    c = Controller([Source.primary()], workers=1)
    busy, due = ObjectKey("ns", "busy"), ObjectKey("ns", "due")
    c.enqueue(busy)
    item = c.next_work(0.0)
    assert item is not None
    c.queue.add_after(due, 1.0, 0.0)
    assert c.next_work(5.0) is None  # due, but no worker is free
    assert c.next_deadline() is None
    c.report(item, Reconciled(), 5.0)
    assert c.next_deadline() == 1.0  # a worker is free: the past deadline is real work
    second = c.next_work(5.0)
    assert second is not None
    assert second.key == due
