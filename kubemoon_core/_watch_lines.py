"""Decoding complete watch lines into :class:`WatchEvent` values: the hot loops behind
:class:`~kubemoon_core._watch.WatchDecoder`, one per JSON backend.

The decoder (``kubemoon_core._watch``) cuts the stream into complete lines and hands them
here with the stream offset of the first; a function appends the events of those lines to
``events`` and, for a bad line, raises ``fail(error)`` (the decoder's own, which marks it
failed) once the events of the lines before it are appended. Rules:

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

from collections.abc import Callable, Iterable
from json.scanner import make_scanner
from typing import Any, cast

from . import _json, _jsonsplit
from ._errors import DecodeError, RemoteProtocolError
from ._status import decode_status
from ._watch_events import KeptOutEvent, WatchEvent

__all__: list[str] = []

# What the decoder hands in to fail with: it records the error and returns it, to be raised.
Fail = Callable[[RemoteProtocolError], RemoteProtocolError]

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


def decode_text(
    raw: bytearray | memoryview,
    offset: int,
    events: list[WatchEvent],
    keep_raw: bool,
    fail: Fail,
) -> str:
    """Decode complete lines that start at stream offset ``offset`` as UTF-8.

    When a line is not UTF-8, the lines before it are decoded first (into ``events``),
    so an earlier bad line is the one reported, as when decoding line by line."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        line_start = bytes(raw[: exc.start]).rfind(b"\n") + 1
        scan_text(str(raw[:line_start], "utf-8"), offset, events, keep_raw, fail)
        raise fail(
            DecodeError("watch line is not valid UTF-8", offset=offset + line_start)
        ) from None


def decode_lines(
    lines: list[Any],
    start: int,
    events: list[WatchEvent],
    fail: Fail,
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
                raise fail(DecodeError(exc.reason, offset=_offset_of(lines, line, start))) from None
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
            raise fail(_bad_event(doc, _offset_of(lines, line, start)))
    except (KeyError, TypeError):
        raise fail(_bad_event(doc, _offset_of(lines, line, start))) from None


def decode_structs(
    lines: list[Any], start: int, events: list[WatchEvent], keep_raw: bool, fail: Fail
) -> None:
    """The msgspec backend: each line (bytes) becomes its event in one C call.

    msgspec decodes a line of exactly the members ``type`` (a string) and ``object``
    (an object) straight into a small struct (with ``keep_raw``: the object's bytes as
    they stand, then those bytes into a dict). Any other line (a blank one, a malformed
    one, one with other members, an unknown type, an ``ERROR`` without a Status) goes
    through :func:`decode_lines` alone, so it is tolerated, accepted or refused exactly as
    with every backend, with the same error and offset.
    """
    line_decode, raw_decode, object_decode = _struct_decoders()
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
            decode_lines(lines, start, events, fail, (line,))
            continue
        kind = doc.type
        if kind in plain or (kind == "ERROR" and decode_status(obj) is not None):
            event = new(WatchEvent)
            set_type(event, kind)
            set_object(event, obj)
            set_raw(event, bytes(raw) if keep_raw else None)
            append(event)
        else:
            decode_lines(lines, start, events, fail, (line,))


def scan_text(text: str, start: int, events: list[WatchEvent], keep_raw: bool, fail: Fail) -> None:
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
                        and (stop + 1 == newline or not text[stop + 1 : newline].strip(_BLANK_TEXT))
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
                    raise fail(
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
            raise fail(_bad_event(doc, _text_offset(text, pos, start)))
    except (KeyError, TypeError):
        raise fail(_bad_event(doc, _text_offset(text, pos, start))) from None


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
