"""A pure, deterministic model of kube-apiserver's storage: objects, versions, watches.

Rules: no I/O and no clock: every method that depends on time takes ``now`` (seconds of
virtual time; timestamps are ``epoch + now``), and uids come from a seeded
``random.Random``. One global, monotonically increasing resourceVersion orders every
write, as etcd's revision does. Answers follow kube-apiserver 1.37's wording (checked by
``tests/integration/test_sim_vs_apiserver.py``); a request outside what is modelled raises
:class:`NotModelled` rather than answer differently. Objects handed in and out are copies.

This file is one job (the registry's create/update/delete/list/watch semantics and the
garbage collector that acts on them share the object maps and the event history), which
is why it is longer than most.
"""

# Longer than 700 lines because the registry and its garbage collector share the object maps.
from __future__ import annotations

import base64
import binascii
import builtins
import collections
import datetime
import json
import random
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubemoon_core import GroupVersionResource, KubeMoonError
from kubemoon_core.errors import JSONPatchError
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.typed import decode, encode

from ._errors import NotModelled, StatusError, qualified_resource
from ._kinds import BUILTIN_RESOURCES, Generation, SimResource, resource_of_class
from ._raw import RawJSON, dumps
from ._selectors import Selector, parse_field_selector, parse_label_selector

__all__ = ["DEFAULT_EPOCH", "SimApiServer", "SimWatch", "WatchLine"]

DEFAULT_EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
"""Virtual time 0 as a wall-clock instant (creationTimestamp and deletionTimestamp)."""

INITIAL_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
BOOKMARK_INTERVAL = 60.0
DEFAULT_WATCH_TIMEOUT = 1800.0
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# What a write keeps from the stored object whatever the body says.
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)

Key = tuple[str, str]  # (namespace or "", name)


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (faster than ``copy.deepcopy``)."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def _clone(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of an object."""
    return cast(dict[str, Any], _copy(obj))


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _without(obj: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in names}


@dataclass(frozen=True, slots=True)
class _Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    gvr: GroupVersionResource
    key: Key
    object: dict[str, Any]
    previous: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class WatchLine:
    """One event a watch delivers: its type and object (kept as the model's own copy)."""

    type: str
    object: dict[str, Any]

    def encode(self) -> bytes:
        """The JSON line kube-apiserver writes for it."""
        return dumps({"type": self.type, "object": self.object}) + b"\n"


