"""WatchDecoder: framing, validation, limits, error offsets and error states."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

import kubemoon_core
from kubemoon_core import KubeMoonError
from kubemoon_core._json import dumps
from kubemoon_core._watch import WatchDecoder
from kubemoon_core._watch_events import WatchEvent
from kubemoon_core.errors import DecodeError, Expired, LocalProtocolError, RemoteProtocolError
from kubemoon_core.json_backends import use_fast_json, use_msgspec_json, use_standard_json


def line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": name, "resourceVersion": rv}}


EXPIRED = {
    "kind": "Status",
    "apiVersion": "v1",
    "code": 410,
    "reason": "Expired",
    "message": "too old resource version: 1 (5)",
}


def test_events_and_their_properties(backend: str) -> None:
    bookmark = {
        "kind": "ConfigMap",
        "metadata": {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}},
    }
    stream = (
        line("ADDED", cm("a", "5"))
        + line("MODIFIED", cm("a", "6"))
        + line("DELETED", cm("a", "7"))
        + line("BOOKMARK", bookmark)
        + line("ERROR", EXPIRED)
    )
    events = WatchDecoder().receive_data(stream)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
    assert events[0].object == cm("a", "5")
    assert [e.resource_version for e in events] == ["5", "6", "7", "9", None]
    assert [e.initial_events_end for e in events] == [False, False, False, True, False]
    assert all(e.error is None for e in events[:4])
    error = events[4].error
    assert isinstance(error, Expired)
    assert error.code == 410
    assert "too old" in str(error)


def test_events_are_frozen_values() -> None:
    event = WatchEvent("ADDED", cm("a", "1"))
    assert event == WatchEvent("ADDED", cm("a", "1"))
    assert event != WatchEvent("MODIFIED", cm("a", "1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.type = "DELETED"  # type: ignore[misc]
    assert not hasattr(event, "__dict__")


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": "nope"},
        {"metadata": {"resourceVersion": 5}},
    ],
)
def test_resource_version_is_none_unless_a_string(obj: dict[str, Any]) -> None:
    assert WatchEvent("ADDED", obj).resource_version is None


@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        ("ADDED", {"metadata": {"annotations": {"k8s.io/initial-events-end": "true"}}}),
        ("BOOKMARK", {"metadata": {"annotations": {"k8s.io/initial-events-end": "false"}}}),
        ("BOOKMARK", {"metadata": {"annotations": "x"}}),
        ("BOOKMARK", {"metadata": []}),
        ("BOOKMARK", {}),
    ],
)
def test_only_an_annotated_bookmark_ends_the_initial_events(kind: Any, obj: dict[str, Any]) -> None:
    assert not WatchEvent(kind, obj).initial_events_end


def test_lines_split_anywhere_even_inside_a_character(backend: str) -> None:
    obj = {"metadata": {"name": "ü", "resourceVersion": "1"}, "data": {"k": "漢字🙂"}}
    data = json.dumps({"type": "ADDED", "object": obj}, ensure_ascii=False).encode() + b"\n"
    decoder = WatchDecoder()
    events = []
    for i in range(len(data)):
        events += decoder.receive_data(data[i : i + 1])
        assert decoder.buffered == (i + 1) % len(data)
    assert events == [WatchEvent("ADDED", obj)]
    assert decoder.receive_data(b"") == []


def test_crlf_and_blank_lines_are_tolerated(backend: str) -> None:
    a, b = line("ADDED", cm("a", "1")), line("ADDED", cm("b", "2"))
    stream = b"\n\r\n \t\n" + a[:-1] + b"\r\n\r\n" + b[:-1] + b" \r\n"
    decoder = WatchDecoder()
    events = decoder.receive_data(stream[:7]) + decoder.receive_data(stream[7:])
    assert [e.object["metadata"]["name"] for e in events] == ["a", "b"]
    assert decoder.receive_data(b"  \r") == []
    assert decoder.receive_data(b"") == []  # a whitespace-only tail is no event


def test_a_chunk_with_many_lines_and_a_tail(backend: str) -> None:
    decoder = WatchDecoder()
    first = line("ADDED", cm("a", "1"))
    stream = first[:10]
    assert decoder.receive_data(stream) == []
    rest = first[10:] + line("ADDED", cm("b", "2")) + line("ADDED", cm("c", "3"))[:5]
    assert [e.object["metadata"]["name"] for e in decoder.receive_data(rest)] == ["a", "b"]
    assert decoder.buffered == 5


def test_the_end_inside_an_event_is_an_error(backend: str) -> None:
    decoder = WatchDecoder()
    complete = line("ADDED", cm("a", "1"))
    decoder.receive_data(complete + b'{"type":')
    with pytest.raises(RemoteProtocolError) as info:
        decoder.receive_data(b"")
    assert isinstance(info.value, DecodeError)
    assert info.value.offset == len(complete)
    assert f"at byte {len(complete)}" in str(info.value)


def test_after_an_error_every_call_raises(backend: str) -> None:
    decoder = WatchDecoder()
    with pytest.raises(DecodeError):
        decoder.receive_data(b"not json\n")
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.receive_data(line("ADDED", cm("a", "1")))
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.receive_data(b"")


def test_after_the_end_every_call_raises() -> None:
    decoder = WatchDecoder()
    decoder.receive_data(b"")
    with pytest.raises(LocalProtocolError, match="already ended"):
        decoder.receive_data(line("ADDED", cm("a", "1")))


@pytest.mark.parametrize(
    ("bad", "message", "path"),
    [
        (b"{oops}\n", "invalid JSON", ""),
        (b"[1, 2]\n", "not a JSON object", ""),
        (b'{"object": {}}\n', "has no type", "type"),
        (b'{"type": "ADDED"}\n', "has no object", "object"),
        (b'{"type": "ADDED", "object": [1]}\n', "has no object", "object"),
        (b'{"type": "CHANGED", "object": {}}\n', "unknown watch event type 'CHANGED'", "type"),
        (b'{"type": 7, "object": {}}\n', "type is not a string", "type"),
        (b'{"type": ["ADDED"], "object": {}}\n', "type is not a string", "type"),
        (b'{"type": {"a": 1}, "object": {}}\n', "type is not a string", "type"),
        (b'{"type": "ERROR", "object": {"code": 410}}\n', "without a Status", "object"),
    ],
)
def test_malformed_lines_name_their_offset(
    backend: str, bad: bytes, message: str, path: str
) -> None:
    good = line("ADDED", cm("a", "1"))
    decoder = WatchDecoder()
    assert len(decoder.receive_data(good)) == 1
    with pytest.raises(DecodeError) as info:
        # The bad line is never delivered, and neither is what came with it in this call.
        decoder.receive_data(good + bad + good)
    assert message in str(info.value)
    assert info.value.offset == 2 * len(good)
    assert info.value.path == path


@pytest.fixture(params=["json", "orjson", "msgspec"])
def shipped_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backends KubeMoon ships (a custom backend decides for itself)."""
    if request.param == "orjson":
        assert use_fast_json()
    elif request.param == "msgspec":
        assert use_msgspec_json()
    try:
        yield request.param
    finally:
        use_standard_json()


