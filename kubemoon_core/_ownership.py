"""Owner references: building them, reading them, and mapping children to their owners.

Rules: an owner reference names the owner by apiVersion, kind, name and uid; the uid is
what the garbage collector follows, so an owner without one is refused. An object has at
most one reference marked ``controller: true``. Matching an owner compares the group (not
the version: every version of a group serves the same objects), the kind, the name and,
when both sides have it, the uid. Objects are never modified in place: helpers return
copies.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from ._changes import Change
from ._controller import Mapper
from ._errors import LocalProtocolError
from ._resources import GroupVersion, ObjectKey, Scope

__all__ = [
    "controller_of",
    "enqueue_controller",
    "is_owned_by",
    "owner_reference",
    "with_owner_reference",
]


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    return metadata if isinstance(metadata, Mapping) else {}


def _references(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    refs = _metadata(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return []
    return [ref for ref in refs if isinstance(ref, Mapping)]


def _group(api_version: object) -> str | None:
    if not isinstance(api_version, str):
        return None
    try:
        return GroupVersion.parse(api_version).group
    except LocalProtocolError:
        return None


def owner_reference(
    owner: Mapping[str, Any], *, controller: bool = True, block_owner_deletion: bool = True
) -> dict[str, Any]:
    """The ``ownerReferences`` entry pointing at ``owner``.

    ``owner`` must carry ``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.uid``
    (an object read from the server has all four); anything missing is a
    LocalProtocolError naming it.
    """
    if not isinstance(owner, Mapping):
        raise LocalProtocolError("the owner is not a mapping")
    metadata = _metadata(owner)
    ref: dict[str, Any] = {}
    for field, value in (
        ("apiVersion", owner.get("apiVersion")),
        ("kind", owner.get("kind")),
        ("name", metadata.get("name")),
        ("uid", metadata.get("uid")),
    ):
        if not isinstance(value, str) or not value:
            where = field if field in ("apiVersion", "kind") else f"metadata.{field}"
            raise LocalProtocolError(f"the owner has no {where}")
        ref[field] = value
    ref["controller"] = bool(controller)
    ref["blockOwnerDeletion"] = bool(block_owner_deletion)
    return ref


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of the owner reference of ``obj`` marked ``controller: true``, or None."""
    for ref in _references(obj):
        if ref.get("controller") is True:
            return dict(ref)
    return None


def _same_owner(ref: Mapping[str, Any], owner_ref: Mapping[str, Any]) -> bool:
    if ref.get("kind") != owner_ref["kind"] or ref.get("name") != owner_ref["name"]:
        return False
    if _group(ref.get("apiVersion")) != _group(owner_ref["apiVersion"]):
        return False
    uid = ref.get("uid")
    return not uid or uid == owner_ref["uid"]


def is_owned_by(
    obj: Mapping[str, Any], owner: Mapping[str, Any], *, controller: bool = False
) -> bool:
    """True when ``obj`` has an owner reference to ``owner`` (the controller one, if asked).

    ``owner`` needs what :func:`owner_reference` needs.
    """
    target = owner_reference(owner)
    for ref in _references(obj):
        if controller and ref.get("controller") is not True:
            continue
        if _same_owner(ref, target):
            return True
    return False


def with_owner_reference(
    obj: Mapping[str, Any],
    owner: Mapping[str, Any],
    *,
    controller: bool = True,
    block_owner_deletion: bool = True,
) -> dict[str, Any]:
    """A copy of ``obj`` that lists ``owner`` among its owners.

    An existing reference to the same owner is replaced. Refused with LocalProtocolError:
    a second controller, and an owner the garbage collector could not resolve (a
    namespaced owner in another namespace, or of a cluster-scoped object).
    """
    ref = owner_reference(owner, controller=controller, block_owner_deletion=block_owner_deletion)
    owner_namespace = _metadata(owner).get("namespace") or ""
    namespace = _metadata(obj).get("namespace") or ""
    if owner_namespace and owner_namespace != namespace:
        raise LocalProtocolError(
            f"a namespaced owner ({owner_namespace!r}) can only own objects of its namespace, "
            f"not of {namespace or 'the cluster scope'!r}"
        )
    kept = [r for r in _references(obj) if not _same_owner(r, ref)]
    if controller:
        for other in kept:
            if other.get("controller") is True:
                raise LocalProtocolError(
                    f"the object is already controlled by {other.get('kind')} {other.get('name')!r}"
                )
    result = copy.deepcopy(dict(obj))
    metadata = dict(result.get("metadata") or {})
    metadata["ownerReferences"] = [*(dict(r) for r in kept), ref]
    result["metadata"] = metadata
    return result


def enqueue_controller(group: str, kind: str, *, owner_scope: Scope = Scope.NAMESPACED) -> Mapper:
    """A :class:`Mapper` from a child's change to the key of its controller of ``group``/``kind``.

    Both the old and the new state count, so a child that changes controller wakes both.
    The key takes the child's namespace, or ``""`` when ``owner_scope`` is cluster. Use it
    with :meth:`Source.mapped`.
    """

    def owners(change: Change) -> Iterable[ObjectKey]:
        namespace = change.key.namespace if owner_scope is Scope.NAMESPACED else ""
        keys: list[ObjectKey] = []
        for obj in (change.old, change.new):
            ref = controller_of(obj) if obj is not None else None
            if ref is None or ref.get("kind") != kind or _group(ref.get("apiVersion")) != group:
                continue
            name = ref.get("name")
            if isinstance(name, str) and name and (key := ObjectKey(namespace, name)) not in keys:
                keys.append(key)
        return keys

    return owners
