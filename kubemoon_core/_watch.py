"""Decoding a WATCH response body: newline-delimited JSON into :class:`WatchEvent` values.

Rules:

- Chunk boundaries mean nothing: for every byte stream and every way of splitting it, the
  events are the ones decoding it whole gives. Bytes are only decoded once a line is
  complete, so a UTF-8 character split across chunks is never damaged.
- ``\\r\\n`` endings and blank lines are tolerated. A line longer than ``max_line_length``
  is an error as soon as it is known to be too long: the buffer never grows past it.
- A line that is not JSON, not an object with a known ``type`` and an object ``object``, or
  an ``ERROR`` whose object is not a ``Status``, raises :class:`DecodeError` naming the byte
  offset where the line starts; it is never delivered as data. When a call raises, the
  events of that call are discarded (resume from the last delivered resourceVersion).
- ``receive_data(b"")`` ends the stream; a partial line left over is an error.
- Two ways to read, same events: ``receive_data(chunk)`` returns the list of every event the
  chunk completes; the pull side, ``feed(chunk)`` then ``next_event()`` until it returns
  None (or ``for event in events(chunk)``, the same thing), decodes the complete lines one
  window of ``PULL_WINDOW`` bytes (or one longer line) at a time, so a consumer that drops
  each event never holds a large chunk's worth of them. Every event of a chunk is taken
  before the next is fed: feeding (either way) with events pending raises
  ``LocalProtocolError``. Both sides may alternate on one decoder between chunks.
- Errors on the pull side come in stream order: the events of every line before a bad one
  are handed out, then ``next_event()`` raises the error, exactly as if the stream had been
  cut just before the bad line and decoded with ``receive_data``. A line found too long by
  ``feed`` (one inside the chunk, or the unfinished tail) is such a bad line too; only a
  first line (with what was buffered before it) or an unfinished line too long, whose
  predecessors have all been taken, and the end inside an event, raise from ``feed``
  itself. The decoder is failed from the moment it finds the bad line: ``feed`` and
  ``receive_data`` raise "already failed" even while events before it are still to be
  taken, and ``next_event`` raises "already failed" after raising the error once.
- After an error, or after the end, every further call raises: the decoder is single-use.
- Cost is linear in the input: the tail of an unfinished line is appended to one
  ``bytearray`` (amortised O(1) per byte), a chunk is split or decoded to text once (one
  under 64 KiB is first appended to that line in the same way), and JSON is decoded with
  the active backend of ``kubemoon_core._json``, so ``use_fast_json()`` speeds up every
  watch.
- The decoder never touches the garbage collector (process state is not the core's). A
  caller may hand it a pause, ``gc_pause=kubemoon_io.paused_gc`` (any callable returning a
  context manager): a chunk of at least ``GC_PAUSE_MIN`` bytes (1 MiB) given to
  ``receive_data`` is then decoded inside ``gc_pause()``, that one call only; the pull side
  decodes one window at a time and never asks for it. Why: the thousands of fresh
  containers such a chunk creates survive until the call returns its list, so each young
  collection promotes them and the older ones walk them again (measured in
  ``bench/bench_watch.py``: the pause removes about half of the extra per-event cost of
  8 MiB chunks over 16 KiB ones). JSON documents hold no reference cycles, so nothing a
  pause delays could only be freed by the collector. ``gc_pause=True`` (the default before
  the pause left the core) warns with ``DeprecationWarning`` and decodes without one.
- Lines are UTF-8 JSON (RFC 8259). With the standard-library backend the complete lines of
  a chunk are decoded to text in one step (no per-line encoding sniffing: a BOM or UTF-16
  is an error) and each document is read where it stands in that text by the scanner
  ``json.loads`` itself runs, with the backend's settings; a line that is not exactly one
  document followed by blanks goes through ``_json.loads`` alone, so results and errors
  are those of decoding line by line. With the msgspec backend (``use_msgspec_json()``)
  each line's bytes are decoded by msgspec straight into a two-member struct (``type``, a
  string, and ``object``, an object; no other member), one C call per event; a line that
  does not fit goes the generic way below, so what is tolerated, delivered or refused, and
  the error, are the same. Any other backend gets each line's bytes through
  ``_json.loads``.
- ``keep_raw=True`` hands out each event's object also as the exact bytes it was received
  as (``WatchEvent.raw``), for a cache that stores bytes: with msgspec for every line that
  fits the struct (which then keeps the object as ``msgspec.Raw`` and decodes those bytes
  next); with the standard
  library when the line has the apiserver's own shape, ``{"type":"<TYPE>","object":``,
  the object, ``}``, then only blanks (the object is scanned where it stands and its span
  encoded back, which gives the very bytes received as the text was decoded strictly);
  otherwise (and for an ``ERROR`` event there), and with any other backend, ``raw`` is None.
- A line too deep to decode (``ADDED``, ``MODIFIED`` or ``DELETED`` whose object nests at
  least ``_jsonsplit.DEEP`` levels and fails to decode: every backend stops near 1,000 levels,
  the apiserver stores many more) is no error: it becomes a :class:`KeptOutEvent` whose
  object holds only what names it (apiVersion, kind, metadata namespace, name, uid and
  resourceVersion, read without decoding the rest) and whose ``reason`` says why, so the
  reflector moves past it and keeps that one object out of its cache.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from json.scanner import make_scanner
from typing import Any, Literal, cast

from . import _json, _jsonsplit
from ._errors import DecodeError, LocalProtocolError, RemoteProtocolError
from ._status import ApiError, decode_status, error_from_status

__all__ = [
    "DEFAULT_MAX_LINE_LENGTH",
    "GC_PAUSE_MIN",
    "INITIAL_EVENTS_END_ANNOTATION",
    "KeptOutEvent",
    "PULL_WINDOW",
    "WatchDecoder",
    "WatchEvent",
]

DEFAULT_MAX_LINE_LENGTH = 16 * 1024 * 1024
"""The longest watch line a decoder accepts by default."""
GC_PAUSE_MIN = 1024 * 1024
"""Chunks at least this long are decoded inside the decoder's ``gc_pause`` (when given)."""
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"
PULL_WINDOW = 64 * 1024
"""How many bytes of lines :meth:`WatchDecoder.next_event` decodes at a time (at least one
line)."""

