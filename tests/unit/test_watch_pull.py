"""WatchDecoder's pull side (feed / next_event / events): windows, errors in stream order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubemoon_core._json import dumps
from kubemoon_core.errors import DecodeError, LocalProtocolError, RemoteProtocolError
from kubemoon_core.json_backends import set_json_backend, use_standard_json
from kubemoon_core.lowlevel import PULL_WINDOW, WatchDecoder


def line(name: str, pad: int = 0, kind: str = "ADDED") -> bytes:
    obj = {"metadata": {"name": name, "resourceVersion": "1"}, "data": {"k": "x" * pad}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def names(events: Any) -> list[str]:
    return [event.object["metadata"]["name"] for event in events]


def pull(decoder: WatchDecoder) -> list[str]:
    """next_event() until None."""
    out = []
    while (event := decoder.next_event()) is not None:
        out.append(event.object["metadata"]["name"])
    return out


def test_the_same_events_as_receive_data_for_any_split(backend: str) -> None:
    stream = b"".join(line(f"n{i}", pad=i * 37) for i in range(60)) + b" \r\n\n"
    whole = WatchDecoder().receive_data(stream)
    for size in (1, 7, 1000, 70_000, len(stream)):
        decoder = WatchDecoder()
        got = []
        for start in range(0, len(stream), size):
            got += list(decoder.events(stream[start : start + size]))
        assert list(decoder.events(b"")) == []
        assert got == whole


def test_a_large_chunk_is_decoded_one_window_at_a_time() -> None:
    calls: list[int] = []

    def loads(data: Any) -> Any:
        calls.append(len(data))
        return json.loads(bytes(data))

    one = line("x", pad=1000)
    per_window = PULL_WINDOW // len(one) + 1
    set_json_backend("counting", loads, dumps)
    try:
        decoder = WatchDecoder()
        decoder.feed(one * (4 * per_window))
        assert decoder.next_event() is not None
        # Only the first window's lines were decoded so far.
        assert len(calls) == per_window
        assert len(pull(decoder)) == 4 * per_window - 1
        assert len(calls) == 4 * per_window
    finally:
        use_standard_json()


def test_a_line_longer_than_the_window(backend: str) -> None:
    big, small = line("big", pad=PULL_WINDOW * 2), line("small")
    decoder = WatchDecoder()
    assert names(decoder.events(small + big + small + b'{"ty')) == ["small", "big", "small"]
    assert decoder.buffered == 4


def test_buffered_start_joined_to_a_large_chunk(backend: str) -> None:
    lines = [line(f"n{i}", pad=500) for i in range(300)]
    stream = b"".join(lines)
    decoder = WatchDecoder()
    assert names(decoder.events(stream[:100])) == []
    assert names(decoder.events(stream[100:])) == [f"n{i}" for i in range(300)]
    # A single large line completing the buffered start: no second piece.
    long = line("long", pad=70_000)
    assert names(decoder.events(long[:5])) == []
    assert names(decoder.events(long[5:])) == ["long"]


def test_events_left_pending_are_handed_out_by_next_event(backend: str) -> None:
    decoder = WatchDecoder()
    iterator = decoder.events(line("a") + line("b") + line("c"))
    assert next(iterator).object["metadata"]["name"] == "a"
    with pytest.raises(LocalProtocolError, match="still to be taken"):
        decoder.feed(line("d"))
    with pytest.raises(LocalProtocolError, match="still to be taken"):
        decoder.receive_data(line("d"))
    assert pull(decoder) == ["b", "c"]
    assert names(decoder.events(line("d"))) == ["d"]


def test_a_bad_line_comes_after_the_events_before_it(backend: str) -> None:
    good = line("a")
    decoder = WatchDecoder()
    decoder.feed(good + good + b"{oops}\n" + good)
    assert pull_until_error(decoder) == ["a", "a"]
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.next_event()
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.feed(good)


def pull_until_error(decoder: WatchDecoder, offset: int | None = None) -> list[str]:
    """next_event() until it raises a DecodeError (at ``offset`` when given)."""
    out: list[str] = []
    failure: DecodeError | None = None
    while failure is None:
        try:
            event = decoder.next_event()
        except DecodeError as exc:
            failure = exc
            continue
        assert event is not None, "the decoder never raised"
        out.append(event.object["metadata"]["name"])
    assert offset is None or failure.offset == offset
    return out


def test_the_error_of_a_later_window_names_its_offset(backend: str) -> None:
    one = line("x", pad=1000)
    count = 3 * PULL_WINDOW // len(one)
    decoder = WatchDecoder()
    decoder.feed(one * count + b'{"type": "NOPE", "object": {}}\n' + one)
    assert len(pull_until_error(decoder, offset=count * len(one))) == count


def test_a_first_line_with_nothing_good_raises_at_once(backend: str) -> None:
    decoder = WatchDecoder()
    decoder.feed(b"[1]\n")
    with pytest.raises(DecodeError, match="not a JSON object") as info:
        decoder.next_event()
    assert info.value.offset == 0


def test_invalid_utf8_after_good_lines_of_a_window() -> None:
    good = line("a")
    decoder = WatchDecoder()
    decoder.feed(good + b'{"type": "\xff"}\n' + good)
    assert pull_until_error(decoder, offset=len(good)) == ["a"]


class TestLineLimit:
    def test_a_long_line_inside_a_chunk_comes_after_the_lines_before_it(self) -> None:
        ok = line("a")
        decoder = WatchDecoder(max_line_length=len(ok))
        decoder.feed(ok + ok + b" " * (len(ok) + 1) + b"\n" + ok)
        assert pull_until_error(decoder, offset=2 * len(ok)) == ["a", "a"]

    def test_a_long_line_right_after_a_buffered_start(self) -> None:
        ok = line("a")
        decoder = WatchDecoder(max_line_length=len(ok))
        decoder.feed(ok[:3])
        decoder.feed(ok[3:] + b" " * (len(ok) + 1) + b"\n")
        assert pull_until_error(decoder, offset=len(ok)) == ["a"]

    def test_a_long_tail_comes_after_the_lines_before_it(self) -> None:
        decoder = WatchDecoder(max_line_length=100)
        decoder.feed(b"  \n" + line("a")[:90] + b"\n" + b"x" * 101)
        with pytest.raises(DecodeError) as info:
            pull(decoder)
        assert info.value.offset == 3  # the cut line is bad JSON before the tail
        decoder = WatchDecoder(max_line_length=len(line("a")))
        decoder.feed(line("a") + b"x" * 200)
        assert pull_until_error(decoder, offset=len(line("a"))) == ["a"]

    def test_the_first_line_and_the_unfinished_line_raise_at_once(self) -> None:
        decoder = WatchDecoder(max_line_length=10)
        decoder.feed(b"123456")
        with pytest.raises(DecodeError, match="longer than 10") as info:
            decoder.feed(b"78901\n")
        assert info.value.offset == 0
        decoder = WatchDecoder(max_line_length=10)
        decoder.feed(b"123456")
        with pytest.raises(DecodeError, match="longer than 10"):
            decoder.feed(b"78901")


def test_the_end(backend: str) -> None:
    decoder = WatchDecoder()
    assert names(decoder.events(line("a") + b"  ")) == ["a"]
    decoder.feed(b"")
    assert decoder.next_event() is None
    with pytest.raises(LocalProtocolError, match="already ended"):
        decoder.feed(line("b"))
    decoder = WatchDecoder()
    decoder.feed(line("a")[:5])
    with pytest.raises(DecodeError, match="ended inside an event"):
        decoder.feed(b"")


def test_blank_windows_are_skipped(backend: str) -> None:
    blanks = b" \n" * (PULL_WINDOW // 2 + 10)
    decoder = WatchDecoder()
    assert names(decoder.events(blanks + line("a"))) == ["a"]
    assert names(decoder.events(blanks)) == []
