"""ConfigMirror's conversion webhook functions: every object goes to the other version and
back unchanged, whichever version it started in; what cannot is refused, never widened;
every converted spec passes the schema of deploy/base/crd.yaml with nothing left to prune."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from configmirror import converter
from configmirror._convert import SELECTOR_ANNOTATION, V1ALPHA1, V1BETA1, schema_problems
from kubemoon_core.errors import ConversionError
from kubemoon_core.webhooks import ConversionRequest

CONVERTER = converter()
CRD = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "base" / "crd.yaml").read_text())
SPEC_SCHEMAS = {
    f"kubemoon.dev/{v['name']}": v["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for v in CRD["spec"]["versions"]
}


def passes_the_crd_schema(obj: dict[str, Any]) -> bool:
    problems = schema_problems(SPEC_SCHEMAS[obj["apiVersion"]], obj["spec"], ".spec")
    assert problems == [], problems
    return True


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
    spec = {
        "source": draw(names),
        "targetNamespaces": draw(st.lists(names, max_size=4, unique=True)),
    }
    obj = {"apiVersion": V1ALPHA1, "kind": "ConfigMirror", "metadata": metadata(draw)}
    return finish({**obj, "spec": spec}, draw)


@st.composite
def v1beta1(draw: st.DrawFn) -> dict[str, Any]:
    targets: dict[str, Any] = {"namespaces": draw(st.lists(names, max_size=4, unique=True))}
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
    assert passes_the_crd_schema(beta)
    assert CONVERTER.convert(beta, V1ALPHA1) == obj


@given(v1beta1())
def test_v1beta1_round_trips_through_v1alpha1(obj: dict[str, Any]) -> None:
    alpha = CONVERTER.convert(obj, V1ALPHA1)
    assert alpha["spec"]["targetNamespaces"] == obj["spec"]["targets"]["namespaces"]
    assert "targets" not in alpha["spec"]
    assert passes_the_crd_schema(alpha)
    assert CONVERTER.convert(alpha, V1BETA1) == obj


# Any JSON at all, and selector-shaped JSON with hostile parts.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
selector_like = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(label_keys, json_values, max_size=3),
        "matchExpressions": st.lists(json_values, max_size=2),
        "other": json_values,
    },
)


@given(v1alpha1(), json_values | selector_like, st.booleans())
def test_a_selector_annotation_converts_exactly_or_is_refused(
    obj: dict[str, Any], selector: Any, spaced: bool
) -> None:
    text = json.dumps(selector, separators=(", ", ": ") if spaced else (",", ":"))
    obj["metadata"].setdefault("annotations", {})[SELECTOR_ANNOTATION] = text
    try:
        beta = CONVERTER.convert(obj, V1BETA1)
    except ConversionError:
        # Refused: only when the selector is not an object of string-valued matchLabels.
        valid = isinstance(selector, dict) and set(selector) <= {"matchLabels"}
        labels = selector.get("matchLabels", {}) if isinstance(selector, dict) else None
        assert not (valid and all(isinstance(v, str) for v in (labels or {}).values()))
        return
    # Converted: the stored selector is exactly what was written (nothing for the
    # apiserver to prune, so nothing that could widen it), and it comes back the same.
    assert beta["spec"]["targets"]["namespaceSelector"] == selector
    assert passes_the_crd_schema(beta)
    back = CONVERTER.convert(beta, V1ALPHA1)
    assert json.loads(back["metadata"]["annotations"][SELECTOR_ANNOTATION]) == selector
    assert CONVERTER.convert(back, V1BETA1) == beta


@given(v1beta1())
def test_a_v1beta1_object_carrying_the_annotation_is_refused(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("annotations", {})[SELECTOR_ANNOTATION] = '{"matchLabels":{}}'
    with pytest.raises(ConversionError, match="reserved for conversion"):
        CONVERTER.convert(obj, V1ALPHA1)


@given(st.lists(v1alpha1() | v1beta1(), max_size=4), st.sampled_from([V1ALPHA1, V1BETA1]))
def test_a_review_converts_every_object(objects: list[dict[str, Any]], target: str) -> None:
    response = CONVERTER.review(ConversionRequest("r", target, tuple(objects)))
    assert response.succeeded
    assert [o["apiVersion"] for o in response.converted_objects] == [target] * len(objects)
    assert [o["metadata"]["name"] for o in response.converted_objects] == [
        o["metadata"]["name"] for o in objects
    ]


@pytest.mark.parametrize(
    ("annotation", "why"),
    [
        ("{not json", "is not a JSON namespaceSelector"),
        ('{"matchLabels":{"a":"x","a":"y"}}', "duplicate key 'a'"),
        ('{"matchLabels":{"a":NaN}}', "NaN is not JSON"),
        ('{"matchExpressions":[]}', "matchExpressions: not in the schema"),
        ('{"matchLabels":{"a":[1]}}', "matchLabels.a: expected string, got list"),
        ('{"matchLabels":{"a":1}}', "matchLabels.a: expected string, got int"),
        ('"str"', "namespaceSelector: expected object, got str"),
        ("null", "namespaceSelector: null is not allowed"),
        ("[" * 16_000, "nested too deeply"),
        ('{"matchLabels":{"a":"' + "x" * 20_000 + '"}}', "longer than 16384 characters"),
    ],
)
def test_an_annotation_that_cannot_be_stored_as_written_is_refused(
    annotation: str, why: str
) -> None:
    obj = {
        "apiVersion": V1ALPHA1,
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "annotations": {SELECTOR_ANNOTATION: annotation}},
        "spec": {"source": "s", "targetNamespaces": []},
    }
    with pytest.raises(ConversionError, match=re.escape(why)):
        CONVERTER.convert(obj, V1BETA1)
    response = CONVERTER.review(ConversionRequest("r", V1BETA1, (obj,)))
    assert response.failure is not None and why in response.failure


def test_the_checked_schema_is_the_deployed_one() -> None:
    from configmirror._convert import _SPEC_SCHEMAS

    assert dict(_SPEC_SCHEMAS) == SPEC_SCHEMAS


spec_like = st.fixed_dictionaries(
    {},
    optional={
        "source": names | json_values,
        "targetNamespaces": st.lists(names | json_values, max_size=3),
        "targets": st.fixed_dictionaries(
            {},
            optional={
                "namespaces": st.lists(names | json_values, max_size=3),
                "namespaceSelector": selector_like | json_values,
            },
        ),
    },
)
annotation_values = json_values | (json_values | selector_like).map(json.dumps)


@given(
    st.sampled_from([V1ALPHA1, V1BETA1, "kubemoon.dev/v2", None]),
    spec_like | json_values,
    st.dictionaries(st.sampled_from([SELECTOR_ANNOTATION, "x"]), annotation_values, max_size=2),
    spec_like | json_values,
)
def test_admission_judges_any_object_without_raising(
    api_version: Any, spec: Any, annotations: dict[str, Any], old_spec: Any
) -> None:
    """Whatever a request holds, validation and the access plan answer, never raise."""
    from configmirror._admission import required_checks, storage_form, validate_mirror

    def obj(with_spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": api_version,
            "kind": "ConfigMirror",
            "metadata": {"name": "m", "annotations": annotations},
            "spec": with_spec,
        }

    problems = validate_mirror(obj(spec), "home")
    assert all(isinstance(p, str) for p in problems)
    if not problems:
        new = storage_form(obj(spec))
        try:
            old = storage_form(obj(old_spec))
        except ConversionError:
            old = None
        assert isinstance(required_checks(old, new, "home"), list)
