"""The standard library, orjson and msgspec backends decode alike and refuse alike.

For generated JSON documents, watch streams and LIST pages, sound or corrupted, every
backend gives equal results or fails with a ``KubeMoonError`` at the same place: the same
watch events before the same bad line (same offset), the same LIST page or the same path.
Excluded are the differences the backends' parsers are documented to have (``_json``): a
lone UTF-16 surrogate escape (the standard library accepts it) and non-UTF-8 encodings the standard library sniffs. With
``keep_raw`` every item's and event's bytes decode to its object.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource, KubeMoonError
from kubemoon_core._json import loads
from kubemoon_core._reflector import Reflector
from kubemoon_core._watch import WatchDecoder
from kubemoon_core.errors import DecodeError
from kubemoon_core.json_backends import use_fast_json, use_msgspec_json, use_standard_json

BACKENDS: dict[str, Callable[[], object]] = {
    "json": use_standard_json,
    "orjson": use_fast_json,
    "msgspec": use_msgspec_json,
}
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # of any size: no backend reads one otherwise
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
# What the parsers are documented to read differently.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]", re.IGNORECASE)


def comparable(data: bytes) -> bool:
    return not (
        _SURROGATE.search(data)
        or b"\x00" in data[:4]
        or data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"))
    )


@pytest.fixture(autouse=True)
def _standard_afterwards() -> Iterator[None]:
    yield
    use_standard_json()


def each_backend(decode: Callable[[], Any]) -> dict[str, Any]:
    """``decode()`` under every backend: its result, or ("error", the error's type and place)."""
    results: dict[str, Any] = {}
    for name, select in BACKENDS.items():
        assert select() is not False
        try:
            results[name] = decode()
        except DecodeError as exc:
            results[name] = ("error", type(exc), exc.offset, exc.path)
        except KubeMoonError as exc:
            results[name] = ("error", type(exc))
        finally:
            use_standard_json()
    return results


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(out)))
        how = draw(st.sampled_from(["flip", "insert", "delete"]))
        if how == "flip" and at < len(out):
            out[at] = draw(st.integers(0, 255))
        elif how == "insert":
            out[at:at] = draw(st.sampled_from([b"1e999", b"NaN", b",", b"}", b'"', b"\xff", b" "]))
        else:
            del out[at : at + draw(st.integers(1, 5))]
    return bytes(out)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    return mutate(json.dumps(draw(VALUES), ensure_ascii=draw(st.booleans())).encode(), draw)


@given(data=documents())
def test_documents_decode_alike(data: bytes) -> None:
    assume(comparable(data))
    results = each_backend(lambda: loads(data))
    assert results["orjson"] == results["json"] == results["msgspec"]


TYPES = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "BOGUS"]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(TYPES))
        obj: Any = (
            {"kind": "Status", "code": 410}
            if kind == "ERROR" and draw(st.booleans())
            else {"metadata": {"name": draw(TEXT)}, "data": draw(VALUES)}
        )
        event: dict[str, Any] = {"type": kind, "object": obj}
        if draw(st.booleans()):
            event = {"object": obj, "type": kind}  # another member order
        if not draw(st.integers(0, 5)):
            event["extra"] = draw(VALUES)
        compact = draw(st.booleans())
        separators = (",", ":") if compact else (", ", ": ")
        lines.append(json.dumps(event, separators=separators).encode())
        if not draw(st.integers(0, 5)):
            lines.append(draw(st.sampled_from([b"", b" ", b"\r"])))
    return mutate(b"".join(line + b"\n" for line in lines), draw)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams(), keep_raw=st.booleans(), cut=st.integers(0, 2000))
def test_watch_streams_decode_alike(stream: bytes, keep_raw: bool, cut: int) -> None:
    assume(comparable(stream))

    def decode() -> list[tuple[str, Any]]:
        decoder = WatchDecoder(keep_raw=keep_raw)
        events = decoder.receive_data(stream[:cut]) if stream[:cut] else []
        events += decoder.receive_data(stream[cut:]) if stream[cut:] else []
        events += decoder.receive_data(b"")
        for event in events:
            if event.raw is not None:
                assert json.loads(event.raw) == event.object
        return [(event.type, event.object) for event in events]

    results = each_backend(decode)
    assert results["orjson"] == results["json"] == results["msgspec"]


