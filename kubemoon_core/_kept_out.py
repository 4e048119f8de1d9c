"""Records of objects the server holds but the reflector's cache cannot.

Rules: an object too deeply nested to decode, or one the store refuses (for a metadata-only
cache: labels past :data:`MAX_CACHED_LABEL_CHARS`), is kept out of the store and produces
no change; a :class:`KeptOut` says what it was (as much of its key, uid
and resourceVersion as could be read without decoding it) and why. What names a record is
read defensively: a missing or mistyped field is None, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import LocalProtocolError
from ._resources import ObjectKey

__all__ = ["MAX_CACHED_LABEL_CHARS", "KeptOut", "check_label_size"]

#: The most label text (keys and values, in characters) a metadata-only cache keeps of one
#: object. The apiserver bounds annotations (256 KiB in all) but not labels: an object can
#: carry a megabyte of them, several MiB once decoded, and a metadata-only cache promises
#: objects that stay small whatever their writer does. Real objects use a few hundred.
MAX_CACHED_LABEL_CHARS = 64 * 1024


def check_label_size(obj: Mapping[str, Any]) -> None:
    """Refuse ``obj`` (:class:`~kubemoon_core.errors.LocalProtocolError`) when its labels
    hold more than :data:`MAX_CACHED_LABEL_CHARS` characters."""
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping) or not labels:
        return
    size = sum(len(k) + (len(v) if isinstance(v, str) else 0) for k, v in labels.items())
    if size > MAX_CACHED_LABEL_CHARS:
        raise LocalProtocolError(
            f"its {len(labels)} labels hold {size} characters, more than the "
            f"{MAX_CACHED_LABEL_CHARS} a metadata-only cache keeps of one object"
        )


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
