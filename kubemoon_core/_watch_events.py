"""The values a watch stream is decoded into: :class:`WatchEvent`, and
:class:`KeptOutEvent` for an object too deeply nested to decode (the rules are in
``kubemoon_core._watch`` and ``kubemoon_core._watch_lines``). Pure values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._status import ApiError, decode_status, error_from_status

__all__ = ["INITIAL_EVENTS_END_ANNOTATION", "KeptOutEvent", "WatchEvent"]

INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"

# The values of WatchEvent.type (a typing alias, not exported: it is not a runtime object).
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream: its ``type`` and the decoded ``object``.

    For ``ERROR`` events the object is a ``Status`` and :attr:`error` is the matching
    :class:`ApiError` (410 gives ``Gone``/``Expired``). For ``BOOKMARK`` events only
    :attr:`resource_version` and :attr:`initial_events_end` carry meaning.

    ``raw`` is set only by a decoder made with ``keep_raw=True``: the exact bytes of the
    line's ``object`` member as they were received (UTF-8 JSON text of :attr:`object`, not
    re-encoded), or None where the decoder could not take them without parsing the line a
    second time (see ``kubemoon_core._watch_lines``). It takes no part in equality or the repr.
    """

    type: WatchEventType
    object: dict[str, Any]
    raw: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def resource_version(self) -> str | None:
        """``metadata.resourceVersion`` of the object, or None when it has none."""
        metadata = self.object.get("metadata")
        # type() first: isinstance against an ABC is slow, and decoded JSON is made of dicts.
        if type(metadata) is dict or isinstance(metadata, Mapping):
            rv = metadata.get("resourceVersion")
            return rv if isinstance(rv, str) else None
        return None

    @property
    def initial_events_end(self) -> bool:
        """True for the BOOKMARK that ends the initial events of a streaming list."""
        if self.type != "BOOKMARK":
            return False
        metadata = self.object.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        return (
            isinstance(annotations, Mapping)
            and annotations.get(INITIAL_EVENTS_END_ANNOTATION) == "true"
        )

    @property
    def error(self) -> ApiError | None:
        """The decoded :class:`ApiError` of an ``ERROR`` event; None for other types."""
        if self.type != "ERROR":
            return None
        status = decode_status(self.object)
        assert status is not None, "the decoder only delivers ERROR events holding a Status"
        return error_from_status(status)


@dataclass(frozen=True, slots=True)
class KeptOutEvent(WatchEvent):
    """An event whose object could not be decoded (too deeply nested): ``object`` holds only
    what names it (``metadata`` namespace, name, uid, resourceVersion) and ``reason`` says
    why. The reflector keeps that object out of its cache (see ``kubemoon_core._watch_lines``)."""

    reason: str = ""
