"""A compact store reads and writes a deeply nested object from any stack depth.

Attack: a tenant's object nesting a few hundred levels under the decoders' limit (~1,000
levels, counted from the caller's stack) is decoded by the watch from a shallow stack and
stored; a compact store decodes it again on every read, from the reader's stack. Before
the fix a read from ~100 frames deeper raised a bare RecursionError (from get(), and from
objects() for every other object of the cache too), a lazy change's ``new`` a DecodeError,
and an upsert from a deeper stack refused the object that a plain store keeps.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kubemoon_core import ObjectKey, _store
from kubemoon_core._store import namespace_indexer
from kubemoon_core._store_codec import _fast_codec, _standard_codec
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import Store

DEPTH = 900
FRAMES = 200


def deep(depth: int = DEPTH) -> dict[str, Any]:
    spec: Any = {"bottom": True}
    for _ in range(depth):
        spec = {"d": spec}
    metadata = {"name": "deep", "namespace": "ns", "resourceVersion": "7"}
    return {"apiVersion": "x/v1", "kind": "Blob", "metadata": metadata, "spec": spec}


def other(name: str) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns", "resourceVersion": "3"}
    return {"apiVersion": "x/v1", "kind": "Blob", "metadata": metadata, "spec": {"n": 1}}


def at_depth(frames: int, call: Callable[[], Any]) -> Any:
    return call() if frames == 0 else at_depth(frames - 1, call)


@pytest.fixture(params=["fast", "standard"])
def codec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "standard":
        monkeypatch.setattr(_store, "_codec", _standard_codec)
    return str(request.param)


KEY = ObjectKey("ns", "deep")


def test_reads_from_a_deep_stack_return_what_a_plain_store_holds(codec: str) -> None:
    limit = sys.getrecursionlimit()
    plain, compact = Store(), Store(compact=True)
    compact.add_indexers({"namespace": namespace_indexer})
    for store in (plain, compact):
        store.upsert(other("a"))
        store.upsert(deep())
    assert at_depth(FRAMES, lambda: compact.get(KEY)) == plain.get(KEY)
    assert at_depth(FRAMES, compact.objects) == plain.objects()
    assert at_depth(FRAMES, compact.items) == plain.items()
    assert len(at_depth(FRAMES, lambda: compact.by_index("namespace", "ns"))) == 2
    assert at_depth(FRAMES, lambda: compact.uid(KEY)) is None
    assert sys.getrecursionlimit() == limit


def test_writes_from_a_deep_stack_keep_the_object(codec: str) -> None:
    compact = Store(compact=True)
    change = at_depth(FRAMES, lambda: compact.upsert(deep()))
    assert change is not None and change.new == deep()
    updated = deep()
    updated["metadata"]["resourceVersion"] = "8"
    change = at_depth(FRAMES, lambda: compact.upsert(updated))
    assert change is not None and change.old == deep() and change.new == updated
    assert at_depth(FRAMES, lambda: compact.delete(updated)) is not None
    assert len(compact) == 0


def test_lazy_list_changes_decode_from_a_deep_stack(codec: str) -> None:
    compact = Store(compact=True)
    compact.begin_epoch()
    compact.stage(other("a"))
    compact.stage(deep())
    changes = compact.commit_epoch(initial=True)
    news = at_depth(FRAMES, lambda: [change.new for change in changes])
    assert deep() in news and other("a") in news


def test_the_raised_limit_is_restored_across_threads() -> None:
    limit = sys.getrecursionlimit()
    compact = Store(compact=True)
    compact.upsert(deep())
    got: list[bool] = []
    barrier = threading.Barrier(4)

    def read() -> None:
        barrier.wait()
        for _ in range(20):
            got.append(at_depth(FRAMES, lambda: compact.get(KEY)) == deep())

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [True] * 80
    assert sys.getrecursionlimit() == limit


def test_a_document_too_deep_for_any_stack_still_fails() -> None:
    for make in (_fast_codec, _standard_codec):
        codec = make()
        too_deep = b'{"d":' * 5000 + b"1" + b"}" * 5000
        with pytest.raises(RecursionError):
            codec.decode(too_deep)
    assert sys.getrecursionlimit() < 5000


def test_an_upsert_with_raw_bytes_from_a_deep_stack_keeps_the_object(codec: str) -> None:
    """Before the fix: a bare RecursionError from comparing the decoded raw with the object
    (or refusing a deep raw in another key order), where a shallow stack stores it."""
    obj = deep()
    raw = json.dumps(obj, separators=(",", ":")).encode()
    compact = Store(compact=True)
    at_depth(FRAMES, lambda: compact.upsert(obj, raw=raw))
    assert compact.json(KEY) == raw and compact.get(KEY) == obj
    reordered = {"spec": obj["spec"], **{k: v for k, v in obj.items() if k != "spec"}}
    reordered["metadata"] = {**obj["metadata"], "resourceVersion": "8"}
    raw = json.dumps(reordered, separators=(",", ":")).encode()
    updated = {**obj, "metadata": reordered["metadata"]}
    at_depth(FRAMES, lambda: compact.upsert(updated, raw=raw))
    assert compact.get(KEY) == updated


def test_a_raw_that_differs_deep_down_is_still_refused_by_name(codec: str) -> None:
    obj = deep()
    other_raw = json.dumps(deep(DEPTH - 1), separators=(",", ":")).encode()
    compact = Store(compact=True)
    with pytest.raises(LocalProtocolError, match="differ at spec"):
        at_depth(FRAMES, lambda: compact.upsert(obj, raw=other_raw))