# The values of WatchEvent.type (a typing alias, not exported: it is not a runtime object).
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]

# JSON whitespace that may surround an event or fill a blank line.
_BLANK = b" \t\r"
_BLANK_TEXT = " \t\r"
# Event types delivered without further checks; ERROR needs its object decoded as a Status.
_PLAIN_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
# The scanner json.loads itself runs (the C one where there is one), made from the standard
# backend's own decoder so it refuses what that backend refuses (NaN, Infinity, a number
# that overflows a double: RFC 8259): it decodes one document at an index of a longer text
# and says where it ended. Those rules cost nothing per line: the C scanner calls back into
# Python only for a constant (always refused) or a number with a fraction or exponent.
_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(cast("Any", _json.STRICT_DECODER))
# Lines shorter than this are checked for blanks before they are decoded: a stream of
# blank lines costs no decoding attempt (and no exception) per line. Longer ones are
# decoded first (a blank line that long costs one failed decode per this many bytes).
_SHORT = 64
# A chunk completing at least this many bytes of lines is large: it is not copied after
# the start of a line left from before, but scanned in two pieces.
_LARGE = 64 * 1024


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream: its ``type`` and the decoded ``object``.

    For ``ERROR`` events the object is a ``Status`` and :attr:`error` is the matching
    :class:`ApiError` (410 gives ``Gone``/``Expired``). For ``BOOKMARK`` events only
    :attr:`resource_version` and :attr:`initial_events_end` carry meaning.

    ``raw`` is set only by a decoder made with ``keep_raw=True``: the exact bytes of the
    line's ``object`` member as they were received (UTF-8 JSON text of :attr:`object`, not
    re-encoded), or None where the decoder could not take them without parsing the line a
    second time (see the module rules). It takes no part in equality or the repr.
    """

    type: WatchEventType
    object: dict[str, Any]
    raw: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def resource_version(self) -> str | None:
        """``metadata.resourceVersion`` of the object, or None when it has none."""
        metadata = self.object.get("metadata")
        # type() first: isinstance against an ABC is slow, and decoded JSON is made of dicts.
        if type(metadata) is dict or isinstance(metadata, Mapping):
            rv = metadata.get("resourceVersion")
            return rv if isinstance(rv, str) else None
        return None

    @property
    def initial_events_end(self) -> bool:
        """True for the BOOKMARK that ends the initial events of a streaming list."""
        if self.type != "BOOKMARK":
            return False
        metadata = self.object.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        return (
            isinstance(annotations, Mapping)
            and annotations.get(INITIAL_EVENTS_END_ANNOTATION) == "true"
        )

    @property
    def error(self) -> ApiError | None:
        """The decoded :class:`ApiError` of an ``ERROR`` event; None for other types."""
        if self.type != "ERROR":
            return None
        status = decode_status(self.object)
        assert status is not None, "the decoder only delivers ERROR events holding a Status"
        return error_from_status(status)


@dataclass(frozen=True, slots=True)
class KeptOutEvent(WatchEvent):
    """An event whose object could not be decoded (too deeply nested): ``object`` holds only
    what names it (``metadata`` namespace, name, uid, resourceVersion) and ``reason`` says
    why. The reflector keeps that object out of its cache (see the module rules)."""

    reason: str = ""


def _kept_out_event(line: bytes) -> KeptOutEvent | None:
    """The event of a well-formed line whose object is too deep to decode, else None."""
    try:
        spans, end = _jsonsplit.members(line, 0)
        if line[end:].strip(b" \t\r\n") or set(spans) != {"type", "object"}:
            return None
        start, stop = spans["type"]
        kind = _json.loads(line[start:stop])
        start, stop = spans["object"]
        if kind not in ("ADDED", "MODIFIED", "DELETED") or line[start] != 0x7B:
            return None
        depth, _ = _jsonsplit.depth_and_end(line, start)
    except DecodeError:
        return None
    if depth < _jsonsplit.DEEP:
        return None
    return KeptOutEvent(
        kind,
        _jsonsplit.identity(line, start),
        reason=_jsonsplit.too_deep(depth),
    )


def _pause_hook(
    value: Callable[[], AbstractContextManager[object]] | bool | None,
) -> Callable[[], AbstractContextManager[object]] | None:
    """The decoder's ``gc_pause`` argument as a callable, or None for no pause."""
    if value is None or value is False:
        return None
    if value is True:
        warnings.warn(
            "WatchDecoder(gc_pause=True) no longer pauses the garbage collector: the core "
            "never touches it; pass gc_pause=kubemoon_io.paused_gc",
            DeprecationWarning,
            stacklevel=3,
        )
        return None
    if not callable(value):
        raise LocalProtocolError(
            "gc_pause must be a callable returning a context manager "
            f"(kubemoon_io.paused_gc), False or None, not {value!r}"
        )
    return value