@pytest.mark.parametrize(
    "number", [b"NaN", b"Infinity", b"-Infinity", b"1e999999", b"-1e999999", b"[1, NaN]"]
)
@pytest.mark.parametrize("size", ["small", "large"])
def test_non_finite_numbers_are_refused_on_every_backend(
    shipped_backend: str, number: bytes, size: str
) -> None:
    good = line("ADDED", cm("a", "1"))
    filler = good * (1 if size == "small" else 70_000 // len(good))
    bad = b'{"type": "MODIFIED", "object": {"kind": "X", "spec": {"n": ' + number + b"}}}\n"
    decoder = WatchDecoder()
    with pytest.raises(DecodeError, match="invalid JSON") as info:
        decoder.receive_data(filler + bad + good)
    assert info.value.offset == len(filler)


def test_the_offset_of_a_later_line_counts_multibyte_text() -> None:
    obj = {"metadata": {"name": "é漢", "resourceVersion": "1"}}
    good = json.dumps({"type": "ADDED", "object": obj}, ensure_ascii=False).encode() + b"\n"
    with pytest.raises(DecodeError) as info:
        WatchDecoder().receive_data(good + good + b"garbage\n")
    assert info.value.offset == 2 * len(good)


def test_invalid_utf8_is_an_error_at_its_line() -> None:
    good = line("ADDED", cm("a", "1"))
    bad = b'{"type": "ADDED", "object": {"x": "\xff"}}\n'
    with pytest.raises(DecodeError, match="not valid UTF-8") as info:
        WatchDecoder().receive_data(good + bad)
    assert info.value.offset == len(good)


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_bad_line_before_invalid_utf8_is_the_one_reported(
    shipped_backend: str, size: str
) -> None:
    """The first bad line of a chunk is reported, whether or not a later one is UTF-8."""
    good = line("ADDED", cm("a", "1"))
    filler = good * (1 if size == "small" else 70_000 // len(good))
    not_utf8 = b'{"type": "ADDED", "object": {"x": "\xff"}}\n'
    for first_bad in (b"garbage\n", b'{"type": "BOGUS", "object": {}}\n'):
        with pytest.raises(DecodeError) as info:
            WatchDecoder().receive_data(filler + first_bad + good + not_utf8 + good)
        assert info.value.offset == len(filler)
        assert "UTF-8" not in str(info.value)


@pytest.mark.parametrize("where", ["joined", "after"])
def test_invalid_utf8_offsets_when_a_line_was_buffered(where: str) -> None:
    good = line("ADDED", cm("a", "1"))
    bad = b'{"type": "ADDED", "object": {"x": "\xc3"}}\n'
    decoder = WatchDecoder()
    if where == "joined":
        decoder.receive_data(good + bad[:5])
        with pytest.raises(DecodeError, match="not valid UTF-8") as info:
            decoder.receive_data(bad[5:] + good)
        assert info.value.offset == len(good)
    else:
        decoder.receive_data(good[:5])
        with pytest.raises(DecodeError, match="not valid UTF-8") as info:
            decoder.receive_data(good[5:] + good + bad + good)
        assert info.value.offset == 2 * len(good)


def test_a_line_joined_from_chunks_is_checked_like_any_other(backend: str) -> None:
    good = line("ADDED", cm("a", "1"))
    decoder = WatchDecoder()
    decoder.receive_data(good + b'{"type": "NOPE", ')
    with pytest.raises(DecodeError) as info:
        decoder.receive_data(b'"object": {}}\n')
    assert info.value.offset == len(good)


class TestLineLimit:
    def test_the_limit_must_be_a_positive_int(self) -> None:
        for bad in (0, -1, True, 1.5, "10"):
            with pytest.raises(LocalProtocolError):
                WatchDecoder(max_line_length=bad)  # type: ignore[arg-type]

    def test_a_line_growing_past_the_limit_fails_before_its_end(self) -> None:
        decoder = WatchDecoder(max_line_length=10)
        decoder.receive_data(b"  \n12345")
        decoder.receive_data(b"67890")
        assert decoder.buffered == 10
        with pytest.raises(DecodeError, match="longer than 10 bytes") as info:
            decoder.receive_data(b"1")
        assert info.value.offset == 3
        assert decoder.buffered == 0

    def test_the_first_line_of_a_chunk_counts_what_was_buffered(self) -> None:
        decoder = WatchDecoder(max_line_length=10)
        decoder.receive_data(b"123456")
        with pytest.raises(DecodeError, match="longer than 10") as info:
            decoder.receive_data(b"78901\n  \n")
        assert info.value.offset == 0

    def test_the_tail_of_a_chunk(self) -> None:
        decoder = WatchDecoder(max_line_length=10)
        with pytest.raises(DecodeError, match="longer than 10") as info:
            decoder.receive_data(b"  \n" + b"x" * 11)
        assert info.value.offset == 3

    def test_a_whole_line_inside_a_big_chunk(self) -> None:
        ok = line("ADDED", {})
        decoder = WatchDecoder(max_line_length=len(ok))
        with pytest.raises(DecodeError, match="longer than") as info:
            decoder.receive_data(ok + ok + b" " * (len(ok) + 1) + b"\n" + ok)
        assert info.value.offset == 2 * len(ok)

    def test_lines_at_the_limit_pass(self, backend: str) -> None:
        ok = line("ADDED", {})
        decoder = WatchDecoder(max_line_length=len(ok) - 1)
        assert len(decoder.receive_data(ok * 5)) == 5
        assert len(decoder.receive_data(ok[:4])) == 0
        assert len(decoder.receive_data(ok[4:] + ok)) == 2


def test_only_kubemoon_errors_escape(backend: str) -> None:
    deep = b'{"type": "ADDED", "object": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    with pytest.raises(KubeMoonError):
        WatchDecoder(max_line_length=1 << 20).receive_data(deep)


# The standard library's documents are scanned in place in the chunk's text; every line
# that is not exactly one document followed by blanks must end as decoding it alone does.
TRICKY_LINES = [
    b'  {"type": "ADDED", "object": {}}',  # leading blanks
    b'{"type": "ADDED", "object": {}} \t\r',  # trailing blanks
    b'{"type": "ADDED", "object": {"x": NaN}}',  # not RFC 8259: refused by scan and loads
    b'{"type": "ADDED", "object": {"x": 1e999999}}',  # overflows a double: refused alike
    b'{"type": "ADDED", "object": {}} x',  # trailing garbage
    b'{"type": "ADDED", "object": {}}{"type": "ADDED", "object": {}}',  # two documents
    b'{"type": "ADDED",',  # a document continued on the next line
    b'"object": {}}',
    b'"just a string"',
    b"\xef\xbb\xbf{}",  # a BOM
    b'{"type": "ADDED", "object": {"x": "a\tb"}}',  # a raw control character in a string
    b" \t",
]


def _oracle(lines: list[bytes]) -> list[WatchEvent] | tuple[str, int]:
    """Decode each line alone: the events, or the reason and offset of the first error."""
    from kubemoon_core._json import loads

    events, offset = [], 0
    for raw in lines:
        text = raw.decode()
        try:
            doc = loads(text)
        except DecodeError as exc:
            if text.strip(" \t\r"):
                return exc.reason, offset
            doc = None
        if doc is not None:
            if not (isinstance(doc, dict) and doc.get("type") == "ADDED"):
                return "watch event", offset
            events.append(WatchEvent("ADDED", doc["object"]))
        offset += len(raw) + 1
    return events


@pytest.mark.parametrize("tricky", range(len(TRICKY_LINES)))
@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("buffered", [False, True])
def test_scanned_lines_end_as_decoded_alone(tricky: int, size: str, buffered: bool) -> None:
    good = line("ADDED", cm("a", "1"))[:-1]
    count = 1 if size == "small" else 70_000 // len(good)
    lines = [good] * count + TRICKY_LINES[tricky : tricky + 2] + [good]
    stream = b"\n".join(lines) + b"\n"
    expected = _oracle(lines)
    decoder = WatchDecoder()
    chunks = [stream[:5], stream[5:]] if buffered else [stream]
    if isinstance(expected, list):
        assert [event for chunk in chunks for event in decoder.receive_data(chunk)] == expected
        return
    reason, offset = expected
    if buffered:
        decoder.receive_data(chunks[0])
    with pytest.raises(DecodeError) as info:
        decoder.receive_data(chunks[-1])
    assert reason in info.value.reason
    assert info.value.offset == offset


def test_a_long_line_completed_by_a_large_chunk() -> None:
    long = line("ADDED", {"data": {"k": "x" * 70_000}})
    decoder = WatchDecoder()
    assert decoder.receive_data(long[:10]) == []
    assert decoder.receive_data(long[10:]) == [WatchEvent("ADDED", {"data": {"k": "x" * 70_000}})]


def test_the_offset_of_a_bad_line_after_a_large_buffered_chunk() -> None:
    good = json.dumps({"type": "ADDED", "object": {"k": "é" * 50}}, ensure_ascii=False)
    good_line = good.encode() + b"\n"
    stream = good_line * (70_000 // len(good_line)) + b"bad\n"
    decoder = WatchDecoder()
    decoder.receive_data(stream[:3])
    with pytest.raises(DecodeError, match="invalid JSON") as info:
        decoder.receive_data(stream[3:])
    assert info.value.offset == len(stream) - 4


# -- the garbage-collector pause on large chunks --------------------------------------------


def _big_chunk() -> tuple[bytes, int]:
    """At least GC_PAUSE_MIN bytes of complete events, plus the start of one more."""
    from kubemoon_core.lowlevel import GC_PAUSE_MIN

    one = line("ADDED", {"metadata": {"name": "x", "resourceVersion": "1"}, "data": {"k": "v"}})
    count = GC_PAUSE_MIN // len(one) + 1
    return one * count + b'{"type":', count


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations the cyclic collector collects while the test runs, with a threshold
    low enough that decoding a large chunk would trigger collections."""
    import gc

    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    threshold = gc.get_threshold()
    enabled = gc.isenabled()
    gc.enable()
    gc.set_threshold(50, 10, 10)
    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*threshold)
        if not enabled:
            gc.disable()


def test_large_chunk_is_decoded_without_collections_and_the_collector_restored(
    collections: list[int],
) -> None:
    import gc

    from kubemoon_io import paused_gc

    data, count = _big_chunk()
    events = WatchDecoder(gc_pause=paused_gc).receive_data(data)
    assert len(events) == count
    # Decoding runs with the collector paused; the first allocations after the pause may
    # start the collection that was due, as they would in any other code.
    assert len(collections) <= 3
    assert gc.isenabled()


def test_large_chunk_without_gc_pause_collects_as_usual(collections: list[int]) -> None:
    data, count = _big_chunk()
    assert len(WatchDecoder(gc_pause=False).receive_data(data)) == count
    assert len(collections) > 100  # the same work does trigger it: the pause is real


def test_the_core_decoder_never_pauses_the_collector_by_itself(collections: list[int]) -> None:
    # The pause is the caller's (kubemoon_io.paused_gc): the pure core leaves process
    # state alone, so a large chunk decoded without one is collected as usual.
    data, count = _big_chunk()
    assert len(WatchDecoder().receive_data(data)) == count
    assert len(collections) > 100


def test_the_pause_is_asked_for_large_pushed_chunks_only() -> None:
    import contextlib

    data, count = _big_chunk()
    asked: list[str] = []

    @contextlib.contextmanager
    def pause() -> Iterator[None]:
        asked.append("enter")
        yield
        asked.append("exit")

    decoder = WatchDecoder(gc_pause=pause)
    assert decoder.receive_data(data[:4096])  # a small chunk (whole events): no pause
    assert asked == []
    decoder = WatchDecoder(gc_pause=pause)
    assert len(decoder.receive_data(data)) == count
    assert asked == ["enter", "exit"]
    puller = WatchDecoder(gc_pause=pause)
    puller.feed(data)
    assert sum(1 for _ in iter(puller.next_event, None)) == count
    assert asked == ["enter", "exit"]  # the pull side decodes windows: never paused


def test_gc_pause_true_is_deprecated_and_a_bad_value_refused() -> None:
    with pytest.warns(DeprecationWarning, match="paused_gc"):
        WatchDecoder(gc_pause=True)
    with pytest.raises(LocalProtocolError, match="gc_pause"):
        WatchDecoder(gc_pause="yes")  # type: ignore[arg-type]


def test_small_chunks_never_touch_the_collector(collections: list[int]) -> None:
    from kubemoon_io import paused_gc

    data, count = _big_chunk()
    decoder = WatchDecoder(gc_pause=paused_gc)
    total = sum(len(decoder.receive_data(data[i : i + 4096])) for i in range(0, len(data), 4096))
    assert total == count
    assert len(collections) > 100  # collections run between and during small calls


def test_a_disabled_collector_stays_disabled(collections: list[int]) -> None:
    import gc

    from kubemoon_io import paused_gc

    data, count = _big_chunk()
    gc.disable()
    try:
        assert len(WatchDecoder(gc_pause=paused_gc).receive_data(data)) == count
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_restored_when_a_large_chunk_fails(collections: list[int]) -> None:
    import gc

    from kubemoon_io import paused_gc

    data, _ = _big_chunk()
    decoder = WatchDecoder(gc_pause=paused_gc)
    with pytest.raises(DecodeError):
        decoder.receive_data(b"not json\n" + data)
    assert gc.isenabled()


# --- keep_raw: each object's bytes as received -------------------------------------------


def test_raw_is_only_kept_when_asked(shipped_backend: str) -> None:
    data = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}\n'
    assert WatchDecoder().receive_data(data)[0].raw is None
    (event,) = WatchDecoder(keep_raw=True).receive_data(data)
    expected = b'{"metadata":{"name":"a","resourceVersion":"1"}}'
    assert event.raw == (None if shipped_backend == "orjson" else expected)
    assert "raw" not in repr(event)
    assert event == WatchEvent("ADDED", json.loads(expected))  # raw takes no part


@pytest.mark.parametrize(
    ("data", "has_it"),
    [
        (b'{"type":"MODIFIED","object":{"a":"\xc3\xa9 \\u00e9"}}\r\n', {"json", "msgspec"}),
        (b'{"type":"DELETED","object":{"a":[1,2.5,{}]}}  \n', {"json", "msgspec"}),
        (b'{"type": "ADDED", "object": {"a": 1}}\n', {"msgspec"}),  # not the compact shape
        (b'{"object":{"a":1},"type":"ADDED"}\n', {"msgspec"}),  # members the other way round
        (b'{"type":"ERROR","object":{"kind":"Status","code":410}}\n', {"msgspec"}),
        (b'{"type":"ADD\\u0045D","object":{"a":1}}\n', {"msgspec"}),  # an escaped type
        (b'{"type":"ADDED","object":{"a":1},"more":1}\n', set()),  # another member
    ],
)
def test_raw_bytes_are_exactly_the_object(
    shipped_backend: str, data: bytes, has_it: set[str]
) -> None:
    (event,) = WatchDecoder(keep_raw=True).receive_data(data)
    assert event == WatchDecoder().receive_data(data)[0]
    if shipped_backend not in has_it:
        assert event.raw is None
        return
    assert event.raw is not None
    assert event.raw in data
    assert json.loads(event.raw) == event.object
    assert event.raw.startswith(b"{") and event.raw.endswith(b"}")


def test_raw_of_the_scanned_path_when_the_object_spans_lines_or_is_bad() -> None:
    """The stdlib's shape path gives way to the ordinary one for anything else."""
    decoder = WatchDecoder(keep_raw=True)
    with pytest.raises(DecodeError, match="invalid JSON"):
        decoder.receive_data(b'{"type":"ADDED","object":{"a":NaN}}\n')
    decoder = WatchDecoder(keep_raw=True)
    with pytest.raises(DecodeError, match="unknown watch event type"):
        decoder.receive_data(b'{"type":"BOGUS","object":{"a":1}}\n')
    decoder = WatchDecoder(keep_raw=True)
    with pytest.raises(DecodeError):
        decoder.receive_data(b'{"type":"ADDED","object":{"a":1}} x\n')


# --- blank lines cost no decoding --------------------------------------------------------


@pytest.mark.parametrize("path", ["scan", "structs", "generic"])
def test_short_blank_lines_are_skipped_without_a_decode(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of blank lines (a megabyte of newlines once cost seconds of failed decodes)
    reaches no decoder; a long blank line is still tolerated after one."""
    import kubemoon_core._watch_lines as watch

    calls: list[object] = []
    if path == "scan":
        scan = watch._SCAN
        monkeypatch.setattr(watch, "_SCAN", lambda text, pos: calls.append(pos) or scan(text, pos))
    elif path == "structs":
        assert use_msgspec_json()
        line_decode, raw_decode, object_decode = watch._struct_decoders()
        monkeypatch.setattr(
            watch,
            "_struct_decoders",
            lambda: (lambda b: calls.append(b) or line_decode(b), raw_decode, object_decode),
        )
    else:
        kubemoon_core.json_backends.set_json_backend(
            "custom", lambda b: calls.append(b) or json.loads(b), dumps
        )
    try:
        good = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'
        blanks = b"\n\r\n \t\r\n" * 10_000
        for size in (100, 70_000):  # a small chunk, and a large one (decoded in windows)
            calls.clear()
            filler = blanks[:size] if size > len(good) else b"\n"
            events = WatchDecoder().receive_data(filler + good + filler + good)
            assert [e.type for e in events] == ["ADDED", "ADDED"]
            assert len(calls) == 2
        calls.clear()
        assert WatchDecoder().receive_data(b" " * 100 + b"\r\n" + good) == [events[0]]
        assert len(calls) == 2  # the long blank line was tried once
    finally:
        use_standard_json()
