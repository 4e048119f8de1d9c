"""Shard selectors (issue 25): the hash, the apiserver's syntax, validation, the client
filter, and how list/watch options and the reflector carry them."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from kubemoon_core import (
    GroupVersionResource,
    ListOptions,
    Response,
    delete_collection_request,
    list_request,
    watch_request,
)
from kubemoon_core._reflector import Reflector
from kubemoon_core.errors import DecodeError, LocalProtocolError, ShardSelectorError
from kubemoon_core.sharding import (
    HASH_SPACE,
    ShardField,
    ShardRange,
    ShardSelector,
    fnv1a_64,
    shard_hash,
    shard_probe_request,
    sharding_enabled,
)

CM = GroupVersionResource("", "v1", "configmaps")


def obj(uid: str, namespace: str | None = "ns", name: str = "x", rv: str = "1") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": uid, "resourceVersion": rv}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


# Published FNV-1a 64 test vectors (the FNV reference test suite).
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a_64_matches_the_published_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_64(data) == expected


def test_shard_hash_reads_the_raw_utf8_bytes_and_hashes_missing_fields_as_empty() -> None:
    assert shard_hash(obj("foobar")) == 0x85944171F73967E8
    assert shard_hash(obj("x", namespace="é")) == fnv1a_64(b"x")
    assert shard_hash(obj("x", namespace="é"), ShardField.NAMESPACE) == fnv1a_64("é".encode())
    cluster_scoped = obj("u", namespace=None)
    assert shard_hash(cluster_scoped, ShardField.NAMESPACE) == fnv1a_64(b"")
    assert shard_hash({}) == fnv1a_64(b"")
    assert shard_hash({"metadata": {"uid": 7}}) == fnv1a_64(b"")


def test_a_range_renders_the_apiservers_syntax_exactly() -> None:
    assert ShardRange(0, 1 << 63).render() == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    )
    whole = ShardRange(0xABC, HASH_SPACE, ShardField.NAMESPACE)
    assert str(whole) == (
        "shardRange(object.metadata.namespace, '0x0000000000000abc', '0x10000000000000000')"
    )
    selector = ShardSelector((ShardRange(0, 16), ShardRange(32, 48)))
    assert selector.render() == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000010') || "
        "shardRange(object.metadata.uid, '0x0000000000000020', '0x0000000000000030')"
    )
    assert ShardSelector.parse(selector.render()) == selector
    assert ShardSelector.parse(str(whole)) == ShardSelector((whole,))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 5), "start -1 is outside"),
        ((0, 0), "end 0 is outside"),
        ((0, HASH_SPACE + 1), "is outside (0, 2**64]"),
        ((HASH_SPACE, HASH_SPACE), "start 18446744073709551616 is outside"),
        ((5, 5), "is not below its end"),
        ((9, 3), "is not below its end"),
        ((True, 3), "start must be an int"),
        ((0, 2.5), "end must be an int"),
    ],
)
def test_a_bad_range_is_a_typed_error_naming_the_bound(args: tuple[Any, Any], message: str) -> None:
    with pytest.raises(ShardSelectorError, match=message.replace("(", r"\(").replace("*", r"\*")):
        ShardRange(*args)


def test_a_bad_selector_is_a_typed_error() -> None:
    with pytest.raises(ShardSelectorError, match="at least one range"):
        ShardSelector(())
    with pytest.raises(ShardSelectorError, match="tuple"):
        ShardSelector([ShardRange(0, 1)])  # type: ignore[arg-type]
    with pytest.raises(ShardSelectorError, match=r"ranges\[1\]"):
        ShardSelector((ShardRange(0, 1), "x"))  # type: ignore[arg-type]
    with pytest.raises(ShardSelectorError, match="same field"):
        ShardSelector((ShardRange(0, 1), ShardRange(0, 1, ShardField.NAMESPACE)))
    with pytest.raises(ShardSelectorError, match="field must be a ShardField"):
        ShardRange(0, 1, "object.metadata.uid")  # type: ignore[arg-type]
    assert issubclass(ShardSelectorError, LocalProtocolError)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",  # short start
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000A')",
        "shardRange(object.metadata.uid, '0x00000000000000AB', '0x8000000000000000')",  # upper
        "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') ||",
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
        "shardRange(object.metadata.uid, 0x0000000000000000, 0x8000000000000000)",
    ],
)
def test_parse_refuses_what_the_apiserver_refuses(text: str) -> None:
    with pytest.raises(ShardSelectorError):
        ShardSelector.parse(text)


def test_parse_refuses_non_text_and_oversized_input() -> None:
    with pytest.raises(ShardSelectorError, match="text"):
        ShardSelector.parse(b"x")  # type: ignore[arg-type]
    with pytest.raises(ShardSelectorError, match="longer than"):
        ShardSelector.parse("x" * (64 * 1024 + 1))
    with pytest.raises(ShardSelectorError, match="at most"):
        ShardSelector(tuple(ShardRange(n, n + 1) for n in range(1025)))


def test_equal_split_partitions_the_space_and_contains_agrees_with_the_hash() -> None:
    parts = [ShardSelector.equal_split(4, i) for i in range(4)]
    assert parts[0].ranges[0].start == 0 and parts[-1].ranges[0].end == HASH_SPACE
    for left, right in itertools.pairwise(parts):
        assert left.ranges[0].end == right.ranges[0].start
    assert sum(p.fraction for p in parts) == pytest.approx(1.0)
    rng = random.Random(7)
    for _ in range(500):
        o = obj(f"{rng.getrandbits(128):032x}")
        owners = [p for p in parts if p.contains(o)]
        assert len(owners) == 1
        assert owners[0].contains_hash(shard_hash(o))
    with pytest.raises(ShardSelectorError):
        ShardSelector.equal_split(0, 0)
    with pytest.raises(ShardSelectorError):
        ShardSelector.equal_split(2, 2)
    with pytest.raises(ShardSelectorError):
        ShardSelector.equal_split(2, True)


def test_fraction_counts_overlaps_once() -> None:
    half = HASH_SPACE // 2
    sel = ShardSelector((ShardRange(0, half), ShardRange(half // 2, half), ShardRange(0, 1)))
    assert sel.fraction == pytest.approx(0.5)


SELECTOR = ShardSelector.equal_split(4, 1)


def test_list_options_carry_the_selector_on_list_watch_and_streaming_list() -> None:
    rendered = SELECTOR.render()
    listed = list_request(
        CM, namespace="ns", options=ListOptions(limit=100, shard_selector=SELECTOR)
    )
    assert listed.query_value("shardSelector") == rendered
    page = ListOptions(limit=100, continue_token="tok", shard_selector=SELECTOR)
    assert list_request(CM, options=page).query_value("shardSelector") == rendered
    stream = ListOptions(
        resource_version="",
        resource_version_match="NotOlderThan",
        send_initial_events=True,
        shard_selector=SELECTOR,
    )
    assert watch_request(CM, options=stream).query_value("shardSelector") == rendered
    assert "shardSelector=shardRange%28object.metadata.uid" in listed.target
    with pytest.raises(LocalProtocolError, match="ShardSelector"):
        ListOptions(shard_selector=rendered)  # type: ignore[arg-type]


def test_delete_collection_refuses_a_shard_selector_unless_asked() -> None:
    options = ListOptions(label_selector="a=b", shard_selector=SELECTOR)
    with pytest.raises(LocalProtocolError, match="allow_shard_selector"):
        delete_collection_request(CM, namespace="ns", list_options=options)
    request = delete_collection_request(
        CM, namespace="ns", list_options=options, allow_shard_selector=True
    )
    assert request.query_value("shardSelector") == SELECTOR.render()
    plain = delete_collection_request(
        CM, namespace="ns", list_options=ListOptions(label_selector="a=b")
    )
    assert plain.query_value("shardSelector") is None


def test_the_probe_request_and_its_verdict() -> None:
    request = shard_probe_request()
    assert request.path == "/api/v1/namespaces"
    assert request.query_value("limit") == "1"
    selector = ShardSelector.parse(request.query_value("shardSelector") or "")
    assert selector.fraction * HASH_SPACE == 1
    off = {"kind": "NamespaceList", "metadata": {}, "items": [obj("d", namespace=None)]}
    assert sharding_enabled(off) is False
    on = {"kind": "NamespaceList", "metadata": {"shardInfo": {"selector": "x"}}, "items": []}
    assert sharding_enabled(on) is True
    assert sharding_enabled({"metadata": {}, "items": []}) is True
    assert sharding_enabled({"metadata": {}}) is True
    with pytest.raises(DecodeError):
        sharding_enabled([])
    with pytest.raises(DecodeError):
        sharding_enabled({"items": {}})


def _uid_in(selector: ShardSelector, inside: bool, start: int = 0) -> str:
    for n in range(start, start + 10_000):
        uid = f"uid-{n}"
        if selector.contains({"metadata": {"uid": uid}}) is inside:
            return uid
    raise AssertionError("no uid found")


def test_the_reflector_asks_for_its_shard_on_every_request_and_drops_the_rest() -> None:
    r = Reflector(CM, rng=random.Random(1), namespace="ns", page_size=1, shard_selector=SELECTOR)
    assert r.shard_selector == SELECTOR
    inside, outside = _uid_in(SELECTOR, True), _uid_in(SELECTOR, False)
    first = r.next_request(0.0)
    assert first is not None and first.query_value("shardSelector") == SELECTOR.render()

    def page_of(items: list[dict[str, Any]], token: str | None) -> Response:
        meta: dict[str, Any] = {"resourceVersion": "5"}
        if token:
            meta["continue"] = token
        doc = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta, "items": items}
        return Response(200, (), json.dumps(doc).encode())

    assert r.receive_response(page_of([obj(outside, name="out")], "t1"), 0.0) == []
    second = r.next_request(0.0)
    assert second is not None
    assert second.query_value("continue") == "t1"
    assert second.query_value("shardSelector") == SELECTOR.render()
    changes = r.receive_response(page_of([obj(inside, name="in")], None), 0.0)
    assert [c.object["metadata"]["name"] for c in changes] == ["in"]
    assert r.stats.out_of_shard == 1
    watch = r.next_request(0.0)
    assert watch is not None and watch.stream
    assert watch.query_value("shardSelector") == SELECTOR.render()
    r.receive_watch_head(200, (), 0.0)
    other = _uid_in(SELECTOR, False, start=20_000)
    events = b"".join(
        json.dumps({"type": kind, "object": o}).encode() + b"\n"
        for kind, o in [
            ("ADDED", obj(other, name="out2", rv="7")),
            ("MODIFIED", obj(inside, name="in", rv="8")),
            ("DELETED", obj(outside, name="out", rv="9")),
        ]
    )
    changes = r.receive_watch_data(events, 0.0)
    assert [(c.object["metadata"]["name"]) for c in changes] == ["in"]
    assert r.resource_version == "9"  # a dropped event still moves the resume point
    assert r.stats.out_of_shard == 3
    assert [o["metadata"]["name"] for o in r.store.objects()] == ["in"]


def test_a_streaming_list_asks_for_its_shard_and_drops_the_rest() -> None:
    r = Reflector(CM, rng=random.Random(1), streaming_list=True, shard_selector=SELECTOR)
    request = r.next_request(0.0)
    assert request is not None and request.query_value("sendInitialEvents") == "true"
    assert request.query_value("shardSelector") == SELECTOR.render()
    r.receive_watch_head(200, (), 0.0)
    inside, outside = _uid_in(SELECTOR, True), _uid_in(SELECTOR, False)
    end = {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "resourceVersion": "9",
            "annotations": {"k8s.io/initial-events-end": "true"},
        },
    }
    data = b"".join(
        json.dumps({"type": kind, "object": o}).encode() + b"\n"
        for kind, o in [
            ("ADDED", obj(inside, name="in")),
            ("ADDED", obj(outside, name="out")),
            ("BOOKMARK", end),
        ]
    )
    changes = r.receive_watch_data(data, 0.0)
    assert [c.object["metadata"]["name"] for c in changes] == ["in"]
    assert r.stats.out_of_shard == 1


def test_the_reflector_refuses_a_shard_selector_that_is_not_one() -> None:
    with pytest.raises(LocalProtocolError, match="ShardSelector"):
        Reflector(CM, rng=random.Random(1), shard_selector="x")  # type: ignore[arg-type]


def test_a_uid_is_hashed_once_however_often_a_sharded_replica_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: a sharded replica hashes each uid on every change, gated write and copy it
    labels; the pure-Python FNV-1a runs once per uid, and every caller agrees with it."""
    from kubemoon_core import _shard
    from kubemoon_core._changes import Change, ChangeType
    from kubemoon_core._resources import ObjectKey
    from kubemoon_core.sharding import ShardedKeys, owner_bucket, owner_bucket_label

    calls: list[bytes] = []

    def counting(data: bytes) -> int:
        calls.append(bytes(data))
        return fnv1a_64(data)

    monkeypatch.setattr(_shard, "fnv1a_64", counting)
    _shard.text_hash.cache_clear()
    uid = "5f0c3a6e-8d1b-4c2a-9e7f-0a1b2c3d4e5f"
    obj = {"metadata": {"namespace": "src", "name": "m", "uid": uid}}
    expected = fnv1a_64(uid.encode())
    for _ in range(3):
        assert shard_hash(obj) == expected
        assert owner_bucket(uid) == expected >> 56
        assert owner_bucket_label(uid) == f"{expected >> 56:02x}"
        assert ShardSelector((ShardRange(0, HASH_SPACE),)).contains(obj)
        keys = ShardedKeys()
        keys.observe(Change(ChangeType.ADDED, ObjectKey("src", "m"), None, obj))
    assert calls == [uid.encode()]
    with pytest.raises(ShardSelectorError):
        owner_bucket("\ud800")  # a lone surrogate: still refused, never remembered
    _shard.text_hash.cache_clear()
