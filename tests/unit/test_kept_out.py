"""Objects too deeply nested to decode are kept out of the cache; the others sync.

Regression for issue 31, defect 1: one custom resource nested 10,000 levels (the apiserver
stores 9,000+, every JSON backend stops near 1,000) made every LIST page fail forever.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, ObjectKey, Response
from kubemoon_core._changes import ChangeType
from kubemoon_core._jsonsplit import depth_and_end, elements, identity, members
from kubemoon_core._reflector import Reflector
from kubemoon_core._reflector_states import ReflectorState
from kubemoon_core.errors import DecodeError
from kubemoon_core.lowlevel import KeptOutEvent, Store, WatchDecoder

W = GroupVersionResource("example.com", "v1", "widgets")
DEPTH = 10_000


def deep_json(depth: int = DEPTH) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def item_json(name: str, rv: str, spec: str = '{"n":1}') -> str:
    return (
        f'{{"metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}",'
        f'"resourceVersion":"{rv}"}},"spec":{spec}}}'
    )


def page(items: list[str], rv: str, token: str | None = None) -> Response:
    meta = {"resourceVersion": rv} | ({"continue": token} if token else {})
    body = (
        '{"kind":"WidgetList","apiVersion":"example.com/v1","metadata":'
        + json.dumps(meta)
        + ',"items":['
        + ",".join(items)
        + "]}"
    )
    return Response(200, (), body.encode())


def line(kind: str, obj: str) -> bytes:
    return f'{{"type":"{kind}","object":{obj}}}\n'.encode()


def reflector(compact: bool, **kwargs: Any) -> Reflector:
    return Reflector(
        W, rng=random.Random(1), namespace="ns", store=Store(compact=compact), **kwargs
    )


def watching(r: Reflector, items: list[str]) -> list[Any]:
    assert r.next_request(0.0) is not None
    changes = r.receive_response(page(items, "10"), 0.0)
    assert r.state is ReflectorState.WATCH_DUE
    assert r.next_request(0.0) is not None
    r.receive_watch_head(200, (), 0.0)
    return changes


def test_the_scanner_finds_parts_of_a_document_too_deep_to_decode() -> None:
    data = item_json("deep", "7", deep_json()).encode()
    assert depth_and_end(data, 0) == (DEPTH + 1, len(data))
    spans, end = members(data, 0)
    assert end == len(data) and set(spans) == {"metadata", "spec"}
    assert identity(data, 0)["metadata"] == {
        "namespace": "ns",
        "name": "deep",
        "uid": "u-deep",
        "resourceVersion": "7",
    }
    places, _ = elements(b' [1, "a]", {"b":[2]} ]', 1)
    assert len(places) == 3
    for bad in (b'{"a":[1}', b'{"a":"x', b"[1,", b'{"a" 1}'):
        with pytest.raises(DecodeError):
            depth_and_end(bad, 0) if bad[0] == 0x5B else members(bad, 0)


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
def test_a_list_page_keeps_the_deep_item_out_and_syncs_the_rest(
    backend: str, compact: bool
) -> None:
    r = reflector(compact)
    items = [item_json(f"w{i}", "5") for i in range(10)]
    items.insert(4, item_json("deep", "6", deep_json()))
    changes = watching(r, items)
    assert r.has_synced
    assert sorted(c.key.name for c in changes) == [f"w{i}" for i in range(10)]
    assert len(r.store) == 10 and ObjectKey("ns", "deep") not in r.store
    (record,) = r.kept_out.values()
    assert record.key == ObjectKey("ns", "deep") and record.uid == "u-deep"
    assert f"nested {DEPTH + 1} levels deep" in record.reason and backend in record.reason
    assert r.stats.kept_out == 1 and r.stats.failures == 0


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
def test_a_deep_watch_event_is_skipped_and_its_stale_copy_leaves_the_cache(
    backend: str, compact: bool
) -> None:
    r = reflector(compact)
    watching(r, [item_json("w0", "5"), item_json("w1", "5")])
    data = line("MODIFIED", item_json("w1", "11", deep_json())) + line(
        "ADDED", item_json("w2", "12")
    )
    changes = r.receive_watch_data(data, 0.0)
    assert [(c.type, c.key.name) for c in changes] == [(ChangeType.ADDED, "w2")]
    assert r.state is ReflectorState.WATCHING and r.resource_version == "12"
    assert ObjectKey("ns", "w1") not in r.store  # the stale copy is not read as current
    assert list(r.kept_out) == [ObjectKey("ns", "w1")] and r.stats.kept_out == 1
    # Shallow again: back in the cache; deleted: no longer kept out.
    r.receive_watch_data(line("MODIFIED", item_json("w1", "13")), 0.0)
    assert ObjectKey("ns", "w1") in r.store and not r.kept_out
    r.receive_watch_data(line("ADDED", item_json("w3", "14", deep_json())), 0.0)
    assert list(r.kept_out) == [ObjectKey("ns", "w3")]
    r.receive_watch_data(line("DELETED", item_json("w3", "15", deep_json())), 0.0)
    assert not r.kept_out and r.resource_version == "15"


@pytest.mark.parametrize("compact", [False, True], ids=["plain", "compact"])
def test_a_streaming_list_keeps_the_deep_object_out(backend: str, compact: bool) -> None:
    r = reflector(compact, streaming_list=True)
    assert r.next_request(0.0) is not None
    r.receive_watch_head(200, (), 0.0)
    end = (
        '{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"resourceVersion":"9",'
        '"annotations":{"k8s.io/initial-events-end":"true"}}}'
    )
    data = (
        line("ADDED", item_json("w0", "5"))
        + line("ADDED", item_json("deep", "6", deep_json()))
        + line("ADDED", item_json("w1", "7"))
        + line("BOOKMARK", end)
    )
    changes = r.receive_watch_data(data, 0.0)
    assert r.has_synced and sorted(c.key.name for c in changes) == ["w0", "w1"]
    assert list(r.kept_out) == [ObjectKey("ns", "deep")]


def test_a_relist_drops_the_stale_copy_without_a_deletion(backend: str) -> None:
    r = reflector(False)
    watching(r, [item_json("w0", "5"), item_json("w1", "5")])
    gone = '{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}'
    r.receive_watch_data(line("ERROR", gone), 0.0)  # the watch expired: a relist
    r.watch_ended(0.0)
    deadline = r.next_deadline()
    assert deadline is not None and r.next_request(deadline) is not None
    changes = r.receive_response(
        page([item_json("w0", "5"), item_json("w1", "20", deep_json())], "20"), deadline
    )
    assert changes == []  # w1 left the cache, but it was not deleted: no change
    assert ObjectKey("ns", "w1") not in r.store and list(r.kept_out) == [ObjectKey("ns", "w1")]


def test_a_malformed_shallow_item_still_refuses_the_page(backend: str) -> None:
    r = reflector(False)
    assert r.next_request(0.0) is not None
    r.receive_response(page([item_json("w0", "5"), '{"metadata":tru}'], "10"), 0.0)
    assert not r.has_synced and isinstance(r.last_error, DecodeError)
    assert not r.kept_out


def test_the_watch_decoder_hands_out_a_kept_out_event(backend: str) -> None:
    obj = item_json("deep", "6", deep_json())
    (event,) = WatchDecoder().receive_data(line("ADDED", obj))
    assert isinstance(event, KeptOutEvent) and event.type == "ADDED"
    assert event.resource_version == "6" and event.object["metadata"]["name"] == "deep"
    # A malformed line is still an error.
    with pytest.raises(DecodeError):
        WatchDecoder().receive_data(b'{"type":"ADDED","object":{"a":[}}\n')
