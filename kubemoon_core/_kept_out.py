"""Records of objects the server holds but the reflector's cache cannot.

Rules: an object too deeply nested to decode, or one the store refuses, is kept out of the
store and produces no change; a :class:`KeptOut` says what it was (as much of its key, uid
and resourceVersion as could be read without decoding it) and why. What names a record is
read defensively: a missing or mistyped field is None, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._resources import ObjectKey

__all__ = ["KeptOut"]


@dataclass(frozen=True, slots=True)
class KeptOut:
    """An object the server holds that the cache cannot: too deeply nested to decode, or
    not storable. It is not in the store and produces no change; ``key`` is None when even
    its name could not be read."""

    key: ObjectKey | None
    uid: str | None
    resource_version: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.key if self.key is not None else 'an unnamed object'}: {self.reason}"


def _kept_out(obj: Mapping[str, Any], reason: str) -> KeptOut:
    """A record of ``obj`` (a decoded object, or what names one) kept out for ``reason``."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        metadata = {}

    def text(name: str) -> str | None:
        value = metadata.get(name)
        return value if isinstance(value, str) and value else None

    name = text("name")
    key = ObjectKey(text("namespace") or "", name) if name is not None else None
    return KeptOut(key, text("uid"), text("resourceVersion"), reason)


def _stub_metadata(record: KeptOut) -> dict[str, str]:
    """The metadata a kept-out record names (for the store's and the shard's key lookups)."""
    metadata: dict[str, str] = {}
    if record.key is not None:
        metadata["name"] = record.key.name
        if record.key.namespace:
            metadata["namespace"] = record.key.namespace
    if record.uid is not None:
        metadata["uid"] = record.uid
    return metadata
