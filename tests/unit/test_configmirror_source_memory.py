"""The operator's memories: sources read in full (bounded in bytes, valid per version)
and what each copy holds (bounded in entries, valid per uid and version)."""

from __future__ import annotations

from typing import Any

from configmirror import copy_data
from configmirror._memory import CopyMemory, SourceMemory


def _configmap(name: str, rv: str, value: str, namespace: str = "home") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "resourceVersion": rv}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": value}}


def _metadata(name: str, rv: str, namespace: str = "home") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "resourceVersion": rv}
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta}


def test_an_entry_answers_only_for_the_version_it_was_read_at() -> None:
    memory = SourceMemory()
    source = _configmap("settings", "5", "x")
    memory.put(source)
    assert memory.get(_metadata("settings", "5")) is source
    assert memory.get(_metadata("settings", "6")) is None  # changed since: read again
    assert memory.get(_metadata("settings", "5", namespace="other")) is None
    newer = _configmap("settings", "6", "y")
    memory.put(newer)
    assert len(memory) == 1
    assert memory.get(_metadata("settings", "6")) is newer


def test_what_it_keeps_is_bounded_in_bytes_least_recently_used_out() -> None:
    memory = SourceMemory(max_bytes=10_000)
    for i in range(20):
        memory.put(_configmap(f"s{i}", "1", "v" * 3_000))
        if i == 1:
            assert memory.get(_metadata("s0", "1")) is not None  # s0 used: s1 goes first
        if i == 2:
            assert memory.get(_metadata("s1", "1")) is None
            assert memory.get(_metadata("s0", "1")) is not None
    assert memory.bytes <= 10_000
    assert memory.get(_metadata("s19", "1")) is not None
    assert memory.get(_metadata("s1", "1")) is None
    memory.put(_configmap("huge", "1", "v" * 20_000))  # alone past the bound: not kept
    assert memory.get(_metadata("huge", "1")) is None
    assert memory.bytes <= 10_000


def _copy(name: str, rv: str, value: str, uid: str = "u1") -> dict[str, Any]:
    copy = _configmap(name, rv, value, namespace="target")
    copy["metadata"]["uid"] = uid
    return copy


def test_the_copy_memory_answers_for_one_uid_and_version_and_is_bounded() -> None:
    memory = CopyMemory(max_entries=3)
    written = _copy("settings", "7", "x")
    known = memory.put(written)
    assert known == copy_data(written)
    meta = {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata"}
    seen = {**meta, "metadata": dict(written["metadata"])}
    assert memory.get(seen) == known
    assert memory.get({**meta, "metadata": {**seen["metadata"], "resourceVersion": "8"}}) is None
    assert memory.get({**meta, "metadata": {**seen["metadata"], "uid": "u2"}}) is None
    memory.forget("target", "settings")
    assert memory.get(seen) is None and len(memory) == 0
    for i in range(5):
        memory.put(_copy(f"c{i}", "1", "v"))
    assert len(memory) == 3
    assert memory.get(_copy("c0", "1", "v")) is None
    assert memory.get(_copy("c4", "1", "v")) is not None
