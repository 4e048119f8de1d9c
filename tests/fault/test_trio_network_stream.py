"""The trio adapter's network stream: a request's writes leave together, at the first read.

Driven through trio's in-memory streams (a real ``trio.abc.Stream``, no sockets needed): the
send side records every ``send_all``; its hook can stall a send or break it.
"""

from __future__ import annotations

import httpcore
import pytest
import trio
import trio.testing

from kubemoon_trio._backend import _TrioStream

pytestmark = pytest.mark.fault


def _stream() -> tuple[
    _TrioStream, trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream, list[bytes]
]:
    sent: list[bytes] = []
    send = trio.testing.MemorySendStream()

    async def record() -> None:
        sent.append(bytes(send.get_data_nowait()))

    send.send_all_hook = record
    receive = trio.testing.MemoryReceiveStream()
    return _TrioStream(trio.StapledStream(send, receive)), send, receive, sent


async def test_a_requests_head_and_body_go_out_in_one_send_before_the_read() -> None:
    stream, _, receive, sent = _stream()
    await stream.write(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n", timeout=5)
    await stream.write(b"body", timeout=5)
    await stream.write(b"", timeout=5)
    assert sent == []  # held back until the answer is read
    receive.put_data(b"HTTP/1.1 200 OK\r\n")
    assert await stream.read(65536, timeout=5) == b"HTTP/1.1 200 OK\r\n"
    assert sent == [b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"]
    receive.put_data(b"more")
    assert await stream.read(65536, timeout=5) == b"more"
    assert len(sent) == 1  # nothing left to send


async def test_a_large_write_goes_out_at_once_after_what_was_held() -> None:
    stream, _, _, sent = _stream()
    await stream.write(b"head", timeout=5)
    big = b"x" * (_TrioStream.COALESCE_LIMIT + 1)
    await stream.write(big, timeout=5)
    assert sent == [b"head", big]


async def test_a_failed_send_at_the_read_is_passed_over_and_the_answer_read() -> None:
    # As httpcore's connection does with a failed request write: a server may answer and
    # close before reading the whole request.
    stream, send, receive, _ = _stream()
    await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=5)
    send.close()
    receive.put_data(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert await stream.read(65536, timeout=5) == b"HTTP/1.1 413 Request Entity Too Large\r\n"


async def test_a_send_that_stalls_at_the_read_raises_the_write_timeout() -> None:
    stream, send, _, _ = _stream()

    async def stall() -> None:
        await trio.sleep_forever()

    send.send_all_hook = stall
    await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=0.05)
    with pytest.raises(httpcore.WriteTimeout):
        await stream.read(65536, timeout=5)


async def test_a_broken_read_is_a_read_error_and_a_stalled_one_a_read_timeout() -> None:
    stream, _, receive, _ = _stream()
    with pytest.raises(httpcore.ReadTimeout):
        await stream.read(65536, timeout=0.05)
    receive.close()
    with pytest.raises(httpcore.ReadError):
        await stream.read(65536, timeout=5)
