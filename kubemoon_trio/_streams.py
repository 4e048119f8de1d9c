"""Streaming responses: a response read chunk by chunk on a connection of its own, and the
events of a WATCH decoded from one.

Rules: a stream owns its connection (its own one-connection pool) and closing the stream
closes it, also on cancellation (shielded); a cut connection is a ``TransportError`` and a
stall a ``TransportTimeout``, never a foreign exception. A ``Watch`` is iterated only
inside its ``async with`` block, so no ``break`` or dropped iterator leaves a connection
open; it pulls events one at a time (``WatchDecoder.feed``/``next_event``), so a large
chunk is never decoded all at once, and the events before a malformed line come before its
error. Opening the stream (credentials, retries after a 401, error answers) is the
client's job: a ``Watch`` only asks its opener for one.
"""

from __future__ import annotations

from typing import Protocol

import httpcore

from kubemoon_core import Request
from kubemoon_core._watch import WatchDecoder
from kubemoon_core._watch_events import WatchEvent
from kubemoon_core.errors import LocalProtocolError
from kubemoon_io import TransportTimeout, transport_error

from . import _backend
from ._framing import ERROR_BODY_LIMIT, NETWORK_ERRORS, Headers, decode_headers

__all__ = ["StreamResponse", "Watch"]


class StreamResponse:
    """A streaming response on a connection of its own; close it to close the connection."""

    def __init__(
        self,
        pool: httpcore.AsyncConnectionPool,
        response: httpcore.Response,
        origin: str,
        server_name: str | None,
    ) -> None:
        self._pool = pool
        self._reader = _backend.BodyReader(response)
        self._origin = origin
        self._server_name = server_name
        self._closed = False
        self.status_code: int = response.status
        self.headers: Headers = decode_headers(response.headers)

    def __repr__(self) -> str:
        return f"<StreamResponse {self.status_code} from {self._origin}>"

    @property
    def closed(self) -> bool:
        """True once the stream (and its connection) is closed."""
        return self._closed

    async def receive(self, deadline: float | None = None) -> bytes:
        """The next chunk of the body; ``b""`` at its clean end.

        A cut connection raises :class:`TransportError`; no data before ``deadline`` (on the
        adapter's clock; blocking streams use their read timeout) raises
        :class:`TransportTimeout`.
        """
        if self._closed:
            return b""
        try:
            return await self._reader.receive(deadline)
        except TimeoutError:
            raise TransportTimeout(f"{self._origin}: the stream stalled") from None
        except NETWORK_ERRORS as exc:
            raise transport_error(exc, self._origin, self._server_name) from None

    async def read_error_body(self) -> bytes:
        """Read (a bounded prefix of) the body, for an error response."""
        body = b""
        while len(body) < ERROR_BODY_LIMIT:
            chunk = await self.receive()
            if not chunk:
                break
            body += chunk
        return body[:ERROR_BODY_LIMIT]

    async def aclose(self) -> None:
        """Close the response and its connection; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with _backend.shielded():
            try:
                await self._reader.aclose()
            except NETWORK_ERRORS:
                pass
            finally:
                await self._pool.aclose()


class StreamOpener(Protocol):
    """What a :class:`Watch` needs of its client: a way to open a checked stream."""

    async def open_stream(
        self, request: Request, *, read_timeout: float | None = None, check: bool = False
    ) -> StreamResponse: ...


class Watch:
    """The events of one WATCH request, on a connection of its own.

    Use it as ``async with client.watch(...) as events: async for event in events: ...``;
    iterating it outside its block raises ``LocalProtocolError``, so that no connection is
    ever left open by a ``break`` or a dropped iterator. Leaving the block, an error or a
    cancellation closes the connection. The
    iteration ends when the server ends the stream cleanly (``timeoutSeconds``); a cut
    stream raises :class:`TransportError` (a partial event is never dropped silently); a
    malformed line raises the core's ``DecodeError`` after the events before it; an
    ``ERROR`` event raises its
    ``ApiError`` (410 is ``Gone``/``Expired``).
    """

    def __init__(self, client: StreamOpener, request: Request, read_timeout: float | None) -> None:
        self._client = client
        self._request = request
        self._read_timeout = read_timeout
        self._stream: StreamResponse | None = None
        # Pulled one event at a time: a large chunk is never decoded all at once, and the
        # events before a malformed line are delivered before its error.
        self._decoder = WatchDecoder()
        self._ended = False  # the body's end was fed to the decoder
        self._done = False
        self._entered = False

    def __repr__(self) -> str:
        return f"<Watch {self._request.path}>"

    async def __aenter__(self) -> Watch:
        self._entered = True
        await self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Watch:
        self._check_entered()
        return self

    def _check_entered(self) -> None:
        if not self._entered:
            raise LocalProtocolError(
                "a Watch is iterated inside its block: "
                "`async with client.watch(...) as events: async for event in events: ...`"
            )

    async def _open(self) -> StreamResponse:
        if self._stream is None:
            self._stream = await self._client.open_stream(
                self._request, read_timeout=self._read_timeout, check=True
            )
        return self._stream

    async def __anext__(self) -> WatchEvent:
        self._check_entered()
        if self._done:
            raise StopAsyncIteration
        try:
            stream = await self._open()
            while (event := self._decoder.next_event()) is None:
                if self._ended:
                    raise StopAsyncIteration
                data = await stream.receive()
                self._decoder.feed(data)
                self._ended = not data
            if event.error is not None:
                raise event.error
            return event
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop watching and close the connection."""
        self._done = True
        if self._stream is not None:
            await self._stream.aclose()
