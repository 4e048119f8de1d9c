"""Conversion between ConfigMirror v1alpha1 and v1beta1 (the storage version): lossless or
refused, never wider.

Rules: v1alpha1 ``spec.targetNamespaces`` is v1beta1 ``spec.targets.namespaces``. What
v1alpha1 cannot say (``spec.targets.namespaceSelector``) travels in the annotation
:data:`SELECTOR_ANNOTATION` (canonical JSON) and comes back from it, so every object
converts to the other version and back to the same meaning. Status has the same shape in
both. An object that cannot make that round trip is refused with a
:class:`~kubemoon_core.errors.ConversionError` rather than converted into something else:

- the annotation must be strict JSON (no duplicate keys, no ``NaN``) of a selector that
  the v1beta1 schema accepts as written: a field the apiserver would prune (such as
  ``matchExpressions``, which the operator does not read) or a label value that is not a
  string is refused, since pruning it would widen the selector;
- a v1beta1 object may not carry the annotation itself (back in v1alpha1 it would turn
  into a selector the stored object does not have);
- every converted ``spec`` must pass the target version's schema as declared in
  ``configmirror._api`` (what ``deploy/base/crd.yaml`` is generated from), with nothing left
  for the apiserver to prune.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from kubemoon_core.errors import ConversionError
from kubemoon_core.typed import openapi_schema
from kubemoon_core.webhooks import Converter

from ._api import ConfigMirror, ConfigMirrorV1beta1

__all__ = [
    "MAX_SELECTOR_ANNOTATION",
    "SELECTOR_ANNOTATION",
    "V1ALPHA1",
    "V1BETA1",
    "converter",
    "schema_problems",
    "to_v1alpha1",
    "to_v1beta1",
]

V1ALPHA1 = "kubemoon.dev/v1alpha1"
V1BETA1 = "kubemoon.dev/v1beta1"
SELECTOR_ANNOTATION = "kubemoon.dev/v1beta1-namespace-selector"
"""Keeps a v1beta1 namespaceSelector while the object is read or written as v1alpha1."""
MAX_SELECTOR_ANNOTATION = 16 * 1024
"""The longest value of :data:`SELECTOR_ANNOTATION` that conversion reads."""

_SPEC_SCHEMAS: dict[str, Mapping[str, Any]] = {
    V1ALPHA1: openapi_schema(ConfigMirror)["properties"]["spec"],
    V1BETA1: openapi_schema(ConfigMirrorV1beta1)["properties"]["spec"],
}
_SELECTOR_SCHEMA: Mapping[str, Any] = _SPEC_SCHEMAS[V1BETA1]["properties"]["targets"]["properties"][
    "namespaceSelector"
]
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def schema_problems(schema: Mapping[str, Any], value: Any, path: str = "") -> list[str]:
    """What the apiserver would refuse or prune in ``value`` under a structural ``schema``.

    Checks ``type``, ``properties`` (a field the schema does not know is a problem: the
    apiserver would silently prune it), ``additionalProperties``, ``required``,
    ``items``, ``enum``, ``minLength``/``maxLength``/``pattern``, ``minItems``/``maxItems``
    and the uniqueness of an ``x-kubernetes-list-type: set``. Each problem names its
    JSON path.
    """
    where = path or "."
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null is not allowed"]
    kind = schema.get("type")
    if isinstance(kind, str):
        allowed = _JSON_TYPES.get(kind, ())
        if not isinstance(value, allowed) or (isinstance(value, bool) and kind != "boolean"):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {list(schema['enum'])}")
    if isinstance(value, str):
        problems += _string_problems(schema, value, where)
    elif isinstance(value, list):
        problems += _array_problems(schema, value, path, where)
    elif isinstance(value, dict):
        problems += _object_problems(schema, value, path)
    return problems


def _string_problems(schema: Mapping[str, Any], value: str, where: str) -> list[str]:
    problems = []
    if len(value) < schema.get("minLength", 0):
        problems.append(f"{where}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        problems.append(f"{where}: longer than {schema['maxLength']}")
    if "pattern" in schema and not _compiled(schema["pattern"]).search(value):
        problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
    return problems


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    # Go's RE2 (the apiserver's) reads a final ``$`` as the end of the text; Python's
    # also matches before a final newline, which would let "name\n" through.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + "\\Z"
    return re.compile(pattern)


def _array_problems(
    schema: Mapping[str, Any], value: list[Any], path: str, where: str
) -> list[str]:
    problems = []
    if len(value) < schema.get("minItems", 0):
        problems.append(f"{where}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        problems.append(f"{where}: more than {schema['maxItems']} items")
    if schema.get("x-kubernetes-list-type") == "set":
        seen: set[Any] = set()
        for item in value:
            key = item if isinstance(item, str | int | float) else _canonical(item)
            if key in seen:
                problems.append(f"{where}: {item!r} is listed twice in a set")
            seen.add(key)
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            problems += schema_problems(items, item, f"{path}[{index}]")
    return problems


def _object_problems(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> list[str]:
    problems = []
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for field in schema.get("required", ()):
        if field not in value:
            problems.append(f"{path}.{field}: required")
    for key, item in value.items():
        if isinstance(properties, dict) and key in properties:
            problems += schema_problems(properties[key], item, f"{path}.{key}")
        elif isinstance(extra, dict):
            problems += schema_problems(extra, item, f"{path}.{key}")
        elif extra is not True and not schema.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{path}.{key}: not in the schema (the apiserver would prune it)")
    return problems


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_selector(text: str) -> Any:
    """The selector an annotation's value holds; ConversionError unless it is exactly one."""
    if len(text) > MAX_SELECTOR_ANNOTATION:
        raise ConversionError(
            f"annotation {SELECTOR_ANNOTATION} is longer than {MAX_SELECTOR_ANNOTATION} "
            "characters: more than any namespaceSelector needs"
        )
    try:
        selector = json.loads(text, object_pairs_hook=_strict_object, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        raise ConversionError(
            f"annotation {SELECTOR_ANNOTATION} is not a JSON namespaceSelector: "
            f"{'nested too deeply' if isinstance(exc, RecursionError) else exc}"
        ) from None
    _check_selector(selector)
    return selector


def _check_selector(selector: Any) -> None:
    problems = schema_problems(_SELECTOR_SCHEMA, selector, ".spec.targets.namespaceSelector")
    if problems:
        raise ConversionError(
            "the namespaceSelector cannot be stored as written (it would be pruned or "
            f"refused, and could select more than it says): {'; '.join(problems)}"
        )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _check_spec(obj: Mapping[str, Any], version: str) -> None:
    spec = obj.get("spec")
    if spec is None:
        return
    problems = schema_problems(_SPEC_SCHEMAS[version], spec, ".spec")
    if problems:
        raise ConversionError(f"the {version} form does not pass its schema: {'; '.join(problems)}")


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def to_v1beta1(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 ConfigMirror as v1beta1 (``obj`` is a private copy, changed in place).

    Raises :class:`~kubemoon_core.errors.ConversionError` when the annotation is not a selector
    the v1beta1 schema stores as written, or the result does not pass that schema.
    """
    spec = obj.get("spec")
    annotation = _annotations(obj).get(SELECTOR_ANNOTATION)
    if annotation is not None and not isinstance(annotation, str):
        raise ConversionError(f"annotation {SELECTOR_ANNOTATION} is not a string")
    if isinstance(spec, dict):
        targets: dict[str, Any] = {}
        if "targetNamespaces" in spec:
            targets["namespaces"] = spec.pop("targetNamespaces")
        if annotation is not None:
            targets["namespaceSelector"] = _parse_selector(annotation)
            metadata = obj["metadata"]
            del metadata["annotations"][SELECTOR_ANNOTATION]
            if not metadata["annotations"]:
                del metadata["annotations"]
        spec["targets"] = targets
    elif annotation is not None:
        raise ConversionError(f"annotation {SELECTOR_ANNOTATION} on an object without a spec")
    _check_spec(obj, V1BETA1)
    return obj


def to_v1alpha1(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1beta1 ConfigMirror as v1alpha1 (``obj`` is a private copy, changed in place).

    Raises :class:`~kubemoon_core.errors.ConversionError` when the object already carries the
    annotation (it would come back as a selector), when its selector is not one the
    schema stores as written, or when the result does not pass the v1alpha1 schema.
    """
    if SELECTOR_ANNOTATION in _annotations(obj):
        raise ConversionError(
            f"annotation {SELECTOR_ANNOTATION} is reserved for conversion: a v1beta1 "
            "ConfigMirror says its selector in spec.targets.namespaceSelector"
        )
    spec = obj.get("spec")
    if isinstance(spec, dict):
        targets = spec.pop("targets", None)
        targets = targets if isinstance(targets, Mapping) else {}
        if "namespaces" in targets:
            spec["targetNamespaces"] = targets["namespaces"]
        unknown = sorted(set(targets) - {"namespaces", "namespaceSelector"})
        if unknown:
            raise ConversionError(f"spec.targets has fields v1alpha1 cannot keep: {unknown}")
        selector = targets.get("namespaceSelector")
        if selector is not None:
            _check_selector(selector)
            metadata = obj.setdefault("metadata", {})
            annotations = metadata.setdefault("annotations", {})
            annotations[SELECTOR_ANNOTATION] = _canonical(selector)
    _check_spec(obj, V1ALPHA1)
    return obj


def converter() -> Converter:
    """The :class:`~kubemoon_core.webhooks.Converter` of ConfigMirror's conversion webhook."""
    result = Converter(hub=V1BETA1)
    result.register(V1ALPHA1, V1BETA1, to_v1beta1)
    result.register(V1BETA1, V1ALPHA1, to_v1alpha1)
    return result
