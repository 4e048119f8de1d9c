"""How a compact store keeps an object: one bytes blob (the resourceVersion, then the
object's JSON), and the codec that writes and reads it (the fastest one installed).

Rules: every codec writes RFC 8259 JSON, so a NaN or an infinite float is refused, as the
core's JSON rules say; the blob layout is below. Pure; used by :class:`kubemoon_core._store.Store`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from ._json import _STD_ENCODER, STRICT_DECODER, _non_finite

__all__: list[str] = []

# The stored key: (namespace, name), as in kubemoon_core._store.
_Key = tuple[str, str]
# A compact store's entry: (blob, the stored key). The blob is one bytes object: a length
# byte n, the resourceVersion's n UTF-8 bytes, then the JSON document (n = 255: no string
# resourceVersion of at most 254 bytes, none kept). One object instead of a str, a bytes
# and a longer tuple saves 56 B per object. The key is kept so that an epoch marks an
# unchanged object with the stored key tuple and holds no new one.
_Entry = tuple[bytes, _Key]
_NO_RV = 255


def _pack(rv: Any, document: bytes) -> bytes:
    """The blob of a document whose resourceVersion is ``rv`` (always a fresh exact copy)."""
    if type(rv) is str:
        # No lone surrogate here: the document holding it could not be encoded or checked.
        encoded = rv.encode()
        if len(encoded) < _NO_RV:
            return b"".join((bytes((len(encoded),)), encoded, document))
    return b"".join((b"\xff", document))


def _blob_rv(blob: bytes) -> str | None:
    size = blob[0]
    return None if size == _NO_RV else blob[1 : 1 + size].decode()


def _blob_start(blob: bytes) -> int:
    size = blob[0]
    return 1 if size == _NO_RV else 1 + size


# -- reading a deep object from any stack -------------------------------------------------
# Every decoder counts its nesting against the interpreter's recursion limit, from the
# caller's stack depth: an object a watch decoded from a shallow stack (any depth below the
# limit is stored) could not be read again from a reader's deeper one, where a plain store
# hands out the dict it holds. A decode that hits the limit is retried once with the limit
# doubled: a stored object nests at most the limit's levels and the reader's stack is below
# it, so the retry fits. The limit is restored by the last retry to finish. The core takes
# no lock (it is sans-IO): the two lists change by single appends and pops, atomic in
# CPython, so threads retrying at once share one raised limit; the worst a race between a
# retry ending and another starting does is fail that other one as before the fix.

_retrying: list[None] = []  # one item per retry running
_saved_limit: list[int] = []  # the limit before the retries running (first item)


def _deep_retry(decode: Callable[[Any], Any], data: Any) -> Any:
    """``decode(data)`` with the recursion limit doubled (after a RecursionError)."""
    _retrying.append(None)
    if not _saved_limit:
        _saved_limit.append(sys.getrecursionlimit())
    doubled = 2 * _saved_limit[0]
    if sys.getrecursionlimit() < doubled:
        sys.setrecursionlimit(doubled)
    try:
        return decode(data)
    finally:
        _retrying.pop()
        if not _retrying and _saved_limit:
            limit = _saved_limit[0]
            _saved_limit.clear()
            sys.setrecursionlimit(limit)


def _any_stack(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``decode`` that reads a deep document from a deep stack (see above)."""

    def decode_anywhere(data: Any) -> Any:
        try:
            return decode(data)
        except RecursionError:
            return _deep_retry(decode, data)

    return decode_anywhere


# -- the codec of compact stores ----------------------------------------------------------
# Encoding: orjson (0.9 us for a 900-byte ConfigMap here, with the copy below), else
# msgspec (1.2 us), else the standard library (5.4 us). Decoding: msgspec (1.3 us), else the
# standard library's strict decoder (4 us); never orjson, which reads an integer beyond 64
# bits as a float. Every backend writes RFC 8259 JSON; a NaN or an infinite float is refused
# as the core's JSON rules say.


class _Codec:
    """``encode`` (a value's JSON, maybe in an oversized buffer: the store copies it),
    ``decode`` (a JSON document) and ``load`` (the document of a blob)."""

    __slots__ = ("decode", "encode", "load", "name")

    def __init__(
        self,
        name: str,
        encode: Callable[[Any], bytes],
        decode: Callable[[bytes], Any],
        load: Callable[[bytes], Any],
    ) -> None:
        self.name = name
        self.encode = encode
        self.decode = decode
        self.load = load


# The core's strict stdlib codec (RFC 8259 numbers), shared with _json.
_STD_ENCODE = _STD_ENCODER.encode
_std_decode = STRICT_DECODER.decode


_SORTED_ENCODE = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
).encode


def _sorted_json(value: Any) -> str:
    return _SORTED_ENCODE(value)


def _std_dumps(value: Any) -> bytes:
    return _STD_ENCODE(value).encode()


def _std_text(data: bytes) -> Any:
    return _std_decode(data.decode())  # UTF-8 only (strict), as the stored bytes are


_std_loads = _any_stack(_std_text)


def _std_load(blob: bytes) -> Any:
    return _std_loads(blob[_blob_start(blob) :])


def _checked_nan(encode: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def dumps(value: Any) -> bytes:
        data = encode(value)
        # orjson and msgspec write a NaN or an infinity as null; only then can one hide.
        if b"null" in data and _non_finite(value):
            raise ValueError("NaN and infinite floats are not JSON numbers (RFC 8259)")
        return data

    return dumps


def _standard_codec() -> _Codec:
    """The standard library's codec (what a compact store uses with no extra installed)."""
    return _Codec("json", _any_stack(_std_dumps), _std_loads, _std_load)


def _fast_codec() -> _Codec:
    """The fastest codec installed (see the comment above)."""
    codec = _standard_codec()
    encode, decode, load, names = codec.encode, codec.decode, codec.load, ["json", "json"]
    try:
        import msgspec  # noqa: PLC0415 - optional dependency

        encode = _checked_nan(msgspec.json.Encoder().encode)
        msgspec_decode = msgspec.json.Decoder().decode
        decode = _any_stack(msgspec_decode)

        def load(blob: bytes) -> Any:
            view = memoryview(blob)[_blob_start(blob) :]  # no copy
            try:
                return msgspec_decode(view)
            except RecursionError:
                return _deep_retry(msgspec_decode, view)

        names = ["msgspec", "msgspec"]
    except ImportError:  # pragma: no cover - the dev environment has msgspec
        pass
    try:
        import orjson  # noqa: PLC0415 - optional dependency

        orjson_dumps = orjson.dumps
        fallback = encode

        def orjson_encode(value: Any) -> bytes:
            try:
                data = orjson_dumps(value)
            except TypeError as exc:
                message = str(exc)
                if "64-bit" not in message and "Recursion" not in message:
                    raise  # a non-str key, a foreign type: the others would bend them
                # An integer beyond 64 bits or more than 255 levels (which the core's
                # decoders read): the other encoders write them exactly.
                return fallback(value)
            if b"null" in data and _non_finite(value):  # orjson writes NaN as null
                raise ValueError("NaN and infinite floats are not JSON numbers (RFC 8259)")
            # orjson's bytes keep a 4 KiB buffer for a 900-byte ConfigMap (tracemalloc):
            # the store's blob is an exact copy.
            return data

        encode = orjson_encode
        names[0] = "orjson"
    except ImportError:  # pragma: no cover - the dev environment has orjson
        pass
    return _Codec("+".join(dict.fromkeys(names)), _any_stack(encode), decode, load)
