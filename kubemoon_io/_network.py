"""A network backend for httpcore's async pools that never leaves a socket open.

Rules: httpcore's trio and anyio streams close their socket when a TLS handshake fails
with an ``Exception``, but not when the handshake is *cancelled* (trio's ``Cancelled`` and
asyncio's ``CancelledError`` are ``BaseException``\\ s): the socket then lives on in the
cancellation's traceback until the garbage collector finds the cycle and warns
``ResourceWarning: unclosed socket`` in whatever code runs at that moment. This wrapper
closes the stream on any failure of ``start_tls`` and re-raises it unchanged.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

from ._gate import check_armed_guard, report_late_send

__all__ = ["ClosingNetworkBackend"]

SocketOption = Any  # httpcore's SOCKET_OPTION (a tuple for setsockopt)


class _ClosingStream(httpcore.AsyncNetworkStream):
    """A stream whose ``start_tls`` closes it when the handshake fails in any way."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        check_armed_guard()  # a gated write: its authority must hold as its bytes go out
        await self._stream.write(buffer, timeout)
        report_late_send()  # frozen inside the send: the bytes may arrive late; say so

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            tls = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # Both loops close the socket before their checkpoint, which may raise the
            # cancellation again: the original failure is what is raised.
            with contextlib.suppress(BaseException):
                await self._stream.aclose()
            raise
        return _ClosingStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class ClosingNetworkBackend(httpcore.AsyncNetworkBackend):
    """Wraps an async httpcore network backend so a cancelled TLS handshake closes its
    socket at once (see the module rules)."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect as the wrapped backend does."""
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _ClosingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect as the wrapped backend does."""
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _ClosingStream(stream)

    async def sleep(self, seconds: float) -> None:
        """Sleep as the wrapped backend does."""
        await self._backend.sleep(seconds)
