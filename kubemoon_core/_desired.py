"""Create-or-update planning: the one write (or none) that makes an object look as desired.

Rules:

- Only what the desired object sets is compared, so fields the server fills in (defaults,
  ``metadata.uid``, other controllers' labels) never cause a write and steady state makes
  zero writes.
- ``metadata.labels`` and ``metadata.annotations`` compare key by key; other keys on the
  existing object are kept. ``metadata.ownerReferences`` and ``metadata.finalizers``
  must each be present; the patch sends the merged list (merge patches replace lists).
- Other top-level fields (``spec``, ``data``, ``rules``...) compare as subtrees: mappings
  by the keys the desired value sets, lists and scalars exactly; a desired ``None``
  removes a key. The fields named in ``exact`` (default ``data`` and ``binaryData``)
  must match key for key, extra keys being removed. A Secret's write-only ``stringData``
  is compared with ``data`` in base64. ``status`` is planned separately.
- An update is a JSON merge patch of the differences that carries the existing object's
  ``metadata.resourceVersion``: the API server checks it as a precondition, so a
  concurrent change gives 409 Conflict instead of a lost update.
"""

from __future__ import annotations

import base64
import copy
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import LocalProtocolError
from ._ownership import _group
from ._request import PatchType, Request, Target, apply_request, create_request, patch_request
from ._resources import APIResource

__all__ = [
    "SERVER_SET_METADATA",
    "WriteAction",
    "WritePlan",
    "apply_object",
    "plan_status",
    "plan_write",
    "server_side_apply_request",
]

SERVER_SET_METADATA = (
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
)
"""Metadata fields the API server sets; :func:`apply_object` strips them."""

_SKIPPED = frozenset({"apiVersion", "kind", "metadata", "status"})
_MAP_METADATA = ("labels", "annotations")
_MISSING = object()


class WriteAction(enum.Enum):
    """What a plan does."""

    NONE = "none"
    CREATE = "create"
    PATCH = "patch"


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The write that makes an object look as desired: none, a create, or a guarded patch.

    ``changed`` names the top-level paths that differ (``metadata.labels``, ``spec``...).
    """

    action: WriteAction
    request: Request | None = None
    changed: tuple[str, ...] = ()


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _subset_diff(desired: Any, existing: Any) -> Any:
    """The merge patch that brings ``existing`` to ``desired``'s keys, or _MISSING if none."""
    if isinstance(desired, Mapping) and isinstance(existing, Mapping):
        patch: dict[str, Any] = {}
        for key, value in desired.items():
            current = existing.get(key, _MISSING)
            if value is None:
                if current is not _MISSING and current is not None:
                    patch[key] = None
                continue
            if current is _MISSING:
                patch[key] = copy.deepcopy(value)
                continue
            sub = _subset_diff(value, current)
            if sub is not _MISSING:
                patch[key] = sub
        return patch if patch else _MISSING
    if desired == existing:
        return _MISSING
    return copy.deepcopy(desired)


def _exact_diff(desired: Any, existing: Any) -> Any:
    if not isinstance(desired, Mapping):
        return _MISSING if desired == existing else copy.deepcopy(desired)
    current = _mapping(existing)
    patch: dict[str, Any] = {
        key: copy.deepcopy(value) for key, value in desired.items() if current.get(key) != value
    }
    patch.update({key: None for key in current if key not in desired})
    return patch if patch else _MISSING