class WatchDecoder:
    """Turns the bytes of one WATCH response body into :class:`WatchEvent` values.

    Feed every chunk to :meth:`receive_data` as it arrives and ``b""`` at the end of the
    body. One decoder serves one response. With ``gc_pause`` (a callable returning a context
    manager, such as :func:`kubemoon_io.paused_gc`) a chunk of at least
    :data:`GC_PAUSE_MIN` bytes given to :meth:`receive_data` is decoded inside it, for that
    call only (see the module rules); the decoder itself never touches the collector. With
    ``keep_raw`` every event also carries the exact bytes of its object in
    ``WatchEvent.raw`` (None where they are not at hand without a second parse: see
    the module rules).
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_error",
        "_gc_pause",
        "_keep_raw",
        "_late",
        "_max",
        "_next",
        "_offset",
        "_pieces",
        "_ready",
    )

    def __init__(
        self,
        *,
        max_line_length: int = DEFAULT_MAX_LINE_LENGTH,
        gc_pause: Callable[[], AbstractContextManager[object]] | bool | None = None,
        keep_raw: bool = False,
    ) -> None:
        if isinstance(max_line_length, bool) or not isinstance(max_line_length, int):
            raise LocalProtocolError("max_line_length must be an int")
        if max_line_length < 1:
            raise LocalProtocolError("max_line_length must be positive")
        self._max = max_line_length
        self._gc_pause = _pause_hook(gc_pause)
        self._keep_raw = bool(keep_raw)
        # The start of an unfinished line; never longer than _max.
        self._buffer = bytearray()
        # Bytes received before the current chunk: error messages name stream offsets.
        self._offset = 0
        self._closed = False
        self._error: RemoteProtocolError | None = None
        # The pull API: complete lines fed but not decoded yet, as (bytes, start, stop,
        # stream offset of start); the decoded events of one window, and the next to hand
        # out; and an error that next_event() raises once the events before it are taken.
        self._pieces: list[tuple[bytes | bytearray, int, int, int]] = []
        self._ready: list[WatchEvent] = []
        self._next = 0
        self._late: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """How many bytes of an unfinished line are held."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> list[WatchEvent]:
        """Decode a chunk; return the events of every line it completes.

        ``b""`` marks the end of the stream: it raises :class:`RemoteProtocolError` if an
        unfinished event is left over. When the call raises, none of the chunk's events is
        delivered. Refused while events fed with :meth:`feed` are still to be taken.
        """
        self._check_open()
        if not data:
            self._end()
            return []
        buffer = self._buffer
        limit = self._max
        end = data.rfind(b"\n")
        if end < 0:
            self._extend(data)
            return []
        start = self._offset - len(buffer)
        first = data.find(b"\n")
        if len(buffer) + first > limit:
            raise self._fail(self._too_long(start))
        if len(data) - end - 1 > limit:
            raise self._fail(self._too_long(self._offset + end + 1))
        if len(data) > limit and (bad := self._long_line(data, end)) >= 0:
            raise self._fail(self._too_long(self._offset + bad))
        events: list[WatchEvent] = []
        pause = self._gc_pause
        if pause is not None and len(data) >= GC_PAUSE_MIN:
            with pause():
                self._events(data, first, end, start, events)
        else:
            self._events(data, first, end, start, events)
        self._offset += len(data)
        if end + 1 < len(data):
            self._buffer += data[end + 1 :]
        return events

    def feed(self, data: bytes) -> None:
        """Take a chunk without decoding it; :meth:`next_event` then decodes its events.

        The pull side of the decoder, for a consumer that handles events one at a time:
        only a bounded window of lines (:data:`PULL_WINDOW` bytes, or one longer line) is
        decoded at a time, so the events of a large chunk never exist all at once. ``b""``
        ends the stream, as for :meth:`receive_data`. Take every event of a chunk (until
        :meth:`next_event` returns None) before feeding the next: feeding earlier raises
        :class:`LocalProtocolError`, and so does :meth:`receive_data`. The module rules
        say how errors are delivered.
        """
        self._check_open()
        if not data:
            self._end()
            return
        buffer = self._buffer
        end = data.rfind(b"\n")
        if end < 0:
            self._extend(data)
            return
        offset = self._offset
        start = offset - len(buffer)
        first = data.find(b"\n")
        if len(buffer) + first > self._max:
            raise self._fail(self._too_long(start))
        # A later line too long is raised by next_event() once the lines before it are
        # taken: the stream is decoded up to ``stop`` only.
        stop = end + 1
        late = None
        if len(data) > self._max and (bad := self._long_line(data, end)) >= 0:
            stop = bad
            late = self._too_long(offset + bad)
        elif len(data) - stop > self._max:
            late = self._too_long(offset + stop)
        self._buffer = bytearray()
        pieces = self._pieces
        if not buffer:
            pieces.append((data, 0, stop, start))
        elif stop < _LARGE and _json.json_backend() == "json":
            # One text, one scan for a small chunk (other backends split bytes: the lines
            # of a bytes object are bytes, those of a bytearray cost two allocations each).
            buffer += memoryview(data)[:stop]
            pieces.append((buffer, 0, len(buffer), start))
        else:
            buffer += memoryview(data)[: first + 1]
            pieces.append((buffer, 0, len(buffer), start))
            if stop > first + 1:
                pieces.append((data, first + 1, stop, offset + first + 1))
        self._offset = offset + len(data)
        if late is not None:
            self._error = self._late = late
        elif stop < len(data):
            self._buffer += data[stop:]

    def next_event(self) -> WatchEvent | None:
        """The next event of what :meth:`feed` took, or None when more data is needed (or
        the stream has ended and every event was taken).

        When a line is bad, the events before it are returned first, then this raises the
        error (once; every later call raises "already failed").
        """
        index = self._next
        ready = self._ready
        if index < len(ready):
            self._next = index + 1
            return ready[index]
        return self._refill()

    def events(self, data: bytes) -> Iterator[WatchEvent]:
        """:meth:`feed` ``data`` now; return an iterator of its events (:meth:`next_event`
        until it returns None). An iterator left unfinished leaves its events pending:
        :meth:`next_event` hands them out."""
        self.feed(data)
        return iter(self.next_event, None)

    def _check_open(self) -> None:
        if self._error is not None:
            raise RemoteProtocolError(f"the watch stream already failed: {self._error}")
        if self._closed:
            raise LocalProtocolError("the watch stream already ended")
        if self._pieces or self._next < len(self._ready):
            raise LocalProtocolError(
                "events of the previous chunk are still to be taken: "
                "call next_event() until it returns None"
            )

    def _end(self) -> None:
        self._closed = True
        if self._buffer.strip(_BLANK):
            raise self._fail(
                DecodeError("the stream ended inside an event", offset=self._line_start())
            )

    def _extend(self, data: bytes) -> None:
        """No line ends in ``data``: it only extends the unfinished one."""
        if len(self._buffer) + len(data) > self._max:
            raise self._fail(self._too_long(self._line_start()))
        self._buffer += data
        self._offset += len(data)

    def _refill(self) -> WatchEvent | None:
        """Decode the next window of the pending lines; return its first event."""
        pieces = self._pieces
        while pieces:
            raw, start, stop, offset = pieces[0]
            # The window ends with the first newline at least PULL_WINDOW bytes on, if any.
            cut = (
                stop
                if stop - start <= PULL_WINDOW
                else raw.find(b"\n", start + PULL_WINDOW - 1) + 1
            )
            if cut >= stop:
                del pieces[0]
            else:
                pieces[0] = (raw, cut, stop, offset + cut - start)
            events: list[WatchEvent] = []
            self._ready = events
            try:
                self._window(raw, start, cut, offset, events)
            except RemoteProtocolError as exc:
                # The events before the bad line are handed out first, then the error.
                self._late = exc
            if events:
                self._next = 1
                return events[0]
        self._ready = []
        self._next = 0
        late = self._late
        if late is not None:
            self._late = None
            raise late
        if self._error is not None:
            raise RemoteProtocolError(f"the watch stream already failed: {self._error}")
        return None

    def _window(
        self, raw: bytes | bytearray, start: int, stop: int, offset: int, events: list[WatchEvent]
    ) -> None:
        """Decode the complete lines ``raw[start:stop]`` (at stream offset ``offset``) into
        ``events``; the events before a bad line are there when it raises."""
        backend = _json.json_backend()
        if backend != "json":
            lines: list[Any] = raw[start:stop].split(b"\n")
            lines.pop()  # b"": the window ends with a newline
            if backend == "msgspec":
                self._decode_structs(lines, offset, events)
            else:
                self._decode(lines, offset, events)
            return
        view = memoryview(raw)[start:stop]
        try:
            text = str(view, "utf-8")
        except UnicodeDecodeError as exc:
            # Decode the lines before the bad one, then fail at its start.
            good = bytes(view[: exc.start]).rfind(b"\n") + 1
            self._scan(str(view[:good], "utf-8"), offset, events)
            raise self._fail(
                DecodeError("watch line is not valid UTF-8", offset=offset + good)
            ) from None
        self._scan(text, offset, events)

    def _long_line(self, data: bytes, end: int) -> int:
        """Where the first complete line of ``data`` longer than the limit starts, or -1.

        Only a chunk longer than the limit can hold a whole line over it."""
        line_start = 0
        while line_start <= end:
            newline = data.find(b"\n", line_start)
            if newline - line_start > self._max:
                return line_start
            line_start = newline + 1
        return -1

    def _events(
        self, data: bytes, first: int, end: int, start: int, events: list[WatchEvent]
    ) -> None:
        """The events of the lines that end in ``data``, the first at ``first``, the last at
        ``end``; the first line starts at stream offset ``start``.

        The buffered start of a line is joined to the first line. A small chunk is then
        decoded in one step: for the standard library its lines are decoded to text in one
        C call (a newline never falls inside a UTF-8 sequence, so this equals decoding line
        by line) and scanned in place; any other backend gets each line's bytes. A large
        chunk (``_LARGE`` bytes of lines or more) is decoded one ``PULL_WINDOW`` of lines
        at a time, as the pull side does, so nothing the size of the chunk (its text, or
        its lines as bytes) is built besides the events themselves.
        """
        buffer = self._buffer
        self._buffer = bytearray()
        if end >= _LARGE:
            rest = 0
            if buffer:
                buffer += memoryview(data)[: first + 1]
                self._window(buffer, 0, len(buffer), start, events)
                rest = first + 1
            self._windows(data, rest, end + 1, self._offset + rest, events)
            return
        backend = _json.json_backend()
        if backend != "json":
            lines: list[Any] = data.split(b"\n")
            lines.pop()  # the start of an unfinished line (or b"")
            if buffer:
                buffer += lines[0]
                lines[0] = buffer
            if backend == "msgspec":
                self._decode_structs(lines, start, events)
            else:
                self._decode(lines, start, events)
            return
        view = memoryview(data)
        if buffer:
            # A small chunk is copied whole after the buffered bytes: one text, one scan.
            buffer += view[: end + 1]
            self._scan(self._text(buffer, start, events), start, events)
        else:
            self._scan(self._text(view[: end + 1], start, events), start, events)

    def _windows(
        self, raw: bytes, start: int, stop: int, offset: int, events: list[WatchEvent]
    ) -> None:
        """Decode the complete lines ``raw[start:stop]`` (at stream offset ``offset``) one
        window of ``PULL_WINDOW`` bytes (or one longer line) at a time."""
        while start < stop:
            cut = (
                stop
                if stop - start <= PULL_WINDOW
                else raw.find(b"\n", start + PULL_WINDOW - 1) + 1
            )
            self._window(raw, start, cut, offset, events)
            offset += cut - start
            start = cut

    def _text(self, raw: bytearray | memoryview, offset: int, events: list[WatchEvent]) -> str:
        """Decode complete lines that start at stream offset ``offset`` as UTF-8.

        When a line is not UTF-8, the lines before it are decoded first (into ``events``),
        so an earlier bad line is the one reported, as when decoding line by line."""
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            line_start = bytes(raw[: exc.start]).rfind(b"\n") + 1
            self._scan(str(raw[:line_start], "utf-8"), offset, events)
            raise self._fail(
                DecodeError("watch line is not valid UTF-8", offset=offset + line_start)
            ) from None

    def _decode(
        self,
        lines: list[Any],
        start: int,
        events: list[WatchEvent],
        todo: Iterable[Any] | None = None,
    ) -> None:
        """Decode the lines (bytes), the first of which starts at stream offset ``start``;
        only those of ``todo`` when given (offsets are still counted in ``lines``)."""
        # The hot loop: one decode, two subscripts and four C calls per line.
        loads = _json.loads
        plain = _PLAIN_TYPES
        new, set_type, set_object, set_raw = _NEW_EVENT, _SET_TYPE, _SET_OBJECT, _SET_RAW
        append = events.append
        line: Any = b""
        doc: Any = None
        try:
            for line in lines if todo is None else todo:
                if len(line) < _SHORT and not line.strip(_BLANK):
                    continue  # a blank line (or a lone \r): tolerated, at no decoding cost
                try:
                    doc = loads(line)
                except DecodeError as exc:
                    if not line.strip(_BLANK):
                        continue  # a blank line (or a lone \r): tolerated
                    kept = _kept_out_event(bytes(line))
                    if kept is not None:
                        append(kept)
                        continue
                    raise self._fail(
                        DecodeError(exc.reason, offset=_offset_of(lines, line, start))
                    ) from None
                # The subscripts check the shape for free: a document that is not an
                # object raises TypeError, a missing member KeyError, and an unhashable
                # type TypeError in the set lookup.
                kind = doc["type"]
                obj = doc["object"]
                if type(obj) is dict and (
                    kind in plain or (kind == "ERROR" and decode_status(obj) is not None)
                ):
                    event = new(WatchEvent)
                    set_type(event, kind)
                    set_object(event, obj)
                    set_raw(event, None)
                    append(event)
                    continue
                raise self._fail(_bad_event(doc, _offset_of(lines, line, start)))
        except (KeyError, TypeError):
            raise self._fail(_bad_event(doc, _offset_of(lines, line, start))) from None

    def _decode_structs(self, lines: list[Any], start: int, events: list[WatchEvent]) -> None:
        """The msgspec backend: each line (bytes) becomes its event in one C call.

        msgspec decodes a line of exactly the members ``type`` (a string) and ``object``
        (an object) straight into a small struct (with ``keep_raw``: the object's bytes as
        they stand, then those bytes into a dict). Any other line (a blank one, a malformed
        one, one with other members, an unknown type, an ``ERROR`` without a Status) goes
        through :meth:`_decode` alone, so it is tolerated, accepted or refused exactly as
        with every backend, with the same error and offset.
        """
        line_decode, raw_decode, object_decode = _struct_decoders()
        keep_raw = self._keep_raw
        decode = raw_decode if keep_raw else line_decode
        plain = _PLAIN_TYPES
        new, set_type, set_object, set_raw = _NEW_EVENT, _SET_TYPE, _SET_OBJECT, _SET_RAW
        append = events.append
        for line in lines:
            if len(line) < _SHORT and not line.strip(_BLANK):
                continue  # a blank line (or a lone \r): tolerated, at no decoding cost
            try:
                doc = decode(line)
                raw = doc.object
                obj = object_decode(raw) if keep_raw else raw
            except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
                self._decode(lines, start, events, (line,))
                continue
            kind = doc.type
            if kind in plain or (kind == "ERROR" and decode_status(obj) is not None):
                event = new(WatchEvent)
                set_type(event, kind)
                set_object(event, obj)
                set_raw(event, bytes(raw) if keep_raw else None)
                append(event)
            else:
                self._decode(lines, start, events, (line,))

    def _scan(self, text: str, start: int, events: list[WatchEvent]) -> None:
        """Decode ``text``, lines each ended by a newline, the first at stream offset ``start``.

        Each document is scanned where it stands in the text: no line is copied out, and
        none of the Python layers of ``json.loads`` runs. A line that is not exactly one
        document followed by nothing but blanks (leading blanks, a blank line, anything
        invalid) is decoded alone with ``loads``, so every such case ends exactly as
        decoding line by line does.
        """
        # The hot loop: one find, one scan, two subscripts and four C calls per line. With
        # keep_raw, a line of the apiserver's own shape (``{"type":"<TYPE>","object":``, the
        # object, ``}``) has its object scanned where it stands, so its span is known (the
        # raw bytes) and no envelope dict is built; without keep_raw that path is not taken,
        # as its prefix tests cost more than the envelope (measured in bench_watch).
        scan, find, size = _SCAN, text.find, len(text)
        starts = text.startswith
        keep_raw = self._keep_raw
        plain = _PLAIN_TYPES
        new, set_type, set_object, set_raw = _NEW_EVENT, _SET_TYPE, _SET_OBJECT, _SET_RAW
        append = events.append
        pos = 0
        doc: Any = None
        try:
            while pos < size:
                newline = find("\n", pos)
                if newline - pos < _SHORT and not text[pos:newline].strip(_BLANK_TEXT):
                    pos = newline + 1
                    continue  # a blank line (or a lone \r): tolerated, at no decoding cost
                if keep_raw and starts('{"type":"', pos):
                    quote = find('"', pos + 9, newline)
                    kind = text[pos + 9 : quote]
                    if quote > 0 and kind in plain and starts('","object":{', quote):
                        try:
                            obj, stop = scan(text, quote + 11)
                        except (StopIteration, ValueError, RecursionError):
                            stop = size  # not an object there: the whole line, below
                        if (
                            stop < newline
                            and text[stop] == "}"
                            and (
                                stop + 1 == newline
                                or not text[stop + 1 : newline].strip(_BLANK_TEXT)
                            )
                        ):
                            event = new(WatchEvent)
                            set_type(event, kind)
                            set_object(event, obj)
                            set_raw(event, text[quote + 11 : stop].encode() if keep_raw else None)
                            append(event)
                            pos = newline + 1
                            continue
                try:
                    doc, stop = scan(text, pos)
                except (StopIteration, ValueError, RecursionError):
                    stop = size  # not a document here: decode the line alone
                if stop != newline and (stop > newline or text[stop:newline].strip(_BLANK_TEXT)):
                    line = text[pos:newline]
                    try:
                        doc = _json.loads(line)
                    except DecodeError as exc:
                        if not line.strip(_BLANK_TEXT):
                            pos = newline + 1
                            continue  # a blank line (or a lone \r): tolerated
                        kept = _kept_out_event(line.encode())
                        if kept is not None:
                            append(kept)
                            pos = newline + 1
                            continue
                        raise self._fail(
                            DecodeError(exc.reason, offset=_text_offset(text, pos, start))
                        ) from None
                # The subscripts check the shape for free: a document that is not an
                # object raises TypeError, a missing member KeyError, and an unhashable
                # type TypeError in the set lookup.
                kind = doc["type"]
                obj = doc["object"]
                if type(obj) is dict and (
                    kind in plain or (kind == "ERROR" and decode_status(obj) is not None)
                ):
                    event = new(WatchEvent)
                    set_type(event, kind)
                    set_object(event, obj)
                    set_raw(event, None)
                    append(event)
                    pos = newline + 1
                    continue
                raise self._fail(_bad_event(doc, _text_offset(text, pos, start)))
        except (KeyError, TypeError):
            raise self._fail(_bad_event(doc, _text_offset(text, pos, start))) from None

    def _line_start(self) -> int:
        return self._offset - len(self._buffer)

    def _too_long(self, offset: int) -> DecodeError:
        return DecodeError(f"watch line longer than {self._max} bytes", offset=offset)

    def _fail(self, error: RemoteProtocolError) -> RemoteProtocolError:
        self._error = error
        self._buffer = bytearray()
        self._pieces.clear()
        return error


