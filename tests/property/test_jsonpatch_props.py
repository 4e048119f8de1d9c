"""Hypothesis: applying json_patch(a, b) to a gives exactly b, for any JSON documents."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core.objects import apply_json_patch, json_patch
from kubemoon_core.webhooks import AdmissionResponse

# Keys deliberately rich in the characters JSON Pointer must escape.
keys = st.text(alphabet=st.sampled_from("ab~/0 1-\u00e9"), max_size=5) | st.text(max_size=4)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)


def _encoded(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@given(documents, documents)
def test_patch_turns_original_into_modified(original: Any, modified: Any) -> None:
    patch = json_patch(original, modified)
    result = apply_json_patch(original, patch)
    # Compared as encoded JSON: this keeps True/1/1.0 and 0.0/-0.0 apart.
    assert _encoded(result) == _encoded(modified)
    assert (patch == []) == (_encoded(original) == _encoded(modified))


@given(documents, documents)
def test_patch_survives_a_json_round_trip(original: Any, modified: Any) -> None:
    # What the API server receives is the patch after JSON encoding.
    patch = json.loads(json.dumps(json_patch(original, modified)))
    assert _encoded(apply_json_patch(original, patch)) == _encoded(modified)


@given(st.dictionaries(keys, documents, max_size=5), st.dictionaries(keys, documents, max_size=5))
def test_a_patched_admission_response_carries_the_same_patch(
    original: dict[str, Any], modified: dict[str, Any]
) -> None:
    response = AdmissionResponse.patched(original, modified)
    assert _encoded(apply_json_patch(original, list(response.patch))) == _encoded(modified)
