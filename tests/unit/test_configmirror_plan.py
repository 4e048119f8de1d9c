"""The ConfigMirror planner: what one reconcile writes, for each situation."""

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from configmirror import (
    ACCEPT_MIRRORS_SELECTOR,
    DATA_DIGEST_ANNOTATION,
    FINALIZER,
    MANAGED_BY_LABEL,
    OWNER_UID_ANNOTATION,
    CopyData,
    Plan,
    PlannedEvent,
    copy_data,
    copy_settled,
    data_digest,
    mirror_targets,
)
from configmirror import plan_reconcile as plan_with_allowed
from kubemoon_core.sharding import OWNER_BUCKET_LABEL, owner_bucket_label

NOW = "2026-11-29T18:00:00Z"
EVERY_TARGET = frozenset({"a", "b", "c"})


def plan_reconcile(
    mirror: Mapping[str, Any],
    source: Mapping[str, Any] | None,
    copies: Mapping[str, Mapping[str, Any]],
    managed: Iterable[Mapping[str, Any]],
    now: str,
    *,
    allowed: Collection[str] = EVERY_TARGET,
) -> Plan:
    """The planner with every target namespace accepting copies, unless told otherwise."""
    return plan_with_allowed(mirror, source, copies, managed, now, allowed_namespaces=allowed)


def mirror(**overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {
            "name": "m",
            "namespace": "src",
            "uid": "uid-1",
            "resourceVersion": "10",
            "generation": 2,
            "finalizers": [FINALIZER],
        },
        "spec": {"source": "settings", "targetNamespaces": ["a", "b"]},
    }
    for key, value in overrides.items():
        if key in ("metadata", "spec"):
            obj[key] = {**obj[key], **value}
        else:
            obj[key] = value
    return obj


SOURCE = {
    "metadata": {"name": "settings", "namespace": "src", "resourceVersion": "5"},
    "data": {"k": "v"},
    "binaryData": {"b": "AAE="},
}


SOURCE_DIGEST = data_digest(SOURCE)


def copy(
    namespace: str, *, uid: str = "uid-1", data: dict[str, str] | None = None
) -> dict[str, Any]:
    """A copy as the operator writes it (the digest it claims is of the data it was given,
    so ``data=`` makes one whose data was edited behind the annotation's back)."""
    return {
        "metadata": {
            "name": "settings",
            "namespace": namespace,
            "uid": f"cm-{namespace}",
            "resourceVersion": "7",
            "labels": {MANAGED_BY_LABEL: "kubemoon-configmirror"},
            "annotations": {OWNER_UID_ANNOTATION: uid, DATA_DIGEST_ANNOTATION: SOURCE_DIGEST},
        },
        "data": data if data is not None else {"k": "v"},
        "binaryData": {"b": "AAE="},
    }


def metadata_of(configmap: Mapping[str, Any]) -> dict[str, Any]:
    """What a metadata-only cache holds of ``configmap``."""
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": dict(configmap["metadata"]),
    }


SYNCED_STATUS = {
    "observedGeneration": 2,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Synced",
            "message": "mirrored to 2 namespace(s)",
            "observedGeneration": 2,
            "lastTransitionTime": "2026-11-29T17:00:00Z",
        }
    ],
    "targets": [
        {"namespace": "a", "state": "Synced", "message": "", "uid": "cm-a"},
        {"namespace": "b", "state": "Synced", "message": "", "uid": "cm-b"},
    ],
}


def recording(*namespaces: str) -> dict[str, Any]:
    """A status recording the copies (uid ``cm-<namespace>``) kept in ``namespaces``."""
    kept = [
        {"namespace": n, "state": "Synced", "message": "", "uid": f"cm-{n}"} for n in namespaces
    ]
    return {**SYNCED_STATUS, "targets": kept}


def summary(plan: Any) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in plan.writes]


def test_first_reconcile_adds_the_finalizer_and_nothing_else() -> None:
    plan = plan_reconcile(mirror(metadata={"finalizers": ["other"]}), SOURCE, {}, [], NOW)
    assert summary(plan) == [
        ("PATCH", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m")
    ]
    body = json.loads(plan.writes[0].body)
    assert body == {"metadata": {"finalizers": ["other", FINALIZER], "resourceVersion": "10"}}


def test_creates_missing_copies_and_writes_status() -> None:
    plan = plan_reconcile(mirror(), SOURCE, {}, [], NOW)
    assert summary(plan) == [
        ("POST", "/api/v1/namespaces/a/configmaps"),
        ("POST", "/api/v1/namespaces/b/configmaps"),
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"),
    ]
    created = json.loads(plan.writes[0].body)
    assert created["metadata"]["annotations"] == {
        OWNER_UID_ANNOTATION: "uid-1",
        DATA_DIGEST_ANNOTATION: SOURCE_DIGEST,
    }
    assert created["metadata"]["labels"] == {MANAGED_BY_LABEL: "kubemoon-configmirror"}
    assert (created["data"], created["binaryData"]) == ({"k": "v"}, {"b": "AAE="})
    assert "resourceVersion" not in created["metadata"]
    status = json.loads(plan.writes[2].body)
    assert status["metadata"]["resourceVersion"] == "10"
    ready = status["status"]["conditions"][0]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True",
        "Synced",
        NOW,
    )


