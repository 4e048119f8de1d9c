"""An ``events.k8s.io/v1`` event recorder as a pure machine: occurrences in, bounded writes out.

Rules (client-go's ``tools/events`` semantics, with tighter bounds on writes):

- ``record`` describes one occurrence. The first occurrence of an *isomorphic key*
  (regarding object without its resourceVersion, related object, reason and action; the
  reporting controller is the recorder's own) becomes the create request of a new Event
  named ``<regarding name>.<hex nanoseconds>`` in the regarding object's namespace
  (``default`` for cluster-scoped objects). The note is not part of the key: a series
  keeps its first note, as in client-go.
- A repeat of a key seen within ``series_window`` seconds only counts: the Event's
  ``series`` (count, lastObservedTime) is written at most once per ``flush_interval`` per
  key, by ``flush`` at ``next_deadline()`` (or by ``record`` when one is already due). So
  100 identical warnings within a minute cost one create and one series update.
- A token bucket per regarding object (burst 25, one token per 5 minutes, client-go's
  spam filter) limits the creates; counting repeats is free and never filtered.
- The adapter reports every write's outcome: ``receive_response`` or ``request_failed``.
  A failed create or series update forgets the key, so a later occurrence starts over.
- State is bounded: ``cache_size`` keys and regarding objects, least recently used
  evicted. Nothing here raises for a bad object or argument of ``record``: an event must
  never fail a reconcile, so the plan comes back empty with the reason.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ._errors import LocalProtocolError
from ._request import PatchType, Request, Response, create_request, patch_request
from ._resources import GroupVersionResource

__all__ = ["EVENTS", "EventOutcome", "EventPlan", "EventRecorder", "EventWrite"]

EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")
"""The ``events.k8s.io/v1`` events resource."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)
_MAX_NOTE_BYTES = 1024  # the API server refuses longer notes
_MAX_FIELD = 128  # reason, action, reportingController, reportingInstance
_TYPES = ("Normal", "Warning")
_MAX_NAME = 253


class EventOutcome(enum.Enum):
    """What ``record`` did with an occurrence."""

    CREATED = "created"  # a new Event: the plan holds its create request
    COUNTED = "counted"  # a repeat, added to a series (the plan may hold a due update)
    SPAM = "spam"  # dropped: the regarding object's token bucket is empty
    INVALID = "invalid"  # dropped: a bad object or argument (see ``reason``)


@dataclass(frozen=True, slots=True)
class EventWrite:
    """One write to perform; hand it back to ``receive_response`` or ``request_failed``."""

    request: Request
    write_id: int
    create: bool
    event: str = ""
    """The Event written, ``namespace/name``: a series update belongs to the record that
    started the series (its gate, for a runtime that gates writes)."""


@dataclass(frozen=True, slots=True)
class EventPlan:
    """What ``record`` decided: the writes to perform now, and why."""

    outcome: EventOutcome
    writes: tuple[EventWrite, ...] = ()
    reason: str = ""
    event: str = ""
    """The Event created or counted in (``namespace/name``); empty when dropped."""


_Ref = tuple[tuple[str, str], ...]  # an ObjectReference as sorted items
_Key = tuple[_Ref, _Ref, str, str]  # regarding, related, reason, action


class _State(enum.Enum):
    CREATING = "creating"
    LIVE = "live"


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    state: _State
    count: int
    written: int  # the count the server has
    last_seen: float
    last_observed: datetime
    last_write: float
    in_flight: int | None = None  # write id of a series update on its way


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


