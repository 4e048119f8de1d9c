"""A typed mutating webhook's patch applies to the object the API server sent.

The API server applies the patch to the raw request object, which may lack fields the
class defaults (a CRD schema without those defaults), carry ``null`` for an optional field
(which the encoding leaves out) and hold fields the class keeps without knowing them
(``PreserveUnknown``, metadata's unknown fields). For random such objects and a random
change of one field, every operation applies to the raw object, the result is the encoded
mutation, and nothing the raw object held beyond the class is lost.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubemoon_core.objects import apply_json_patch
from kubemoon_core.typed import MetadataField, PreserveUnknown, custom_resource, decode, encode
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    PendingAdmission,
    WebhookDeclarations,
)


@dataclass(slots=True)
class Limits:
    memory: str = "64Mi"
    burst: int = 0


@dataclass(slots=True)
class BoxSpec:
    cpu: str = "100m"
    replicas: int = 1
    tags: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    note: str | None = None
    rest: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)


@custom_resource(group="props.kubemoon.dev", version="v1")
@dataclass(slots=True)
class Box:
    spec: BoxSpec = field(default_factory=BoxSpec)
    metadata: MetadataField = MetadataField()


CHANGES = ("cpu", "replicas", "tags", "memory", "burst", "note", "none")


def mutate(box: Box, change: str) -> Box:
    spec = box.spec
    if change == "cpu":
        spec = dataclasses.replace(spec, cpu="250m" if spec.cpu != "250m" else "500m")
    elif change == "replicas":
        spec = dataclasses.replace(spec, replicas=spec.replicas + 1)
    elif change == "tags":
        spec = dataclasses.replace(spec, tags=[*spec.tags, "added"])
    elif change == "memory":
        spec = dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, memory="1Gi"))
    elif change == "burst":
        spec = dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, burst=7))
    elif change == "note":
        spec = dataclasses.replace(spec, note="set")
    return dataclasses.replace(box, spec=spec)


def hooks() -> WebhookDeclarations:
    declarations = WebhookDeclarations("props")

    @declarations.mutating("/mutate", Box)
    def handler(request: AdmissionRequest[Box]) -> AdmissionResponse:
        assert request.object is not None
        change = request.object.metadata.annotations["change"]
        return AdmissionResponse.patched(request.object, mutate(request.object, change))

    @declarations.mutating("/mutate-async", Box)
    async def handler_async(request: AdmissionRequest[Box]) -> AdmissionResponse:
        return handler(request)

    return declarations


APP = hooks().app()

words = st.text("abcxyz", min_size=1, max_size=5)
unknown_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def raw_boxes(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["cpu"] = draw(st.sampled_from(["100m", "250m", "2"]))
    if draw(st.booleans()):
        spec["replicas"] = draw(st.integers(0, 9))
    if draw(st.booleans()):
        spec["tags"] = draw(st.lists(words, max_size=3))
    if draw(st.booleans()):
        limits: dict[str, Any] = {}
        if draw(st.booleans()):
            limits["memory"] = draw(st.sampled_from(["64Mi", "1Gi"]))
        if draw(st.booleans()):
            limits["burst"] = draw(st.integers(0, 9))
        spec["limits"] = limits
    if draw(st.booleans()):
        spec["note"] = draw(st.none() | words)
    for key, value in draw(st.dictionaries(words.map("x-{}".format), unknown_values)).items():
        spec[key] = value  # kept by the class without knowing it (PreserveUnknown)
    metadata: dict[str, Any] = {
        "name": "b",
        "namespace": "ns",
        "annotations": {"change": draw(st.sampled_from(CHANGES))},
    }
    metadata.update(draw(st.dictionaries(words.map("x-{}".format), unknown_values, max_size=2)))
    raw: dict[str, Any] = {"apiVersion": "props.kubemoon.dev/v1", "kind": "Box"}
    raw["metadata"] = metadata
    if spec or draw(st.booleans()):
        raw["spec"] = spec
    return raw


def review(raw: dict[str, Any]) -> bytes:
    document = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0f0e0d0c-0000-4000-8000-000000000000",
            "kind": {"group": "props.kubemoon.dev", "version": "v1", "kind": "Box"},
            "resource": {"group": "props.kubemoon.dev", "version": "v1", "resource": "boxes"},
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "name": "b",
            "namespace": "ns",
            "object": raw,
        },
    }
    return json.dumps(document).encode()


def patch_of(raw: dict[str, Any], path: str = "/mutate") -> list[dict[str, Any]]:
    reply = APP.dispatch("POST", path, [("Content-Type", "application/json")], review(raw))
    if isinstance(reply, PendingAdmission):  # an async handler: driven as a loop would
        coroutine = reply.verdict
        try:
            coroutine.send(None)  # type: ignore[attr-defined]
        except StopIteration as stopped:
            reply = reply.reply(stopped.value)
    assert reply.status == 200, reply.message
    response = json.loads(reply.body)["response"]
    assert response["allowed"] is True, response
    if "patch" not in response:
        return []
    result: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return result


def expected(raw: dict[str, Any]) -> dict[str, Any]:
    """The encoded mutation, with the optional fields the request held as ``null`` (which
    the encoding leaves out, and no mutation here sets) kept."""
    box = decode(Box, raw)
    change = box.metadata.annotations["change"]
    result: dict[str, Any] = encode(mutate(box, change))
    if "note" in raw.get("spec", {}) and raw["spec"]["note"] is None and change != "note":
        result["spec"]["note"] = None
    return result


@settings(max_examples=300, deadline=None)
@given(raw_boxes())
def test_the_patch_applies_to_the_raw_object_and_gives_the_encoded_mutation(
    raw: dict[str, Any],
) -> None:
    patch = patch_of(raw)
    applied = apply_json_patch(raw, patch)  # every operation applies to the raw object
    assert applied == expected(raw)
    # Nothing the class does not know is lost.
    for key, value in raw.get("spec", {}).items():
        if key.startswith("x-"):
            assert applied["spec"][key] == value
    for key, value in raw["metadata"].items():
        if key.startswith("x-"):
            assert applied["metadata"][key] == value


@pytest.mark.parametrize("path", ["/mutate", "/mutate-async"])
def test_a_default_absent_on_the_wire_is_added_not_replaced(path: str) -> None:
    raw = {
        "apiVersion": "props.kubemoon.dev/v1",
        "kind": "Box",
        "metadata": {"name": "b", "namespace": "ns", "annotations": {"change": "replicas"}},
        "spec": {"x-kept": {"a": 1}},
    }
    patch = patch_of(raw, path)
    assert {"op": "add", "path": "/spec/replicas", "value": 2} in patch
    assert all(op["op"] != "replace" for op in patch), patch
    assert apply_json_patch(raw, patch)["spec"] == {
        "cpu": "100m",
        "replicas": 2,
        "tags": [],
        "limits": {"memory": "64Mi", "burst": 0},
        "x-kept": {"a": 1},
    }