def test_steady_state_makes_no_writes() -> None:
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b")],
        NOW,
    )
    assert plan.writes == ()
    assert not plan.wait_for_deletions


def test_a_changed_source_updates_copies_conditionally() -> None:
    stale = copy("b", data={"k": "old"})
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS), SOURCE, {"a": copy("a"), "b": stale}, [copy("a"), stale], NOW
    )
    assert summary(plan) == [("PUT", "/api/v1/namespaces/b/configmaps/settings")]
    body = json.loads(plan.writes[0].body)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["data"] == {"k": "v"}


def test_an_unmanaged_copy_is_never_touched_and_named_in_status() -> None:
    theirs = copy("b", uid="someone-else")
    plan = plan_reconcile(mirror(), SOURCE, {"a": copy("a"), "b": theirs}, [copy("a")], NOW)
    assert summary(plan) == [
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status")
    ]
    status = json.loads(plan.writes[0].body)["status"]
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "TargetConflict")
    assert "b/settings" in ready["message"]
    assert status["targets"][1]["state"] == "Conflict"
    no_annotation = copy("b")
    del no_annotation["metadata"]["annotations"]
    plan = plan_reconcile(mirror(), SOURCE, {"b": no_annotation}, [], NOW)
    assert all(r.path != "/api/v1/namespaces/b/configmaps/settings" for r in plan.writes)


def test_removed_namespaces_lose_their_copies() -> None:
    leftover = copy("c")
    plan = plan_reconcile(
        mirror(status=recording("a", "b", "c")),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), leftover],
        NOW,
    )
    assert summary(plan)[0] == ("DELETE", "/api/v1/namespaces/c/configmaps/settings")
    body = json.loads(plan.writes[0].body)
    assert body["preconditions"] == {"uid": "cm-c", "resourceVersion": "7"}
    # The status then records the copies kept, and no longer the deleted one.
    status = json.loads(plan.writes[1].body)["status"]
    assert [t.get("uid") for t in status["targets"]] == ["cm-a", "cm-b"]


def test_a_look_alike_outside_the_targets_is_deleted_only_if_recorded() -> None:
    """Issue 31: a ConfigMap of the source's name, the managed-by label and the mirror's
    UID, made (or edited, by someone who may update but not delete it) in a namespace the
    mirror does not target: the operator never wrote it, so it is neither deleted while
    the mirror lives nor on cleanup, and it does not hold the finalizer."""
    lookalike = copy("c")
    lookalike["metadata"]["uid"] = "someone-elses"
    plan = plan_reconcile(
        mirror(status=recording("a", "b", "c")),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), lookalike],
        NOW,
    )
    assert all(r.method != "DELETE" for r in plan.writes)
    assert plan.ignored == ("c/settings",)
    deleting = mirror(
        metadata={"deletionTimestamp": NOW, "finalizers": [FINALIZER]},
        status=recording("a", "b"),
    )
    cleanup = plan_with_allowed(
        deleting,
        SOURCE,
        {},
        [copy("a"), lookalike],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        copies_listed=True,
    )
    assert summary(cleanup) == [("DELETE", "/api/v1/namespaces/a/configmaps/settings")]
    assert cleanup.ignored == ("c/settings",)
    done = plan_with_allowed(
        deleting, SOURCE, {}, [lookalike], NOW, allowed_namespaces=EVERY_TARGET, copies_listed=True
    )
    assert json.loads(done.writes[0].body)["metadata"]["finalizers"] == []
    # In a namespace it targets and that accepts copies, a copy is its own (it writes it
    # there anyway): deleted on cleanup even if never recorded (made by an older version).
    unrecorded = plan_with_allowed(
        mirror(metadata={"deletionTimestamp": NOW, "finalizers": [FINALIZER]}),
        SOURCE,
        {},
        [copy("b")],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        copies_listed=True,
    )
    assert summary(unrecorded) == [("DELETE", "/api/v1/namespaces/b/configmaps/settings")]


def test_a_copy_it_made_but_never_recorded_is_deleted_outside_the_targets() -> None:
    """Found by the simulation (test_sim_configmirror.py, mirror_run("single", 118, 5, 9)):
    a copy created while the mirror's status could not be written (409s on a stale view)
    is not in ``targets[].uid``; once its namespace stops being a target it must still go,
    since the operator knows it made it (``made``), or it is left behind for good."""
    unrecorded = copy("c")
    args = (mirror(status=recording("a", "b")), SOURCE, {"a": copy("a"), "b": copy("b")})
    managed = [copy("a"), copy("b"), unrecorded]
    ignored = plan_with_allowed(*args, managed, NOW, allowed_namespaces=EVERY_TARGET)
    assert all(r.method != "DELETE" for r in ignored.writes)  # not known to be its own
    plan = plan_with_allowed(
        *args, managed, NOW, allowed_namespaces=EVERY_TARGET, made=frozenset({"cm-c"})
    )
    assert summary(plan) == [("DELETE", "/api/v1/namespaces/c/configmaps/settings")]


