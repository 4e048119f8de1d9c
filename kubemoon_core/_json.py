"""One replaceable JSON backend for everything the core decodes and encodes.

The standard library is the default; ``use_fast_json()`` switches to orjson when it is
installed (``pip install kubemoon[fast]``). Decoding errors become ``DecodeError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._errors import DecodeError, LocalProtocolError

# loads and dumps are for the core's own modules; users pick a backend with these.
__all__ = [
    "json_backend",
    "set_json_backend",
    "use_fast_json",
    "use_standard_json",
]

Loads = Callable[[bytes | str], Any]
Dumps = Callable[[Any], bytes]


def _std_loads(data: bytes | str) -> Any:
    return json.loads(data)


def _std_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


_backend: tuple[str, Loads, Dumps] = ("json", _std_loads, _std_dumps)


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
    except (TypeError, ValueError) as exc:
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
    set_json_backend("orjson", orjson.loads, orjson.dumps)
    return True


def use_standard_json() -> None:
    """Switch back to the standard library backend."""
    set_json_backend("json", _std_loads, _std_dumps)
