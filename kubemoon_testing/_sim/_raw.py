"""Objects nested deeper than Python can decode: kept as their JSON text.

Rules: kube-apiserver stores custom resources nested up to 10,000 levels
(``x-kubernetes-preserve-unknown-fields``), while Python's JSON decoder and the model's
recursive copies stop near the recursion limit. :func:`loads` decodes a body as usual; when
that recursion fails, it decodes the document's top-level members one by one (found by the
core's non-recursive scanners) and keeps a member too deep to decode as :class:`RawJSON`,
its exact text: the model stores, compares and serves it without looking inside.
:func:`dumps` writes it back verbatim. A document deeper than kube-apiserver's 10,000
levels, or whose ``metadata`` is too deep, is refused with :class:`NotModelled`.
"""

from __future__ import annotations

import json
from typing import Any

from kubemoon_core._jsonsplit import depth_and_end, members
from kubemoon_core.errors import DecodeError

from ._errors import NotModelled

__all__ = ["MAX_DEPTH", "RawJSON", "dumps", "loads"]

MAX_DEPTH = 10_000
"""kube-apiserver's nesting limit for a request body."""


class RawJSON:
    """A JSON value kept as its text (too deep to decode); equal by text."""

    __slots__ = ("depth", "text")

    def __init__(self, text: bytes, depth: int) -> None:
        self.text = text
        self.depth = depth

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJSON) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"<RawJSON {len(self.text)} bytes, {self.depth} levels>"


def loads(data: bytes) -> Any:
    """Decode a request body; top-level members too deep to decode stay :class:`RawJSON`."""
    try:
        return json.loads(data)
    except RecursionError:
        pass
    try:
        start = len(data) - len(data.lstrip())
        spans, end = members(data, start)
        if data[end:].strip():
            raise NotModelled("a request body that is not JSON")
        document: dict[str, Any] = {}
        for key, (first, last) in spans.items():
            text = data[first:last]
            try:
                document[key] = json.loads(text)
            except RecursionError:
                depth, _ = depth_and_end(data, first)
                if key == "metadata":
                    raise NotModelled("metadata nested too deep to decode") from None
                if depth + 1 > MAX_DEPTH:
                    raise NotModelled(
                        f"an object nested {depth + 1} levels (past kube-apiserver's "
                        f"{MAX_DEPTH}; its answer is not modelled)"
                    ) from None
                document[key] = RawJSON(bytes(text), depth)
    except (DecodeError, ValueError, UnicodeDecodeError):
        raise NotModelled("a request body that is not JSON") from None
    return document


def dumps(document: Any) -> bytes:
    """Compact JSON of ``document``, :class:`RawJSON` values written verbatim."""
    raws: list[bytes] = []

    def keep(value: Any) -> Any:
        if isinstance(value, RawJSON):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(f"not JSON: {type(value).__name__}")

    text = json.dumps(document, separators=(",", ":"), default=keep).encode("utf-8")
    for index, raw in enumerate(raws):
        text = text.replace(f'"\\u0000raw{index}\\u0000"'.encode(), raw, 1)
    return text