def test_missing_source_reports_source_not_found_and_keeps_copies() -> None:
    plan = plan_reconcile(mirror(), None, {"a": copy("a")}, [copy("a")], NOW)
    assert summary(plan) == [
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status")
    ]
    status = json.loads(plan.writes[0].body)["status"]
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "SourceNotFound")
    assert "src/settings" in ready["message"]
    assert [t["state"] for t in status["targets"]] == ["Pending", "Pending"]


def test_deletion_deletes_copies_then_removes_the_finalizer() -> None:
    deleting = mirror(metadata={"deletionTimestamp": NOW, "finalizers": ["other", FINALIZER]})
    first = plan_reconcile(deleting, SOURCE, {}, [copy("a"), copy("b")], NOW)
    assert summary(first) == [
        ("DELETE", "/api/v1/namespaces/a/configmaps/settings"),
        ("DELETE", "/api/v1/namespaces/b/configmaps/settings"),
    ]
    assert first.wait_for_deletions
    second = plan_with_allowed(
        deleting, SOURCE, {}, [], NOW, allowed_namespaces=EVERY_TARGET, copies_listed=True
    )
    assert not second.wait_for_deletions and not second.list_copies
    assert json.loads(second.writes[0].body)["metadata"]["finalizers"] == ["other"]
    gone = mirror(metadata={"deletionTimestamp": NOW, "finalizers": ["other"]})
    assert plan_reconcile(gone, SOURCE, {}, [copy("a")], NOW).writes == ()


def test_the_finalizer_goes_only_once_the_copies_were_listed_from_the_api_server() -> None:
    """Issue 31, defect 7: caches are selected by labels, so a copy whose owner-bucket label
    a tenant changed is in none of them. Before the finalizer goes the planner asks for the
    copies as the API server holds them, and whatever their labels, the owner annotation
    decides: the relabelled copy is deleted, then the finalizer goes. (Attack defect 3: a
    ConfigMap without the managed-by label is not a copy, whatever its annotation: it is
    left alone and reported, not deleted.)"""
    deleting = mirror(
        metadata={"deletionTimestamp": NOW, "finalizers": ["other", FINALIZER]},
        status=recording("a", "b", "c"),
    )
    cached_none = plan_with_allowed(
        deleting, SOURCE, {}, [], NOW, allowed_namespaces=EVERY_TARGET, sharded=True
    )
    assert cached_none.list_copies
    assert cached_none.writes == () and not cached_none.wait_for_deletions
    relabelled = copy("c")
    relabelled["metadata"]["labels"][OWNER_BUCKET_LABEL] = "zz"
    unlabelled = copy("a")
    unlabelled["metadata"]["labels"] = {}
    listed = plan_with_allowed(
        deleting,
        SOURCE,
        {},
        [relabelled, unlabelled],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        sharded=True,
        copies_listed=True,
    )
    assert summary(listed) == [("DELETE", "/api/v1/namespaces/c/configmaps/settings")]
    assert listed.ignored == ("a/settings",)
    assert listed.wait_for_deletions and not listed.list_copies
    # Not being deleted, nothing is listed: the caches and the AlreadyExists reads suffice.
    assert not plan_reconcile(mirror(), SOURCE, {}, [], NOW).list_copies


def test_transition_time_changes_only_with_the_condition_status() -> None:
    changed = {**SYNCED_STATUS, "observedGeneration": 1}
    plan = plan_reconcile(mirror(status=changed), SOURCE, {"a": copy("a"), "b": copy("b")}, [], NOW)
    ready = json.loads(plan.writes[0].body)["status"]["conditions"][0]
    assert ready["lastTransitionTime"] == "2026-11-29T17:00:00Z"
    plan = plan_reconcile(mirror(status=changed), None, {}, [], NOW)
    ready = json.loads(plan.writes[0].body)["status"]["conditions"][0]
    assert ready["lastTransitionTime"] == NOW


# -- opt-in targets (issue 15) ---------------------------------------------------------------


def test_a_target_that_does_not_accept_copies_gets_nothing() -> None:
    plan = plan_reconcile(mirror(), SOURCE, {}, [], NOW, allowed={"a"})
    assert summary(plan) == [
        ("POST", "/api/v1/namespaces/a/configmaps"),
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"),
    ]
    status = json.loads(plan.writes[1].body)["status"]
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotAllowed")
    assert ready["message"].endswith(": b")
    assert ACCEPT_MIRRORS_SELECTOR in ready["message"]
    assert status["targets"] == [
        {"namespace": "a", "state": "Synced", "message": ""},
        {
            "namespace": "b",
            "state": "NotAllowed",
            "message": f"namespace b does not match {ACCEPT_MIRRORS_SELECTOR}",
        },
    ]
    assert plan.events == (PlannedEvent("Warning", "TargetNotAllowed", ready["message"]),)


