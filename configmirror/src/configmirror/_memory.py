"""What the operator remembers of ConfigMaps it read or wrote in full, bounded.

Rules: no ConfigMap is cached with its data, so what the reconcile needs of one is kept
here, small and valid only at one resourceVersion: the sources it read (:class:`SourceMemory`,
bounded in bytes of data) and, for each copy, the digest of the data it held when the
operator last wrote or read it (:class:`CopyMemory`, bounded in entries). Whatever is
forgotten is read again with one GET when it matters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ._plan import CopyData, _meta, copy_data

__all__ = [
    "COPY_MEMORY_ENTRIES",
    "SOURCE_MEMORY_BYTES",
    "CopyMemory",
    "MadeCopies",
    "SourceMemory",
    "as_metadata",
]

# What the source memory may hold, in characters of data plus a fixed cost per entry.
SOURCE_MEMORY_BYTES = 16 * 1024 * 1024
_ENTRY_COST = 1024
# How many copies the copy memory describes at most (about 300 bytes each).
COPY_MEMORY_ENTRIES = 100_000
# How many UIDs of copies this process created are remembered (about 100 bytes each).
MADE_COPIES_ENTRIES = 100_000


def _data_size(configmap: Mapping[str, Any]) -> int:
    size = _ENTRY_COST
    for field in ("data", "binaryData"):
        values = configmap.get(field)
        if isinstance(values, Mapping):
            size += sum(len(str(k)) + len(str(v)) for k, v in values.items())
    return size


def as_metadata(configmap: Mapping[str, Any]) -> dict[str, Any]:
    """What a metadata-only cache would hold of ``configmap`` (its data dropped)."""
    metadata = {k: v for k, v in _meta(configmap).items() if k != "managedFields"}
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata}


class CopyMemory:
    """What each copy held at the resourceVersion the operator last wrote or read it at
    (:class:`~configmirror.CopyData`), least recently used first out, at most
    ``max_entries``: a forgotten copy is read again with one GET when it matters."""

    def __init__(self, max_entries: int = COPY_MEMORY_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], CopyData] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _key(configmap: Mapping[str, Any]) -> tuple[str, str]:
        meta = _meta(configmap)
        return str(meta.get("namespace", "")), str(meta.get("name", ""))

    def get(self, configmap: Mapping[str, Any]) -> CopyData | None:
        """What ``configmap`` holds, if it was seen in full at its uid and resourceVersion."""
        key = self._key(configmap)
        known = self._entries.get(key)
        if known is None or not known.describes(configmap):
            return None
        self._entries.move_to_end(key)
        return known

    def put(self, configmap: Mapping[str, Any], data: CopyData | None = None) -> CopyData:
        """Remember what ``configmap`` holds: ``data``, or read from it (then it is whole)."""
        known = data if data is not None else copy_data(configmap)
        key = self._key(configmap)
        self._entries.pop(key, None)
        self._entries[key] = known
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return known

    def forget(self, namespace: str, name: str) -> None:
        self._entries.pop((namespace, name), None)


class MadeCopies:
    """The UIDs of the copies this process created (the API server's answer to its POST),
    most recent last, at most ``max_entries``. Only these are known to be the operator's
    own: every mark of a copy can be forged by whoever may update a ConfigMap (or the
    mirror's status), so a copy not in here is deleted only where the mirror's author may
    delete it."""

    def __init__(self, max_entries: int = MADE_COPIES_ENTRIES) -> None:
        self.max_entries = max_entries
        self._uids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._uids)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids

    def add(self, uid: str) -> None:
        self._uids.pop(uid, None)
        self._uids[uid] = None
        while len(self._uids) > self.max_entries:
            self._uids.popitem(last=False)


class SourceMemory:
    """ConfigMaps read in full (the sources), least recently used first, at most
    ``max_bytes`` of data; an entry answers only for the resourceVersion it was read at."""

    def __init__(self, max_bytes: int = SOURCE_MEMORY_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[str, str], tuple[Mapping[str, Any], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The ConfigMap ``metadata`` describes, in full, if it was read at its version."""
        meta = _meta(metadata)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        entry = self._entries.get(key)
        if entry is None or _meta(entry[0]).get("resourceVersion") != meta.get("resourceVersion"):
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, configmap: Mapping[str, Any]) -> None:
        """Keep ``configmap`` (replacing what was kept of it), evicting the oldest."""
        meta = _meta(configmap)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        size = _data_size(configmap)
        if size > self.max_bytes:
            return  # read again by every reconcile that needs it
        self._entries[key] = (configmap, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.bytes -= evicted
