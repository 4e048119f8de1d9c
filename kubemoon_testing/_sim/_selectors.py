"""Label and field selectors as kube-apiserver parses and applies them.

Rules: label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, existence and
``!`` non-existence, joined by commas; a malformed one is a 400 BadRequest. Field selectors
support ``metadata.name`` and ``metadata.namespace`` with ``=``, ``==``, ``!=``; any other
field raises :class:`NotModelled` (kube-apiserver supports further fields per resource).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import NotModelled, StatusError

__all__ = ["Selector", "parse_field_selector", "parse_label_selector"]

Selector = Callable[[Mapping[str, Any]], bool]

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*(?:(in|notin)\s*\(([^)]*)\)\s*)?$")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(selector[start:index])
            start = index + 1
    parts.append(selector[start:])
    return parts


def _check_key(key: str, selector: str) -> str:
    if not _KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise StatusError.bad_request(f"unable to parse requirement: invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise StatusError.bad_request(
            f"unable to parse requirement: invalid label value: {value!r}"
        )
    return value


def _requirement(text: str, selector: str) -> Selector:
    for op in ("!=", "==", "="):
        if op in text:
            key, _, value = text.partition(op)
            key, value = _check_key(key.strip(), selector), _check_value(value.strip())
            if op == "!=":
                return lambda obj: _labels(obj).get(key) != value
            return lambda obj: _labels(obj).get(key) == value
    match = _SET.match(text)
    if match is None:
        raise StatusError.bad_request(f"unable to parse requirement: {text.strip()!r}")
    negated, key, op, values_text = match.groups()
    key = _check_key(key, selector)
    if op is None:
        if negated:
            return lambda obj: key not in _labels(obj)
        return lambda obj: key in _labels(obj)
    if negated:
        raise StatusError.bad_request(f"unable to parse requirement: {text.strip()!r}")
    values = frozenset(_check_value(v.strip()) for v in values_text.split(","))
    if op == "in":
        return lambda obj: _labels(obj).get(key) in values
    return lambda obj: _labels(obj).get(key) not in values


def parse_label_selector(selector: str | None) -> Selector | None:
    """A predicate over objects, or None for "everything"."""
    if selector is None or not selector.strip():
        return None
    requirements = [_requirement(part, selector) for part in _split(selector)]
    return lambda obj: all(requirement(obj) for requirement in requirements)


_FIELDS = ("metadata.name", "metadata.namespace")


def _field(obj: Mapping[str, Any], path: str) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    value = metadata.get(path.partition(".")[2], "")
    return value if isinstance(value, str) else ""


def _field_requirement(text: str) -> Selector:
    for op in ("!=", "==", "="):
        if op in text:
            path, _, value = text.partition(op)
            path, value = path.strip(), value.strip()
            if path not in _FIELDS:
                raise NotModelled(f"the field selector {path!r} (only {', '.join(_FIELDS)})")
            if op == "!=":
                return lambda obj: _field(obj, path) != value
            return lambda obj: _field(obj, path) == value
    raise StatusError.bad_request(f"invalid selector: '{text}'; can't understand '{text}'")


def parse_field_selector(selector: str | None) -> Selector | None:
    """A predicate over objects, or None for "everything"."""
    if selector is None or not selector.strip():
        return None
    requirements = [_field_requirement(part) for part in selector.split(",")]
    return lambda obj: all(requirement(obj) for requirement in requirements)
