"""The deprecated mapping view of a typed ``ObjectMeta`` (``obj.metadata["name"]``).

Rules:

- Typed objects' ``metadata`` was a ``dict`` of the JSON form until this release; reading it
  as a mapping still works for one release, each read with a :class:`DeprecationWarning`
  naming the attribute to use instead. The view is read-only and speaks JSON names
  (``"ownerReferences"``) and JSON values (dicts, not ``OwnerReference``), as the dict did.
- It defines no ``__len__``: an ``ObjectMeta`` is always true, as a dataclass is.
- Reading one key (``[key]``, ``.get``, ``in``) encodes that field only, never the whole
  metadata: its cost does not grow with the other fields (a tenant's 10,000
  ``ownerReferences`` made each ``metadata["name"]`` cost milliseconds).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._declare import class_info
from ._typed import encode, node_codec

__all__: list[str] = []  # MetadataView is ObjectMeta's base, no name users import


def _snake(json_name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", json_name).lower()


def _warn(what: str) -> None:
    warnings.warn(
        f"reading a typed object's metadata as a mapping ({what}) is deprecated: "
        "metadata is an ObjectMeta (obj.metadata.name, obj.metadata.owner_references, ...)",
        DeprecationWarning,
        stacklevel=3,
    )


_MISSING = object()
# class -> (JSON name -> (attribute, its encoder), the attribute keeping unknown fields)
_FIELDS: dict[type, tuple[dict[str, tuple[str, Callable[[Any], Any]]], str | None]] = {}


def _json_value(meta: object, key: object) -> Any:
    """What ``encode(meta).get(key, _MISSING)`` is, encoding that one field only."""
    cls = type(meta)
    found = _FIELDS.get(cls)
    if found is None:
        info = class_info(cls)
        table = {f.json_name: (f.name, node_codec(f.node).encode) for f in info.fields}
        found = _FIELDS[cls] = (table, info.extra)
    table, extra = found
    entry = table.get(key)  # type: ignore[call-overload]  # any key, as a dict takes
    if entry is not None:
        value = getattr(meta, entry[0])
        if value is not None:
            return entry[1](value)
    if extra is None:
        return _MISSING
    unknown: dict[str, Any] = getattr(meta, extra)
    return unknown.get(key, _MISSING)  # type: ignore[call-overload]


class MetadataView:
    """Mixin of ``ObjectMeta``: the read-only mapping of its JSON form, deprecated."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        _warn(f"[{key!r}]: use .{_snake(key)}")
        value = _json_value(self, key)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated: the JSON value of ``key`` or ``default``; read the attribute instead."""
        _warn(f".get({key!r}): use .{_snake(key)}")
        value = _json_value(self, key)
        return default if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        _warn(f"{key!r} in metadata")
        return _json_value(self, key) is not _MISSING

    def __iter__(self) -> Iterator[str]:
        _warn("iterating")
        return iter(encode(self))

    def keys(self) -> list[str]:
        """Deprecated: the JSON names of the fields that are set."""
        _warn(".keys()")
        return list(encode(self))

    def items(self) -> list[tuple[str, Any]]:
        """Deprecated: the JSON form's items."""
        _warn(".items()")
        return list(encode(self).items())

    def values(self) -> list[Any]:
        """Deprecated: the JSON form's values."""
        _warn(".values()")
        return list(encode(self).values())