def _micro_time(wall: datetime) -> str:
    return wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(name: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise LocalProtocolError(f"{name} must be a non-empty string")
    if len(value) > limit:
        raise LocalProtocolError(f"{name} must have at most {limit} characters")
    return value


def _reference(obj: object, what: str) -> dict[str, str]:
    """The ObjectReference of ``obj``: apiVersion, kind, name, namespace, uid, resourceVersion."""
    if not isinstance(obj, Mapping):
        raise LocalProtocolError(f"the {what} object is not a mapping")
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    ref: dict[str, str] = {}
    for field, value in (
        ("apiVersion", obj.get("apiVersion")),
        ("kind", obj.get("kind")),
        ("name", metadata.get("name")),
    ):
        if not isinstance(value, str) or not value:
            raise LocalProtocolError(f"the {what} object has no {field}")
        ref[field] = value
    for field in ("namespace", "uid", "resourceVersion"):
        value = metadata.get(field)
        if isinstance(value, str) and value:
            ref[field] = value
    return ref


def _key_of(ref: Mapping[str, str] | None) -> _Ref:
    if ref is None:
        return ()
    return tuple(sorted((k, v) for k, v in ref.items() if k != "resourceVersion"))


def _truncate(note: str) -> str:
    data = note.encode("utf-8")
    if len(data) <= _MAX_NOTE_BYTES:
        return note
    return data[:_MAX_NOTE_BYTES].decode("utf-8", "ignore")


class EventRecorder:
    """Turns occurrences into bounded Event writes; see the module rules."""

    __slots__ = (
        "_buckets",
        "_burst",
        "_cache_size",
        "_controller",
        "_dirty",
        "_flush_interval",
        "_ids",
        "_instance",
        "_pending",
        "_refill",
        "_series",
        "_window",
    )

    def __init__(
        self,
        reporting_controller: str,
        reporting_instance: str,
        *,
        series_window: float = 600.0,
        flush_interval: float = 60.0,
        burst: int = 25,
        refill_seconds: float = 300.0,
        cache_size: int = 4096,
    ) -> None:
        self._controller = _text("reporting_controller", reporting_controller, _MAX_FIELD)
        self._instance = _text("reporting_instance", reporting_instance, _MAX_FIELD)
        for name, value in (
            ("series_window", series_window),
            ("flush_interval", flush_interval),
            ("refill_seconds", refill_seconds),
        ):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise LocalProtocolError(f"{name} must be a positive number, got {value!r}")
        for name, count in (("burst", burst), ("cache_size", cache_size)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise LocalProtocolError(f"{name} must be a positive integer, got {count!r}")
        self._window = float(series_window)
        self._flush_interval = float(flush_interval)
        self._burst = burst
        self._refill = float(refill_seconds)
        self._cache_size = cache_size
        self._series: OrderedDict[_Key, _Series] = OrderedDict()  # least recently seen first
        self._dirty: dict[_Key, _Series] = {}  # series with counts the server lacks
        self._buckets: OrderedDict[_Ref, _Bucket] = OrderedDict()
        # write id -> the key, its series when the write was made, the count it carries
        self._pending: dict[int, tuple[_Key, _Series, int]] = {}
        self._ids = itertools.count(1)

    def record(
        self,
        regarding: Mapping[str, Any],
        type: str,
        reason: str,
        note: str,
        *,
        action: str,
        now: float,
        wall: datetime,
        related: Mapping[str, Any] | None = None,
    ) -> EventPlan:
        """Record one occurrence; never raises (a bad input gives an ``INVALID`` plan).

        ``type`` is ``Normal`` or ``Warning``; ``reason`` (what happened, CamelCase) and
        ``action`` (what was done about it) have at most 128 characters; ``note`` is
        truncated to 1 kB. ``wall`` (timezone-aware) stamps the Event; ``now`` (monotonic)
        drives the series and the spam filter.
        """
        try:
            if type not in _TYPES:
                raise LocalProtocolError(f"type must be Normal or Warning, got {type!r}")
            _text("reason", reason, _MAX_FIELD)
            _text("action", action, _MAX_FIELD)
            if not isinstance(note, str):
                raise LocalProtocolError("note must be a string")
            if not isinstance(wall, datetime) or wall.tzinfo is None:
                raise LocalProtocolError("wall must be a timezone-aware datetime")
            if not isinstance(now, int | float) or not math.isfinite(now):
                raise LocalProtocolError("now must be a finite number")
            ref = _reference(regarding, "regarding")
            related_ref = None if related is None else _reference(related, "related")
        except LocalProtocolError as exc:
            return EventPlan(EventOutcome.INVALID, reason=str(exc))
        key: _Key = (_key_of(ref), _key_of(related_ref), reason, action)
        series = self._series.get(key)
        if series is not None and now - series.last_seen <= self._window:
            series.count += 1
            series.last_seen = now
            series.last_observed = wall
            self._series.move_to_end(key)
            self._dirty[key] = series
            due = self._series_write(key, series, now)
            return EventPlan(EventOutcome.COUNTED, due, event=f"{series.namespace}/{series.name}")
        if not self._take_token(key[0], now):
            return EventPlan(EventOutcome.SPAM, reason="too many events for this object")
        return self._create(
            key,
            ref,
            related_ref,
            type=type,
            reason=reason,
            action=action,
            note=_truncate(note),
            now=now,
            wall=wall,
        )

    def next_deadline(self) -> float | None:
        """When ``flush`` has a series update to send, or None."""
        due = [
            s.last_write + self._flush_interval
            for s in self._dirty.values()
            if s.state is _State.LIVE and s.in_flight is None
        ]
        return min(due, default=None)

    def flush(self, now: float) -> tuple[EventWrite, ...]:
        """The series updates due at ``now``; also forgets series that went quiet."""
        writes: list[EventWrite] = []
        for key, series in list(self._dirty.items()):
            writes.extend(self._series_write(key, series, now))
        # Least recently seen first: sweep quiet, fully written series off the front.
        entries = self._series
        while entries:
            key, series = next(iter(entries.items()))
            idle = series.state is _State.LIVE and series.in_flight is None
            if not idle or key in self._dirty or now - series.last_seen <= self._window:
                break
            del entries[key]
        return tuple(writes)

    def receive_response(self, write: EventWrite, response: Response, now: float) -> None:
        """Take the response to ``write``; a non-2xx one counts as a failure."""
        if not response.ok:
            self.request_failed(write, now)
            return
        entry = self._pending.pop(write.write_id, None)
        if entry is None:
            return  # not a write of this recorder, or reported twice
        key, series, count = entry
        if self._series.get(key) is not series:
            return  # evicted or started over meanwhile
        series.state = _State.LIVE
        series.written = max(series.written, count)
        series.last_write = now
        if series.in_flight == write.write_id:
            series.in_flight = None
        if series.written >= series.count:
            self._dirty.pop(key, None)

    def request_failed(self, write: EventWrite, now: float) -> None:
        """``write`` failed (an error response or a transport error): forget its key."""
        entry = self._pending.pop(write.write_id, None)
        if entry is not None and self._series.get(entry[0]) is entry[1]:
            del self._series[entry[0]]
            self._dirty.pop(entry[0], None)

    @property
    def cached_keys(self) -> int:
        """How many isomorphic keys the recorder remembers."""
        return len(self._series)

    def _series_write(self, key: _Key, series: _Series, now: float) -> tuple[EventWrite, ...]:
        if (
            series.state is not _State.LIVE
            or series.in_flight is not None
            or series.count == series.written
            or now < series.last_write + self._flush_interval
        ):
            return ()
        patch = {
            "series": {
                "count": series.count,
                "lastObservedTime": _micro_time(series.last_observed),
            }
        }
        request = patch_request(
            EVENTS, series.name, patch, patch_type=PatchType.MERGE, namespace=series.namespace
        )
        write = EventWrite(
            request, next(self._ids), create=False, event=f"{series.namespace}/{series.name}"
        )
        self._pending[write.write_id] = (key, series, series.count)
        series.in_flight = write.write_id
        return (write,)

    def _create(
        self,
        key: _Key,
        ref: dict[str, str],
        related: dict[str, str] | None,
        *,
        type: str,
        reason: str,
        action: str,
        note: str,
        now: float,
        wall: datetime,
    ) -> EventPlan:
        write_id = next(self._ids)
        micros = (wall - _EPOCH) // _ONE_MICROSECOND
        # Nanoseconds as client-go names them, the sub-microsecond digits made unique per write.
        name = f"{ref['name']}.{micros * 1000 + write_id % 1000:x}"
        namespace = ref.get("namespace", "default")
        event: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(wall),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "regarding": ref,
            "note": note,
            "type": type,
        }
        if related is not None:
            event["related"] = related
        try:
            if len(name) > _MAX_NAME:
                raise LocalProtocolError(f"the event name would exceed {_MAX_NAME} characters")
            request = create_request(EVENTS, event)
        except LocalProtocolError as exc:  # e.g. a namespace that is no DNS label
            return EventPlan(EventOutcome.INVALID, reason=str(exc))
        write = EventWrite(request, write_id, create=True, event=f"{namespace}/{name}")
        series = _Series(name, namespace, _State.CREATING, 1, 0, now, wall, now)
        self._pending[write_id] = (key, series, 1)
        self._series.pop(key, None)
        self._dirty.pop(key, None)
        self._series[key] = series
        if len(self._series) > self._cache_size:
            evicted, _ = self._series.popitem(last=False)
            self._dirty.pop(evicted, None)
        return EventPlan(EventOutcome.CREATED, (write,), event=write.event)

    def _take_token(self, regarding: _Ref, now: float) -> bool:
        buckets = self._buckets
        bucket = buckets.get(regarding)
        if bucket is None:
            bucket = buckets[regarding] = _Bucket(float(self._burst), now)
            if len(buckets) > self._cache_size:
                buckets.popitem(last=False)
        else:
            buckets.move_to_end(regarding)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(self._burst), bucket.tokens + elapsed / self._refill)
            bucket.updated = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True