class SimWatch:
    """An open WATCH: the events it still has to deliver, its bookmarks and its deadline.

    The model pushes matching events into it as writes happen; :meth:`take` hands out what
    is due at ``now`` (bookmarks included) and ends the watch at its deadline.
    """

    def __init__(
        self,
        resource: SimResource,
        namespace: str | None,
        label: Selector | None,
        field: Selector | None,
        *,
        started: float,
        timeout: float,
        bookmarks: bool,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self._label = label
        self._field = field
        self.started = started
        self.deadline = started + timeout
        self.bookmarks = bookmarks
        self._next_bookmark = self._bookmark_after(started)
        self._pending: collections.deque[WatchLine] = collections.deque()
        self.closed = False
        self.last_rv = 0

    def _bookmark_after(self, now: float) -> float | None:
        if not self.bookmarks:
            return None
        # Every minute, and once two seconds before the deadline (the watch cache's timing).
        periods = int((now - self.started) // BOOKMARK_INTERVAL) + 1
        periodic = self.started + BOOKMARK_INTERVAL * periods
        while periodic <= now:  # floating-point rounding may land it on ``now``
            periods += 1
            periodic = self.started + BOOKMARK_INTERVAL * periods
        final = self.deadline - 2.0
        if now < final:
            return min(periodic, final)
        return None

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """True when ``obj`` is in this watch's namespace and selectors."""
        if self.namespace is not None and _metadata(obj).get("namespace") != self.namespace:
            return False
        if self._label is not None and not self._label(obj):
            return False
        return self._field is None or self._field(obj)

    def offer(self, event: _Event) -> None:
        """Queue ``event`` as this watch sees it (entering or leaving the selection is an
        ADDED or DELETED, as the watch cache reports it)."""
        if self.closed or event.gvr != self.resource.gvr:
            return
        now_in = event.type != "DELETED" and self.matches(event.object)
        was_in = event.previous is not None and self.matches(event.previous)
        if event.type == "DELETED":
            now_in, was_in = False, self.matches(event.object)
        obj = event.object
        if now_in and was_in:
            kind = "MODIFIED"
        elif now_in:
            kind = "ADDED"
        elif was_in:
            kind = "DELETED"
            if event.type != "DELETED":
                # Leaving the selection: the previous content at the event's version, as
                # the watch cache sends it.
                assert event.previous is not None
                obj = _clone(event.previous)
                obj["metadata"]["resourceVersion"] = str(event.rv)
        else:
            return
        self._pending.append(WatchLine(kind, obj))
        self.last_rv = event.rv

    def push(self, line: WatchLine) -> None:
        """Queue a line as it is (initial events, errors)."""
        self._pending.append(line)

    @property
    def has_pending(self) -> bool:
        """True when lines are waiting to be taken."""
        return bool(self._pending)

    def take(self, now: float, current_rv: int) -> list[WatchLine]:
        """The lines due at ``now``; after the deadline the watch is closed (what was
        queued before it is still delivered)."""
        lines = list(self._pending)
        self._pending.clear()
        if self._next_bookmark is not None and now >= self._next_bookmark and not self.closed:
            lines.append(
                WatchLine(
                    "BOOKMARK",
                    {
                        "kind": self.resource.kind,
                        "apiVersion": self.resource.api_version,
                        "metadata": {"resourceVersion": str(current_rv)},
                    },
                )
            )
            self._next_bookmark = self._bookmark_after(now)
        if now >= self.deadline:
            self.closed = True
        return lines

    def next_deadline(self) -> float | None:
        """When :meth:`take` next has something to do without a write (None: closed)."""
        if self.closed:
            return None
        if self._next_bookmark is not None:
            return min(self._next_bookmark, self.deadline)
        return self.deadline

    def close(self) -> None:
        """Stop queueing (the client went away)."""
        self.closed = True
        self._pending.clear()


class SimApiServer:
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

    def _record(
        self,
        kind: str,
        resource: SimResource,
        key: Key,
        obj: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> None:
        event = _Event(self.resource_version, kind, resource.gvr, key, obj, previous)
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        for watch in self._watches:
            watch.offer(event)
        self.writes += 1
        ident = (resource.gvr, key)
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or ()
        if kind != "DELETED" and (
            meta.get("ownerReferences")
            or "orphan" in finalizers
            or "foregroundDeletion" in finalizers
        ):
            self._gc_candidates.add(ident)
        else:
            self._gc_candidates.discard(ident)

    def _next_rv(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def compact(self, resource_version: int | None = None) -> None:
        """Forget the history up to ``resource_version`` (default: all of it), as an etcd
        compaction does: watches and continue tokens from before it answer 410 Expired."""
        target = self.resource_version if resource_version is None else resource_version
        while self._history and self._history[0].rv <= target:
            self._history.popleft()
        self._compacted = max(self._compacted, target)

    @property
    def compacted_resource_version(self) -> int:
        """The oldest resourceVersion a watch or continue token may still start from."""
        return self._compacted

    def _check_namespace(self, resource: SimResource, namespace: str | None, name: str) -> None:
        if not resource.namespaced:
            return
        if not namespace:
            raise NotModelled("a namespaced write without a namespace in the path")
        ns = self._objects[GroupVersionResource("", "v1", "namespaces")].get(("", namespace))
        if ns is None:
            raise StatusError.not_found("", "namespaces", namespace)
        if "deletionTimestamp" in _metadata(ns):
            raise StatusError(
                403,
                "Forbidden",
                f'{qualified_resource(resource.group, resource.resource)} "{name}" is '
                f"forbidden: unable to create new content in namespace {namespace} because "
                "it is being terminated",
                name=name,
                group=resource.group,
                kind=resource.resource,
            )

    def _check_body(
        self, resource: SimResource, body: Any, namespace: str | None
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise NotModelled("a request body that is not a JSON object")
        if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
            raise NotModelled(
                f"a body whose apiVersion/kind is not {resource.api_version}/{resource.kind} "
                f"(got {body.get('apiVersion')!r}/{body.get('kind')!r})"
            )
        body = _clone(body)
        metadata = body.get("metadata", {})
        if not isinstance(metadata, dict):
            raise NotModelled("metadata that is not an object")
        body["metadata"] = metadata
        if resource.namespaced:
            given = metadata.get("namespace")
            if given not in (None, "") and given != namespace:
                raise StatusError.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        metadata.pop("managedFields", None)
        metadata.pop("selfLink", None)
        self._check_content(resource, body)
        return cast(dict[str, Any], body)

    def _check_content(self, resource: SimResource, body: dict[str, Any]) -> None:
        """The parts of kube-apiserver's validation that are modelled; the rest refused."""
        metadata = body["metadata"]
        if resource.cls is not None:
            if any(isinstance(value, RawJSON) for value in body.values()):
                raise NotModelled(f"an object of {resource.gvr} too deep to decode")
            try:
                encoded = encode(decode(resource.cls, body))
            except KubeMoonError as exc:
                raise NotModelled(
                    f"an object the schema of {resource.gvr} refuses ({exc})"
                ) from None
            if _without(encoded, "metadata") != _without(body, "metadata"):
                raise NotModelled(
                    f"an object the schema of {resource.gvr} would default or prune "
                    "(send it complete, as the declared class encodes it)"
                )
        for field in ("labels", "annotations"):
            values = metadata.get(field)
            if values is not None and (
                not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
            ):
                raise NotModelled(f"metadata.{field} that is not a map of strings")
        finalizers = metadata.get("finalizers")
        if finalizers is not None and (
            not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
        ):
            raise NotModelled("metadata.finalizers that is not a list of strings")
        if resource.gvr == GroupVersionResource("", "v1", "configmaps"):
            for field in ("data", "binaryData"):
                values = body.get(field)
                if values is not None and (
                    not isinstance(values, dict)
                    or not all(
                        isinstance(v, str) and re.fullmatch(r"[-._a-zA-Z0-9]+", k)
                        for k, v in values.items()
                    )
                ):
                    raise NotModelled(f"ConfigMap {field} that kube-apiserver would refuse")
        if resource.gvr == GroupVersionResource("", "v1", "secrets"):
            body.setdefault("type", "Opaque")
            values = body.get("data")
            if values is not None:
                if not isinstance(values, dict):
                    raise NotModelled("Secret data that is not a map")
                for value in values.values():
                    try:
                        base64.b64decode(value, validate=True)
                    except (binascii.Error, TypeError, ValueError):
                        raise NotModelled("Secret data that is not base64") from None
            if "stringData" in body:
                raise NotModelled("Secret stringData")
        if resource.gvr == _EVENTS:
            _check_event(body)

    def _validate_name(self, resource: SimResource, name: str) -> None:
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            raise StatusError.invalid(
                resource.group,
                resource.kind,
                name,
                field="metadata.name",
                detail=f'Invalid value: "{name}": {_SUBDOMAIN_MESSAGE}',
            )
        if resource.gvr.resource == "namespaces" and ("." in name or len(name) > 63):
            raise NotModelled("a namespace name that is not a DNS label")

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
            if resource.gvr == GroupVersionResource("", "v1", "configmaps") and old.get(
                "immutable"
            ):
                raise NotModelled("changing an immutable ConfigMap")
        meta = new["metadata"]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if "deletionTimestamp" in old_meta:
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            configmaps = GroupVersionResource("", "v1", "configmaps")
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

    # -- reads of many objects ---------------------------------------------------------------

    def _snapshot(self, resource: SimResource, rv: int) -> dict[Key, dict[str, Any]]:
        """The objects of ``resource`` as they were at ``rv`` (410 if compacted)."""
        if rv < self._compacted:
            raise StatusError.expired(f"too old resource version: {rv} ({self._compacted})")
        state = dict(self._store(resource))
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.gvr != resource.gvr:
                continue
            if event.type == "ADDED":
                state.pop(event.key, None)
            else:
                assert event.previous is not None
                state[event.key] = event.previous
        return state

    def list(
        self,
        resource: SimResource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> dict[str, Any]:
        """LIST, with selectors, pages (``limit``/``continue``) and the resourceVersion
        semantics of kube-apiserver (unset: latest; ``0``: any; ``N``: not older than N, or
        exactly N with ``limit`` or ``resourceVersionMatch=Exact``)."""
        label = parse_label_selector(label_selector)
        field = parse_field_selector(field_selector)
        start = ""
        if continue_token:
            if resource_version not in (None, ""):
                raise StatusError.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            rv, start = self._decode_continue(continue_token)
            objects = self._snapshot(resource, rv)
        else:
            rv, objects = self._list_state(
                resource, resource_version, resource_version_match, limit
            )
        items = []
        for key in sorted(objects):
            if namespace is not None and key[0] != namespace:
                continue
            path = f"{key[0]}/{key[1]}" if resource.namespaced else key[1]
            if start and path < start:
                continue
            obj = objects[key]
            if label is not None and not label(obj):
                continue
            if field is not None and not field(obj):
                continue
            items.append((path, obj))
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if resource.custom:
            metadata["continue"] = ""  # an unstructured list always carries the field
        if limit and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            metadata["continue"] = self._encode_continue(rv, items[-1][0] + "\x00")
            if label is None and field is None:
                metadata["remainingItemCount"] = rest
        out = []
        for _, obj in items:
            copied = _copy(obj)
            if not resource.custom:
                copied.pop("apiVersion", None)
                copied.pop("kind", None)
            out.append(copied)
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": out,
        }

    def _list_state(
        self,
        resource: SimResource,
        resource_version: str | None,
        match: str | None,
        limit: int | None,
    ) -> tuple[int, dict[Key, dict[str, Any]]]:
        if match not in (None, "", "Exact", "NotOlderThan"):
            raise NotModelled(f"resourceVersionMatch={match!r}")
        if resource_version in (None, ""):
            if match:
                raise NotModelled("resourceVersionMatch without a resourceVersion")
            return self.resource_version, self._store(resource)
        if not resource_version.isdigit():
            raise NotModelled(f"a resourceVersion that is not a number: {resource_version!r}")
        rv = int(resource_version)
        if rv == 0:
            if match == "Exact" or limit:
                raise NotModelled("a LIST at resourceVersion 0 with a limit or Exact match")
            return self.resource_version, self._store(resource)
        if rv > self.resource_version:
            raise NotModelled("a resourceVersion newer than the simulator's (it would wait)")
        if match == "Exact" or (not match and limit):
            return rv, self._snapshot(resource, rv)
        return self.resource_version, self._store(resource)

    def _encode_continue(self, rv: int, start: str) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def _decode_continue(self, token: str) -> tuple[int, str]:
        try:
            padded = token + "=" * (-len(token) % 4)
            doc = json.loads(base64.urlsafe_b64decode(padded.encode()))
            rv, start = doc["rv"], doc["start"]
            if doc.get("v") != "meta.k8s.io/v1" or not isinstance(rv, int) or rv < 0:
                raise ValueError(token)
            if not isinstance(start, str):
                raise ValueError(token)
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise NotModelled("a continue token the simulator did not issue") from None
        return rv, start

    def watch(
        self,
        resource: SimResource,
        namespace: str | None,
        now: float,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_watch_bookmarks: bool = False,
        send_initial_events: bool | None = None,
        resource_version_match: str | None = None,
    ) -> SimWatch:
        """Open a WATCH; from a compacted resourceVersion it delivers one ERROR 410 Expired
        event and ends, as kube-apiserver does."""
        label = parse_label_selector(label_selector)
        field = parse_field_selector(field_selector)
        timeout = DEFAULT_WATCH_TIMEOUT if timeout_seconds is None else float(timeout_seconds)
        watch = SimWatch(
            resource,
            namespace,
            label,
            field,
            started=now,
            timeout=timeout,
            bookmarks=allow_watch_bookmarks,
        )
        if send_initial_events is not None:
            if resource_version_match != "NotOlderThan" or not allow_watch_bookmarks:
                raise NotModelled("sendInitialEvents without NotOlderThan and bookmarks")
            if resource_version not in (None, "", "0") and (
                not resource_version.isdigit() or int(resource_version) > self.resource_version
            ):
                raise NotModelled(f"a streaming list from resourceVersion {resource_version!r}")
        elif resource_version_match:
            raise NotModelled("resourceVersionMatch on a watch without sendInitialEvents")
        if send_initial_events or (
            send_initial_events is None and resource_version in (None, "", "0")
        ):
            for key in sorted(self._store(resource)):
                obj = self._store(resource)[key]
                if watch.matches(obj):
                    watch.push(WatchLine("ADDED", obj))
            if send_initial_events:
                watch.push(
                    WatchLine(
                        "BOOKMARK",
                        {
                            "kind": resource.kind,
                            "apiVersion": resource.api_version,
                            "metadata": {
                                "resourceVersion": str(self.resource_version),
                                "annotations": {INITIAL_EVENTS_END: "true"},
                            },
                        },
                    )
                )
        elif send_initial_events is None:
            assert resource_version is not None
            if not resource_version.isdigit():
                raise NotModelled(f"a resourceVersion that is not a number: {resource_version!r}")
            rv = int(resource_version)
            if rv > self.resource_version:
                raise NotModelled("a watch from a resourceVersion newer than the simulator's")
            if rv < self._compacted:
                error = StatusError.expired(f"too old resource version: {rv} ({self._compacted})")
                watch.push(WatchLine("ERROR", error.status()))
                watch.closed = True
                return watch
            for event in self._history:
                if event.rv > rv:
                    watch.offer(event)
        self._watches.add(watch)
        return watch

    def forget(self, watch: SimWatch) -> None:
        """Stop feeding ``watch`` (its client closed it)."""
        watch.close()
        self._watches.discard(watch)

    # -- the garbage collector ---------------------------------------------------------------

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


_EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")
_EVENT_SHORT_FIELDS = ("reportingController", "reportingInstance", "action", "reason")


def _check_event(body: dict[str, Any]) -> None:
    """An ``events.k8s.io/v1`` Event as kube-apiserver's validation accepts it (the fields
    an event recorder sets); any other is refused with NotModelled, since the simulator does
    not reproduce the 422 that kube-apiserver would answer."""

    def refuse(why: str) -> NotModelled:
        return NotModelled(f"an Event kube-apiserver's validation would refuse ({why})")

    if not isinstance(body.get("eventTime"), str) or not body["eventTime"]:
        raise refuse("eventTime is required")
    for field in _EVENT_SHORT_FIELDS:
        value = body.get(field)
        if not isinstance(value, str) or not value or len(value) > 128:
            raise refuse(f"{field} must be 1 to 128 characters")
    if body.get("type") not in ("Normal", "Warning"):
        raise refuse("type must be Normal or Warning")
    note = body.get("note", "")
    if not isinstance(note, str) or len(note.encode()) > 1024:
        raise refuse("note must be at most 1 kB")
    for field in ("regarding", "related"):
        if field in body and not isinstance(body[field], dict):
            raise refuse(f"{field} must be an object reference")
    series = body.get("series")
    if series is not None and (
        not isinstance(series, dict)
        or not isinstance(series.get("count"), int)
        or series["count"] < 2
        or not series.get("lastObservedTime")
    ):
        raise refuse("series needs a count of at least 2 and a lastObservedTime")
