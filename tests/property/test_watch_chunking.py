"""Chunk-split invariance of the watch decoder, against a line-by-line oracle.

For generated event streams (ASCII and multi-byte text, ``\\r\\n`` endings, blank lines,
objects up to a few MiB in a few examples) and every chunking, 1-byte chunks included,
the decoder yields exactly the events of decoding the stream whole, which are the events
the oracle reads line by line. Corrupted or truncated streams raise only
``KubeMoonError`` subclasses, deliver only a prefix of the oracle's events, never buffer
more than the line limit, and leave the decoder failed. Every JSON backend is checked
(the standard library, orjson, msgspec). With ``keep_raw`` each event's ``raw`` is the
exact bytes of its object in the stream.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubemoon_core import KubeMoonError
from kubemoon_core._watch import WatchDecoder
from kubemoon_core._watch_events import WatchEvent
from kubemoon_core.json_backends import use_fast_json, use_msgspec_json, use_standard_json

TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)  # UTF-8: no surrogates
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "metadata": {"name": draw(TEXT), "resourceVersion": str(draw(st.integers(1, 10**9)))},
        "data": draw(st.dictionaries(TEXT, JSON_VALUES, max_size=4)),
    }


ERROR_OBJECT = {"kind": "Status", "apiVersion": "v1", "code": 410, "reason": "Expired"}
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(TYPES), objects()),
        st.just(("ERROR", ERROR_OBJECT)),
    ),
    max_size=12,
)


def encode(
    events: list[tuple[str, dict[str, Any]]], ascii_only: bool, crlf: list[bool], blanks: list[bool]
) -> bytes:
    """A stream as the API server writes it, with optional \\r\\n endings and blank lines."""
    out = bytearray()
    for index, (kind, obj) in enumerate(events):
        line = json.dumps({"type": kind, "object": obj}, ensure_ascii=ascii_only).encode()
        out += line
        out += b"\r\n" if crlf[index % len(crlf)] else b"\n"
        if blanks[index % len(blanks)]:
            out += b"\r\n" if crlf[index % len(crlf)] else b" \n"
    return bytes(out)


@pytest.fixture(params=["json", "orjson", "msgspec"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "orjson":
        assert use_fast_json()
    elif request.param == "msgspec":
        assert use_msgspec_json()
    try:
        yield request.param
    finally:
        use_standard_json()


def chunks_of(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def pull(chunks: list[bytes], *, keep_raw: bool = False) -> list[WatchEvent]:
    """The pull side: every chunk through ``events()``, the end through ``feed(b"")``."""
    decoder = WatchDecoder(keep_raw=keep_raw)
    events: list[WatchEvent] = []
    for chunk in chunks:
        if chunk:
            events += decoder.events(chunk)
    decoder.feed(b"")
    assert decoder.next_event() is None
    return events


def decode(
    chunks: list[bytes], *, max_line_length: int | None = None, keep_raw: bool = False
) -> list[WatchEvent]:
    decoder = WatchDecoder(
        max_line_length=16 << 20 if max_line_length is None else max_line_length,
        keep_raw=keep_raw,
    )
    events: list[WatchEvent] = []
    for chunk in chunks:
        if chunk:
            events += decoder.receive_data(chunk)
    events += decoder.receive_data(b"")
    return events


def oracle(stream: bytes, backend: str, limit: int) -> tuple[list[tuple[str, Any]], bool]:
    """Decode line by line, the obvious way: (events before any error, whether one occurs)."""
    loads: Callable[[bytes], Any] = {
        "orjson": orjson.loads,
        "msgspec": msgspec.json.decode,
    }.get(backend, lambda b: json.loads(b.decode("utf-8")))
    *lines, tail = stream.split(b"\n")
    events: list[tuple[str, Any]] = []
    for line in lines:
        if len(line) > limit:
            return events, True
        if not line.strip(b" \t\r"):
            continue
        try:
            doc = loads(line)
        except (ValueError, RecursionError):
            return events, True
        if not isinstance(doc, dict) or not isinstance(doc.get("object"), dict):
            return events, True
        kind, obj = doc.get("type"), doc["object"]
        if kind not in TYPES and not (kind == "ERROR" and obj.get("kind") == "Status"):
            return events, True
        events.append((kind, obj))
    return events, len(tail) > limit or bool(tail.strip(b" \t\r"))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=EVENTS,
    ascii_only=st.booleans(),
    crlf=st.lists(st.booleans(), min_size=1, max_size=3),
    blanks=st.lists(st.booleans(), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 5000), max_size=30),
)
def test_every_chunking_gives_the_events_of_the_whole(
    backend: str,
    *,
    events: list[tuple[str, dict[str, Any]]],
    ascii_only: bool,
    crlf: list[bool],
    blanks: list[bool],
    cuts: list[int],
) -> None:
    stream = encode(events, ascii_only, crlf, blanks)
    whole = decode([stream])
    assert [(e.type, e.object) for e in whole] == events
    assert decode(chunks_of(stream, cuts)) == whole
    assert pull(chunks_of(stream, cuts)) == whole
    assert pull([stream]) == whole
    if len(stream) <= 4000:
        assert decode([stream[i : i + 1] for i in range(len(stream))]) == whole
        assert pull([stream[i : i + 1] for i in range(len(stream))]) == whole
    for event in whole:
        if event.type == "ERROR":
            assert event.error is not None and event.error.code == 410
        else:
            assert event.error is None
            assert event.resource_version == event.object["metadata"]["resourceVersion"]


# Big inputs: a few examples by default, more under the fuzz profile.
@settings(
    max_examples=max(6, settings().max_examples // 100),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    piece=st.text(alphabet=st.sampled_from('ab é漢🙂"\\'), min_size=1, max_size=8),
    mebibytes=st.floats(0.5, 3.0),
    cuts=st.lists(st.integers(0, 8 << 20), max_size=40),
)
def test_objects_of_several_mebibytes(
    backend: str, piece: str, mebibytes: float, cuts: list[int]
) -> None:
    big = piece * int(mebibytes * (1 << 20) / len(piece.encode()))
    events = [
        ("ADDED", {"metadata": {"name": "small", "resourceVersion": "1"}}),
        ("MODIFIED", {"metadata": {"name": "big", "resourceVersion": "2"}, "data": {"k": big}}),
        ("DELETED", {"metadata": {"name": "small", "resourceVersion": "3"}}),
    ]
    stream = encode(events, False, [False], [False])
    whole = decode([stream])
    assert [(e.type, e.object) for e in whole] == events
    assert decode(chunks_of(stream, cuts)) == whole
    assert pull(chunks_of(stream, cuts)) == whole


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    stream = encode(draw(EVENTS), draw(st.booleans()), [draw(st.booleans())], [False])
    data = bytearray(stream)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, len(data)))
        if how == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 20))]
        else:
            del data[at:]
    return bytes(data)


# Streams with a corruption somewhere (or random bytes), cut anywhere, under several limits.
corrupted_streams = given(
    stream=corrupted() | st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 3000), max_size=20),
    limit=st.sampled_from([16 << 20, 64, 200]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@corrupted_streams
def test_corruption_raises_only_kubemoon_errors(
    backend: str, stream: bytes, cuts: list[int], limit: int
) -> None:
    expected, fails = oracle(stream, backend, limit)
    decoder = WatchDecoder(max_line_length=limit)
    delivered: list[WatchEvent] = []
    error: KubeMoonError | None = None
    try:
        for chunk in [*chunks_of(stream, cuts), b""]:
            delivered += decoder.receive_data(chunk)
            assert decoder.buffered <= limit
    except KubeMoonError as exc:
        error = exc
    got = [(e.type, e.object) for e in delivered]
    assert got == expected[: len(got)]
    if fails:
        assert error is not None
        with pytest.raises(KubeMoonError):
            decoder.receive_data(b"{}\n")
    else:
        assert error is None
        assert got == expected


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@corrupted_streams
def test_the_pull_side_delivers_every_event_before_the_first_bad_line(
    backend: str, stream: bytes, cuts: list[int], limit: int
) -> None:
    """feed()/next_event() deliver exactly the oracle's events, then raise if it fails:
    as if the stream had been cut just before the bad line."""
    expected, fails = oracle(stream, backend, limit)
    decoder = WatchDecoder(max_line_length=limit)
    delivered: list[WatchEvent] = []
    error: KubeMoonError | None = None
    try:
        for chunk in [*chunks_of(stream, cuts), b""]:
            decoder.feed(chunk)
            while (event := decoder.next_event()) is not None:
                delivered.append(event)
            assert decoder.buffered <= limit
    except KubeMoonError as exc:
        error = exc
    assert [(e.type, e.object) for e in delivered] == expected
    assert (error is not None) == fails
    if fails:
        with pytest.raises(KubeMoonError):
            decoder.next_event()
        with pytest.raises(KubeMoonError):
            decoder.feed(b"{}\n")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=EVENTS,
    compact=st.booleans(),
    ascii_only=st.booleans(),
    crlf=st.lists(st.booleans(), min_size=1, max_size=3),
    blanks=st.lists(st.booleans(), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 5000), max_size=30),
)
def test_raw_bytes_are_each_object_as_received(
    backend: str,
    *,
    events: list[tuple[str, dict[str, Any]]],
    compact: bool,
    ascii_only: bool,
    crlf: list[bool],
    blanks: list[bool],
    cuts: list[int],
) -> None:
    """keep_raw changes no event; every raw is the object's own bytes, taken from the
    stream, whatever the chunking; lines of the apiserver's compact shape always have them
    with the standard library (but ERROR) and msgspec."""
    if compact:
        stream = b"".join(
            json.dumps(
                {"type": kind, "object": obj}, separators=(",", ":"), ensure_ascii=ascii_only
            ).encode()
            + (b"\r\n" if crlf[i % len(crlf)] else b"\n")
            for i, (kind, obj) in enumerate(events)
        )
    else:
        stream = encode(events, ascii_only, crlf, blanks)
    plain = decode([stream])
    whole = decode([stream], keep_raw=True)
    assert whole == plain
    assert [e.raw for e in decode(chunks_of(stream, cuts), keep_raw=True)] == [e.raw for e in whole]
    assert [e.raw for e in pull(chunks_of(stream, cuts), keep_raw=True)] == [e.raw for e in whole]
    assert all(e.raw is None for e in plain)
    for event in whole:
        if event.raw is not None:
            assert event.raw in stream
            assert json.loads(event.raw) == event.object
        elif compact:
            assert backend == "orjson" or (backend == "json" and event.type == "ERROR")
