"""The reflector's LIST-page scanners: a page's items with their exact bytes, or split apart.

Rules: these are ways to decode one complete LIST response body that the ordinary
``_json.loads`` cannot serve. ``_raw_page`` returns the document and each item's exact
bytes (msgspec's ``Raw``, or the standard library's scanner walked over the top-level
object), or None for anything unusual, and the caller then decodes the page the ordinary
way, so it is refused or accepted exactly as without it. ``_split_page`` decodes a page
the backend refused whole member by member and item by item, keeping out the items too
deep to decode (:class:`KeptOut`); anything else wrong raises the original error. Pure:
bytes in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import _json, _jsonsplit
from ._errors import DecodeError
from ._kept_out import KeptOut, _kept_out
from ._watch import _SCAN

__all__: list[str] = []


# A LIST page whose items' exact bytes are wanted (Reflector._page with keep_raw):
# msgspec keeps each item as msgspec.Raw; the standard library's scanner is walked over the
# page's top-level object. Anything unusual (another backend, a member the page struct does
# not know, text that is not strict UTF-8, malformed JSON) gives None, and the page is then
# decoded the ordinary way, which refuses or accepts it exactly as without keep_raw.
_JSON_BLANK = re.compile(r"[ \t\n\r]*")
_RAW_PAGE: Callable[[bytes], Any] | None = None


def _raw_page(body: bytes) -> tuple[dict[str, Any], list[bytes]] | None:
    """The page document and its items' exact bytes, or None (see above)."""
    backend = _json.json_backend()
    try:
        if backend == "msgspec":
            return _msgspec_page(body)
        if backend == "json":
            return _scanned_page(str(body, "utf-8"))
    except (ValueError, RecursionError, StopIteration, IndexError):
        pass  # UnicodeDecodeError and msgspec's errors are ValueErrors
    return None


def _msgspec_page(body: bytes) -> tuple[dict[str, Any], list[bytes]] | None:
    global _RAW_PAGE
    import msgspec  # noqa: PLC0415 - optional dependency, present when selected

    if _RAW_PAGE is None:
        page = msgspec.defstruct(
            "RawListPage",
            [
                ("apiVersion", Any, None),
                ("kind", Any, None),
                ("metadata", Any, None),
                ("items", list[msgspec.Raw] | None, None),
            ],
            forbid_unknown_fields=True,
            gc=False,
        )
        _RAW_PAGE = msgspec.json.Decoder(page).decode
    decoded: Any = _RAW_PAGE(body)
    if decoded.items is None:
        return None
    decode = msgspec.json.Decoder(dict[str, Any]).decode
    items = [decode(raw) for raw in decoded.items]
    document = {
        "apiVersion": decoded.apiVersion,
        "kind": decoded.kind,
        "metadata": decoded.metadata,
        "items": items,
    }
    return document, [bytes(raw) for raw in decoded.items]


def _skip_blank(text: str, pos: int) -> int:
    """Where the JSON blanks at ``pos`` end."""
    match = _JSON_BLANK.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _scanned_page(text: str) -> tuple[dict[str, Any], list[bytes]] | None:
    """Walk the page's top-level object with the standard scanner, noting each item's span."""
    scan, blank = _SCAN, _skip_blank
    document: dict[str, Any] = {}
    spans: list[tuple[int, int]] = []
    pos = blank(text, 0)
    if text[pos] != "{":
        return None
    pos = blank(text, pos + 1)
    if text[pos] == "}":
        return None  # no items: nothing to keep
    while True:
        if text[pos] != '"':
            return None
        key, pos = scan(text, pos)
        pos = blank(text, pos)
        if text[pos] != ":":
            return None
        pos = blank(text, pos + 1)
        if key == "items" and text[pos] == "[":
            items: list[Any] = []
            spans = []
            pos = blank(text, pos + 1)
            if text[pos] != "]":
                while True:
                    item, stop = scan(text, pos)
                    items.append(item)
                    spans.append((pos, stop))
                    pos = blank(text, stop)
                    if text[pos] == "]":
                        break
                    if text[pos] != ",":
                        return None
                    pos = blank(text, pos + 1)
            value: Any = items
            pos += 1
        else:
            value, pos = scan(text, pos)
        document[key] = value
        pos = blank(text, pos)
        if text[pos] == "}":
            break
        if text[pos] != ",":
            return None
        pos = blank(text, pos + 1)
    if pos + 1 != len(text) and text[pos + 1 :].strip(" \t\n\r"):
        return None
    if not isinstance(document.get("items"), list):
        return None
    # Strict UTF-8 text encodes back to exactly the bytes it was decoded from.
    return document, [text[start:stop].encode() for start, stop in spans]


def _prefixed(raw: bytes, head: bytes) -> bytes:
    """An item's bytes with the members the page filled in (``head``) written first."""
    rest = raw[1:]
    if rest[:1] == b"}" or rest.lstrip(b" \t\n\r")[:1] == b"}":
        return b"{" + head + rest  # an empty object: no comma
    return b"{" + head + b"," + rest


def _split_page(body: bytes, error: DecodeError) -> tuple[dict[str, Any], list[KeptOut]]:
    """A page the backend could not decode whole, decoded member by member and item by
    item: the items too deep to decode are kept out (what names each is read without
    decoding it). Anything else wrong raises ``error`` (or the item's own error)."""
    try:
        spans, end = _jsonsplit.members(body, 0)
        if body[end:].strip(b" \t\n\r"):
            raise error
        document: dict[str, Any] = {}
        kept: list[KeptOut] = []
        for name, (start, stop) in spans.items():
            if name != "items" or body[start] != 0x5B:
                document[name] = _json.loads(body[start:stop], offset=start)
                continue
            items: list[Any] = []
            places, _ = _jsonsplit.elements(body, start)
            for index, (first, last) in enumerate(places):
                try:
                    items.append(_json.loads(body[first:last], offset=first))
                except DecodeError as exc:
                    depth, _ = _jsonsplit.depth_and_end(body, first)
                    if depth < _jsonsplit.DEEP or body[first] != 0x7B:
                        raise DecodeError(
                            exc.reason, path=f"items[{index}]", offset=first
                        ) from None
                    kept.append(
                        _kept_out(_jsonsplit.identity(body, first), _jsonsplit.too_deep(depth))
                    )
            document["items"] = items
    except DecodeError as exc:
        if exc.path.startswith("items["):
            raise
        raise error from None
    return document, kept
