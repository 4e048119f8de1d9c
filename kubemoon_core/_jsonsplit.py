"""Finding JSON values' boundaries without decoding them: for documents too deep to decode.

Rules: every JSON backend stops near 1,000 levels of nesting (the standard library and
msgspec) or at 1,024 (orjson), while the apiserver stores custom resources nested 9,000
levels and more (``x-kubernetes-preserve-unknown-fields``). When a LIST page or a watch line
does not decode, these scanners split it into its parts (the page's members and items, the
line's ``type`` and ``object``) without recursion, and read the few shallow members of an
object that name it (``metadata.namespace``, ``name``, ``uid``, ``resourceVersion``), so one
object that cannot be decoded is kept out and the others are not.

The scanners check structure only (brackets balanced, strings closed, members separated);
the parts they find are then decoded by the active backend, which checks everything else.
Cost is linear: strings and runs of scalars are skipped by one regular-expression match
each; a nesting level costs one loop step. Any malformed structure raises
:class:`DecodeError`. Offsets are byte offsets into the UTF-8 ``data``.
"""

from __future__ import annotations

import re
from typing import Any

from . import _json
from ._errors import DecodeError

# For the core's own modules (the reflector and the watch decoder).
__all__ = ["DEEP"]

DEEP = 256
"""A value that fails to decode and nests at least this deep is too deep to decode (kept out);
a shallower one that fails is malformed (the whole document is refused as before)."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^\"\[\]{},:\s]+")
_INSIDE = re.compile(rb"[^\"\[\]{}]+")
_BLANK = re.compile(rb"[ \t\n\r]*")
_OPEN = {0x7B: 0x7D, 0x5B: 0x5D}  # { } and [ ]


def _blank(data: bytes, pos: int) -> int:
    match = _BLANK.match(data, pos)
    assert match is not None  # matches the empty string
    return match.end()


def depth_and_end(data: bytes, pos: int) -> tuple[int, int]:
    """The nesting depth of the value at ``data[pos]`` and where it ends (exclusive)."""
    pos = _blank(data, pos)
    if pos >= len(data):
        raise DecodeError("a JSON value was expected", offset=pos)
    first = data[pos]
    if first == 0x22:
        match = _STRING.match(data, pos)
        if match is None:
            raise DecodeError("unterminated string", offset=pos)
        return 0, match.end()
    if first not in _OPEN:
        match = _SCALAR.match(data, pos)
        if match is None:
            raise DecodeError("a JSON value was expected", offset=pos)
        return 0, match.end()
    closers: list[int] = []
    deepest = 0
    size = len(data)
    while pos < size:
        byte = data[pos]
        if byte == 0x22:
            match = _STRING.match(data, pos)
            if match is None:
                raise DecodeError("unterminated string", offset=pos)
            pos = match.end()
        elif byte in _OPEN:
            closers.append(_OPEN[byte])
            deepest = max(deepest, len(closers))
            pos += 1
        elif byte in (0x7D, 0x5D):
            if not closers or closers.pop() != byte:
                raise DecodeError("unbalanced brackets", offset=pos)
            pos += 1
            if not closers:
                return deepest, pos
        else:
            match = _INSIDE.match(data, pos)
            assert match is not None  # byte itself matches
            pos = match.end()
    raise DecodeError("unterminated JSON value", offset=pos)


def _key(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data) or data[pos] != 0x22:
        raise DecodeError("an object key was expected", offset=pos)
    _, end = depth_and_end(data, pos)
    key = _json.loads(data[pos:end], offset=pos)
    if not isinstance(key, str):  # pragma: no cover - a JSON string decodes to a str
        raise DecodeError("an object key was expected", offset=pos)
    return key, end


def members(data: bytes, pos: int) -> tuple[dict[str, tuple[int, int]], int]:
    """The members of the object at ``data[pos]`` as ``{key: (start, stop)}`` of each
    value's bytes, and where the object ends. A repeated key keeps its last value."""
    pos = _blank(data, pos)
    if pos >= len(data) or data[pos] != 0x7B:
        raise DecodeError("a JSON object was expected", offset=pos)
    found: dict[str, tuple[int, int]] = {}
    pos = _blank(data, pos + 1)
    if pos < len(data) and data[pos] == 0x7D:
        return found, pos + 1
    while True:
        key, pos = _key(data, pos)
        pos = _blank(data, pos)
        if pos >= len(data) or data[pos] != 0x3A:
            raise DecodeError("':' was expected", offset=pos)
        start = _blank(data, pos + 1)
        _, pos = depth_and_end(data, start)
        found[key] = (start, pos)
        pos = _blank(data, pos)
        if pos < len(data) and data[pos] == 0x7D:
            return found, pos + 1
        if pos >= len(data) or data[pos] != 0x2C:
            raise DecodeError("',' or '}' was expected", offset=pos)
        pos = _blank(data, pos + 1)


def elements(data: bytes, pos: int) -> tuple[list[tuple[int, int]], int]:
    """The ``(start, stop)`` of each element of the array at ``data[pos]``, and its end."""
    pos = _blank(data, pos)
    if pos >= len(data) or data[pos] != 0x5B:
        raise DecodeError("a JSON array was expected", offset=pos)
    found: list[tuple[int, int]] = []
    pos = _blank(data, pos + 1)
    if pos < len(data) and data[pos] == 0x5D:
        return found, pos + 1
    while True:
        start = pos
        _, pos = depth_and_end(data, start)
        found.append((start, pos))
        pos = _blank(data, pos)
        if pos < len(data) and data[pos] == 0x5D:
            return found, pos + 1
        if pos >= len(data) or data[pos] != 0x2C:
            raise DecodeError("',' or ']' was expected", offset=pos)
        pos = _blank(data, pos + 1)


def identity(data: bytes, start: int) -> dict[str, Any]:
    """What names the object at ``data[start]`` without decoding it: its ``apiVersion``
    and ``kind`` and, in ``metadata``, ``namespace``, ``name``, ``uid`` and
    ``resourceVersion``, each only where it is a string. Unreadable parts are left out."""
    found: dict[str, Any] = {}
    try:
        spans, _ = members(data, start)
    except DecodeError:
        return found
    for name in ("apiVersion", "kind"):
        value = _string(data, spans.get(name))
        if value is not None:
            found[name] = value
    metadata: dict[str, str] = {}
    where = spans.get("metadata")
    if where is not None:
        try:
            inner, _ = members(data, where[0])
        except DecodeError:
            inner = {}
        for name in ("namespace", "name", "uid", "resourceVersion"):
            value = _string(data, inner.get(name))
            if value is not None:
                metadata[name] = value
    found["metadata"] = metadata
    return found


def _string(data: bytes, span: tuple[int, int] | None) -> str | None:
    if span is None or data[span[0]] != 0x22:
        return None
    try:
        value = _json.loads(data[span[0] : span[1]])
    except DecodeError:
        return None
    return value if isinstance(value, str) else None


def too_deep(depth: int) -> str:
    """The reason an object nested ``depth`` levels is kept out."""
    return (
        f"nested {depth} levels deep, more than the {_json.json_backend()} JSON backend "
        "decodes (about 1,000)"
    )
