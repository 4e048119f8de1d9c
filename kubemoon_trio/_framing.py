"""How a core ``Request`` is framed for httpcore, and what every exchange shares.

Rules: a header HTTP/1.1 cannot carry is the caller's ``LocalProtocolError`` (naming the
header, never its value: it may be a credential), checked here before any connection is
touched; the trace callbacks are the only place a send guard is armed for a request's
socket writes (``kubemoon_io.gated_writes``) and the only place a SOCKS socket that
httpcore drops after a failed handshake is closed; ``NETWORK_ERRORS`` lists every exception
httpcore lets out, each of which a caller turns into a ``TransportError``. No state: the
client, the pool and the streams all import from here, and this module imports none of them.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import httpcore
import socksio

from kubemoon_core.errors import LocalProtocolError
from kubemoon_io import SendGuard, arm_send_guard, disarm_send_guard

from . import _backend

__all__ = [
    "ERROR_BODY_LIMIT",
    "Headers",
    "NETWORK_ERRORS",
    "closing_failed_socks",
    "decode_headers",
    "encode_headers",
    "guarded",
]

# An error response's body is cut at this many bytes.
ERROR_BODY_LIMIT = 64 * 1024

# Every exception httpcore raises (its pools' and proxies' included): each becomes a
# ``TransportError``, never a foreign exception from a public method.
NETWORK_ERRORS = (
    httpcore.ConnectionNotAvailable,
    httpcore.ProxyError,
    socksio.SOCKSError,  # a malformed SOCKS reply (httpcore lets socksio's error out)
    httpcore.ProtocolError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.UnsupportedProtocol,
    OSError,
    ssl.SSLError,
)

Headers = tuple[tuple[str, str], ...]

# httpcore's trace events: a request starts being framed, its answer's head has been read
# (or the exchange failed): between them the network stream checks the armed guard.
_FRAMING = "http11.send_request_headers.started"
_ANSWERED = frozenset(
    {
        "http11.receive_response_headers.complete",
        "http11.receive_response_headers.failed",
        "http11.response_closed.started",
    }
)


def guarded(extensions: dict[str, Any], guard: SendGuard, what: str) -> dict[str, Any]:
    """``extensions`` with a trace callback that checks ``guard`` on the connection the
    request will use (after its TLS handshake) and arms it for every socket write of the
    request (each adapter's network stream checks it right before bytes go out)."""

    inner = extensions.get("trace")

    async def trace(event: str, info: Mapping[str, Any]) -> None:
        if event == _FRAMING:
            guard(what)  # raises AuthorityLost: httpcore closes the connection, sends nothing
            arm_send_guard(guard, what)
        elif event in _ANSWERED:
            disarm_send_guard()
        if inner is not None:
            await inner(event, info)

    return {**extensions, "trace": trace}


def closing_failed_socks(extensions: dict[str, Any]) -> dict[str, Any]:
    """``extensions`` with a trace callback that closes the proxy's socket when the SOCKS
    handshake on it fails: httpcore drops that socket unclosed (a refusal, a malformed
    reply), which leaks it until garbage collection."""
    opened: list[Any] = []

    async def trace(event: str, info: Mapping[str, Any]) -> None:
        if event == "socks.connect_tcp.complete":
            opened.append(info["return_value"])
        elif event == "socks.setup_socks5_connection.failed" and opened:
            with _backend.shielded():
                await opened.pop().aclose()

    return {**extensions, "trace": trace}


# What h11 accepts in a request's header (RFC 9110 token; visible characters, with spaces
# or tabs only between them): checked here, where a bad one is the caller's error, not a
# broken connection.
_HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e\x80-\xff](?:[ \t]*[\x21-\x7e\x80-\xff])*)?")


def encode_headers(headers: Headers) -> list[tuple[bytes, bytes]]:
    """``headers`` as httpcore sends them; one that HTTP/1.1 cannot carry is a
    ``LocalProtocolError`` naming it (never its value: it may be a credential)."""
    encoded: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise LocalProtocolError(f"{name!r} is not a valid HTTP header name")
        if not isinstance(value, str) or not _HEADER_VALUE.fullmatch(value):
            raise LocalProtocolError(
                f"the value of the {name} header is not a valid HTTP header value "
                "(Latin-1 characters only, no control characters, no leading or "
                "trailing space)"
            )
        encoded.append((name.encode("latin-1"), value.encode("latin-1")))
    return encoded


def decode_headers(raw: Sequence[tuple[bytes, bytes]]) -> Headers:
    return tuple([(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw])
