"""A pure, deterministic model of kube-apiserver's storage: objects, versions, watches.

Rules: no I/O and no clock: every method that depends on time takes ``now`` (seconds of
virtual time; timestamps are ``epoch + now``), and uids come from a seeded
``random.Random``. One global, monotonically increasing resourceVersion orders every
write, as etcd's revision does. Answers follow kube-apiserver 1.37's wording (checked by
``tests/integration/test_sim_vs_apiserver.py``); a request outside what is modelled raises
:class:`NotModelled` rather than answer differently. Objects handed in and out are copies.

This file is the registry: the object maps and the verbs that write them (create, update,
patch, delete). :class:`SimApiServer` is assembled from it and its parts, one file each:
the checks of a request body (``_validation.py``), the event history with LIST and WATCH
(``_history.py``; one open watch is ``_watch.py``) and the garbage collector (``_gc.py``).
"""

from __future__ import annotations

import collections
import datetime
import random
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import JSONPatchError
from kubemoon_core.objects import apply_json_patch

from ._errors import NotModelled, StatusError, qualified_resource
from ._gc import _deletion_finalizers, _GarbageCollector
from ._history import _History
from ._json import Key, _clone, _copy, _metadata, _without
from ._kinds import BUILTIN_RESOURCES, Generation, SimResource, resource_of_class
from ._raw import RawJSON
from ._validation import _CONFIGMAPS, _Validation
from ._watch import SimWatch, WatchLine, _Event

__all__ = ["DEFAULT_EPOCH", "SimApiServer", "SimWatch", "WatchLine"]

DEFAULT_EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
"""Virtual time 0 as a wall-clock instant (creationTimestamp and deletionTimestamp)."""

INITIAL_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# What a write keeps from the stored object whatever the body says.
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


