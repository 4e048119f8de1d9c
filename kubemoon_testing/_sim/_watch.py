"""One open WATCH of the simulated API server: what it delivers, and when.

Rules: no I/O and no clock. The store offers every write's event to each open watch
(:meth:`SimWatch.offer`), which queues it as that watch sees it (entering or leaving its
selection is an ADDED or DELETED); :meth:`SimWatch.take` hands out what is due at ``now``,
with bookmarks on the watch cache's timing, and ends the watch at its deadline.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubemoon_core import GroupVersionResource

from ._json import Key, _clone, _metadata
from ._kinds import SimResource
from ._raw import dumps
from ._selectors import Selector

__all__ = ["SimWatch", "WatchLine"]

BOOKMARK_INTERVAL = 60.0
DEFAULT_WATCH_TIMEOUT = 1800.0
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


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