def _same_owner(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.get("uid") and b.get("uid"):
        return bool(a.get("uid") == b.get("uid"))
    return (a.get("kind"), a.get("name"), _group(a.get("apiVersion"))) == (
        b.get("kind"),
        b.get("name"),
        _group(b.get("apiVersion")),
    )


def _owner_diff(desired: object, existing: object) -> list[dict[str, Any]] | None:
    wanted = [r for r in desired if isinstance(r, Mapping)] if isinstance(desired, list) else []
    have = [r for r in existing if isinstance(r, Mapping)] if isinstance(existing, list) else []
    merged = [dict(r) for r in have]
    changed = False
    for ref in wanted:
        index = next((i for i, r in enumerate(merged) if _same_owner(r, ref)), None)
        if index is None:
            merged.append(dict(ref))
            changed = True
        elif any(merged[index].get(k) != v for k, v in ref.items() if k != "apiVersion"):
            # (the group already matched; another version of it names the same owner)
            merged[index] = {**merged[index], **ref}
            changed = True
    return merged if changed else None


def _list_union(desired: object, existing: object) -> list[Any] | None:
    have = list(existing) if isinstance(existing, list) else []
    missing = [f for f in desired if f not in have] if isinstance(desired, list) else []
    return [*have, *missing] if missing else None


def _encoded(string_data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: base64.b64encode(value.encode("utf-8")).decode("ascii")
        if isinstance(value, str)
        else value
        for key, value in string_data.items()
    }


def _metadata_patch(
    desired: Mapping[str, Any], existing: Mapping[str, Any], changed: list[str]
) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for name in _MAP_METADATA:
        if name in desired:
            sub = _subset_diff(_mapping(desired[name]), _mapping(existing.get(name)))
            if sub is not _MISSING:
                patch[name] = sub
                changed.append(f"metadata.{name}")
    if "ownerReferences" in desired:
        owners = _owner_diff(desired["ownerReferences"], existing.get("ownerReferences"))
        if owners is not None:
            patch["ownerReferences"] = owners
            changed.append("metadata.ownerReferences")
    if "finalizers" in desired:
        finalizers = _list_union(desired["finalizers"], existing.get("finalizers"))
        if finalizers is not None:
            patch["finalizers"] = finalizers
            changed.append("metadata.finalizers")
    return patch


def _identity(resource: Target, existing: Mapping[str, Any]) -> tuple[str, str | None, str]:
    metadata = _mapping(existing.get("metadata"))
    name, rv = metadata.get("name"), metadata.get("resourceVersion")
    if not isinstance(name, str) or not name:
        raise LocalProtocolError("the existing object has no metadata.name")
    if not isinstance(rv, str) or not rv:
        raise LocalProtocolError(
            "the existing object has no metadata.resourceVersion to guard the patch"
        )
    namespace = metadata.get("namespace") or None
    if isinstance(resource, APIResource) and not resource.namespaced:
        namespace = None
    return name, namespace, rv


def plan_write(
    resource: Target,
    desired: Mapping[str, Any],
    existing: Mapping[str, Any] | None,
    *,
    exact: Iterable[str] = ("data", "binaryData"),
) -> WritePlan:
    """Plan the write that makes ``existing`` (None: absent) look as ``desired``.

    ``existing`` is the cached object; ``desired`` carries what this controller manages
    (for a create, the whole object, namespace in ``metadata.namespace``). See the module
    rules for how the two are compared.
    """
    if not isinstance(desired, Mapping):
        raise LocalProtocolError("the desired object is not a mapping")
    if existing is None:
        return WritePlan(WriteAction.CREATE, create_request(resource, desired), ("*",))
    name, namespace, rv = _identity(resource, existing)
    exact_fields = frozenset(exact)
    changed: list[str] = []
    metadata = _metadata_patch(
        _mapping(desired.get("metadata")), _mapping(existing.get("metadata")), changed
    )
    patch: dict[str, Any] = {}
    for field, value in desired.items():
        if field in _SKIPPED:
            continue
        current = existing.get(field)
        if field == "stringData" and isinstance(value, Mapping):
            diff = _subset_diff(_encoded(value), _mapping(existing.get("data")))
            sub = _MISSING if diff is _MISSING else value
        elif field in exact_fields:
            sub = _exact_diff(value, current)
        else:
            sub = _subset_diff(value, current if current is not None else {})
            if value is None and current is None:
                sub = _MISSING
        if sub is not _MISSING:
            patch[field] = sub
            changed.append(field)
    if not changed:
        return WritePlan(WriteAction.NONE)
    patch["metadata"] = {**metadata, "resourceVersion": rv}
    request = patch_request(resource, name, patch, patch_type=PatchType.MERGE, namespace=namespace)
    return WritePlan(WriteAction.PATCH, request, tuple(changed))


def plan_status(
    resource: Target,
    desired_status: Mapping[str, Any],
    existing: Mapping[str, Any],
    *,
    guard: bool = True,
) -> WritePlan:
    """Plan a merge patch of the ``status`` subresource, only if the status differs.

    The status belongs to the controller, so it is compared whole: keys of the existing
    status that ``desired_status`` lacks are removed. With ``guard`` the patch carries
    the resourceVersion (409 if the object changed since it was read).
    """
    if not isinstance(desired_status, Mapping):
        raise LocalProtocolError("the desired status is not a mapping")
    name, namespace, rv = _identity(resource, existing)
    diff = _exact_diff(desired_status, _mapping(existing.get("status")))
    if diff is _MISSING:
        return WritePlan(WriteAction.NONE)
    patch: dict[str, Any] = {"status": diff}
    if guard:
        patch["metadata"] = {"resourceVersion": rv}
    request = patch_request(
        resource, name, patch, patch_type=PatchType.MERGE, namespace=namespace, subresource="status"
    )
    return WritePlan(WriteAction.PATCH, request, ("status",))


def apply_object(obj: Mapping[str, Any], *, keep_status: bool = False) -> dict[str, Any]:
    """A copy of ``obj`` fit for server-side apply: server-set metadata removed.

    Drops :data:`SERVER_SET_METADATA` and, unless ``keep_status``, ``status`` (applied
    separately, through the status subresource).
    """
    if not isinstance(obj, Mapping):
        raise LocalProtocolError("the object is not a mapping")
    result = copy.deepcopy(dict(obj))
    metadata = result.get("metadata")
    if isinstance(metadata, dict):
        for field in SERVER_SET_METADATA:
            metadata.pop(field, None)
    if not keep_status:
        result.pop("status", None)
    return result


def server_side_apply_request(
    resource: Target,
    obj: Mapping[str, Any],
    *,
    field_manager: str,
    force: bool = True,
    namespace: str | None = None,
) -> Request:
    """The server-side apply request of ``obj`` (after :func:`apply_object`) as ``field_manager``.

    ``force`` defaults to True: a controller owns the fields it applies.
    """
    return apply_request(
        resource,
        apply_object(obj),
        field_manager=field_manager,
        force=force,
        namespace=namespace,
    )
