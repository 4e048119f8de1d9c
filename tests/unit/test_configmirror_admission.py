"""ConfigMirror's admission decisions: validation, access reviews, defaults."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from configmirror._admission import (
    ALL_NAMESPACES,
    MAX_TARGETS,
    SOURCE_LABEL,
    AccessCheck,
    DecisionCache,
    access_denial,
    access_review,
    cap_denial,
    decision_key,
    default_mirror,
    deletion_update,
    mirror_reach,
    required_checks,
    storage_form,
    target_namespaces,
    validate_mirror,
)
from configmirror._convert import SELECTOR_ANNOTATION
from kubemoon_core import GroupVersionKind, GroupVersionResource
from kubemoon_core.errors import ConversionError
from kubemoon_core.webhooks import AdmissionRequest, Operation, UserInfo

ALICE = UserInfo("alice", "u-1", ("devs", "system:authenticated"), {"scopes": ("a",)})


def mirror(source: Any = "settings", targets: Any = ("a", "b"), **meta: Any) -> dict[str, Any]:
    """A v1alpha1 ConfigMirror."""
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "namespace": "home", **meta},
        "spec": {"source": source, "targetNamespaces": list(targets)},
    }


def v1beta1(
    targets: list[Any], selector: Any = None, source: Any = "settings", **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"source": source, "targets": {"namespaces": targets}}
    if selector is not None:
        spec["targets"]["namespaceSelector"] = selector
    return {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "namespace": "home", **meta},
        "spec": spec,
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
    beta = v1beta1(["a"])
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
    # In v1beta1 (no conversion): the apiserver's schema stops most of these in v1alpha1.
    assert validate_mirror(v1beta1(targets, source=source), "home") == expected


def test_too_many_targets() -> None:
    targets = [f"t{i}" for i in range(MAX_TARGETS + 1)]
    assert validate_mirror(mirror("s", targets), "home") == [
        f"at most {MAX_TARGETS} target namespaces, got {MAX_TARGETS + 1}"
    ]
    assert validate_mirror(v1beta1(targets), "home") == [
        f"at most {MAX_TARGETS} target namespaces, got {MAX_TARGETS + 1}"
    ]
    assert validate_mirror(mirror("s", targets[:MAX_TARGETS]), "home") == []


def test_every_problem_is_reported_at_once() -> None:
    problems = validate_mirror(v1beta1(["home", "B", "home"], {}, source=""), "home")
    assert len(problems) == 6
    # A v1alpha1 object the schema would refuse does not even convert: one message.
    (converted,) = validate_mirror(mirror("", ["home"]), "home")
    assert "does not pass its schema: .spec.source: shorter than 1" in converted


WEB = {"matchLabels": {"tier": "web"}}


def test_the_decision_is_made_on_the_storage_form() -> None:
    alpha = mirror(annotations={SELECTOR_ANNOTATION: '{"matchLabels":{"tier":"web"}}'})
    beta = storage_form(alpha)
    assert beta["spec"]["targets"] == {"namespaces": ["a", "b"], "namespaceSelector": WEB}
    assert "annotations" not in beta["metadata"]
    assert storage_form(beta) == beta
    with pytest.raises(ConversionError, match="'v1' is not a served ConfigMirror version"):
        storage_form({**beta, "apiVersion": "v1"})


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, "must name at least one label in matchLabels"),
        ({"matchLabels": {}}, "must name at least one label in matchLabels"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, "not matchExpressions"),
        ({"matchLabels": {"a": 1}}, "matchLabels['a']: 1 is not a valid label value"),
        ({"matchLabels": {"a": [1]}}, "[1] is not a valid label value"),
        ({"matchLabels": {"a": "x y"}}, "'x y' is not a valid label value"),
        ({"matchLabels": {"-a": "x"}}, "'-a' is not a valid label key"),
        ({"matchLabels": {"a/": "x"}}, "'a/' is not a valid label key"),
        ({"matchLabels": {"A_b/c": "x"}}, "'A_b/c' is not a valid label key"),
        ("everything", "namespaceSelector must be an object"),
    ],
)
def test_a_selector_read_broader_than_written_is_refused(selector: Any, expected: str) -> None:
    problems = validate_mirror(v1beta1(["a"], selector), "home")
    assert any(expected in problem for problem in problems), problems


def test_a_valid_selector_is_accepted() -> None:
    labels = {"matchLabels": {"example.com/tier": "web", "env": ""}}
    assert validate_mirror(v1beta1(["a"], labels), "home") == []


@pytest.mark.parametrize(
    "annotation",
    [
        "{}",
        '{"matchExpressions":[{"key":"a","operator":"Exists"}]}',
        '{"matchLabels":{"a":[1]}}',
        '{"matchLabels":{"a":1}}',
        '"str"',
        "[1]",
        "not json",
        '{"matchLabels":{"a":"x","a":"y"}}',
        '{"matchLabels":{"a":NaN}}',
    ],
)
def test_a_v1alpha1_selector_annotation_is_judged_as_stored(annotation: str) -> None:
    problems = validate_mirror(mirror(annotations={SELECTOR_ANNOTATION: annotation}), "home")
    assert problems  # refused by the conversion, or as an empty selector


def test_the_conversion_annotation_on_a_v1beta1_object_is_refused() -> None:
    beta = v1beta1(["a"], annotations={SELECTOR_ANNOTATION: '{"matchLabels":{"t":"x"}}'})
    (problem,) = validate_mirror(beta, "home")
    assert f"annotation {SELECTOR_ANNOTATION} is reserved for conversion" in problem


def test_the_access_review_asks_for_the_requesting_user() -> None:
    review = access_review(ALICE, AccessCheck("create", "team-b"))
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
    bob = access_review(UserInfo("bob"), AccessCheck("get", "home", "settings"))["spec"]
    assert "uid" not in bob and "extra" not in bob
    assert bob["resourceAttributes"]["verb"] == "get"
    assert bob["resourceAttributes"]["name"] == "settings"


def test_the_access_answer() -> None:
    x, system = AccessCheck("create", "x"), AccessCheck("create", "kube-system")
    assert access_denial({"status": {"allowed": True}}, ALICE, x) is None
    denied = access_denial({"status": {"allowed": False}}, ALICE, system)
    assert denied is not None
    assert "user 'alice' may not create ConfigMaps in namespace 'kube-system'" in denied
    explained = access_denial({"status": {"allowed": False, "reason": "no"}}, ALICE, x)
    assert explained is not None and "'x' (no):" in explained
    # An explicit deny wins, and an answer without a status is no permission.
    assert access_denial({"status": {"allowed": True, "denied": True}}, ALICE, x) is not None
    assert access_denial({}, ALICE, x) is not None
    unread = access_denial({}, ALICE, AccessCheck("get", "home", "secret"))
    assert unread is not None and "may not get ConfigMap home/secret" in unread
    everywhere = access_denial({}, ALICE, AccessCheck("create", ALL_NAMESPACES))
    assert everywhere is not None and "in all namespaces" in everywhere
    assert "namespaceSelector" in everywhere


def beta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return storage_form(obj)


GET = AccessCheck("get", "home", "settings")
ALL = AccessCheck("create", ALL_NAMESPACES)


def creates(*namespaces: str) -> list[AccessCheck]:
    return [AccessCheck("create", n) for n in namespaces]


def test_a_new_mirror_needs_every_check() -> None:
    assert required_checks(None, beta_of(mirror(targets=["b", "a"])), "home") == [
        GET,
        *creates("a", "b"),
    ]
    assert required_checks(None, v1beta1(["a"], WEB), "home") == [GET, ALL, *creates("a")]
    assert required_checks(None, v1beta1([]), "home") == []  # reaches nothing


def test_an_update_is_reviewed_for_what_it_adds() -> None:
    old = beta_of(mirror(targets=["a", "b"]))
    # Only metadata changed (a finalizer, a label): nobody's access is in question.
    assert required_checks(old, beta_of(mirror(finalizers=["kubemoon.dev/cleanup"])), "home") == []
    assert required_checks(old, beta_of(mirror(targets=["a"])), "home") == []  # narrower
    assert required_checks(old, beta_of(mirror(targets=["a", "c"])), "home") == [
        GET,
        *creates("c"),
    ]
    # A new source is written to every target on this user's word.
    assert required_checks(old, beta_of(mirror(source="other")), "home") == [
        AccessCheck("get", "home", "other"),
        *creates("a", "b"),
    ]


def test_any_change_of_what_the_selector_resolves_to_is_reviewed() -> None:
    plain = mirror(targets=["a"])
    selecting = mirror(targets=["a"], annotations={SELECTOR_ANNOTATION: json_of(WEB)})
    # A v1alpha1 update that adds the annotation adds a selector: spec is the same.
    assert plain["spec"] == selecting["spec"]
    assert required_checks(beta_of(plain), beta_of(selecting), "home") == [GET, ALL]
    other = v1beta1(["a"], {"matchLabels": {"tier": "db"}})
    assert required_checks(beta_of(selecting), other, "home") == [GET, ALL]
    narrower = v1beta1(["a"], {"matchLabels": {"tier": "web", "x": "y"}})
    assert required_checks(beta_of(selecting), narrower, "home") == [GET, ALL]
    assert required_checks(beta_of(selecting), v1beta1(["a"], WEB), "home") == []
    assert required_checks(beta_of(selecting), beta_of(plain), "home") == []  # removed
    assert mirror_reach(beta_of(selecting)).selector == (("tier", "web"),)


def json_of(value: Any) -> str:
    import json

    return json.dumps(value)


def test_the_cap_denial_names_the_cap() -> None:
    checks = [GET, *creates(*(f"t{i}" for i in range(30)))]
    message = cap_denial(checks, 20)
    assert "needs 31 access reviews, more than the 20 one admission request may cause" in message
    assert "add at most 19 new target namespaces per change" in message


def test_decisions_are_kept_briefly_by_everything_the_review_asks() -> None:
    cache = DecisionCache(ttl=5.0, max_entries=3)
    key = decision_key(ALICE, GET)
    assert cache.get(key, 0.0) == (False, None)
    cache.put(key, None, 0.0)
    assert cache.get(key, 4.9) == (True, None)
    assert cache.get(key, 5.0) == (False, None)  # expired, and dropped
    assert len(cache) == 0
    cache.put(key, "no", 10.0)
    assert cache.get(key, 11.0) == (True, "no")
    # Any difference in what is asked is another key.
    variants = [
        UserInfo("bob", "u-1", ALICE.groups, ALICE.extra),
        UserInfo("alice", "u-2", ALICE.groups, ALICE.extra),
        UserInfo("alice", "u-1", ("devs",), ALICE.extra),
        UserInfo("alice", "u-1", ALICE.groups, {"scopes": ("b",)}),
    ]
    assert len({decision_key(u, GET) for u in [ALICE, *variants]}) == 5
    checks = [GET, AccessCheck("get", "home", "x"), AccessCheck("get", "a", "settings"), ALL]
    assert len({decision_key(ALICE, c) for c in checks}) == 4
    # Groups in another order ask the same.
    same = UserInfo("alice", "u-1", tuple(reversed(ALICE.groups)), ALICE.extra)
    assert decision_key(same, GET) == key
    # Bounded: the oldest goes first.
    for i in range(4):
        cache.put(decision_key(ALICE, AccessCheck("create", f"n{i}")), None, 20.0)
    assert len(cache) == 3
    assert cache.get(decision_key(ALICE, AccessCheck("create", "n0")), 20.0) == (False, None)
    assert (cache.hits, cache.misses) == (2, 3)
    off = DecisionCache(ttl=0)
    off.put(key, None, 0.0)
    assert len(off) == 0


def being_deleted(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}


def test_finishing_a_deletion_is_recognised() -> None:
    invalid = v1beta1(["home"], {}, finalizers=["kubemoon.dev/cleanup"])
    old = being_deleted(invalid)
    new = being_deleted(v1beta1(["home"], {}))
    assert deletion_update(request(new, old))
    # Not being deleted, or the spec changes: judged as any update.
    assert not deletion_update(request(v1beta1(["home"], {}), invalid))
    assert not deletion_update(request(being_deleted(v1beta1(["x"], {})), old))
    assert not deletion_update(request(new))


def test_a_deleting_mirror_changing_more_than_its_finalizers_is_validated() -> None:
    held = being_deleted(v1beta1(["x"], {}, finalizers=["tenant.example/hold"]))
    annotated = copy.deepcopy(held)
    annotated["metadata"]["annotations"] = {SELECTOR_ANNOTATION: '{"matchLabels":{"a":"b"}}'}
    labelled = copy.deepcopy(held)
    labelled["metadata"]["labels"] = {"a": "b"}
    assert not deletion_update(request(annotated, held))
    assert not deletion_update(request(labelled, held))
    released = copy.deepcopy(held)
    released["metadata"]["finalizers"] = []
    released["metadata"]["resourceVersion"] = "2"
    assert deletion_update(request(released, held))


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


def test_an_oversized_mirror_is_not_defaulted_before_validation_refuses_it() -> None:
    # Sizes come first: a list the validation refuses is never copied or sorted.
    for huge in (
        mirror(targets=[f"ns-{i}" for i in range(MAX_TARGETS + 1, 0, -1)]),
        v1beta1(["z"] * (MAX_TARGETS + 1)),
    ):
        assert default_mirror(huge) == huge
        assert any("at most 100 target namespaces" in p for p in validate_mirror(huge, "home"))
    at_the_limit = mirror(targets=[f"ns-{i}" for i in range(MAX_TARGETS, 0, -1)])
    assert default_mirror(at_the_limit)["spec"]["targetNamespaces"][0] == "ns-1"
