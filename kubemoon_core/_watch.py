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

How complete lines become events (the JSON backends, ``keep_raw``, lines too deep to
decode) is ruled in ``kubemoon_core._watch_lines``; the event values are in
``kubemoon_core._watch_events``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from . import _json
from ._errors import DecodeError, LocalProtocolError, RemoteProtocolError
from ._watch_events import WatchEvent
from ._watch_lines import _BLANK, decode_lines, decode_structs, decode_text, scan_text

__all__ = ["DEFAULT_MAX_LINE_LENGTH", "GC_PAUSE_MIN", "PULL_WINDOW", "WatchDecoder"]

DEFAULT_MAX_LINE_LENGTH = 16 * 1024 * 1024
"""The longest watch line a decoder accepts by default."""
GC_PAUSE_MIN = 1024 * 1024
"""Chunks at least this long are decoded inside the decoder's ``gc_pause`` (when given)."""
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"
PULL_WINDOW = 64 * 1024
"""How many bytes of lines :meth:`WatchDecoder.next_event` decodes at a time (at least one
line)."""

# A chunk completing at least this many bytes of lines is large: it is not copied after
# the start of a line left from before, but scanned in two pieces.
_LARGE = 64 * 1024


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
    the rules of ``kubemoon_core._watch_lines``).
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
                decode_structs(lines, offset, events, self._keep_raw, self._fail)
            else:
                decode_lines(lines, offset, events, self._fail)
            return
        view = memoryview(raw)[start:stop]
        try:
            text = str(view, "utf-8")
        except UnicodeDecodeError as exc:
            # Decode the lines before the bad one, then fail at its start.
            good = bytes(view[: exc.start]).rfind(b"\n") + 1
            scan_text(str(view[:good], "utf-8"), offset, events, self._keep_raw, self._fail)
            raise self._fail(
                DecodeError("watch line is not valid UTF-8", offset=offset + good)
            ) from None
        scan_text(text, offset, events, self._keep_raw, self._fail)

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
                decode_structs(lines, start, events, self._keep_raw, self._fail)
            else:
                decode_lines(lines, start, events, self._fail)
            return
        view = memoryview(data)
        keep_raw, fail = self._keep_raw, self._fail
        if buffer:
            # A small chunk is copied whole after the buffered bytes: one text, one scan.
            buffer += view[: end + 1]
            text = decode_text(buffer, start, events, keep_raw, fail)
        else:
            text = decode_text(view[: end + 1], start, events, keep_raw, fail)
        scan_text(text, start, events, keep_raw, fail)

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

    def _line_start(self) -> int:
        return self._offset - len(self._buffer)

    def _too_long(self, offset: int) -> DecodeError:
        return DecodeError(f"watch line longer than {self._max} bytes", offset=offset)

    def _fail(self, error: RemoteProtocolError) -> RemoteProtocolError:
        self._error = error
        self._buffer = bytearray()
        self._pieces.clear()
        return error