class SimApiServer(_Validation, _History, _GarbageCollector):
    """The simulated API server's state and its REST semantics, without any transport.

    ``resources`` are served in addition to the modelled built-ins; ``history_limit``
    bounds the event history (older resourceVersions answer 410 Expired, as after an etcd
    compaction); ``seed`` makes uids and generated names reproducible.
    """

    def __init__(
        self,
        resources: Iterable[SimResource | type] = (),
        *,
        seed: int = 0,
        epoch: datetime.datetime = DEFAULT_EPOCH,
        history_limit: int = 10_000,
        start_resource_version: int = 1,
        garbage_collector: bool = True,
    ) -> None:
        self._rng = random.Random(seed)
        self._epoch = epoch
        self._history_limit = history_limit
        self.garbage_collector = garbage_collector
        self._resources: dict[GroupVersionResource, SimResource] = {}
        self._objects: dict[GroupVersionResource, dict[Key, dict[str, Any]]] = {}
        self._uids: dict[str, tuple[GroupVersionResource, Key]] = {}
        self._history: collections.deque[_Event] = collections.deque()
        self._compacted = start_resource_version
        self.resource_version = start_resource_version
        self._watches: set[SimWatch] = set()
        # What the garbage collector looks at: objects with owner references or with the
        # orphan/foregroundDeletion finalizers (kept up to date by every write).
        self._gc_candidates: set[tuple[GroupVersionResource, Key]] = set()
        self.writes = 0
        for resource in BUILTIN_RESOURCES:
            self.register(resource)
        for item in resources:
            self.register(item)
        for name in INITIAL_NAMESPACES:
            self.create(
                self._resources[GroupVersionResource("", "v1", "namespaces")],
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                0.0,
            )

    # -- resources ---------------------------------------------------------------------------

    def register(self, resource: SimResource | type) -> SimResource:
        """Serve ``resource`` (a :class:`SimResource` or a declared class)."""
        if not isinstance(resource, SimResource):
            resource = resource_of_class(resource)
        self._resources[resource.gvr] = resource
        self._objects.setdefault(resource.gvr, {})
        return resource

    def resource(self, gvr: GroupVersionResource) -> SimResource:
        """The served resource ``gvr``; a resource not served is 404 (kube-apiserver's
        plain "404 page not found" is not modelled: NotModelled)."""
        found = self._resources.get(gvr)
        if found is None:
            raise NotModelled(f"the resource {gvr} (not registered with the simulator)")
        return found

    @property
    def resources(self) -> list[SimResource]:
        """Every served resource."""
        return list(self._resources.values())

    # -- helpers -----------------------------------------------------------------------------

    def timestamp(self, now: float) -> str:
        """``now`` as an RFC 3339 timestamp in whole seconds (the API's precision)."""
        instant = self._epoch + datetime.timedelta(seconds=int(now))
        return instant.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _store(self, resource: SimResource) -> dict[Key, dict[str, Any]]:
        return self._objects[resource.gvr]

    def _key(self, resource: SimResource, namespace: str | None, name: str) -> Key:
        return (namespace or "" if resource.namespaced else "", name)

    def _next_rv(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def _spec_changed(
        self, resource: SimResource, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> bool:
        ignored = (
            ("metadata", "status") if resource.generation is Generation.SPEC else ("metadata",)
        )
        return _without(old, *ignored) != _without(new, *ignored)

    def _live(self, resource: SimResource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._store(resource).get(self._key(resource, namespace, name))
        if obj is None:
            raise StatusError.not_found(resource.group, resource.resource, name)
        return obj

    # -- verbs -------------------------------------------------------------------------------

    def get(self, resource: SimResource, namespace: str | None, name: str) -> dict[str, Any]:
        """GET an object (404 NotFound if absent)."""
        return _clone(self._live(resource, namespace, name))

    def create(
        self, resource: SimResource, namespace: str | None, body: Any, now: float
    ) -> dict[str, Any]:
        """POST: store a new object (409 AlreadyExists, 404 on a missing namespace)."""
        obj = self._check_body(resource, body, namespace)
        metadata = obj["metadata"]
        if metadata.get("resourceVersion"):
            raise NotModelled("a create whose body sets metadata.resourceVersion")
        name = metadata.get("name")
        if not name:
            prefix = metadata.get("generateName")
            if not prefix:
                raise StatusError(
                    422,
                    "Invalid",
                    f'{resource.kind}{"." + resource.group if resource.group else ""} "" is '
                    "invalid: metadata.name: Required value: name or generateName is required",
                    group=resource.group,
                    kind=resource.kind,
                    causes=[
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: name or generateName is required",
                            "field": "metadata.name",
                        }
                    ],
                )
            suffix = "".join(self._rng.choice(_GENERATE_ALPHABET) for _ in range(5))
            name = f"{prefix}{suffix}"
            metadata["name"] = name
        if not isinstance(name, str):
            raise NotModelled("a metadata.name that is not a string")
        self._validate_name(resource, name)
        self._check_namespace(resource, namespace, name)
        key = self._key(resource, namespace, name)
        store = self._store(resource)
        if key in store:
            error = StatusError.already_exists(resource.group, resource.resource, name)
            if "deletionTimestamp" in store[key]["metadata"]:
                error.message = f"object is being deleted: {error.message}"
            raise error
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            metadata.pop(field, None)
        metadata["uid"] = self._new_uid()
        metadata["creationTimestamp"] = self.timestamp(now)
        if resource.generation is not Generation.NONE:
            metadata["generation"] = 1
        if resource.gvr.resource == "namespaces":
            metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif resource.status_subresource:
            obj.pop("status", None)
        metadata["resourceVersion"] = self._next_rv()
        store[key] = obj
        self._uids[metadata["uid"]] = (resource.gvr, key)
        self._record("ADDED", resource, key, obj, None)
        return _clone(obj)

    def update(
        self,
        resource: SimResource,
        namespace: str | None,
        name: str,
        body: Any,
        now: float,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT an object or its status (409 Conflict on a stale resourceVersion)."""
        if subresource not in (None, "status"):
            raise NotModelled(f"the subresource {subresource!r} of {resource.gvr}")
        if subresource == "status" and not resource.status_subresource:
            raise StatusError.no_route()
        new = self._check_body(resource, body, namespace)
        metadata = new["metadata"]
        if metadata.get("name") != name:
            raise StatusError.bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        old = self._live(resource, namespace, name)
        given = metadata.get("resourceVersion")
        if not given:
            if not resource.allow_unconditional_update:
                # Named by resource, not kind, as kube-apiserver's custom resource
                # handler names it.
                raise StatusError.invalid(
                    resource.group,
                    resource.resource,
                    name,
                    field="metadata.resourceVersion",
                    detail="Invalid value: 0: must be specified for an update",
                )
        elif not isinstance(given, str) or not given.isdigit():
            raise NotModelled(f"a resourceVersion that is not a number: {given!r}")
        elif given != old["metadata"]["resourceVersion"]:
            raise StatusError.conflict(resource.group, resource.resource, name)
        return self._write(resource, old, new, now, subresource=subresource)

    def _write(
        self,
        resource: SimResource,
        old: dict[str, Any],
        new: dict[str, Any],
        now: float,
        *,
        subresource: str | None,
    ) -> dict[str, Any]:
        """Store ``new`` over ``old``: server fields kept, generation, no-op detection,
        and removal when the last finalizer of a deleting object goes."""
        old_meta = old["metadata"]
        if subresource == "status":
            status = new.get("status")
            new = _clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            meta = new["metadata"]
            for field in _SERVER_METADATA:
                meta.pop(field, None)
                if field in old_meta:
                    meta[field] = old_meta[field]
            if resource.status_subresource:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = _copy(old["status"])
            elif resource.gvr.resource == "namespaces":
                raise NotModelled("updating a namespace's spec or status")
            if resource.gvr == _CONFIGMAPS and old.get("immutable"):
                raise NotModelled("changing an immutable ConfigMap")
        meta = new["metadata"]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if "deletionTimestamp" in old_meta:
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            configmaps = _CONFIGMAPS
            if added and (resource.custom or resource.gvr == configmaps):
                raise StatusError.no_new_finalizers(
                    resource.group, resource.kind, meta["name"], added, custom=resource.custom
                )
            if added:
                raise NotModelled("adding finalizers to an object being deleted")
        if resource.generation is not Generation.NONE and self._spec_changed(resource, old, new):
            meta["generation"] = old_meta.get("generation", 0) + 1
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if new == old:
            return _clone(old)  # a no-op write stores nothing and keeps the resourceVersion
        key = self._key(resource, meta.get("namespace"), meta["name"])
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            # Removed for good; the answer is the object as written, at the resourceVersion
            # it had (what kube-apiserver answers when an update empties the finalizers).
            self._remove(resource, key, old)
            return _clone(new)
        meta["resourceVersion"] = self._next_rv()
        self._store(resource)[key] = new
        self._record("MODIFIED", resource, key, new, old)
        self._after_write(now)
        return _clone(new)

    def _remove(self, resource: SimResource, key: Key, last: dict[str, Any]) -> dict[str, Any]:
        """Delete an object for good: a DELETED event with the last stored state at a new
        resourceVersion; the answer is a Success Status naming it (as kube-apiserver's
        answer to a DELETE that removes the object, for built-in and custom resources)."""
        store = self._store(resource)
        del store[key]
        gone = _copy(last)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        uid = gone["metadata"]["uid"]
        self._uids.pop(uid, None)
        self._record("DELETED", resource, key, gone, last)
        self._after_write(None)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": key[1],
                **({"group": resource.group} if resource.group else {}),
                "kind": resource.resource,
                "uid": uid,
            },
        }

    def patch(
        self,
        resource: SimResource,
        namespace: str | None,
        name: str,
        patch: Any,
        now: float,
        *,
        content_type: str,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with a JSON merge patch or a JSON patch; other patch types NotModelled."""
        old = self._live(resource, namespace, name)
        base = _copy(old)
        if content_type == "application/merge-patch+json":
            if not isinstance(patch, dict):
                raise NotModelled("a merge patch that is not a JSON object")
            patched = _merge_patch(base, patch)
        elif content_type == "application/json-patch+json":
            if any(isinstance(value, RawJSON) for value in base.values()):
                raise NotModelled("a JSON patch of an object too deep to decode")
            try:
                patched = apply_json_patch(base, patch)
            except JSONPatchError as exc:
                raise NotModelled(f"a JSON patch that fails to apply ({exc})") from None
        else:
            raise NotModelled(f"PATCH with Content-Type {content_type!r}")
        if not isinstance(patched, dict):
            raise NotModelled("a patch whose result is not an object")
        meta = _metadata(patched)
        given = meta.get("resourceVersion")
        if given != old["metadata"]["resourceVersion"]:
            if not isinstance(given, str) or not given.isdigit():
                raise NotModelled(f"a patched resourceVersion that is not a number: {given!r}")
            raise StatusError.conflict(resource.group, resource.resource, name)
        if meta.get("name") != name or meta.get("uid") != old["metadata"]["uid"]:
            raise NotModelled("a patch that changes metadata.name or metadata.uid")
        new = self._check_body(resource, patched, namespace)
        return self._write(resource, old, new, now, subresource=subresource)

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
    ) -> dict[str, Any]:
        """DELETE: removed at once without finalizers, else marked with a
        deletionTimestamp (200 with the object either way)."""
        old = self._live(resource, namespace, name)
        old_meta = old["metadata"]
        qualified = qualified_resource(resource.group, resource.resource)
        if precondition_uid is not None and precondition_uid != old_meta["uid"]:
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {qualified} "{name}": Precondition failed: '
                f"UID in precondition: {precondition_uid}, UID in object meta: {old_meta['uid']}",
                name=name,
                group=resource.group,
                kind=resource.resource,
            )
        if (
            precondition_resource_version is not None
            and precondition_resource_version != old_meta["resourceVersion"]
        ):
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {qualified} "{name}": Precondition failed: '
                f"ResourceVersion in precondition: {precondition_resource_version}, "
                f"ResourceVersion in object meta: {old_meta['resourceVersion']}",
                name=name,
                group=resource.group,
                kind=resource.resource,
            )
        if resource.gvr.resource == "namespaces":
            raise NotModelled("deleting a namespace (the namespace controller)")
        deleting = "deletionTimestamp" in old_meta
        old_finalizers = list(old_meta.get("finalizers") or ())
        finalizers = _deletion_finalizers(old_finalizers, propagation_policy)
        if deleting and set(finalizers) == set(old_finalizers):
            return _clone(old)  # deleted again: nothing changes, nothing is written
        key = self._key(resource, namespace, name)
        if not finalizers:
            return self._remove(resource, key, old)
        new = _clone(old)
        meta = new["metadata"]
        meta["finalizers"] = finalizers
        if not deleting:
            meta["deletionTimestamp"] = self.timestamp(now)
            meta["deletionGracePeriodSeconds"] = 0
            if meta.get("generation", 0) > 0:
                meta["generation"] += 1
        meta["resourceVersion"] = self._next_rv()
        self._store(resource)[key] = new
        self._record("MODIFIED", resource, key, new, old)
        self._after_write(now)
        return _clone(new)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    if isinstance(target, RawJSON):
        raise NotModelled("a merge patch into a value too deep to decode")
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result
