"""The simulated API server's event history, and the reads served from it.

Rules: every write appends one event at the next global resourceVersion and offers it to
the open watches; the history is bounded (``history_limit``) and can be compacted, after
which a LIST, a continue token or a WATCH from before it answers 410 Expired, as after an
etcd compaction. LIST at a past resourceVersion rebuilds that state by undoing the later
events; WATCH replays the events after its resourceVersion, or the current objects as
initial events.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
from typing import TYPE_CHECKING, Any

from kubemoon_core import GroupVersionResource

from ._errors import NotModelled, StatusError
from ._json import Key, _copy
from ._kinds import SimResource
from ._selectors import parse_field_selector, parse_label_selector
from ._watch import DEFAULT_WATCH_TIMEOUT, INITIAL_EVENTS_END, SimWatch, WatchLine, _Event

_TYPE_META = frozenset({"apiVersion", "kind"})


class _History:
    """The event history, LIST and WATCH (a part of :class:`SimApiServer`)."""

    if TYPE_CHECKING:
        resource_version: int
        writes: int
        _history: collections.deque[_Event]
        _history_limit: int
        _compacted: int
        _watches: set[SimWatch]
        _gc_candidates: set[tuple[GroupVersionResource, Key]]

        def _store(self, resource: SimResource) -> dict[Key, dict[str, Any]]: ...

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
        copy: bool = True,
    ) -> dict[str, Any]:
        """LIST, with selectors, pages (``limit``/``continue``) and the resourceVersion
        semantics of kube-apiserver (unset: latest; ``0``: any; ``N``: not older than N, or
        exactly N with ``limit`` or ``resourceVersionMatch=Exact``). Without ``copy`` the
        items share the stored objects' values (for an answer encoded at once, unchanged)."""
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
            if not copy:
                out.append(
                    obj
                    if resource.custom
                    else {k: v for k, v in obj.items() if k not in _TYPE_META}
                )
                continue
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
