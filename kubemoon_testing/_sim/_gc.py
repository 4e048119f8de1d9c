"""The simulated kube-controller-manager's garbage collector, and the finalizers it acts on.

Rules: it runs after every write, in the same step, to a fixed point (no delay is
modelled): dependents whose owners are all gone are deleted in the background, dangling
owner references beside a live owner are removed, and the ``orphan`` and
``foregroundDeletion`` finalizers that a DELETE leaves (:func:`_deletion_finalizers`) are
acted upon. It writes only through the store's own verbs, so its writes are events and
watches see them.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kubemoon_core import GroupVersionResource

from ._json import Key, _copy, _metadata
from ._kinds import SimResource


class _GarbageCollector:
    """The garbage collector (a part of :class:`SimApiServer`)."""

    if TYPE_CHECKING:
        garbage_collector: bool
        writes: int
        _resources: dict[GroupVersionResource, SimResource]
        _objects: dict[GroupVersionResource, dict[Key, dict[str, Any]]]
        _uids: dict[str, tuple[GroupVersionResource, Key]]
        _gc_candidates: set[tuple[GroupVersionResource, Key]]

        def delete(
            self,
            resource: SimResource,
            namespace: str | None,
            name: str,
            now: float,
            *,
            propagation_policy: str | None = None,
            precondition_uid: str | None = None,
            precondition_resource_version: str | None = None,
        ) -> dict[str, Any]: ...

        def _write(
            self,
            resource: SimResource,
            old: dict[str, Any],
            new: dict[str, Any],
            now: float,
            *,
            subresource: str | None,
        ) -> dict[str, Any]: ...

    def _after_write(self, now: float | None) -> None:
        if self.garbage_collector and not self._collecting:
            self.collect_garbage(self._last_now if now is None else now)
        if now is not None:
            self._last_now = now

    _collecting = False
    _last_now = 0.0

    def _owner_present(self, dependent: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
        found = self._uids.get(ref.get("uid", ""))
        if found is None:
            return False
        gvr, key = found
        resource = self._resources[gvr]
        if resource.kind != ref.get("kind") or key[1] != ref.get("name"):
            return False
        return not (resource.namespaced and key[0] != _metadata(dependent).get("namespace", ""))

    def collect_garbage(self, now: float) -> int:
        """Run kube-controller-manager's garbage collector to a fixed point: dependents
        whose owners are all gone are deleted (background), dangling references beside a
        live owner are removed, ``orphan`` and ``foregroundDeletion`` finalizers are acted
        upon. Returns how many writes it made."""
        self._collecting = True
        before = self.writes
        try:
            while self._collect_once(now):
                pass
        finally:
            self._collecting = False
        return self.writes - before

    def _collect_once(self, now: float) -> bool:
        for gvr, key in sorted(self._gc_candidates, key=lambda item: (str(item[0]), item[1])):
            resource = self._resources[gvr]
            store = self._objects[gvr]
            obj = store.get(key)
            if obj is None:
                continue
            meta = obj["metadata"]
            deleting = "deletionTimestamp" in meta
            finalizers = meta.get("finalizers") or ()
            if deleting and "orphan" in finalizers:
                self._orphan_dependents(meta["uid"], now)
                self._drop_finalizer(resource, key, "orphan", now)
                return True
            if deleting and "foregroundDeletion" in finalizers:
                dependents = self._dependents(meta["uid"])
                if not dependents:
                    self._drop_finalizer(resource, key, "foregroundDeletion", now)
                    return True
                for dep_resource, dep_key in dependents:
                    dep = self._objects[dep_resource.gvr][dep_key]
                    if "deletionTimestamp" not in dep["metadata"]:
                        self.delete(dep_resource, dep_key[0] or None, dep_key[1], now)
                        return True
            refs = meta.get("ownerReferences")
            if not refs or not isinstance(refs, list) or deleting:
                continue
            present = [r for r in refs if isinstance(r, dict) and self._owner_present(obj, r)]
            if not present:
                self.delete(resource, key[0] or None, key[1], now)
                return True
            if len(present) != len(refs):
                new = _copy(obj)
                new["metadata"]["ownerReferences"] = present
                self._write(resource, obj, new, now, subresource=None)
                return True
        return False

    def _dependents(self, uid: str) -> builtins.list[tuple[SimResource, Key]]:
        out = []
        for gvr, key in self._gc_candidates:
            obj = self._objects[gvr].get(key)
            refs = (obj["metadata"].get("ownerReferences") or ()) if obj is not None else ()
            if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                out.append((self._resources[gvr], key))
        return sorted(out, key=lambda item: (str(item[0].gvr), item[1]))

    def _orphan_dependents(self, uid: str, now: float) -> None:
        for resource, key in self._dependents(uid):
            obj = self._objects[resource.gvr][key]
            new = _copy(obj)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                del new["metadata"]["ownerReferences"]
            self._write(resource, obj, new, now, subresource=None)

    def _drop_finalizer(self, resource: SimResource, key: Key, finalizer: str, now: float) -> None:
        obj = self._objects[resource.gvr][key]
        new = _copy(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != finalizer]
        self._write(resource, obj, new, now, subresource=None)


def _deletion_finalizers(finalizers: list[str], policy: str | None) -> list[str]:
    """The finalizers a DELETE leaves, as kube-apiserver's registry computes them: the
    ``orphan`` and ``foregroundDeletion`` finalizers are dropped, then the one the policy
    asks for is added back (without a policy, the one the object already carries wins;
    the default policy of the modelled resources is background)."""
    if policy is None:
        orphan = foreground = False
        for finalizer in finalizers:
            if finalizer in ("orphan", "foregroundDeletion"):
                orphan, foreground = finalizer == "orphan", finalizer == "foregroundDeletion"
                break
    else:
        orphan, foreground = policy == "Orphan", policy == "Foreground"
    kept = [f for f in finalizers if f not in ("orphan", "foregroundDeletion")]
    if orphan:
        kept.append("orphan")
    if foreground:
        kept.append("foregroundDeletion")
    if set(kept) == set(finalizers):
        return finalizers
    return kept
