"""One replaceable JSON backend for everything the core decodes and encodes.

The standard library is the default; ``use_fast_json()`` switches to orjson when it is
installed (``pip install kubemoon[fast]``), ``use_msgspec_json()`` to msgspec
(``pip install kubemoon[msgspec]``), whose decoder the watch decoder also runs on each line
in one C call. Decoding errors become ``DecodeError``, encoding errors
``LocalProtocolError``.

Every backend speaks RFC 8259 and nothing more: ``NaN``, ``Infinity``, ``-Infinity`` and a
number too large for a double (``1e999999``) are refused when decoding, and a NaN or an
infinite float is refused when encoding (orjson and msgspec would write it as ``null``).
Too deep a nesting is an error of the same kinds, never a ``RecursionError``.

No backend changes a value: what a backend decodes is exactly what the standard library
decodes (same types, same values), and an integer of any size is written exactly. orjson
reads an integer beyond 64 bits as a float (the apiserver serves a tenant's ``1e20`` as the
literal ``100000000000000000000``), so a document holding a run of 19 or more digits (the
shortest integer orjson could misread; found with one ``bytes.translate`` and one substring
search, about 0.7 us for a 1 KiB object) is decoded by the standard library instead; an
integer orjson cannot write is written by the standard library. A decoder whose parser
reads such integers exactly (msgspec does) is checked once, and then not wrapped. Where
the backends still differ, one refuses what another accepts, and nothing is changed:
orjson and msgspec refuse a lone UTF-16 surrogate escape (``"\\ud800"``) that the
standard library accepts.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from json.decoder import JSONDecoder
from typing import Any

from ._errors import DecodeError, LocalProtocolError

# loads and dumps are for the core's own modules; users pick a backend with these.
__all__ = [
    "json_backend",
    "set_json_backend",
    "use_fast_json",
    "use_msgspec_json",
    "use_standard_json",
]

Loads = Callable[[bytes | str], Any]
Dumps = Callable[[Any], bytes]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is too large for a double")
    return value


# The standard library's decoder with the RFC 8259 number rules; the watch decoder's scanner
# is made from this very object so both read documents alike. parse_float is only called
# for numbers with a fraction or an exponent, so integers keep the C fast path.
STRICT_DECODER = JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
_std_decode = STRICT_DECODER.decode


def _std_loads(data: bytes | str) -> Any:
    # What json.loads does for bytes (UTF-8/16/32 sniffing), then the strict decoder.
    if not isinstance(data, str):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    return _std_decode(data)


_STD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _std_dumps(value: Any) -> bytes:
    return _STD_ENCODER.encode(value).encode()


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinite float is somewhere in ``value`` (iteratively: a value
    orjson managed to encode is at most 255 levels deep, but no recursion is needed)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _checked_dumps(encode: Dumps) -> Dumps:
    def dumps(value: Any) -> bytes:
        data = encode(value)
        # orjson and msgspec write a NaN or an infinity as null; only a document with a null
        # can hide one.
        if b"null" in data and _non_finite(value):
            raise ValueError("NaN and infinite floats are not JSON numbers (RFC 8259)")
        return data

    return dumps


_backend: tuple[str, Loads, Dumps] = ("json", _std_loads, _std_dumps)

# Every byte a space but the ASCII digits, which become "0": a run of 19 digits is then one
# substring. 19 digits is the shortest integer beyond 64 bits (-9223372036854775809).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"0" * 19
_LONG_RUN_TEXT = re.compile(r"[0-9]{19}")
# Integers a 64-bit parser misreads (as a float, or not at all), with their exact values.
_BIG_PROBE = b"[100000000000000000000,-9223372036854775809,18446744073709551616]"
_BIG_VALUES = [10**20, -(2**63) - 1, 2**64]


def _long_digit_run(data: Any) -> bool:
    """Whether ``data`` (bytes-like or text) holds 19 or more digits in a row: the only
    documents in which a 64-bit integer parser can read a number otherwise than the
    standard library (digits inside strings count too: they only cost the slower path)."""
    if isinstance(data, str):
        return _LONG_RUN_TEXT.search(data) is not None
    if not isinstance(data, bytes | bytearray):
        data = bytes(data)
    return _LONG_RUN in data.translate(_DIGITS_ONLY)


def _reads_big_integers(decode: Callable[[bytes], Any]) -> bool:
    """Whether ``decode`` reads integers beyond 64 bits exactly (as ints, not floats)."""
    try:
        found = decode(_BIG_PROBE)
    except Exception:  # a parser that refuses them: the standard library must read them
        return False
    return found == _BIG_VALUES and all(type(item) is int for item in found)


def _exact_loads(decode: Loads) -> Loads:
    """``decode``, or the standard library for a document ``decode`` could misread."""
    if _reads_big_integers(decode):
        return decode
    long_run = _long_digit_run

    def exact(data: bytes | str) -> Any:
        if long_run(data):
            return _std_loads(data)
        return decode(data)

    return exact


def _exact_dumps(encode: Dumps) -> Dumps:
    """``encode``, with the standard library writing what ``encode`` refuses only for being
    an integer beyond 64 bits or nested too deep (which the core's decoders read)."""

    def dumps(value: Any) -> bytes:
        try:
            return encode(value)
        except TypeError as exc:
            message = str(exc)
            if "64-bit" not in message and "Recursion" not in message:
                raise  # a non-str key, a foreign type: refused as before
            return _std_dumps(value)

    return dumps


def loads(data: bytes | str, *, offset: int | None = None) -> Any:
    """Decode one JSON document (UTF-8 bytes or text); any failure is a DecodeError."""
    try:
        return _backend[1](data)
    except (ValueError, TypeError, RecursionError) as exc:
        # json.JSONDecodeError, UnicodeDecodeError and orjson.JSONDecodeError are ValueErrors.
        raise DecodeError(f"invalid JSON: {exc}", offset=offset) from None


def dumps(value: Any) -> bytes:
    """Encode a value as compact UTF-8 JSON."""
    try:
        return _backend[2](value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise LocalProtocolError(f"value cannot be encoded as JSON: {exc}") from None


def set_json_backend(name: str, loads: Loads, dumps: Dumps) -> None:
    """Install a JSON backend: ``loads(bytes | str)`` and ``dumps(value) -> bytes``."""
    global _backend
    _backend = (name, loads, dumps)


def json_backend() -> str:
    """The name of the active backend (``"json"`` or ``"orjson"``...)."""
    return _backend[0]


def use_fast_json() -> bool:
    """Switch to orjson when it is installed; return whether it is now active."""
    try:
        import orjson  # noqa: PLC0415 - optional dependency
    except ImportError:
        return False
    set_json_backend(
        "orjson", _exact_loads(orjson.loads), _exact_dumps(_checked_dumps(orjson.dumps))
    )
    return True


def use_msgspec_json() -> bool:
    """Switch to msgspec when it is installed; return whether it is now active.

    The watch decoder then decodes each line into its event in one C call, and LIST pages
    are parsed by msgspec too.
    """
    try:
        import msgspec  # noqa: PLC0415 - optional dependency
    except ImportError:
        return False
    set_json_backend(
        "msgspec",
        _exact_loads(msgspec.json.Decoder().decode),
        _checked_dumps(msgspec.json.Encoder().encode),  # writes every integer exactly
    )
    return True


def use_standard_json() -> None:
    """Switch back to the standard library backend."""
    set_json_backend("json", _std_loads, _std_dumps)
