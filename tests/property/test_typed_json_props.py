"""decode_json with msgspec gives, for any document, what the Python way gives: the same
object, or the same error (type, path and reason)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from configmirror._api import ConfigMirror
from kubemoon_core import KubeMoonError
from kubemoon_core.builtin import Deployment
from kubemoon_core.json_backends import decode_json, use_msgspec

MIRROR: dict[str, Any] = {
    "apiVersion": "kubemoon.dev/v1alpha1",
    "kind": "ConfigMirror",
    "metadata": {"name": "m", "generation": 2},
    "spec": {"source": "settings", "targetNamespaces": ["a", "b"]},
    "status": {
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": "ok",
                "lastTransitionTime": "2026-11-30T10:00:05Z",
                "observedGeneration": 1,
            }
        ],
        "targets": [{"namespace": "a", "state": "Synced", "message": "m"}],
    },
}
DEPLOYMENT: dict[str, Any] = {
    "metadata": {"name": "d"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}},
        "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
    },
}

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "Synced",
            "Lost",
            "True",
            "2026-11-30T10:00:05Z",
            "2026-11-30T10:00:05+02:00",
            "2026-11-30T10:00:05.123456789Z",
            "2026-11-30 10:00:05Z",
            "2026-11-30T10:00:05",
            "2026-13-30T10:00:05Z",
            "kubemoon.dev/v1alpha1",
            "ConfigMirror",
            "",
        ]
    ),
    st.text(max_size=5),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document: each member and item, and a new key in each object."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        found.append((*prefix, "extraField"))
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def outcome(cls: type, data: bytes, msgspec: bool) -> tuple[str, Any]:
    use_msgspec(msgspec)
    try:
        return "ok", decode_json(cls, data)
    except KubeMoonError as exc:
        return type(exc).__name__, str(exc)
    finally:
        use_msgspec(True)


def changed(doc: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool) -> bytes:
    copy = json.loads(json.dumps(doc))
    target = copy
    for key in path[:-1]:
        target = target[key]
    if delete and isinstance(target, dict):
        target.pop(path[-1], None)
    elif isinstance(target, list) and path[-1] >= len(target):
        target.append(value)
    else:
        target[path[-1]] = value
    return json.dumps(copy).encode()


@given(
    st.sampled_from([(ConfigMirror, MIRROR), (Deployment, DEPLOYMENT)]),
    st.data(),
    VALUES,
    st.booleans(),
)
def test_one_change_anywhere_decodes_alike(
    case: tuple[type, dict[str, Any]], data: st.DataObject, value: Any, delete: bool
) -> None:
    cls, doc = case
    path = data.draw(st.sampled_from(paths(doc)))
    blob = changed(doc, path, value, delete)
    assert outcome(cls, blob, msgspec=True) == outcome(cls, blob, msgspec=False)


@given(st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_any_bytes_decode_alike(blob: bytes) -> None:
    assert outcome(ConfigMirror, blob, True) == outcome(ConfigMirror, blob, False)