# Building events through the slot descriptors skips the frozen dataclass __init__ (two
# object.__setattr__ calls through a Python frame): the same object, half the cost.
_NEW_EVENT = object.__new__
_SET_TYPE = WatchEvent.__dict__["type"].__set__
_SET_OBJECT = WatchEvent.__dict__["object"].__set__
_SET_RAW = WatchEvent.__dict__["raw"].__set__


_STRUCT_DECODERS: tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], Any]] | None = (
    None
)


def _struct_decoders() -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], Any]]:
    """msgspec's decoders of a watch line (object decoded, or kept as raw bytes) and of an
    object alone; made on first use (the msgspec backend is only selected when installed)."""
    global _STRUCT_DECODERS
    if _STRUCT_DECODERS is None:
        import msgspec  # noqa: PLC0415 - optional dependency, present when selected

        line = msgspec.defstruct(
            "WatchLine",
            [("type", str), ("object", dict[str, Any])],
            forbid_unknown_fields=True,
            gc=False,
        )
        raw_line = msgspec.defstruct(
            "RawWatchLine",
            [("type", str), ("object", msgspec.Raw)],
            forbid_unknown_fields=True,
            gc=False,
        )
        _STRUCT_DECODERS = (
            msgspec.json.Decoder(line).decode,
            msgspec.json.Decoder(raw_line).decode,
            msgspec.json.Decoder(dict[str, Any]).decode,
        )
    return _STRUCT_DECODERS


