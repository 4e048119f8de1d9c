"""Hypothesis: applying a planned patch converges; a second plan makes no write."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource
from kubemoon_core.objects import WriteAction, plan_write

CM = GroupVersionResource("", "v1", "configmaps")

keys = st.sampled_from(["a", "b", "c"])
scalars = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"]), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=6,
)
desired_values = st.recursive(
    st.one_of(scalars, st.none()),
    lambda inner: st.one_of(
        st.lists(scalars, max_size=2), st.dictionaries(keys, inner, max_size=3)
    ),
    max_leaves=6,
)
string_maps = st.dictionaries(keys, st.sampled_from(["1", "2"]), max_size=3)
refs = st.lists(
    st.builds(
        lambda name, controller: {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "name": name,
            "uid": f"u-{name}",
            "controller": controller,
        },
        keys,
        st.booleans(),
    ),
    max_size=2,
    unique_by=lambda r: r["uid"],
)
finalizers = st.lists(st.sampled_from(["a.io/x", "b.io/y"]), max_size=2, unique=True)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


@st.composite
def objects(draw: st.DrawFn, *, desired: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if draw(st.booleans()):
        metadata["labels"] = draw(string_maps)
    if draw(st.booleans()):
        metadata["annotations"] = draw(string_maps)
    if draw(st.booleans()):
        metadata["ownerReferences"] = draw(refs)
    if draw(st.booleans()):
        metadata["finalizers"] = draw(finalizers)
    obj: dict[str, Any] = {"metadata": metadata}
    if draw(st.booleans()):
        obj["data"] = draw(string_maps)
    if draw(st.booleans()):
        obj["spec"] = draw(desired_values if desired else values)
    if desired:
        return obj
    metadata.update(name="cm", namespace="ns", resourceVersion="1")
    return obj


@given(objects(desired=True), objects(desired=False))
def test_one_patch_converges(desired: dict[str, Any], existing: dict[str, Any]) -> None:
    plan = plan_write(CM, desired, existing)
    if plan.action is WriteAction.NONE:
        assert plan.request is None
        return
    assert plan.request is not None
    patched = _merge(existing, json.loads(plan.request.body))
    assert plan_write(CM, desired, patched).action is WriteAction.NONE
    # Keys the desired object does not mention survive.
    for name in ("labels", "annotations"):
        for key, value in existing["metadata"].get(name, {}).items():
            if key not in desired["metadata"].get(name, {}):
                assert patched["metadata"][name][key] == value