def reflector() -> Reflector:
    return Reflector(GroupVersionResource("", "v1", "configmaps"), rng=random.Random(0))


@st.composite
def pages(draw: st.DrawFn) -> bytes:
    items = [
        {
            **({"apiVersion": "v1"} if draw(st.booleans()) else {}),
            **({"kind": "ConfigMap"} if draw(st.booleans()) else {}),
            "metadata": {"name": draw(TEXT), "resourceVersion": "7"},
            "data": draw(st.dictionaries(TEXT, VALUES, max_size=3)),
        }
        for _ in range(draw(st.integers(0, 4)))
    ]
    if draw(st.booleans()):
        items.append({})  # an item with nothing: apiVersion and kind are all it gets
    page: dict[str, Any] = {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42", **({"continue": "t"} if draw(st.booleans()) else {})},
        "items": items,
    }
    compact = draw(st.booleans())
    body = json.dumps(page, separators=(",", ":") if compact else (", ", ": "))
    return mutate(body.encode(), draw) if draw(st.booleans()) else body.encode()


@given(body=pages(), keep_raw=st.booleans())
def test_list_pages_decode_alike(body: bytes, keep_raw: bool) -> None:
    assume(comparable(body))

    def decode() -> tuple[Any, str, str]:
        items, raws, rv, token = reflector()._page(body, keep_raw)
        if raws is not None:
            assert keep_raw
            assert [json.loads(raw) for raw in raws] == items
        return items, rv, token

    results = each_backend(decode)
    assert results["orjson"] == results["json"] == results["msgspec"]


def test_apiserver_pages_have_raw_items_on_the_stdlib_and_msgspec() -> None:
    page = (
        b'{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9"},'
        b'"items":[{"metadata":{"name":"a","resourceVersion":"1"},"data":{"k":"\xc3\xa9"}},'
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}},{ }]}'
    )
    for name in ("json", "msgspec"):
        BACKENDS[name]()
        items, raws, rv, token = reflector()._page(page, True)
        assert (rv, token) == ("9", "")
        assert raws == [
            b'{"apiVersion":"v1","kind":"ConfigMap",'
            b'"metadata":{"name":"a","resourceVersion":"1"},"data":{"k":"\xc3\xa9"}}',
            b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}',
            b'{"apiVersion":"v1","kind":"ConfigMap" }',  # an empty item: no comma
        ], name
        assert [json.loads(raw) for raw in raws] == items
        assert reflector()._page(page)[1] is None  # only when asked
    use_fast_json()
    assert reflector()._page(page, True)[1] is None  # orjson has no spans to give


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b" { } ",
        b'{"metadata":{"resourceVersion":"1"},"items":null}',
        b'{"metadata":{"resourceVersion":"1"},"items":[]}',
        b'{"metadata":{"resourceVersion":"1"} "items":[]}',
        b'{"metadata":{"resourceVersion":"1"},"items":[{} {}]}',
        b'{"metadata":{"resourceVersion":"1"},"items":[{}]} x',
        b'{"metadata":{"resourceVersion":"1"},"items":[{}]}  \n',
        b'{"metadata":{"resourceVersion":"1"},"items":{}}',
        b'{"metadata":{"resourceVersion":"1"},"items":[1]}',
        b'{"metadata":{"resourceVersion":"1"},"other":1,"items":[{"a":1}]}',
        b"{1:2}",
        b"[]",
        b'{"metadata" 1}',
        b'{"metadata":{"resourceVersion":"1"},"items":[{"a":1e999}]}',
        b'{"metadata":{"resourceVersion":"1"},"items":[{"a":"\xff"}]}',
    ],
)
def test_unusual_pages_decode_as_without_keep_raw(body: bytes) -> None:
    """Every page the raw walk gives up on is decoded (or refused) the ordinary way."""

    def decode(keep_raw: bool) -> Any:
        items, raws, rv, token = reflector()._page(body, keep_raw)
        if raws is not None:
            assert [json.loads(raw) for raw in raws] == items
        return items, rv, token

    plain = each_backend(lambda: decode(False))
    kept = each_backend(lambda: decode(True))
    assert plain["orjson"] == plain["json"] == plain["msgspec"]
    assert kept == plain
