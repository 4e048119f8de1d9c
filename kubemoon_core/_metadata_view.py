"""The deprecated mapping view of a typed ``ObjectMeta`` (``obj.metadata["name"]``).

Rules:

- Typed objects' ``metadata`` was a ``dict`` of the JSON form until this release; reading it
  as a mapping still works for one release, each read with a :class:`DeprecationWarning`
  naming the attribute to use instead. The view is read-only and speaks JSON names
  (``"ownerReferences"``) and JSON values (dicts, not ``OwnerReference``), as the dict did.
- It defines no ``__len__``: an ``ObjectMeta`` is always true, as a dataclass is.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

from ._typed import encode

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


class MetadataView:
    """Mixin of ``ObjectMeta``: the read-only mapping of its JSON form, deprecated."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        _warn(f"[{key!r}]: use .{_snake(key)}")
        return encode(self)[key]

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated: the JSON value of ``key`` or ``default``; read the attribute instead."""
        _warn(f".get({key!r}): use .{_snake(key)}")
        return encode(self).get(key, default)

    def __contains__(self, key: object) -> bool:
        _warn(f"{key!r} in metadata")
        return key in encode(self)

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
