"""ConfigMirror's conversion webhook functions: every object goes to the other version and
back unchanged, whichever version it started in."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from configmirror import converter
from configmirror._convert import SELECTOR_ANNOTATION, V1ALPHA1, V1BETA1
from kubemoon_core import ConversionRequest

CONVERTER = converter()

names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
label_keys = st.from_regex(r"[a-z]([-a-z0-9./]{0,12}[a-z0-9])?", fullmatch=True)
labels = st.dictionaries(label_keys, st.text(max_size=8), max_size=3)
# Annotations that are not the converter's own (an absent or non-empty map, as stored).
annotation_maps = st.none() | st.dictionaries(
    label_keys.filter(lambda k: k != SELECTOR_ANNOTATION), st.text(max_size=8), min_size=1
)
status = st.none() | st.fixed_dictionaries(
    {
        "observedGeneration": st.integers(0, 10),
        "targets": st.lists(
            st.fixed_dictionaries(
                {"namespace": names, "state": st.sampled_from(["Synced", "Pending"])}
            ),
            max_size=3,
        ),
    }
)


def metadata(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": draw(names), "namespace": draw(names), "uid": "u-1"}
    if (extra := draw(annotation_maps)) is not None:
        meta["annotations"] = extra
    if found := draw(labels):
        meta["labels"] = found
    return meta


def finish(obj: dict[str, Any], draw: st.DrawFn) -> dict[str, Any]:
    if (state := draw(status)) is not None:
        obj["status"] = state
    return obj


@st.composite
def v1alpha1(draw: st.DrawFn) -> dict[str, Any]:
    spec = {"source": draw(names), "targetNamespaces": draw(st.lists(names, max_size=4))}
    obj = {"apiVersion": V1ALPHA1, "kind": "ConfigMirror", "metadata": metadata(draw)}
    return finish({**obj, "spec": spec}, draw)


@st.composite
def v1beta1(draw: st.DrawFn) -> dict[str, Any]:
    targets: dict[str, Any] = {"namespaces": draw(st.lists(names, max_size=4))}
    selector = draw(st.none() | st.just({}) | st.fixed_dictionaries({"matchLabels": labels}))
    if selector is not None:
        targets["namespaceSelector"] = selector
    spec = {"source": draw(names), "targets": targets}
    obj = {"apiVersion": V1BETA1, "kind": "ConfigMirror", "metadata": metadata(draw)}
    return finish({**obj, "spec": spec}, draw)


@given(v1alpha1())
def test_v1alpha1_round_trips_through_v1beta1(obj: dict[str, Any]) -> None:
    beta = CONVERTER.convert(obj, V1BETA1)
    assert beta["apiVersion"] == V1BETA1
    assert beta["spec"]["targets"]["namespaces"] == obj["spec"]["targetNamespaces"]
    assert CONVERTER.convert(beta, V1ALPHA1) == obj


@given(v1beta1())
def test_v1beta1_round_trips_through_v1alpha1(obj: dict[str, Any]) -> None:
    alpha = CONVERTER.convert(obj, V1ALPHA1)
    assert alpha["spec"]["targetNamespaces"] == obj["spec"]["targets"]["namespaces"]
    assert "targets" not in alpha["spec"]
    assert CONVERTER.convert(alpha, V1BETA1) == obj


@given(st.lists(v1alpha1() | v1beta1(), max_size=4), st.sampled_from([V1ALPHA1, V1BETA1]))
def test_a_review_converts_every_object(objects: list[dict[str, Any]], target: str) -> None:
    response = CONVERTER.review(ConversionRequest("r", target, tuple(objects)))
    assert response.succeeded
    assert [o["apiVersion"] for o in response.converted_objects] == [target] * len(objects)
    assert [o["metadata"]["name"] for o in response.converted_objects] == [
        o["metadata"]["name"] for o in objects
    ]


def test_a_foreign_selector_annotation_is_left_alone() -> None:
    obj = {
        "apiVersion": V1ALPHA1,
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "annotations": {SELECTOR_ANNOTATION: "{not json"}},
        "spec": {"source": "s", "targetNamespaces": []},
    }
    beta = CONVERTER.convert(obj, V1BETA1)
    assert beta["metadata"]["annotations"] == {SELECTOR_ANNOTATION: "{not json"}
    assert beta["spec"]["targets"] == {"namespaces": []}
