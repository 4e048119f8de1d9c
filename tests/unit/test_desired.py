"""Create-or-update planning: zero writes in steady state, guarded patches otherwise."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubemoon_core import APIResource, GroupVersionResource, Scope
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import (
    SERVER_SET_METADATA,
    WriteAction,
    WritePlan,
    apply_object,
    plan_status,
    plan_write,
    server_side_apply_request,
)

CM = GroupVersionResource("", "v1", "configmaps")
SECRETS = GroupVersionResource("", "v1", "secrets")
WIDGETS = APIResource(
    GroupVersionResource("example.com", "v1", "widgets"), "Widget", Scope.NAMESPACED
)
NODES = APIResource(GroupVersionResource("", "v1", "nodes"), "Node", Scope.CLUSTER)
OWNER = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "name": "w",
    "uid": "u-w",
    "controller": True,
}
DESIRED: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "w-config",
        "namespace": "ns",
        "labels": {"app": "w"},
        "annotations": {"example.com/hash": "abc"},
        "ownerReferences": [OWNER],
    },
    "data": {"k": "v"},
}
EXISTING: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "w-config",
        "namespace": "ns",
        "uid": "u-c",
        "resourceVersion": "7",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"app": "w", "team": "other"},
        "annotations": {"example.com/hash": "abc", "kubectl.io/x": "1"},
        "ownerReferences": [{**OWNER, "blockOwnerDeletion": True}],
        "managedFields": [{"manager": "kubemoon"}],
    },
    "data": {"k": "v"},
}


def _patch(plan: WritePlan) -> dict[str, Any]:
    assert plan.action is WriteAction.PATCH
    assert plan.request is not None
    assert plan.request.header("Content-Type") == "application/merge-patch+json"
    body: dict[str, Any] = json.loads(plan.request.body)
    assert body["metadata"]["resourceVersion"] == "7"
    return body


def test_absent_objects_are_created() -> None:
    plan = plan_write(CM, DESIRED, None)
    assert plan.action is WriteAction.CREATE
    assert plan.request is not None
    assert (plan.request.method, plan.request.path) == ("POST", "/api/v1/namespaces/ns/configmaps")
    assert json.loads(plan.request.body) == DESIRED


def test_steady_state_makes_no_write() -> None:
    assert plan_write(CM, DESIRED, EXISTING) == WritePlan(WriteAction.NONE)
    # Owner references match by uid whatever else the server added.
    assert plan_write(CM, {"metadata": {"ownerReferences": [OWNER]}}, EXISTING).action is (
        WriteAction.NONE
    )


def test_labels_and_annotations_merge_key_by_key() -> None:
    desired = {
        **DESIRED,
        "metadata": {**DESIRED["metadata"], "labels": {"app": "w2", "team": None}},
    }
    plan = plan_write(CM, desired, EXISTING)
    assert plan.changed == ("metadata.labels",)
    assert plan.request is not None
    assert plan.request.path == "/api/v1/namespaces/ns/configmaps/w-config"
    assert _patch(plan) == {
        "metadata": {"labels": {"app": "w2", "team": None}, "resourceVersion": "7"}
    }
    gone = {"metadata": {"labels": {"absent": None}}}
    assert plan_write(CM, gone, EXISTING).action is WriteAction.NONE
    added = {"metadata": {"annotations": {"new": "1"}}}
    assert _patch(plan_write(CM, added, EXISTING))["metadata"]["annotations"] == {"new": "1"}


def test_owner_references_and_finalizers_are_merged_lists() -> None:
    other = {"apiVersion": "example.com/v1", "kind": "Fleet", "name": "f", "uid": "u-f"}
    plan = plan_write(CM, {"metadata": {"ownerReferences": [other]}}, EXISTING)
    assert _patch(plan)["metadata"]["ownerReferences"] == [
        {**OWNER, "blockOwnerDeletion": True},
        other,
    ]
    flipped = {**OWNER, "controller": False}
    plan = plan_write(CM, {"metadata": {"ownerReferences": [flipped, "junk"]}}, EXISTING)
    assert _patch(plan)["metadata"]["ownerReferences"] == [
        {**OWNER, "blockOwnerDeletion": True, "controller": False}
    ]
    # Without uids a reference matches by group, kind and name.
    no_uid = {"apiVersion": "example.com/v2", "kind": "Widget", "name": "w"}
    assert plan_write(CM, {"metadata": {"ownerReferences": [no_uid]}}, EXISTING).action is (
        WriteAction.NONE
    )
    odd = {"metadata": {"ownerReferences": [{"apiVersion": 3, "kind": "Widget", "name": "w"}]}}
    assert plan_write(CM, odd, EXISTING).changed == ("metadata.ownerReferences",)
    fin = {"metadata": {"finalizers": ["a.io/x"]}}
    assert _patch(plan_write(CM, fin, EXISTING))["metadata"]["finalizers"] == ["a.io/x"]
    with_fin = {
        **EXISTING,
        "metadata": {**EXISTING["metadata"], "finalizers": ["b.io/y", "a.io/x"]},
    }
    assert plan_write(CM, fin, with_fin).action is WriteAction.NONE
    assert plan_write(CM, {"metadata": {"finalizers": "x"}}, with_fin).action is WriteAction.NONE


def test_data_is_exact_and_spec_is_a_subset() -> None:
    plan = plan_write(CM, {**DESIRED, "data": {"k": "v2", "n": "1"}}, EXISTING)
    assert plan.changed == ("data",)
    assert _patch(plan)["data"] == {"k": "v2", "n": "1"}
    fewer = plan_write(CM, {**DESIRED, "data": {}}, EXISTING)
    assert _patch(fewer)["data"] == {"k": None}
    # A spec the server defaulted: only the keys the desired object sets matter.
    existing = {**EXISTING, "spec": {"replicas": 2, "strategy": {"type": "Rolling", "max": 1}}}
    same = {"spec": {"strategy": {"type": "Rolling"}}}
    assert plan_write(WIDGETS, same, existing).action is WriteAction.NONE
    deeper = {"spec": {"strategy": {"type": "Recreate"}, "paused": True, "list": [1, 2]}}
    assert _patch(plan_write(WIDGETS, deeper, existing))["spec"] == {
        "strategy": {"type": "Recreate"},
        "paused": True,
        "list": [1, 2],
    }
    assert _patch(plan_write(WIDGETS, {"spec": {"replicas": None}}, existing))["spec"] == {
        "replicas": None
    }
    assert plan_write(WIDGETS, {"rules": None}, existing).action is WriteAction.NONE
    assert _patch(plan_write(WIDGETS, {"rules": ["a"]}, existing))["rules"] == ["a"]
    assert _patch(plan_write(WIDGETS, {"spec": None}, existing))["spec"] is None
    assert plan_write(WIDGETS, {"data": [1]}, {**existing, "data": [1]}).action is WriteAction.NONE
    assert _patch(plan_write(WIDGETS, {"data": [2]}, {**existing, "data": [1]}))["data"] == [2]
    custom = plan_write(WIDGETS, {"spec": {"replicas": 2}}, existing, exact=("spec",))
    assert _patch(custom)["spec"] == {"strategy": None}


def test_secret_string_data_compares_with_data() -> None:
    encoded = base64.b64encode(b"s3cret").decode()
    existing = {**EXISTING, "kind": "Secret", "data": {"password": encoded}}
    desired = {"stringData": {"password": "s3cret"}}
    assert plan_write(SECRETS, desired, existing).action is WriteAction.NONE
    plan = plan_write(SECRETS, {"stringData": {"password": "new", "n": 1}}, existing)
    assert _patch(plan)["stringData"] == {"password": "new", "n": 1}


def test_cluster_scoped_and_misuse() -> None:
    node = {"metadata": {"name": "n1", "namespace": "x", "resourceVersion": "7"}}
    plan = plan_write(NODES, {"metadata": {"labels": {"a": "b"}}}, node)
    assert plan.request is not None
    assert plan.request.path == "/api/v1/nodes/n1"
    with pytest.raises(LocalProtocolError, match="not a mapping"):
        plan_write(CM, [], EXISTING)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="no metadata.name"):
        plan_write(CM, DESIRED, {"metadata": {"resourceVersion": "1"}})
    with pytest.raises(LocalProtocolError, match="resourceVersion to guard"):
        plan_write(CM, DESIRED, {"metadata": {"name": "a"}})


def test_status_is_patched_only_when_it_differs() -> None:
    existing = {**EXISTING, "status": {"phase": "Ready", "observedGeneration": 3}}
    same = {"phase": "Ready", "observedGeneration": 3}
    assert plan_status(WIDGETS, same, existing).action is WriteAction.NONE
    plan = plan_status(WIDGETS, {"phase": "Failed"}, existing)
    assert plan.request is not None
    assert plan.request.path == "/apis/example.com/v1/namespaces/ns/widgets/w-config/status"
    assert _patch(plan) == {
        "status": {"phase": "Failed", "observedGeneration": None},
        "metadata": {"resourceVersion": "7"},
    }
    unguarded = plan_status(WIDGETS, {"phase": "New"}, EXISTING, guard=False)
    assert unguarded.request is not None
    assert json.loads(unguarded.request.body) == {"status": {"phase": "New"}}
    with pytest.raises(LocalProtocolError, match="desired status"):
        plan_status(WIDGETS, None, existing)  # type: ignore[arg-type]


def test_server_side_apply_strips_server_set_fields() -> None:
    obj = {**EXISTING, "status": {"phase": "x"}}
    clean = apply_object(obj)
    assert not set(SERVER_SET_METADATA) & set(clean["metadata"])
    assert "status" not in clean
    assert clean["metadata"]["labels"] == EXISTING["metadata"]["labels"]
    assert "uid" in EXISTING["metadata"]  # the input is untouched
    assert apply_object(obj, keep_status=True)["status"] == {"phase": "x"}
    assert apply_object({"kind": "X"}) == {"kind": "X"}
    request = server_side_apply_request(CM, obj, field_manager="widgets")
    assert (request.method, request.path) == ("PATCH", "/api/v1/namespaces/ns/configmaps/w-config")
    assert request.query == (("fieldManager", "widgets"), ("force", "true"))
    assert json.loads(request.body) == clean
    with pytest.raises(LocalProtocolError, match="not a mapping"):
        apply_object("x")  # type: ignore[arg-type]
