"""A pure model of the API server's LIST and WATCH of one collection, for reflector tests.

It keeps every version of every object (so the state at any resourceVersion can be
rebuilt), a compaction floor, continue-token snapshots, and the open watch connections
with the bytes they still have to deliver. It answers the reflector's ``Request`` values
the way kube-apiserver does:

- LIST: ``limit``/``continue`` pages of one snapshot; a continue token whose snapshot is
  older than the compaction floor answers 410 Expired. With ``list_rv_expires`` a LIST at a
  resourceVersion older than the floor answers 410 (paginated lists at an exact RV do).
- WATCH from RV X: 200 then every event after X; from below the floor, 200 and one
  ``ERROR`` 410 event, then the end. Bookmarks on demand when ``allowWatchBookmarks``.
- Streaming lists (``sendInitialEvents``): ADDED for every object, then the BOOKMARK
  annotated ``k8s.io/initial-events-end``, then live events; 422 when not supported.

Counters record every 410 and refusal served, so a test can check that each relist of the
reflector had a cause.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubemoon_core import Request, Response

NAMESPACE = "default"
PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"


def status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    """A meta/v1 Status document."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message or reason,
        "reason": reason,
        "code": code,
    }


def status_response(code: int, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A non-2xx response with a Status body."""
    body = json.dumps(status(code, reason)).encode()
    return Response(code, (("Content-Type", "application/json"), *headers), body)


def event_line(kind: str, obj: dict[str, Any]) -> bytes:
    """One watch line, UTF-8 without escaping (so multi-byte characters get split)."""
    return json.dumps({"type": kind, "object": obj}, ensure_ascii=False).encode() + b"\n"


@dataclass
class WatchConn:
    """An open watch or streaming list, and the bytes the server has queued for it."""

    request: Request
    streaming_list: bool
    start_rv: int
    bookmarks: bool
    outgoing: bytearray = field(default_factory=bytearray)
    sent: int = 0  # bytes of ``outgoing`` already delivered
    initial_end: int = 0  # for streams: the offset just after the end bookmark
    ending: bool = False  # the server ends the response once outgoing is delivered

    @property
    def pending(self) -> int:
        """Bytes queued but not delivered."""
        return len(self.outgoing) - self.sent

    @property
    def initial_delivered(self) -> bool:
        """For streams: whether the end bookmark has been delivered completely."""
        return self.sent >= self.initial_end

    def take(self, n: int) -> bytes:
        """Deliver up to ``n`` bytes."""
        chunk = bytes(self.outgoing[self.sent : self.sent + n])
        self.sent += len(chunk)
        return chunk

    def take_lines(self, count: int) -> bytes:
        """Deliver up to ``count`` more complete lines (and finish a partial one first)."""
        end = self.sent
        for _ in range(count + 1):
            newline = self.outgoing.find(b"\n", end)
            if newline < 0:
                break
            end = newline + 1
        if end == self.sent or (count == 0 and self._at_line_start()):
            return b""
        return self.take(end - self.sent)

    def _at_line_start(self) -> bool:
        return self.sent == 0 or self.outgoing[self.sent - 1 : self.sent] == b"\n"


@dataclass
class Counters:
    """What the server did that may legitimately cause a relist."""

    watch_410: int = 0  # ERROR 410 on a watch (after any initial events)
    stream_410: int = 0  # 410 on a streaming list at a resourceVersion
    list_410: int = 0  # 410 on a first LIST page at a resourceVersion
    continue_410: int = 0  # 410 on a continue page
    continue_refused: int = 0  # another 4xx on a continue page
    stream_refused: int = 0  # a streaming list refused (400/403/405/422)
    stream_failed: int = 0  # a streaming list that ended or failed before its end bookmark


class ApiServerModel:
    """One collection of ConfigMaps on a modelled API server."""

    def __init__(
        self,
        *,
        supports_streaming: bool = True,
        list_rv_expires: bool = False,
        first_rv: int = 100,
    ) -> None:
        self.supports_streaming = supports_streaming
        self.list_rv_expires = list_rv_expires
        self.rv = first_rv
        self.objects: dict[str, dict[str, Any]] = {}
        # Every mutation: (resourceVersion, type, object after the mutation).
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.floor = first_rv  # a watch from X needs X >= floor
        self.snapshots: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.watches: list[WatchConn] = []
        self.counters = Counters()

    # -- mutations ---------------------------------------------------------------------------

    def _object(self, name: str, value: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.rv),
            },
            "data": {"value": value},
        }

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, kind, obj))
        line = event_line(kind, obj)
        for conn in self.watches:
            if not conn.ending:
                conn.outgoing += line

    def put(self, name: str, value: str) -> None:
        """Create or update an object."""
        self.rv += 1
        kind = "MODIFIED" if name in self.objects else "ADDED"
        obj = self._object(name, value)
        self.objects[name] = obj
        self._record(kind, obj)

    def delete(self, name: str) -> bool:
        """Delete an object; False if it does not exist."""
        if name not in self.objects:
            return False
        self.rv += 1
        obj = self.objects.pop(name)
        final = json.loads(json.dumps(obj))
        final["metadata"]["resourceVersion"] = str(self.rv)
        self._record("DELETED", final)
        return True

    def compact(self) -> None:
        """Forget the history before now: older watches and continue tokens expire."""
        self.floor = self.rv

    def state_at(self, rv: int) -> dict[str, str]:
        """name -> resourceVersion of every object that existed at ``rv``."""
        state: dict[str, str] = {}
        for event_rv, kind, obj in self.history:
            if event_rv > rv:
                break
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                state.pop(name, None)
            else:
                state[name] = obj["metadata"]["resourceVersion"]
        return state

    def current(self) -> dict[str, str]:
        """name -> resourceVersion of every object now."""
        return {name: o["metadata"]["resourceVersion"] for name, o in self.objects.items()}

    # -- LIST --------------------------------------------------------------------------------

    def handle_list(self, request: Request) -> Response:
        """Answer one LIST page."""
        limit = int(request.query_value("limit") or 0) or 10**9
        token = request.query_value("continue")
        if token is not None:
            snapshot_id, _, offset_text = token.partition(":")
            snap_rv, items = self.snapshots[int(snapshot_id)]
            if snap_rv < self.floor:
                self.counters.continue_410 += 1
                return status_response(410, "Expired")
            offset = int(offset_text)
        else:
            rv_text = request.query_value("resourceVersion")
            if rv_text and self.list_rv_expires and int(rv_text) < self.floor:
                self.counters.list_410 += 1
                return status_response(410, "Expired")
            snap_rv = self.rv
            items = [self._list_item(o) for _, o in sorted(self.objects.items())]
            snapshot_id = str(len(self.snapshots))
            self.snapshots[len(self.snapshots)] = (snap_rv, items)
            offset = 0
        page = items[offset : offset + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(snap_rv)}
        if offset + limit < len(items):
            metadata["continue"] = f"{snapshot_id}:{offset + limit}"
        body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata, "items": page}
        return Response(200, (("Content-Type", "application/json"),), json.dumps(body).encode())

    @staticmethod
    def _list_item(obj: dict[str, Any]) -> dict[str, Any]:
        # Real list items omit apiVersion and kind.
        return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}

    # -- WATCH -------------------------------------------------------------------------------

    def open_watch(self, request: Request) -> tuple[Response | None, WatchConn | None]:
        """Start a watch: (refusal, None) or (None, an open connection)."""
        streaming = request.query_value("sendInitialEvents") == "true"
        bookmarks = request.query_value("allowWatchBookmarks") == "true"
        rv_text = request.query_value("resourceVersion") or ""
        if streaming and not self.supports_streaming:
            self.counters.stream_refused += 1
            return status_response(422, "Invalid"), None
        start = int(rv_text) if rv_text else self.rv
        conn = WatchConn(request, streaming, start, bookmarks)
        if streaming:
            if rv_text and self.list_rv_expires and start < self.floor:
                self.counters.stream_410 += 1
                conn.outgoing += event_line("ERROR", status(410, "Expired"))
                conn.initial_end = len(conn.outgoing)  # cut before it: a failed stream
                conn.ending = True
                self.watches.append(conn)
                return None, conn
            for _, obj in sorted(self.objects.items()):
                conn.outgoing += event_line("ADDED", obj)
            conn.outgoing += self._bookmark(initial_end=True)
            conn.initial_end = len(conn.outgoing)
            conn.start_rv = self.rv
        elif start < self.floor:
            self.counters.watch_410 += 1
            conn.outgoing += event_line("ERROR", status(410, "Expired"))
            conn.ending = True
        else:
            for event_rv, kind, obj in self.history:
                if event_rv > start:
                    conn.outgoing += event_line(kind, obj)
        self.watches.append(conn)
        return None, conn

    def _bookmark(self, *, initial_end: bool = False) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if initial_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return event_line(
            "BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata}
        )

    def bookmark(self, conn: WatchConn) -> None:
        """Queue a bookmark at the current resourceVersion, if the watch asked for them."""
        if conn.bookmarks and not conn.ending:
            conn.outgoing += self._bookmark()

    def expire(self, conn: WatchConn) -> None:
        """Queue an ERROR 410 and end the watch after it (the watch fell behind)."""
        if conn.ending:
            return
        # A stream queues its end bookmark when it opens: this 410 comes after it.
        self.counters.watch_410 += 1
        conn.outgoing += event_line("ERROR", status(410, "Expired"))
        conn.ending = True

    def fail(self, conn: WatchConn, code: int, reason: str) -> None:
        """Queue an ERROR event with another status and end the watch after it."""
        if conn.ending:
            return
        conn.outgoing += event_line("ERROR", status(code, reason))
        conn.ending = True

    def close(self, conn: WatchConn) -> None:
        """The connection is gone (either side closed it)."""
        if conn.streaming_list and not conn.initial_delivered:
            self.counters.stream_failed += 1
        self.watches.remove(conn)
