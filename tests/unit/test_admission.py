"""AdmissionReview decoding (strict, path-named errors) and response encoding."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from kubemoon_core import GroupVersionKind, GroupVersionResource
from kubemoon_core.errors import DecodeError, LocalProtocolError
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import (
    AdmissionResponse,
    Operation,
    UserInfo,
    decode_admission_review,
    encode_admission_review,
)

CONFIGMAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c"},
    "data": {},
}


def review(**request: Any) -> dict[str, Any]:
    """A complete v1 review as the API server sends it; keyword arguments override."""
    base: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "subResource": "",
        "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
        "requestSubResource": "",
        "name": "c",
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {
            "username": "alice",
            "uid": "u-1",
            "groups": ["system:authenticated", "devs"],
            "extra": {"scopes": ["a", "b"]},
        },
        "object": CONFIGMAP,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    base.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}


def test_decode_a_full_review() -> None:
    request = decode_admission_review(json.dumps(review()).encode())
    assert request.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert request.kind == GroupVersionKind("", "v1", "ConfigMap")
    assert request.resource == GroupVersionResource("", "v1", "configmaps")
    assert request.request_kind == GroupVersionKind("", "v1", "ConfigMap")
    assert request.request_resource == GroupVersionResource("", "v1", "configmaps")
    assert request.operation is Operation.CREATE
    assert request.user_info == UserInfo(
        "alice", "u-1", ("system:authenticated", "devs"), {"scopes": ("a", "b")}
    )
    assert (request.name, request.namespace) == ("c", "team-a")
    assert request.object == CONFIGMAP
    assert request.old_object is None
    assert request.dry_run is False
    assert request.options == {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}


def test_decode_a_minimal_review() -> None:
    doc = review(operation="DELETE", dryRun=True, oldObject=CONFIGMAP, userInfo={})
    for key in (
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "object",
        "options",
    ):
        del doc["request"][key]
    request = decode_admission_review(doc)
    assert request.operation is Operation.DELETE
    assert request.dry_run is True
    assert request.object is None
    assert request.old_object == CONFIGMAP
    assert request.request_kind is None
    assert request.request_resource is None
    assert request.user_info == UserInfo()
    assert request.name == request.namespace == request.sub_resource == ""


def _broken(path: list[str | int], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(review())
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ([], ""),
        (_broken(["apiVersion"], "admission.k8s.io/v1beta1"), "apiVersion"),
        (_broken(["kind"], "ConversionReview"), "kind"),
        (_broken(["request"], None), "request"),
        (_broken(["request", "uid"], KeyError), "request.uid"),
        (_broken(["request", "uid"], 7), "request.uid"),
        (_broken(["request", "operation"], "PATCH"), "request.operation"),
        (_broken(["request", "operation"], KeyError), "request.operation"),
        (_broken(["request", "dryRun"], "yes"), "request.dryRun"),
        (_broken(["request", "kind"], KeyError), "request.kind"),
        (_broken(["request", "kind", "kind"], KeyError), "request.kind.kind"),
        (_broken(["request", "kind", "version"], KeyError), "request.kind.version"),
        (_broken(["request", "kind", "kind"], "not a kind!"), "request.kind"),
        (_broken(["request", "resource"], "configmaps"), "request.resource"),
        (_broken(["request", "resource", "resource"], KeyError), "request.resource.resource"),
        (_broken(["request", "resource", "group"], "Bad_Group"), "request.resource"),
        (_broken(["request", "requestKind"], []), "request.requestKind"),
        (_broken(["request", "requestResource", "version"], 1), "request.requestResource.version"),
        (_broken(["request", "userInfo"], KeyError), "request.userInfo"),
        (_broken(["request", "userInfo", "username"], 1), "request.userInfo.username"),
        (_broken(["request", "userInfo", "groups", 1], None), "request.userInfo.groups[1]"),
        (_broken(["request", "userInfo", "groups"], "devs"), "request.userInfo.groups"),
        (_broken(["request", "userInfo", "extra"], []), "request.userInfo.extra"),
        (
            _broken(["request", "userInfo", "extra", "scopes"], [1]),
            "request.userInfo.extra.scopes[0]",
        ),
        (_broken(["request", "object"], "x"), "request.object"),
        (_broken(["request", "oldObject"], [1]), "request.oldObject"),
        (_broken(["request", "options"], 3), "request.options"),
        (_broken(["request", "name"], ["c"]), "request.name"),
    ],
)
def test_decode_errors_name_the_path(doc: Any, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_admission_review(doc)
    assert info.value.path == path


def test_decode_rejects_bytes_that_are_not_json() -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        decode_admission_review(b"{")


def _answer(body: bytes) -> dict[str, Any]:
    doc = json.loads(body)
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    answer: dict[str, Any] = doc["response"]
    return answer


def test_encode_allow_and_deny() -> None:
    assert _answer(encode_admission_review("u", AdmissionResponse.allow())) == {
        "uid": "u",
        "allowed": True,
    }
    denied = AdmissionResponse.deny("no empty data", code=422, reason="Invalid", warnings=("w",))
    assert _answer(encode_admission_review("u", denied)) == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 422, "message": "no empty data", "reason": "Invalid"},
        "warnings": ["w"],
    }
    plain = AdmissionResponse(False, message="plain")
    assert _answer(encode_admission_review("u", plain))["status"] == {"message": "plain"}


def test_encode_a_patch() -> None:
    mutated = copy.deepcopy(CONFIGMAP)
    mutated["metadata"]["labels"] = {"app.kubernetes.io/name": "x"}
    response = AdmissionResponse.patched(CONFIGMAP, mutated, warnings=("defaulted",))
    answer = _answer(encode_admission_review("u", response))
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    assert answer["warnings"] == ["defaulted"]
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"app.kubernetes.io/name": "x"}}
    ]
    assert apply_json_patch(CONFIGMAP, patch) == mutated


def test_an_unchanged_object_gives_no_patch() -> None:
    answer = _answer(encode_admission_review("u", AdmissionResponse.patched(CONFIGMAP, CONFIGMAP)))
    assert answer == {"uid": "u", "allowed": True}


def test_invalid_responses_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="cannot carry a patch"):
        AdmissionResponse(False, patch=({"op": "remove", "path": "/a"},))
    with pytest.raises(LocalProtocolError, match="not an HTTP code"):
        AdmissionResponse.deny("x", code=99)


def test_many_distinct_kinds_are_all_decoded() -> None:
    # Validated kinds are remembered in a bounded cache; it must keep giving right answers.
    for index in range(1100):
        kind = {"group": "example.com", "version": "v1", "kind": f"Kind{index}"}
        request = decode_admission_review(review(kind=kind))
        assert request.kind == GroupVersionKind("example.com", "v1", f"Kind{index}")
    assert decode_admission_review(review()).kind == GroupVersionKind("", "v1", "ConfigMap")