def _offset_of(lines: list[Any], line: Any, start: int) -> int:
    """The byte offset where ``line`` starts (computed on the error path only).

    Equal lines decode the same way, so the first line equal to a failing one is the one
    that failed.
    """
    return start + sum(len(previous) + 1 for previous in lines[: lines.index(line)])


def _text_offset(text: str, pos: int, start: int) -> int:
    """The byte offset of ``text[pos]`` (error path only). The text was decoded strictly
    from UTF-8, so it encodes back to exactly the bytes it came from."""
    return start + len(text[:pos].encode())


def _bad_event(doc: Any, offset: int) -> DecodeError:
    """Say what is wrong with a document that is not a watch event."""
    if not isinstance(doc, dict):
        return DecodeError("watch event is not a JSON object", offset=offset)
    if "type" not in doc:
        return DecodeError("watch event has no type", path="type", offset=offset)
    kind = doc["type"]
    if not isinstance(doc.get("object"), dict):
        return DecodeError("watch event has no object", path="object", offset=offset)
    if not isinstance(kind, str):
        return DecodeError("watch event type is not a string", path="type", offset=offset)
    if kind == "ERROR":
        return DecodeError("watch ERROR event without a Status", path="object", offset=offset)
    return DecodeError(f"unknown watch event type {kind!r}", path="type", offset=offset)
