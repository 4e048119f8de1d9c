"""What the ConfigMirror admission webhooks decide, without I/O.

Rules: :func:`validate_mirror` lists every problem of a ConfigMirror's spec at once (an
empty source, invalid or repeated target namespaces, a target equal to the mirror's own
namespace, more than :data:`MAX_TARGETS` targets); :func:`access_review` builds the
SubjectAccessReview that asks whether the requesting user could create the ConfigMap in
a target namespace themselves, and :func:`access_denial` reads its answer; the defaults
of :func:`default_mirror` are a pure function of the object, so the mutating webhook's
JSON Patch is computed by the core from (object, defaulted object).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kubemoon_core import AdmissionRequest, GroupVersionResource, UserInfo

__all__ = [
    "ALL_NAMESPACES",
    "MAX_TARGETS",
    "SOURCE_LABEL",
    "SUBJECT_ACCESS_REVIEWS",
    "access_denial",
    "access_review",
    "default_mirror",
    "review_targets",
    "target_namespaces",
    "validate_mirror",
]

ALL_NAMESPACES = ""
"""The namespace of an access review about every namespace."""
MAX_TARGETS = 100
"""The most target namespaces one ConfigMirror may name."""
SOURCE_LABEL = "kubemoon.dev/mirror-source"
"""Set by the mutating webhook to the source's name, so mirrors can be selected by source."""
SUBJECT_ACCESS_REVIEWS = GroupVersionResource("authorization.k8s.io", "v1", "subjectaccessreviews")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def target_namespaces(obj: Mapping[str, Any]) -> list[str]:
    """The target namespaces a ConfigMirror names, in either served version.

    v1alpha1 lists them in ``spec.targetNamespaces``; v1beta1 in
    ``spec.targets.namespaces``.
    """
    spec = _spec(obj)
    raw = spec.get("targetNamespaces")
    if raw is None:
        targets = spec.get("targets")
        raw = targets.get("namespaces") if isinstance(targets, Mapping) else None
    return list(raw) if isinstance(raw, list) else []


def validate_mirror(obj: Mapping[str, Any], namespace: str) -> list[str]:
    """Every problem of ``obj`` (a ConfigMirror in ``namespace``); empty when it is valid."""
    problems: list[str] = []
    source = _spec(obj).get("source")
    if not isinstance(source, str) or not source:
        problems.append("spec.source must name a ConfigMap")
    elif len(source) > 253 or not _DNS_SUBDOMAIN.match(source):
        problems.append(f"spec.source {source!r} is not a valid ConfigMap name")
    targets = target_namespaces(obj)
    if len(targets) > MAX_TARGETS:
        problems.append(f"at most {MAX_TARGETS} target namespaces, got {len(targets)}")
    seen: set[str] = set()
    for target in targets:
        if not isinstance(target, str) or len(target) > 63 or not _DNS_LABEL.match(target):
            problems.append(f"target namespace {target!r} is not a valid namespace name")
            continue
        if target in seen:
            problems.append(f"target namespace {target!r} is listed more than once")
        seen.add(target)
        if target == namespace:
            problems.append(
                f"target namespace {target!r} is the ConfigMirror's own namespace: "
                "the source is already there"
            )
    return problems


def review_targets(request: AdmissionRequest) -> list[str]:
    """The target namespaces whose access the request's user must be checked for.

    All targets on CREATE; on UPDATE, all of them when the spec changed (a new source
    would be written to every target on this user's word), none when only metadata or
    finalizers changed. A ``namespaceSelector`` adds :data:`ALL_NAMESPACES`.
    """
    obj = request.object or {}
    if request.old_object is not None and _spec(request.old_object) == _spec(obj):
        return []
    named = [t for t in target_namespaces(obj) if isinstance(t, str)]
    # A v1beta1 namespaceSelector may select any namespace that accepts copies, now or
    # later: it takes the right to create ConfigMaps in all of them ("" in a review).
    targets = _spec(obj).get("targets")
    if isinstance(targets, Mapping) and targets.get("namespaceSelector") is not None:
        named.append(ALL_NAMESPACES)
    return list(dict.fromkeys(named))


def access_review(user: UserInfo, namespace: str) -> dict[str, Any]:
    """The SubjectAccessReview: may ``user`` create ConfigMaps in ``namespace``?"""
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "resourceAttributes": {
            "namespace": namespace,
            "verb": "create",
            "group": "",
            "version": "v1",
            "resource": "configmaps",
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def access_denial(answer: Mapping[str, Any], user: UserInfo, namespace: str) -> str | None:
    """The denial message for a SubjectAccessReview ``answer``; None when access is allowed."""
    status = answer.get("status")
    status = status if isinstance(status, Mapping) else {}
    if status.get("allowed") is True and status.get("denied") is not True:
        return None
    why = status.get("reason") or status.get("evaluationError")
    because = f" ({why})" if isinstance(why, str) and why else ""
    if namespace == ALL_NAMESPACES:
        return (
            f"user {user.username!r} may not create ConfigMaps in all namespaces{because}: "
            "a ConfigMirror with a namespaceSelector needs that right"
        )
    return (
        f"user {user.username!r} may not create ConfigMaps in namespace {namespace!r}{because}: "
        "a ConfigMirror may only target namespaces where its author could write the copy"
    )


def default_mirror(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the defaults applied: sorted targets and the source label.

    Targets are only sorted, never de-duplicated, so a repeated target still reaches the
    validation and is refused with a message. The label is set when the source's name is
    a valid label value (a name of at most 63 characters).
    """
    result: dict[str, Any] = copy.deepcopy(dict(obj))
    spec = result.get("spec")
    if isinstance(spec, dict):
        _sort_targets(spec)
    source = _spec(result).get("source")
    if isinstance(source, str) and source and len(source) <= 63 and _LABEL_VALUE.match(source):
        metadata = result.setdefault("metadata", {})
        if isinstance(metadata, dict):
            labels = metadata.get("labels")
            if not isinstance(labels, dict):
                labels = metadata["labels"] = {}
            labels[SOURCE_LABEL] = source
    return result


def _sort_targets(spec: dict[str, Any]) -> None:
    def ordered(values: Sequence[Any]) -> list[Any]:
        return sorted(values, key=str)

    if isinstance(spec.get("targetNamespaces"), list):
        spec["targetNamespaces"] = ordered(spec["targetNamespaces"])
    targets = spec.get("targets")
    if isinstance(targets, dict) and isinstance(targets.get("namespaces"), list):
        targets["namespaces"] = ordered(targets["namespaces"])