def test_no_accepting_namespace_means_no_copy_and_every_target_named() -> None:
    plan = plan_reconcile(mirror(), SOURCE, {}, [], NOW, allowed=())
    assert summary(plan) == [
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status")
    ]
    ready = json.loads(plan.writes[0].body)["status"]["conditions"][0]
    assert ready["reason"] == "TargetNotAllowed"
    assert ready["message"].endswith(": a, b")


def test_a_namespace_that_stops_accepting_loses_its_managed_copy() -> None:
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b")],
        NOW,
        allowed={"a"},
    )
    assert summary(plan) == [
        ("DELETE", "/api/v1/namespaces/b/configmaps/settings"),
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"),
    ]
    # Deleted exactly as cached: a copy changed meanwhile is not deleted blindly.
    assert json.loads(plan.writes[0].body)["preconditions"] == {
        "uid": "cm-b",
        "resourceVersion": "7",
    }


def test_an_unmanaged_configmap_in_a_refusing_namespace_is_left_alone() -> None:
    theirs = copy("b", uid="someone-else")
    plan = plan_reconcile(mirror(), SOURCE, {"b": theirs}, [], NOW, allowed={"a"})
    assert all("/namespaces/b/" not in r.path for r in plan.writes)
    status = json.loads(plan.writes[-1].body)["status"]
    assert status["targets"][1]["state"] == "NotAllowed"


def test_refused_targets_are_reported_even_without_a_source() -> None:
    plan = plan_reconcile(mirror(), None, {}, [], NOW, allowed={"a"})
    status = json.loads(plan.writes[0].body)["status"]
    assert status["conditions"][0]["reason"] == "SourceNotFound"
    assert [t["state"] for t in status["targets"]] == ["Pending", "NotAllowed"]


def test_the_selector_named_in_messages_is_the_one_in_use() -> None:
    plan = plan_with_allowed(
        mirror(), SOURCE, {}, [], NOW, allowed_namespaces={"a"}, target_selector="team in (x)"
    )
    status = json.loads(plan.writes[-1].body)["status"]
    assert "team in (x)" in status["conditions"][0]["message"]
    assert status["targets"][1]["message"] == "namespace b does not match team in (x)"


