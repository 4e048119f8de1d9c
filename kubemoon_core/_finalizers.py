"""Finalizers: checking them and the guarded patches that add or remove one.

Rules: a finalizer write is a JSON merge patch of ``metadata.finalizers`` (the whole list,
as merge patches replace lists) that also carries the object's ``metadata.resourceVersion``:
the API server treats it as a precondition, so if the object changed since it was read the
patch fails with 409 Conflict instead of dropping someone else's finalizer. Nothing to do
gives None, so steady state makes no write. A finalizer is a qualified name
(``example.com/cleanup``); a new one cannot be added to an object being deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._errors import LocalProtocolError
from ._request import PatchType, Request, Target, patch_request
from ._resources import APIResource

__all__ = ["add_finalizer_request", "has_finalizer", "remove_finalizer_request"]

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def _check_finalizer(finalizer: object) -> str:
    if not isinstance(finalizer, str):
        raise LocalProtocolError(f"a finalizer must be a string, got {finalizer!r}")
    prefix, slash, name = finalizer.rpartition("/")
    if (
        not _NAME.match(name)
        or len(name) > 63
        or (slash and (not _PREFIX.match(prefix) or len(prefix) > 253))
    ):
        raise LocalProtocolError(f"invalid finalizer {finalizer!r}: not a qualified name")
    return finalizer


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    found = metadata.get("finalizers") if isinstance(metadata, Mapping) else None
    if not isinstance(found, list):
        return []
    return [f for f in found if isinstance(f, str)]


def has_finalizer(obj: Mapping[str, Any], finalizer: str) -> bool:
    """True when ``obj`` lists ``finalizer`` in ``metadata.finalizers``."""
    return finalizer in _finalizers(obj)


def _guarded_patch(resource: Target, obj: Mapping[str, Any], finalizers: list[str]) -> Request:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name, rv = metadata.get("name"), metadata.get("resourceVersion")
    if not isinstance(name, str) or not name:
        raise LocalProtocolError("the object has no metadata.name")
    if not isinstance(rv, str) or not rv:
        raise LocalProtocolError(
            "the object has no metadata.resourceVersion to guard the patch: use an object "
            "read from the server"
        )
    namespace = metadata.get("namespace") or None
    if isinstance(resource, APIResource) and not resource.namespaced:
        namespace = None
    patch = {"metadata": {"resourceVersion": rv, "finalizers": finalizers}}
    return patch_request(resource, name, patch, patch_type=PatchType.MERGE, namespace=namespace)


def add_finalizer_request(
    resource: Target, obj: Mapping[str, Any], finalizer: str
) -> Request | None:
    """The guarded patch that appends ``finalizer``, or None when ``obj`` already has it.

    ``obj`` is the object as read (name, namespace, resourceVersion, finalizers). Adding
    to an object that has a ``deletionTimestamp`` is refused: the API server forbids it.
    """
    _check_finalizer(finalizer)
    current = _finalizers(obj)
    if finalizer in current:
        return None
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
        raise LocalProtocolError(f"cannot add finalizer {finalizer!r}: the object is being deleted")
    return _guarded_patch(resource, obj, [*current, finalizer])


def remove_finalizer_request(
    resource: Target, obj: Mapping[str, Any], finalizer: str
) -> Request | None:
    """The guarded patch that removes ``finalizer``, or None when ``obj`` does not have it."""
    _check_finalizer(finalizer)
    current = _finalizers(obj)
    if finalizer not in current:
        return None
    return _guarded_patch(resource, obj, [f for f in current if f != finalizer])
