"""A compact store and a plain store, given the same operations, cannot be told apart.

Hypothesis generates sequences of upserts, deletes and epochs (stage, unstage, commit,
abort), with or without a transform and index functions (one of each fails on some
objects), objects with unicode, integers beyond 64 bits and floats, and ``raw`` bytes that
are absent, the object's JSON in another spelling (spacing, escapes, key order), or a list
item's JSON without apiVersion and kind. After every operation both stores must have
returned equal changes (or raised the same error type) and read the same: keys, objects,
items, indexes, resourceVersions, epoch state. Every compact read is a fresh copy:
mutating it changes nothing. Run with the fastest codec installed and with the standard
library's.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from kubemoon_core import ObjectKey, _store_codec
from kubemoon_core._store import label_indexer, namespace_indexer
from kubemoon_core.lowlevel import Store

NAMES = st.sampled_from(["a", "b", "c", "ü"])
NAMESPACES = st.sampled_from(["", "ns", "名前"])
RVS = st.one_of(st.none(), st.sampled_from(["1", "2", "3"]))
LABELS = st.sampled_from(["web", "db", "bad-transform", "bad-index"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.sampled_from('xé漢🙂\\"\n\x00\u2028/'), max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": draw(NAMES)}
    namespace = draw(NAMESPACES)
    if namespace or draw(st.booleans()):
        metadata["namespace"] = namespace
    rv = draw(RVS)
    if rv is not None:
        metadata["resourceVersion"] = rv
    if draw(st.booleans()):
        metadata["labels"] = {"app": draw(LABELS)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": draw(st.dictionaries(st.text(max_size=4), VALUES, max_size=3)),
    }


@st.composite
def raws(draw: st.DrawFn, obj: dict[str, Any]) -> bytes | None:
    """None, or bytes that decode to ``obj`` (without apiVersion/kind, as a list item)."""
    form = draw(st.sampled_from(["none", "compact", "spaced", "ascii", "item"]))
    if form == "none":
        return None
    body = dict(obj)
    if form == "item":
        del body["apiVersion"], body["kind"]
    if draw(st.booleans()):
        body = dict(reversed(list(body.items())))
    separators = (", ", ": ") if form == "spaced" else (",", ":")
    text = json.dumps(body, separators=separators, ensure_ascii=form == "ascii")
    return text.encode()


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete", "begin", "stage", "unstage", "commit", "abort"]),
        objects(),
        st.data(),
    ),
    max_size=25,
)


def transform(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj["metadata"]
    if metadata.get("labels", {}).get("app") == "bad-transform":
        raise ValueError("this transform refuses the object")
    obj = dict(obj)
    obj["data"] = {k: v for k, v in obj["data"].items() if not k.startswith("x")}
    return obj


def picky_index(obj: Any) -> list[str]:
    if obj["metadata"].get("labels", {}).get("app") == "bad-index":
        raise KeyError("this index refuses the object")
    return sorted({str(k) for k in obj.get("data", {})})


def make(compact: bool, with_transform: bool, with_indexers: bool) -> Store:
    indexers = (
        {"ns": namespace_indexer, "app": label_indexer("app"), "picky": picky_index}
        if with_indexers
        else None
    )
    return Store(
        indexers=indexers, transform=transform if with_transform else None, compact=compact
    )


def observe(store: Store) -> dict[str, Any]:
    view: dict[str, Any] = {
        "len": len(store),
        "keys": store.keys(),
        "objects": store.objects(),
        "items": store.items(),
        "epoch": (store.epoch_open, store.staged),
        "rvs": [store.resource_version(k) for k in store],
        "get": [store.get(k) for k in store],
        "absent": store.get(ObjectKey("nowhere", "nothing")),
    }
    for name in store.index_names:
        values = sorted(store.index_values(name))
        view[f"index {name}"] = {
            value: (store.keys_by_index(name, value), store.by_index(name, value))
            for value in values
        }
    return view


def apply(store: Store, operation: str, obj: dict[str, Any], raw: bytes | None) -> Any:
    """Run one operation; what it returned, or the type of what it raised."""
    result: Any = None
    try:
        if operation == "upsert":
            result = store.upsert(obj, raw=raw)
        elif operation == "delete":
            result = store.delete(obj, raw=raw)
        elif operation == "begin":
            store.begin_epoch()
        elif operation == "stage":
            store.stage(obj, raw=raw)
        elif operation == "unstage":
            store.unstage(obj)
        elif operation == "commit":
            result = store.commit_epoch()
        else:
            store.abort_epoch()
    except Exception as exc:
        return ("error", type(exc))
    return ("ok", result)


_IN_EPOCH = {"upsert": "stage", "delete": "unstage", "begin": "commit"}
_OUTSIDE_EPOCH = {"stage": "upsert", "unstage": "delete", "commit": "begin", "abort": "begin"}


@settings(max_examples=300)
@given(
    operations=OPERATIONS,
    with_transform=st.booleans(),
    with_indexers=st.booleans(),
    standard=st.booleans(),
)
def test_a_compact_store_reads_like_a_plain_store(
    operations: list[tuple[str, dict[str, Any], st.DataObject]],
    with_transform: bool,
    with_indexers: bool,
    standard: bool,
) -> None:
    plain = make(False, with_transform, with_indexers)
    compact = make(True, with_transform, with_indexers)
    if standard:
        compact._codec = _store_codec._standard_codec()
    for drawn, obj, data in operations:
        operation = drawn
        # Mostly what is allowed in the current state, sometimes what is not.
        if data.draw(st.integers(0, 3)):
            if plain.epoch_open:
                operation = _IN_EPOCH.get(drawn, drawn)
            else:
                operation = _OUTSIDE_EPOCH.get(drawn, drawn)
        raw = data.draw(raws(obj))
        expected = apply(plain, operation, copy.deepcopy(obj), raw)
        got = apply(compact, operation, copy.deepcopy(obj), raw)
        assert got == expected, (operation, obj)
        event(f"{operation} {got[0]}{' raw' if raw is not None else ''}")
        seen = observe(compact)
        assert seen == observe(plain)
        # Reads are copies: wreck every one of them, the store reads the same.
        for found in seen["objects"] + seen["get"]:
            found.clear()
        for _, found in seen["items"]:
            found.clear()
        assert observe(compact) == observe(plain)
