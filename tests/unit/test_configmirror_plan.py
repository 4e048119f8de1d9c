"""The ConfigMirror planner: what one reconcile writes, for each situation."""

import json
from typing import Any

from configmirror import FINALIZER, MANAGED_BY_LABEL, OWNER_UID_ANNOTATION, plan_reconcile

NOW = "2026-11-29T18:00:00Z"


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


def copy(
    namespace: str, *, uid: str = "uid-1", data: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "settings",
            "namespace": namespace,
            "uid": f"cm-{namespace}",
            "resourceVersion": "7",
            "labels": {MANAGED_BY_LABEL: "kubemoon-configmirror"},
            "annotations": {OWNER_UID_ANNOTATION: uid},
        },
        "data": data if data is not None else {"k": "v"},
        "binaryData": {"b": "AAE="},
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
        {"namespace": "a", "state": "Synced", "message": ""},
        {"namespace": "b", "state": "Synced", "message": ""},
    ],
}


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
    assert created["metadata"]["annotations"] == {OWNER_UID_ANNOTATION: "uid-1"}
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


def test_removed_namespaces_and_renamed_sources_lose_their_copies() -> None:
    leftover = copy("c")
    plan = plan_reconcile(
        mirror(status=SYNCED_STATUS),
        SOURCE,
        {"a": copy("a"), "b": copy("b")},
        [copy("a"), copy("b"), leftover],
        NOW,
    )
    assert summary(plan) == [("DELETE", "/api/v1/namespaces/c/configmaps/settings")]
    body = json.loads(plan.writes[0].body)
    assert body["preconditions"] == {"uid": "cm-c", "resourceVersion": "7"}


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
    second = plan_reconcile(deleting, SOURCE, {}, [], NOW)
    assert not second.wait_for_deletions
    assert json.loads(second.writes[0].body)["metadata"]["finalizers"] == ["other"]
    gone = mirror(metadata={"deletionTimestamp": NOW, "finalizers": ["other"]})
    assert plan_reconcile(gone, SOURCE, {}, [copy("a")], NOW).writes == ()


def test_transition_time_changes_only_with_the_condition_status() -> None:
    changed = {**SYNCED_STATUS, "observedGeneration": 1}
    plan = plan_reconcile(mirror(status=changed), SOURCE, {"a": copy("a"), "b": copy("b")}, [], NOW)
    ready = json.loads(plan.writes[0].body)["status"]["conditions"][0]
    assert ready["lastTransitionTime"] == "2026-11-29T17:00:00Z"
    plan = plan_reconcile(mirror(status=changed), None, {}, [], NOW)
    ready = json.loads(plan.writes[0].body)["status"]["conditions"][0]
    assert ready["lastTransitionTime"] == NOW
