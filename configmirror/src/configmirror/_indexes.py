"""How mirrors are found in the caches: index functions and change mappers.

Rules: a ConfigMap change concerns its owner mirror and the mirrors that use its name as
source or copy; a Namespace change concerns the mirrors that name it and those that select
namespaces by label (indexed under ``*``: no namespace name contains one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kubemoon_core import Change, ObjectKey
from kubemoon_trio import CacheReader

from ._plan import CopyData, _meta, _selector, copy_settled, mirror_targets
from ._plan import _owner_uid as owner_uid

__all__ = [
    "BY_OWNER_UID",
    "MIRROR_INDEXERS",
    "mirrors_of_configmap",
    "mirrors_targeting",
    "owner_uid_index",
    "source_of",
]

BY_UID, BY_SOURCE, BY_TARGET = "configmirror/uid", "configmirror/source", "configmirror/target"
BY_TARGET_NAMESPACE, BY_OWNER_UID = "configmirror/target-namespace", "configmirror/owner-uid"
# The BY_TARGET_NAMESPACE key of mirrors with a namespaceSelector: any Namespace change
# may concern them. (No namespace name contains a "*".)
_SELECTING = "*"


def _one(value: object) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else ()


def _targets(obj: Mapping[str, Any]) -> list[str]:
    return mirror_targets(obj)  # the named ones: selected namespaces need the cache


def _target_namespaces(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return (*_targets(obj), *((_SELECTING,) if _selector(obj) is not None else ()))


def source_of(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return _one((obj.get("spec") or {}).get("source"))


MIRROR_INDEXERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] = {
    BY_UID: lambda obj: _one(_meta(obj).get("uid")),
    BY_SOURCE: lambda obj: tuple(f"{_meta(obj).get('namespace')}/{s}" for s in source_of(obj)),
    BY_TARGET: lambda obj: tuple(f"{t}/{s}" for s in source_of(obj) for t in _targets(obj)),
    BY_TARGET_NAMESPACE: _target_namespaces,
}


class SourceLookup(Protocol):
    """Where :func:`mirrors_of_configmap` finds a source in full (or None if unknown)."""

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None: ...


def owner_uid_index(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return _one(owner_uid(obj))


def mirrors_of_configmap(
    mirrors: CacheReader,
    configmaps: SourceLookup,
    change: Change,
    *,
    sharded: bool = False,
    known: Callable[[Mapping[str, Any]], CopyData | None] | None = None,
) -> Iterable[ObjectKey]:
    """The mirrors a ConfigMap change concerns: its owner, and those using its name.

    The owner is left out when the change leaves its copy settled (see
    :func:`~configmirror.copy_settled`): the echo of a mirror's own write costs no
    reconcile, and cannot start one from a cache that has seen only some of its writes.
    ``configmaps`` is where sources are found in full (data included: a source it does
    not know in full leaves the copy unsettled); ``sharded`` as for
    :func:`~configmirror.plan_reconcile`. ``known`` tells what a copy seen as metadata
    only holds (see :class:`~configmirror.CopyData`): a copy whose data it does not know at
    its resourceVersion (someone else wrote it) is not settled.
    """
    where = f"{change.key.namespace}/{change.key.name}"
    keys = mirrors.keys_by_index(BY_SOURCE, where) + mirrors.keys_by_index(BY_TARGET, where)
    for obj in (change.old, change.new):
        for uid in owner_uid_index(obj) if obj is not None else ():
            keys += mirrors.keys_by_index(BY_UID, uid)
    new = change.new
    if new is not None and keys:
        for uid in owner_uid_index(new):
            for key in mirrors.keys_by_index(BY_UID, uid):
                mirror = mirrors.get(key)
                if mirror is None:
                    continue
                source = configmaps.get("".join(source_of(mirror)), key.namespace)
                facts = known(new) if known is not None else None
                if copy_settled(new, mirror, source, sharded=sharded, known=facts):
                    keys = [k for k in keys if k != key]
    return dict.fromkeys(keys)


def mirrors_targeting(mirrors: CacheReader, change: Change) -> list[ObjectKey]:
    """The mirrors that target a Namespace that started or stopped accepting copies."""
    named = mirrors.keys_by_index(BY_TARGET_NAMESPACE, change.key.name)
    return list(dict.fromkeys(named + mirrors.keys_by_index(BY_TARGET_NAMESPACE, _SELECTING)))
