"""Hypothesis: reviews never crash the core, and conversion is all or nothing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core.errors import ConversionError, DecodeError
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    ConversionRequest,
    Converter,
    WebhookApp,
    decode_admission_review,
    decode_conversion_review,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

# Reviews that are nearly right: real keys, values of any shape.
REQUEST_KEYS = [
    "uid", "kind", "resource", "subResource", "requestKind", "requestResource",
    "requestSubResource", "name", "namespace", "operation", "userInfo", "object",
    "oldObject", "dryRun", "options",
]  # fmt: skip
near_reviews = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["admission.k8s.io/v1", "apiextensions.k8s.io/v1", "v1"]),
        "kind": st.sampled_from(["AdmissionReview", "ConversionReview"]),
        "request": st.dictionaries(st.sampled_from(REQUEST_KEYS), json_values)
        | st.fixed_dictionaries(
            {
                "uid": st.text(max_size=3),
                "desiredAPIVersion": st.text(max_size=3),
                "objects": st.lists(json_values, max_size=3),
            }
        ),
    }
)


@given(near_reviews | json_values)
def test_decoding_raises_only_decode_errors(document: Any) -> None:
    for decode in (decode_admission_review, decode_conversion_review):
        try:
            decode(document)
        except DecodeError:
            pass


def _allow(request: AdmissionRequest) -> AdmissionResponse:
    return AdmissionResponse.allow()


APP = WebhookApp(max_body_size=4096)
APP.validating("/v", _allow)
APP.conversion("/c", Converter())


@given(
    st.sampled_from(["POST", "GET", "PUT"]),
    st.sampled_from(["/v", "/c", "/v?timeout=10s", "/x"]),
    st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"]),
    st.binary(max_size=64) | near_reviews.map(lambda d: json.dumps(d).encode()),
)
def test_every_request_gets_an_http_answer(
    method: str, target: str, content_type: str, body: bytes
) -> None:
    reply = APP.handle(method, target, [("Content-Type", content_type)], body)
    assert reply.status in (200, 400, 404, 405, 413, 415)
    assert reply.body
    json.loads(reply.body)  # every answer, errors included, is a JSON document


V1, V2 = "example.com/v1", "example.com/v2"


def _up(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("spec", {}).get("poison"):
        raise ConversionError("poisoned")
    obj["spec"] = {"sizes": [obj["spec"]["size"]], "poison": False}
    return obj


def _down(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["spec"]["poison"]:
        raise ConversionError("poisoned")
    obj["spec"] = {"size": obj["spec"]["sizes"][0], "poison": False}
    return obj


CONVERTER = Converter()
CONVERTER.register(V1, V2, _up)
CONVERTER.register(V2, V1, _down)

widgets = st.builds(
    lambda version, name, size, poison: {
        "apiVersion": version,
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, "poison": poison}
        if version == V1
        else {"sizes": [size], "poison": poison},
    },
    st.sampled_from([V1, V2]),
    st.text(min_size=1, max_size=5),
    st.integers(),
    st.booleans(),
)


@given(st.lists(widgets, max_size=6), st.sampled_from([V1, V2]))
def test_a_review_converts_every_object_in_order_or_none(
    objects: list[dict[str, Any]], desired: str
) -> None:
    response = CONVERTER.review(ConversionRequest("u", desired, tuple(objects)))
    needs_work = [o for o in objects if o["apiVersion"] != desired]
    if any(o["spec"]["poison"] for o in needs_work):
        assert not response.succeeded
        assert response.converted_objects == ()
        return
    assert response.succeeded
    assert len(response.converted_objects) == len(objects)
    for before, after in zip(objects, response.converted_objects, strict=True):
        assert after["apiVersion"] == desired
        assert after["metadata"] == before["metadata"]
        # Converting back gives the original object.
        assert CONVERTER.convert(after, before["apiVersion"]) == before
