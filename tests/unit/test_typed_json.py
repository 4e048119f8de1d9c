"""decode_json: bytes to a declared object, with msgspec and without, alike."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from configmirror._api import ConfigMirror
from kubemoon_core import _typed_json as typed_json
from kubemoon_core.builtin import ConfigMap, CustomResourceDefinition, Deployment
from kubemoon_core.errors import DecodeError, SchemaError, TypedDecodeError
from kubemoon_core.json_backends import decode_json, use_msgspec
from kubemoon_core.typed import PreserveUnknown, decode, encode

MIRROR: dict[str, Any] = {
    "apiVersion": "kubemoon.dev/v1alpha1",
    "kind": "ConfigMirror",
    "metadata": {"name": "m", "namespace": "source", "generation": 2},
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
            }
        ],
        "targets": [{"namespace": "a", "state": "Synced"}],
    },
}


@pytest.fixture(params=["msgspec", "python"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    assert use_msgspec(request.param == "msgspec") is (request.param == "msgspec")
    try:
        yield request.param
    finally:
        use_msgspec(True)


def test_msgspec_is_the_default_when_installed() -> None:
    assert typed_json._ENABLED


def test_a_config_mirror_from_bytes_equals_decode(backend: str) -> None:
    data = json.dumps(MIRROR).encode()
    typed = decode_json(ConfigMirror, data)
    assert typed == decode(ConfigMirror, MIRROR)
    assert encode(typed) == MIRROR
    assert decode_json(ConfigMirror, data.decode()) == typed  # str works too
    if backend == "msgspec":
        assert ConfigMirror in typed_json._FAST


def mutate(path: tuple[Any, ...], value: Any) -> bytes:
    doc = json.loads(json.dumps(MIRROR))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is dataclasses.MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (mutate(("spec", "targetNamespaces", 1), 7), ".spec.targetNamespaces[1]", "expected str"),
        (mutate(("spec", "source"), dataclasses.MISSING), ".spec.source", "required field"),
        (mutate(("spec", "extra"), 1), ".spec.extra", "unknown field"),
        (mutate(("kind",), "Other"), ".kind", "expected ConfigMirror"),
        (
            mutate(("status", "conditions", 0, "lastTransitionTime"), "2026-11-30T10:00:05"),
            ".status.conditions[0].lastTransitionTime",
            "with an offset",
        ),
        (
            mutate(("status", "targets", 0, "state"), "Lost"),
            ".status.targets[0].state",
            "expected one of",
        ),
        (mutate(("status", "observedGeneration"), True), ".status.observedGeneration", "int"),
        (mutate(("metadata",), []), ".metadata", "expected object"),
        (b"[1, 2]", "", "expected object"),
    ],
)
def test_each_error_is_decodes_own(backend: str, data: bytes, path: str, words: str) -> None:
    with pytest.raises(TypedDecodeError) as caught:
        decode_json(ConfigMirror, data)
    assert caught.value.path == path
    assert words in str(caught.value)
    with pytest.raises(TypedDecodeError) as expected:
        decode(ConfigMirror, json.loads(data))
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("data", [b"{", b'{"spec": NaN}', b"\xff", b"", b'{"a": 1e999}'])
def test_malformed_json_is_a_decode_error(backend: str, data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(ConfigMirror, data)


def test_an_integer_beyond_64_bits_decodes_as_without_msgspec(backend: str) -> None:
    typed = decode_json(ConfigMirror, mutate(("status", "observedGeneration"), 2**70))
    assert typed.status is not None and typed.status.observed_generation == 2**70


@dataclass(slots=True)
class Open:
    name: str
    rest: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)


@dataclass(slots=True)
class Checked:
    size: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("negative")


def test_classes_msgspec_cannot_mirror_take_the_python_way(backend: str) -> None:
    assert decode_json(Open, b'{"name": "a", "x": 1}') == Open("a", {"x": 1})
    crd = {
        "metadata": {"name": "as.a.b"},
        "spec": {
            "group": "a.b",
            "names": {"kind": "A", "plural": "as"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "not": {"type": "string"}}},
                }
            ],
        },
    }
    typed = decode_json(CustomResourceDefinition, json.dumps(crd))
    assert typed == decode(CustomResourceDefinition, crd)
    if backend == "msgspec":
        assert {Open, CustomResourceDefinition} <= typed_json._SLOW


def test_a_class_refusing_a_value_is_a_typed_error(backend: str) -> None:
    assert decode_json(Checked, b'{"size": 1}') == Checked(1)
    with pytest.raises(TypedDecodeError, match="Checked refused the value: negative"):
        decode_json(Checked, b'{"size": -1}')


def test_builtin_kinds_decode_from_bytes(backend: str) -> None:
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}},
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        },
    }
    typed = decode_json(Deployment, json.dumps(body).encode())
    assert typed == decode(Deployment, body)
    assert decode_json(ConfigMap, b'{"data": {"a": "b"}}').data == {"a": "b"}


def test_a_non_declaration_is_refused(backend: str) -> None:
    with pytest.raises(SchemaError, match="is not a dataclass"):
        decode_json(dict, b"{}")


SPEC = b'"spec":{"source":"s","targetNamespaces":[]}'


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        (b'{"metadata":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}," + SPEC + b"}", "deep"),
        (b'{"kind":"ConfigMirror","kind":"Other",' + SPEC + b"}", ".kind"),
        (b'{"metadata":{"a":"\\ud800"},' + SPEC + b"}", "ok"),
        (("{" + SPEC.decode() + "}").encode("utf-16"), "ok"),
        (b"\xef\xbb\xbf{" + SPEC + b"}", "ok"),
        (b"{" + SPEC + b"}\x00", "Extra data"),
    ],
    ids=["deep nesting", "duplicate key", "lone surrogate", "utf-16", "bom", "trailing nul"],
)
def test_hostile_documents_get_the_same_answer(backend: str, data: bytes, outcome: str) -> None:
    if outcome == "ok":
        assert decode_json(ConfigMirror, data).spec.source == "s"
    elif outcome.startswith("."):
        with pytest.raises(TypedDecodeError) as typed:
            decode_json(ConfigMirror, data)
        assert typed.value.path == outcome
    else:
        words = "recursion" if outcome == "deep" else outcome
        with pytest.raises(DecodeError, match=words):
            decode_json(ConfigMirror, data)


@dataclass(slots=True)
class Part:
    weight: float
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Catalog:
    owner: str | None  # may be absent though it has no default
    parts: dict[str, Part]
    extra: Any = None
    grid: list[list[Part]] | None = None


def test_defaults_enums_and_maps_of_objects(backend: str) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "widgets"))
    from widget_api import Tier, Widget

    widget = decode_json(Widget, b'{"metadata": {"name": "w"}, "spec": {"tier": "large"}}')
    assert widget.spec.tier is Tier.LARGE and widget.spec.replicas == 1 and widget.spec.data == {}
    assert decode_json(Widget, b"{}") == decode(Widget, {})
    with pytest.raises(TypedDecodeError) as caught:
        decode_json(Widget, b'{"spec": {"tier": "huge"}}')
    assert caught.value.path == ".spec.tier"
    raw = b'{"parts": {"a": {"weight": 1}, "b": {"weight": 2.5, "tags": ["x"]}}, "extra": [1, {}], "grid": [[{"weight": 0}]]}'
    catalog = decode_json(Catalog, raw)
    assert catalog == decode(Catalog, json.loads(raw))
    assert catalog.parts["a"] == Part(1.0) and type(catalog.parts["a"].weight) is float
    assert catalog.grid == [[Part(0.0)]] and catalog.owner is None
