"""ConfigMirror's admission decisions: validation, access reviews, defaults."""

from __future__ import annotations

from typing import Any

import pytest

from configmirror._admission import (
    MAX_TARGETS,
    SOURCE_LABEL,
    access_denial,
    access_review,
    default_mirror,
    review_targets,
    target_namespaces,
    validate_mirror,
)
from kubemoon_core import (
    AdmissionRequest,
    GroupVersionKind,
    GroupVersionResource,
    Operation,
    UserInfo,
)

ALICE = UserInfo("alice", "u-1", ("devs", "system:authenticated"), {"scopes": ("a",)})


def mirror(source: Any = "settings", targets: Any = ("a", "b"), **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "namespace": "home", **meta},
        "spec": {"source": source, "targetNamespaces": list(targets)},
    }


def request(obj: Any, old: Any = None) -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        kind=GroupVersionKind("kubemoon.dev", "v1alpha1", "ConfigMirror"),
        resource=GroupVersionResource("kubemoon.dev", "v1alpha1", "configmirrors"),
        operation=Operation.UPDATE if old is not None else Operation.CREATE,
        user_info=ALICE,
        name="m",
        namespace="home",
        object=obj,
        old_object=old,
    )


def test_a_valid_mirror_has_no_problems() -> None:
    assert validate_mirror(mirror(), "home") == []
    beta = {"spec": {"source": "s", "targets": {"namespaces": ["a"]}}}
    assert validate_mirror(beta, "home") == []
    assert target_namespaces(beta) == ["a"]
    assert target_namespaces({"spec": "nonsense"}) == []


@pytest.mark.parametrize(
    ("source", "targets", "expected"),
    [
        ("", ["a"], ["spec.source must name a ConfigMap"]),
        (None, ["a"], ["spec.source must name a ConfigMap"]),
        ("Bad_Name", ["a"], ["spec.source 'Bad_Name' is not a valid ConfigMap name"]),
        ("s", ["a", "a"], ["target namespace 'a' is listed more than once"]),
        ("s", ["A"], ["target namespace 'A' is not a valid namespace name"]),
        ("s", ["a.b"], ["target namespace 'a.b' is not a valid namespace name"]),
        ("s", ["x" * 64], [f"target namespace {'x' * 64!r} is not a valid namespace name"]),
        ("s", [3], ["target namespace 3 is not a valid namespace name"]),
        (
            "s",
            ["home"],
            [
                "target namespace 'home' is the ConfigMirror's own namespace: "
                "the source is already there"
            ],
        ),
    ],
)
def test_each_problem_is_named(source: Any, targets: list[Any], expected: list[str]) -> None:
    assert validate_mirror(mirror(source, targets), "home") == expected


def test_too_many_targets() -> None:
    targets = [f"t{i}" for i in range(MAX_TARGETS + 1)]
    assert validate_mirror(mirror("s", targets), "home") == [
        f"at most {MAX_TARGETS} target namespaces, got {MAX_TARGETS + 1}"
    ]
    assert validate_mirror(mirror("s", targets[:MAX_TARGETS]), "home") == []


def test_every_problem_is_reported_at_once() -> None:
    problems = validate_mirror(mirror("", ["home", "B", "home"]), "home")
    assert len(problems) == 5


def test_the_access_review_asks_for_the_requesting_user() -> None:
    review = access_review(ALICE, "team-b")
    assert review["kind"] == "SubjectAccessReview"
    assert review["spec"] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["devs", "system:authenticated"],
        "extra": {"scopes": ["a"]},
        "resourceAttributes": {
            "namespace": "team-b",
            "verb": "create",
            "group": "",
            "version": "v1",
            "resource": "configmaps",
        },
    }
    assert "uid" not in access_review(UserInfo("bob"), "x")["spec"]
    assert "extra" not in access_review(UserInfo("bob"), "x")["spec"]


def test_the_access_answer() -> None:
    assert access_denial({"status": {"allowed": True}}, ALICE, "x") is None
    denied = access_denial({"status": {"allowed": False}}, ALICE, "kube-system")
    assert denied is not None
    assert "user 'alice' may not create ConfigMaps in namespace 'kube-system'" in denied
    explained = access_denial({"status": {"allowed": False, "reason": "no"}}, ALICE, "x")
    assert explained is not None and "'x' (no):" in explained
    # An explicit deny wins, and an answer without a status is no permission.
    assert access_denial({"status": {"allowed": True, "denied": True}}, ALICE, "x") is not None
    assert access_denial({}, ALICE, "x") is not None


def test_which_targets_are_reviewed() -> None:
    assert review_targets(request(mirror(targets=["a", "b", "a"]))) == ["a", "b"]
    # Only metadata changed (a finalizer, a label): nobody's access is in question.
    old = mirror()
    new = mirror(finalizers=["kubemoon.dev/cleanup"])
    assert review_targets(request(new, old)) == []
    assert review_targets(request(mirror(targets=["a", "c"]), old)) == ["a", "c"]
    assert review_targets(request(mirror(source="other"), old)) == ["a", "b"]


def test_defaults_sort_targets_and_label_the_source() -> None:
    original = mirror(targets=["c", "a", "b", "a"])
    defaulted = default_mirror(original)
    assert defaulted["spec"]["targetNamespaces"] == ["a", "a", "b", "c"]
    assert defaulted["metadata"]["labels"] == {SOURCE_LABEL: "settings"}
    assert original["spec"]["targetNamespaces"] == ["c", "a", "b", "a"]  # not changed
    beta = default_mirror({"spec": {"source": "s", "targets": {"namespaces": ["b", "a"]}}})
    assert beta == {
        "metadata": {"labels": {SOURCE_LABEL: "s"}},
        "spec": {"source": "s", "targets": {"namespaces": ["a", "b"]}},
    }
    labelled = default_mirror(mirror(labels={"keep": "me"}))
    assert labelled["metadata"]["labels"] == {"keep": "me", SOURCE_LABEL: "settings"}
    # A name too long for a label value gets no label; a spec that is not an object is left.
    long_name = "a" * 64
    assert "labels" not in default_mirror(mirror(long_name))["metadata"]
    assert default_mirror({"spec": "odd"}) == {"spec": "odd"}
    assert default_mirror(mirror(labels=None))["metadata"]["labels"] == {SOURCE_LABEL: "settings"}


def test_a_selector_needs_access_to_all_namespaces() -> None:
    beta = {
        "spec": {
            "source": "s",
            "targets": {"namespaces": ["a"], "namespaceSelector": {"matchLabels": {"t": "x"}}},
        }
    }
    assert review_targets(request(beta)) == ["a", ""]
    assert access_review(ALICE, "")["spec"]["resourceAttributes"]["namespace"] == ""
    denied = access_denial({"status": {"allowed": False}}, ALICE, "")
    assert denied is not None and "in all namespaces" in denied
    assert "namespaceSelector" in denied
