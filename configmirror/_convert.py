"""Conversion between ConfigMirror v1alpha1 and v1beta1 (the storage version), lossless.

Rules: v1alpha1 ``spec.targetNamespaces`` is v1beta1 ``spec.targets.namespaces``. What
v1alpha1 cannot say (``spec.targets.namespaceSelector``) travels in the annotation
:data:`SELECTOR_ANNOTATION` (canonical JSON) and comes back from it, so every object
converts to the other version and back unchanged. Status has the same shape in both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubemoon_core import Converter

__all__ = ["SELECTOR_ANNOTATION", "V1ALPHA1", "V1BETA1", "converter", "to_v1alpha1", "to_v1beta1"]

V1ALPHA1 = "kubemoon.dev/v1alpha1"
V1BETA1 = "kubemoon.dev/v1beta1"
SELECTOR_ANNOTATION = "kubemoon.dev/v1beta1-namespace-selector"
"""Keeps a v1beta1 namespaceSelector while the object is read or written as v1alpha1."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def to_v1beta1(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 ConfigMirror as v1beta1 (``obj`` is a private copy, changed in place)."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        targets: dict[str, Any] = {}
        if "targetNamespaces" in spec:
            targets["namespaces"] = spec.pop("targetNamespaces")
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and isinstance(annotations.get(SELECTOR_ANNOTATION), str):
            try:
                targets["namespaceSelector"] = json.loads(annotations[SELECTOR_ANNOTATION])
            except json.JSONDecodeError:
                pass  # not ours to interpret: leave the annotation as it is
            else:
                del annotations[SELECTOR_ANNOTATION]
                if not annotations:
                    del metadata["annotations"]
        spec["targets"] = targets
    return obj


def to_v1alpha1(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1beta1 ConfigMirror as v1alpha1 (``obj`` is a private copy, changed in place)."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        targets = spec.pop("targets", None)
        targets = targets if isinstance(targets, Mapping) else {}
        if "namespaces" in targets:
            spec["targetNamespaces"] = targets["namespaces"]
        if "namespaceSelector" in targets:
            metadata = obj.setdefault("metadata", {})
            annotations = metadata.setdefault("annotations", {})
            annotations[SELECTOR_ANNOTATION] = _canonical(targets["namespaceSelector"])
    return obj


def converter() -> Converter:
    """The :class:`~kubemoon_core.Converter` served by ConfigMirror's conversion webhook."""
    result = Converter(hub=V1BETA1)
    result.register(V1ALPHA1, V1BETA1, to_v1beta1)
    result.register(V1BETA1, V1ALPHA1, to_v1alpha1)
    return result