def test_labelling_the_namespace_converges() -> None:
    refused = plan_reconcile(mirror(), SOURCE, {}, [], NOW, allowed={"a"})
    stored = json.loads(refused.writes[-1].body)["status"]
    accepted = plan_reconcile(mirror(status=stored), SOURCE, {"a": copy("a")}, [copy("a")], NOW)
    assert summary(accepted) == [
        ("POST", "/api/v1/namespaces/b/configmaps"),
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"),
    ]
    ready = json.loads(accepted.writes[-1].body)["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("True", "Synced")
    assert accepted.events == (PlannedEvent("Normal", "Synced", "mirrored to 2 namespace(s)"),)


# -- Events ------------------------------------------------------------------------------------


def test_events_are_planned_when_the_ready_condition_changes_only() -> None:
    missing = plan_reconcile(mirror(), None, {}, [], NOW)
    assert missing.events == (
        PlannedEvent("Warning", "SourceNotFound", "ConfigMap src/settings not found"),
    )
    stored = json.loads(missing.writes[0].body)["status"]
    again = plan_reconcile(mirror(status=stored), None, {}, [], NOW)
    assert (again.writes, again.events) == ((), ())
    theirs = copy("b", uid="someone-else")
    conflict = plan_reconcile(mirror(status=stored), SOURCE, {"b": theirs}, [], NOW)
    (event,) = conflict.events
    assert (event.type, event.reason) == ("Warning", "TargetConflict")
    assert "b/settings" in event.note
    steady = plan_reconcile(
        mirror(status=SYNCED_STATUS), SOURCE, {"a": copy("a"), "b": copy("b")}, [], NOW
    )
    assert steady.events == ()


def test_finalizer_and_deletion_plans_record_no_events() -> None:
    assert plan_reconcile(mirror(metadata={"finalizers": []}), SOURCE, {}, [], NOW).events == ()
    deleting = mirror(metadata={"deletionTimestamp": NOW})
    assert plan_reconcile(deleting, SOURCE, {}, [copy("a")], NOW).events == ()


def beta_mirror(**targets: Any) -> dict[str, Any]:
    obj = mirror()
    obj["apiVersion"] = "kubemoon.dev/v1beta1"
    obj["spec"] = {"source": "settings", "targets": targets}
    return obj


def test_a_v1beta1_mirror_is_planned_and_written_as_v1beta1() -> None:
    plan = plan_reconcile(beta_mirror(namespaces=["a"]), SOURCE, {}, [], NOW)
    assert [(r.method, r.path) for r in plan.writes] == [
        ("POST", "/api/v1/namespaces/a/configmaps"),
        ("PUT", "/apis/kubemoon.dev/v1beta1/namespaces/src/configmirrors/m/status"),
    ]
    fresh = beta_mirror(namespaces=["a"])
    fresh["metadata"]["finalizers"] = []
    (patch,) = plan_reconcile(fresh, SOURCE, {}, [], NOW).writes
    assert patch.path == "/apis/kubemoon.dev/v1beta1/namespaces/src/configmirrors/m"


def test_targets_named_and_selected() -> None:
    labels = {
        "a": {"tier": "web"},
        "b": {"tier": "db"},
        "c": {"tier": "web"},
        "src": {"tier": "web"},
    }
    selecting = beta_mirror(namespaces=["b"], namespaceSelector={"matchLabels": {"tier": "web"}})
    # Named first, then the selected ones sorted; never the mirror's own namespace.
    assert mirror_targets(selecting, labels) == ["b", "a", "c"]
    assert mirror_targets(selecting) == ["b"]  # no namespace information: only the named
    # A selector the webhook refuses (stored before it existed) selects nothing rather
    # than every opted-in namespace: the operator never reads more than was written.
    for unsound in (
        {},
        {"matchLabels": {}},
        {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        {"matchLabels": {"tier": "web"}, "matchExpressions": []},
        {"matchLabels": {"tier": 1}},
        {"matchLabels": ["tier"]},
    ):
        assert mirror_targets(beta_mirror(namespaces=[], namespaceSelector=unsound), labels) == []
    assert mirror_targets(beta_mirror(namespaces=["a"], namespaceSelector="x"), labels) == ["a"]
    assert mirror_targets(mirror(), labels) == ["a", "b"]
    plan = plan_with_allowed(
        selecting,
        SOURCE,
        {},
        [],
        NOW,
        allowed_namespaces=labels.keys(),
        namespace_labels=labels,
    )
    created = [r.path for r in plan.writes if r.method == "POST"]
    assert created == [f"/api/v1/namespaces/{ns}/configmaps" for ns in ("b", "a", "c")]


def test_copy_writes_are_independent_and_the_status_follows_them() -> None:
    stale = copy("b", data={"k": "old"})
    plan = plan_reconcile(
        mirror(status=recording("b", "gone")), SOURCE, {"b": stale}, [stale, copy("gone")], NOW
    )
    assert [(r.method, r.path) for r in plan.copies] == [
        ("POST", "/api/v1/namespaces/a/configmaps"),
        ("PUT", "/api/v1/namespaces/b/configmaps/settings"),
        ("DELETE", "/api/v1/namespaces/gone/configmaps/settings"),
    ]
    assert [r.path for r in plan.mirror] == [
        "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"
    ]
    assert plan.writes == plan.copies + plan.mirror
    finalizing = plan_reconcile(mirror(metadata={"finalizers": []}), SOURCE, {}, [], NOW)
    assert (finalizing.copies, len(finalizing.mirror)) == ((), 1)


def test_a_copy_is_settled_only_when_planning_would_leave_it_alone() -> None:
    assert copy_settled(copy("a"), mirror(), SOURCE)
    # Each thing a reconcile would fix, or cannot judge from the copy alone, is unsettled.
    assert not copy_settled(copy("a", data={"k": "old"}), mirror(), SOURCE)
    assert not copy_settled(copy("a", uid="someone-else"), mirror(), SOURCE)
    assert not copy_settled(copy("a"), mirror(), None)
    assert not copy_settled(copy("c"), mirror(), SOURCE)  # not a target (any more)
    assert not copy_settled(copy("a"), mirror(spec={"source": "other"}), SOURCE)
    deleting = mirror(metadata={"deletionTimestamp": "2026-11-29T18:00:00Z"})
    assert not copy_settled(copy("a"), deleting, SOURCE)
    unlabelled = copy("a")
    unlabelled["metadata"]["labels"] = {}
    assert not copy_settled(unlabelled, mirror(), SOURCE)
    # Planning agrees: a settled copy gets no write.
    plan = plan_reconcile(mirror(status=SYNCED_STATUS), SOURCE, {"a": copy("a"), "b": copy("b")},
                          [copy("a"), copy("b")], NOW)  # fmt: skip
    assert plan.copies == ()


def _sharded(copies: Mapping[str, Mapping[str, Any]], managed: Iterable[Mapping[str, Any]]) -> Plan:
    return plan_with_allowed(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        copies,
        managed,
        NOW,
        allowed_namespaces=EVERY_TARGET,
        sharded=True,
    )


def _labelled(namespace: str, bucket: str | None) -> dict[str, Any]:
    found = copy(namespace)
    if bucket is not None:
        found["metadata"]["labels"][OWNER_BUCKET_LABEL] = bucket
    return found


def test_sharded_copies_carry_their_mirror_s_owner_bucket() -> None:
    plan = plan_with_allowed(
        mirror(), SOURCE, {}, [], NOW, allowed_namespaces=EVERY_TARGET, sharded=True
    )
    created = [json.loads(r.body) for r in plan.copies]
    assert [c["metadata"]["labels"] for c in created] == [
        {MANAGED_BY_LABEL: "kubemoon-configmirror", OWNER_BUCKET_LABEL: owner_bucket_label("uid-1")}
    ] * 2


def test_sharded_a_copy_with_a_missing_or_wrong_bucket_label_is_rewritten() -> None:
    right = owner_bucket_label("uid-1")
    wrong = f"{(int(right, 16) + 1) % 256:02x}"
    a, b = _labelled("a", None), _labelled("b", wrong)
    plan = _sharded({"a": a, "b": b}, [a, b])
    assert summary(plan) == [
        ("PUT", "/api/v1/namespaces/a/configmaps/settings"),
        ("PUT", "/api/v1/namespaces/b/configmaps/settings"),
    ]
    for request in plan.copies:
        body = json.loads(request.body)
        assert body["metadata"]["labels"][OWNER_BUCKET_LABEL] == right
        assert body["metadata"]["resourceVersion"] == "7"
    a, b = _labelled("a", right), _labelled("b", right)
    assert _sharded({"a": a, "b": b}, [a, b]).writes == ()
    assert copy_settled(a, mirror(), SOURCE, sharded=True)
    assert not copy_settled(_labelled("a", wrong), mirror(), SOURCE, sharded=True)


def test_unsharded_leaves_the_bucket_label_as_found() -> None:
    for bucket in (None, "07"):
        a, b = _labelled("a", bucket), _labelled("b", bucket)
        assert (
            plan_reconcile(
                mirror(status=SYNCED_STATUS), SOURCE, {"a": a, "b": b}, [a, b], NOW
            ).writes
            == ()
        )
        assert copy_settled(a, mirror(), SOURCE)


def _lookalike(namespace: str, name: str, *, labelled: bool) -> dict[str, Any]:
    found = copy(namespace)
    found["metadata"]["name"] = name
    if not labelled:
        del found["metadata"]["labels"]
    return found


def test_only_copies_the_operator_made_are_ever_written() -> None:
    """Attack defect 3: anyone who may update a ConfigMap may add the owner annotation.
    Unless it also has the copy's name and the managed-by label, it is not a copy: never
    updated nor deleted (reported in ``ignored``), in a target namespace or elsewhere."""
    others = [
        _lookalike("a", "precious", labelled=False),
        _lookalike("a", "precious", labelled=True),
        _lookalike("c", "settings", labelled=False),
        _lookalike("b", "old-name", labelled=True),  # e.g. a source renamed: left alone
    ]
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), *others],
        NOW,
    )
    assert plan.writes == ()
    assert plan.ignored == ("a/precious", "a/precious", "c/settings", "b/old-name")
    # In a target namespace, the source's name with the annotation but no label is a
    # conflict, not a copy to overwrite.
    unlabelled = _lookalike("b", "settings", labelled=False)
    plan = plan_reconcile(mirror(), SOURCE, {"a": copy("a"), "b": unlabelled}, [], NOW)
    assert all(r.method != "PUT" or "/configmaps/" not in r.path for r in plan.writes)
    status = json.loads(plan.writes[0].body)["status"]
    assert status["conditions"][0]["reason"] == "TargetConflict"
    # Deleting the mirror deletes its copies only.
    deleting = mirror(metadata={"deletionTimestamp": NOW, "finalizers": [FINALIZER]})
    plan = plan_with_allowed(
        deleting,
        SOURCE,
        {},
        [copy("a"), *others],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        copies_listed=True,
    )
    assert summary(plan) == [("DELETE", "/api/v1/namespaces/a/configmaps/settings")]
    listed = plan_with_allowed(
        deleting, SOURCE, {}, others, NOW, allowed_namespaces=EVERY_TARGET, copies_listed=True
    )
    assert json.loads(listed.writes[0].body)["metadata"]["finalizers"] == []
    assert len(listed.ignored) == 4


