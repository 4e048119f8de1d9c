"""ConversionReview decoding, the Converter registry, all-or-nothing reviews."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from kubemoon_core.errors import ConversionError, DecodeError, LocalProtocolError
from kubemoon_core.webhooks import (
    ConversionRequest,
    ConversionResponse,
    Converter,
    decode_conversion_review,
    encode_conversion_review,
)

V1, V2, V3 = "example.com/v1", "example.com/v2", "example.com/v3"


def widget(version: str, name: str = "w", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "Widget", "metadata": {"name": name}, **fields}


def v1_to_v2(obj: dict[str, Any]) -> Mapping[str, Any]:
    obj["spec"] = {"sizes": [obj.pop("size")]}
    return obj


def v2_to_v1(obj: dict[str, Any]) -> Mapping[str, Any]:
    sizes = obj.pop("spec")["sizes"]
    if len(sizes) != 1:
        raise ConversionError(f"v1 holds one size, this widget has {len(sizes)}")
    obj["size"] = sizes[0]
    return obj


def converter() -> Converter:
    c = Converter(hub=V2)
    c.register(V1, V2, v1_to_v2)
    c.register(V2, V1, v2_to_v1)
    c.register(V3, V2, lambda obj: {**obj, "spec": {"sizes": obj["sizes"]}, "sizes": None})
    c.register(V2, V3, lambda obj: {**obj, "sizes": obj["spec"]["sizes"], "spec": None})
    return c


def test_direct_and_hub_conversions() -> None:
    c = converter()
    assert c.hub == V2
    assert c.convert(widget(V1, size=3), V2) == widget(V2, spec={"sizes": [3]})
    assert c.convert(widget(V2, spec={"sizes": [3]}), V1) == widget(V1, size=3)
    assert c.convert(widget(V1, size=3), V3) == widget(V3, sizes=[3], spec=None)
    same = widget(V1, size=3)
    assert c.convert(same, V1) == same
    assert c.convert(same, V1) is not same


def test_the_input_object_is_never_modified() -> None:
    obj = widget(V1, size=3)
    converter().convert(obj, V2)
    assert obj == widget(V1, size=3)


def test_missing_paths_and_bad_objects() -> None:
    c = converter()
    with pytest.raises(ConversionError, match="no conversion from example.com/v9"):
        c.convert(widget("example.com/v9"), V1)
    with pytest.raises(ConversionError, match="no apiVersion"):
        c.convert({"kind": "Widget"}, V1)
    no_hub = Converter()
    no_hub.register(V1, V2, v1_to_v2)
    with pytest.raises(ConversionError, match="no conversion from example.com/v2"):
        no_hub.convert(widget(V2), V1)
    half = Converter(hub=V2)
    half.register(V1, V2, v1_to_v2)
    with pytest.raises(ConversionError, match="to example.com/v3"):
        half.convert(widget(V1, size=1), V3)
    with pytest.raises(ConversionError, match="to example.com/v2"):
        half.convert(widget(V3), V2)


def test_functions_may_not_misbehave() -> None:
    c = Converter()
    c.register(V1, V2, lambda obj: [obj])  # type: ignore[arg-type,return-value]
    with pytest.raises(ConversionError, match="did not return an object"):
        c.convert(widget(V1), V2)
    c = Converter()
    c.register(V1, V2, lambda obj: {**obj, "metadata": {"name": "renamed"}})
    with pytest.raises(ConversionError, match="changed metadata"):
        c.convert(widget(V1), V2)
    c = Converter()
    c.register(V1, V2, lambda obj: {**obj, "metadata": {"name": "w", "labels": {"v": "2"}}})
    assert c.convert(widget(V1), V2)["metadata"] == {"name": "w", "labels": {"v": "2"}}
    c = Converter()
    c.register(V1, V2, lambda obj: {"kept": "kind"})
    assert c.convert({"apiVersion": V1, "kind": "Widget"}, V2) == {
        "kept": "kind",
        "apiVersion": V2,
        "kind": "Widget",
    }


def test_registration_rules() -> None:
    c = Converter()
    c.register(V1, V2, v1_to_v2)
    with pytest.raises(LocalProtocolError, match="exists"):
        c.register(V1, V2, v1_to_v2)
    with pytest.raises(LocalProtocolError, match="must change"):
        c.register(V1, V1, v1_to_v2)


def test_review_converts_in_order() -> None:
    request = ConversionRequest(
        "uid-1", V1, (widget(V2, "a", spec={"sizes": [1]}), widget(V2, "b", spec={"sizes": [2]}))
    )
    response = converter().review(request)
    assert response.succeeded
    assert [o["metadata"]["name"] for o in response.converted_objects] == ["a", "b"]
    assert [o["size"] for o in response.converted_objects] == [1, 2]


def test_one_failure_fails_the_whole_review() -> None:
    objects = (
        widget(V2, "a", spec={"sizes": [1]}),
        widget(V2, "b", spec={"sizes": [1, 2]}),
        widget(V2, "c", spec={"sizes": [3]}),
    )
    response = converter().review(ConversionRequest("uid-1", V1, objects))
    assert not response.succeeded
    assert response.converted_objects == ()
    assert response.failure == "object 1 (Widget b): v1 holds one size, this widget has 2"


def test_a_raising_function_fails_the_review_with_its_error() -> None:
    c = Converter()
    c.register(V1, V2, lambda obj: obj["missing"])
    response = c.review(ConversionRequest("u", V2, ({"apiVersion": V1, "kind": "Widget"},)))
    assert response.failure == "object 0 (Widget): conversion raised KeyError: 'missing'"


def _review(**request: Any) -> dict[str, Any]:
    body = {"uid": "u-1", "desiredAPIVersion": V1, "objects": [widget(V2)]}
    body.update(request)
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": body}


def test_decode() -> None:
    request = decode_conversion_review(json.dumps(_review()).encode())
    assert request == ConversionRequest("u-1", V1, (widget(V2),))


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ([], ""),
        ({**_review(), "apiVersion": "apiextensions.k8s.io/v1beta1"}, "apiVersion"),
        ({**_review(), "kind": "AdmissionReview"}, "kind"),
        ({**_review(), "request": None}, "request"),
        (_review(uid=""), "request.uid"),
        (_review(desiredAPIVersion=1), "request.desiredAPIVersion"),
        (_review(objects={}), "request.objects"),
        (_review(objects=[widget(V2), 1]), "request.objects[1]"),
        (_review(objects=[{"kind": "Widget"}]), "request.objects[0].apiVersion"),
    ],
)
def test_decode_errors_name_the_path(doc: Any, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_conversion_review(doc)
    assert info.value.path == path


def test_encode_success_and_failure() -> None:
    ok = json.loads(encode_conversion_review("u", ConversionResponse((widget(V1),))))
    assert ok == {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": "u",
            "convertedObjects": [widget(V1)],
            "result": {"status": "Success"},
        },
    }
    failed = json.loads(encode_conversion_review("u", ConversionResponse(failure="nope")))
    assert failed["response"] == {
        "uid": "u",
        "convertedObjects": [],
        "result": {"status": "Failure", "message": "nope"},
    }
