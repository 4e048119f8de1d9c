"""How the reflector decodes one LIST page, and the scanners it needs for the unusual pages.

Rules: ``_decode_page`` turns a complete LIST response body into its items (apiVersion and
kind filled in), the resourceVersion and the continue token, refusing a malformed page
with a :class:`DecodeError` naming the path. Two scanners serve what ``_json.loads``
cannot. ``_raw_page`` returns the document and each item's exact bytes (msgspec's ``Raw``,
or the standard library's scanner walked over the top-level object), or None for anything
unusual, and the page is then decoded the ordinary way, so it is refused or accepted
exactly as without it. ``_split_page`` decodes a page the backend refused whole, member by
member and item by item, keeping out the items too deep to decode (:class:`KeptOut`);
anything else wrong raises the original error. Pure: bytes in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import _json, _jsonsplit
from ._errors import DecodeError
from ._kept_out import KeptOut, _kept_out
from ._watch_lines import _SCAN

__all__: list[str] = []


# A LIST page whose items' exact bytes are wanted (_decode_page with keep_raw):
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


def _decode_page(
    body: bytes, keep_raw: bool = False
) -> tuple[list[dict[str, Any]], list[bytes] | None, str, str, list[KeptOut]]:
    """A LIST page: its items (apiVersion and kind filled in), their raw bytes when
    ``keep_raw`` and the backend has them at hand (else None), the resourceVersion, the
    continue token and the items kept out (too deep to decode). Malformed pages raise
    :class:`DecodeError` naming the path."""
    found = _raw_page(body) if keep_raw else None
    raws: list[bytes] | None = None
    document: Any
    kept: list[KeptOut] = []
    if found is not None:
        document, raws = found
    else:
        try:
            document = _json.loads(body)
        except DecodeError as exc:
            # Too deep somewhere? Then item by item: only those items are kept out.
            document, kept = _split_page(body, exc)
    if not isinstance(document, dict):
        raise DecodeError("LIST response is not a JSON object")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise DecodeError("LIST response has no metadata", path="metadata")
    rv = metadata.get("resourceVersion")
    if not isinstance(rv, str) or not rv:
        raise DecodeError("LIST response has no resourceVersion", path="metadata.resourceVersion")
    token = metadata.get("continue", "")
    if not isinstance(token, str):
        raise DecodeError("continue token is not a string", path="metadata.continue")
    items = document.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise DecodeError("LIST items is not an array", path="items")
    # List items usually omit apiVersion and kind; the store keeps whole objects.
    api_version = document.get("apiVersion")
    kind = document.get("kind")
    item_kind = kind[:-4] if isinstance(kind, str) and kind.endswith("List") else None
    if not isinstance(api_version, str):
        api_version = None
    # The members filled into an item, as the JSON to write before its own (raw only).
    heads: dict[tuple[bool, bool], bytes] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DecodeError("LIST item is not an object", path=f"items[{index}]")
        add_version = api_version is not None and "apiVersion" not in item
        add_kind = bool(item_kind) and "kind" not in item
        if add_version:
            item["apiVersion"] = api_version
        if add_kind:
            item["kind"] = item_kind
        if raws is not None and (add_version or add_kind):
            head = heads.get((add_version, add_kind))
            if head is None:
                members = {"apiVersion": api_version} if add_version else {}
                if add_kind:
                    members["kind"] = item_kind
                head = heads[add_version, add_kind] = _json.dumps(members)[1:-1]
            raws[index] = _prefixed(raws[index], head)
    return items, raws, rv, token, kept