def _being_deleted(namespace: str) -> dict[str, Any]:
    found = copy(namespace)
    found["metadata"]["deletionTimestamp"] = NOW
    found["metadata"]["finalizers"] = ["tenant.example/hold"]
    return found


def test_a_copy_being_deleted_counts_as_deleted() -> None:
    """Attack defect 5: a receiving tenant's finalizer on a copy does not hold the mirror's
    deletion, and no DELETE is sent again for an object that already has a
    deletionTimestamp."""
    deleting = mirror(metadata={"deletionTimestamp": NOW, "finalizers": ["other", FINALIZER]})
    held = [_being_deleted("a"), _being_deleted("b")]
    cached = plan_reconcile(deleting, SOURCE, {}, held, NOW)
    assert cached.writes == () and cached.list_copies and not cached.wait_for_deletions
    listed = plan_with_allowed(
        deleting, SOURCE, {}, held, NOW, allowed_namespaces=EVERY_TARGET, copies_listed=True
    )
    assert summary(listed) == [
        ("PATCH", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m")
    ]
    assert json.loads(listed.writes[0].body)["metadata"]["finalizers"] == ["other"]
    # Only the copy not yet being deleted is deleted.
    mixed = plan_reconcile(deleting, SOURCE, {}, [_being_deleted("a"), copy("b")], NOW)
    assert summary(mixed) == [("DELETE", "/api/v1/namespaces/b/configmaps/settings")]
    # Not being deleted: a leftover copy already being deleted is not deleted again.
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), _being_deleted("c")],
        NOW,
    )
    assert plan.writes == ()


def test_an_immutable_stale_copy_is_replaced_and_not_reported_synced() -> None:
    """Attack defect 7: every update of an immutable ConfigMap is refused (422). The
    operator deletes its copy (exactly that object) to create it again, and the status says
    the target is not in sync meanwhile."""
    frozen = copy("b", data={"k": "old"})
    frozen["immutable"] = True
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": frozen},
        [copy("a"), frozen],
        NOW,
    )
    assert summary(plan) == [
        ("DELETE", "/api/v1/namespaces/b/configmaps/settings"),
        ("PUT", "/apis/kubemoon.dev/v1alpha1/namespaces/src/configmirrors/m/status"),
    ]
    assert json.loads(plan.writes[0].body)["preconditions"] == {
        "uid": "cm-b",
        "resourceVersion": "7",
    }
    assert plan.wait_for_deletions
    status = json.loads(plan.writes[1].body)["status"]
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "ReplacingCopy")
    assert "b" in ready["message"]
    assert [t["state"] for t in status["targets"]] == ["Synced", "Pending"]
    # Once gone, it is created again and the mirror is Synced.
    again = plan_reconcile(mirror(status=status), SOURCE, {"a": copy("a")}, [copy("a")], NOW)
    assert summary(again)[0] == ("POST", "/api/v1/namespaces/b/configmaps")
    ready = json.loads(again.writes[1].body)["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("True", "Synced")
    # Still being deleted (a tenant's finalizer): waited for, nothing written to it.
    held = _being_deleted("b")
    held["data"] = {"k": "old"}
    waiting = plan_reconcile(
        mirror(status=status), SOURCE, {"a": copy("a"), "b": held}, [copy("a"), held], NOW
    )
    assert waiting.copies == () and not waiting.wait_for_deletions
    # An immutable copy already in sync needs nothing.
    in_sync = copy("b")
    in_sync["immutable"] = True
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS), SOURCE, {"a": copy("a"), "b": in_sync}, [], NOW
    )
    assert plan.writes == ()


def test_a_long_list_of_replaced_copies_is_bounded_in_the_message() -> None:
    targets = [f"t{i:02d}" for i in range(30)]
    frozen = {}
    for t in targets:
        frozen[t] = copy(t, data={"k": "old"})
        frozen[t]["immutable"] = True
    plan = plan_with_allowed(
        mirror(spec={"targetNamespaces": targets}),
        SOURCE,
        frozen,
        list(frozen.values()),
        NOW,
        allowed_namespaces=targets,
    )
    ready = json.loads(plan.mirror[0].body)["status"]["conditions"][0]
    assert ready["reason"] == "ReplacingCopy"
    assert "t09" in ready["message"] and "t10" not in ready["message"]
    assert "(and 20 more)" in ready["message"]


def test_the_data_digest_is_canonical_and_tells_data_from_binary_data() -> None:
    assert data_digest({"data": {"a": "1", "b": "2"}}) == data_digest(
        {"data": {"b": "2", "a": "1"}}
    )
    assert data_digest({}) == data_digest({"data": {}, "binaryData": {}})
    assert data_digest({"data": {"a": "AAE="}}) != data_digest({"binaryData": {"a": "AAE="}})
    assert data_digest({"data": {"a": "1"}}) != data_digest({"data": {"a": "2"}})
    assert data_digest({"data": {"é": "ü"}}) != data_digest({"data": {"e": "u"}})
    assert len(SOURCE_DIGEST) == 64 and int(SOURCE_DIGEST, 16) >= 0


def test_a_copy_known_as_metadata_only_is_in_sync_only_when_its_data_is_known() -> None:
    """Copies are cached without their data: the digest they claim (an annotation anyone
    may leave as it was) is not enough; what the copy holds at its version must be known."""
    a, b = metadata_of(copy("a")), metadata_of(copy("b"))
    known = {"a": copy_data(copy("a")), "b": copy_data(copy("b"))}
    plan = plan_with_allowed(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": a, "b": b},
        [a, b],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        known=known,
    )
    assert plan.writes == ()
    # The data behind b's annotation is not known (another version, or never read): b is
    # written again, conditionally on the version seen.
    for what in ({"a": known["a"]}, {**known, "b": CopyData("cm-b", "8", SOURCE_DIGEST)}):
        plan = plan_with_allowed(
            mirror(status=SYNCED_STATUS),
            SOURCE,
            {"a": a, "b": b},
            [a, b],
            NOW,
            allowed_namespaces=EVERY_TARGET,
            known=what,
        )
        assert summary(plan) == [("PUT", "/api/v1/namespaces/b/configmaps/settings")]
        assert json.loads(plan.writes[0].body)["metadata"]["resourceVersion"] == "7"


def test_a_copy_whose_data_was_edited_behind_its_annotation_is_repaired() -> None:
    tampered = copy("b", data={"k": "edited"})  # the annotation still claims the source's
    known = {"a": copy_data(copy("a")), "b": copy_data(tampered)}
    plan = plan_with_allowed(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": metadata_of(copy("a")), "b": metadata_of(tampered)},
        [],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        known=known,
    )
    assert summary(plan) == [("PUT", "/api/v1/namespaces/b/configmaps/settings")]
    written = json.loads(plan.writes[0].body)
    assert written["data"] == SOURCE["data"]
    assert written["metadata"]["annotations"][DATA_DIGEST_ANNOTATION] == SOURCE_DIGEST
    # So is one whose annotation was removed or changed (its data unchanged).
    stripped = copy("b")
    del stripped["metadata"]["annotations"][DATA_DIGEST_ANNOTATION]
    plan = plan_reconcile(mirror(status=SYNCED_STATUS), SOURCE, {"b": stripped}, [], NOW)
    assert ("PUT", "/api/v1/namespaces/b/configmaps/settings") in summary(plan)


def test_an_immutable_copy_learned_from_a_refused_update_is_replaced() -> None:
    """Metadata carries no ``immutable``: the caller learns it from the 422 of its update
    and says so with a CopyData of that version (its data unknown)."""
    b = metadata_of(copy("b"))
    b["metadata"]["annotations"][DATA_DIGEST_ANNOTATION] = "an older digest"
    refused = {"b": CopyData("cm-b", "7", "", immutable=True)}
    plan = plan_with_allowed(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": b},
        [copy("a"), b],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        known=refused,
    )
    assert summary(plan)[0] == ("DELETE", "/api/v1/namespaces/b/configmaps/settings")
    assert plan.wait_for_deletions


def test_a_copy_seen_as_metadata_is_settled_only_with_its_data_known() -> None:
    seen = metadata_of(copy("a"))
    assert copy_settled(seen, mirror(), SOURCE, known=copy_data(copy("a")))
    assert not copy_settled(seen, mirror(), SOURCE)  # who wrote this version is not known
    assert not copy_settled(seen, mirror(), SOURCE, known=CopyData("cm-a", "8", SOURCE_DIGEST))
    edited = copy_data(copy("a", data={"k": "edited"}))
    assert not copy_settled(seen, mirror(), SOURCE, known=edited)


def test_a_copy_the_caller_may_not_delete_is_left_in_place() -> None:
    """Attacker's pass, round four: every mark of a copy (name, label, owner UID, a UID in
    the status) can be forged by whoever may update a ConfigMap or the mirror's status, so
    the caller names the copies it did not create and the author may not delete
    (``undeletable``): they are never deleted, and a deleting mirror does not wait for
    them."""
    why = {"c": "user 'limited' may not delete ConfigMaps in namespace 'c'"}
    # Dropped from the targets (recorded): left in place, reported, not deleted.
    plan = plan_with_allowed(
        mirror(status=recording("a", "b", "c")),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), copy("c")],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        undeletable=why,
    )
    assert all(r.method != "DELETE" for r in plan.writes)
    assert plan.ignored == ("c/settings",)
    # A mirror being deleted: the other copies are deleted, then the finalizer goes.
    deleting = mirror(
        metadata={"deletionTimestamp": NOW, "finalizers": [FINALIZER]},
        spec={"targetNamespaces": ["a", "c"]},
    )
    cleanup = plan_with_allowed(
        deleting,
        SOURCE,
        {},
        [copy("a"), copy("c")],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        copies_listed=True,
        undeletable=why,
    )
    assert summary(cleanup) == [("DELETE", "/api/v1/namespaces/a/configmaps/settings")]
    assert cleanup.ignored == ("c/settings",)
    done = plan_with_allowed(
        deleting,
        SOURCE,
        {},
        [copy("c")],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        copies_listed=True,
        undeletable=why,
    )
    assert json.loads(done.writes[0].body)["metadata"]["finalizers"] == []
    # An immutable copy that cannot be deleted cannot be replaced: reported, not deleted.
    frozen = copy("c", data={"k": "old"})
    frozen["immutable"] = True
    stuck = plan_with_allowed(
        mirror(spec={"targetNamespaces": ["a", "c"]}, status=recording("a", "c")),
        SOURCE,
        {"a": copy("a"), "c": frozen},
        [copy("a"), frozen],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        undeletable=why,
    )
    assert [r.method for r in stuck.writes] == ["PUT"]  # the status only
    status = json.loads(stuck.writes[0].body)["status"]
    assert status["conditions"][0]["reason"] == "AuthorNotAllowed"
    assert status["targets"][1] == {"namespace": "c", "state": "NotAllowed", "message": why["c"]}


def test_a_target_whose_configmap_cannot_be_read_gets_nothing_and_is_reported() -> None:
    """Attacker's pass, round four: a receiving tenant makes its copy too deep to decode
    (kept out of the caches and LISTs); nothing is written there and it is not Synced."""
    why = {"b": "ConfigMap b/settings: nested 9005 levels deep"}
    plan = plan_with_allowed(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a")},
        [copy("a")],
        NOW,
        allowed_namespaces=EVERY_TARGET,
        unreadable=why,
    )
    assert [r.method for r in plan.writes] == ["PUT"]  # the status only
    status = json.loads(plan.writes[0].body)["status"]
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "TargetUnreadable")
    assert "b/settings" in ready["message"]
    assert status["targets"][1] == {"namespace": "b", "state": "Conflict", "message": why["b"]}
