"""Transport errors shared by every adapter, and the mapping from httpcore's exceptions.

Rules: every network failure surfaces as a :class:`TransportError` naming the server's
origin and never a header; TLS failures are :class:`TLSError`, timeouts
:class:`TransportTimeout`. httpcore's exceptions are the same classes in its async and sync
halves, so one mapping serves every adapter.
"""

from __future__ import annotations

import os
import ssl

import httpcore
import socksio

from kubemoon_core import KubeMoonError

__all__ = [
    "ResponseTooLarge",
    "TLSError",
    "TransportError",
    "TransportTimeout",
    "transport_error",
]


class TransportError(KubeMoonError):
    """The connection to the API server failed, broke or misbehaved below HTTP semantics.

    A watch stream cut in the middle (even mid-chunk) is a TransportError: events are never
    silently dropped.
    """


class TLSError(TransportError):
    """The TLS handshake failed: wrong CA, wrong server name, bad client certificate..."""


class TransportTimeout(TransportError):
    """Connecting, writing or reading took longer than allowed."""


class ResponseTooLarge(TransportError):
    """A response body was larger than the client's ``max_body_size``; nothing was kept."""


# Not a TLS failure: the socket had no data yet (a read interrupted by a timeout leaves one
# of these in the exception chain on asyncio).
_NOT_TLS_FAILURES = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError) and not isinstance(current, _NOT_TLS_FAILURES):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


_TIMED_OUT: dict[type[BaseException], str] = {
    httpcore.ConnectTimeout: "connecting (TCP connection or TLS handshake)",
    httpcore.ReadTimeout: "reading the response",
    httpcore.WriteTimeout: "sending the request",
    httpcore.PoolTimeout: "waiting for a free connection",
}


def transport_error(exc: Exception, origin: str, server_name: str | None = None) -> TransportError:
    """Translate an httpcore (or socket/ssl) exception into a TransportError for ``origin``.

    A timeout is a :class:`TransportTimeout` on every adapter, even one that struck during
    the TLS handshake (a stalled handshake is not a TLS failure).
    """
    if isinstance(exc, httpcore.TimeoutException | TimeoutError):
        # The same words on every adapter (their exceptions' own texts differ).
        return TransportTimeout(f"{origin}: timed out {_TIMED_OUT.get(type(exc), 'waiting')}")
    detail = str(exc) or type(exc).__name__
    tls = _ssl_cause(exc)
    if tls is not None:
        reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or str(tls)
        name = f" (server name {server_name!r})" if server_name else ""
        return TLSError(f"TLS handshake with {origin}{name} failed: {reason}")
    if isinstance(exc, httpcore.RemoteProtocolError):
        return TransportError(f"{origin}: connection broken: {detail}")
    if isinstance(exc, httpcore.ConnectionNotAvailable):
        if not str(exc):
            detail = "the connection was closed before the request was sent"
        return TransportError(f"{origin}: {detail}")
    if isinstance(exc, socksio.SOCKSError):
        return TransportError(f"{origin}: the SOCKS proxy answered malformed: {detail}")
    if isinstance(exc, httpcore.ProxyError):
        return TransportError(f"{origin}: the proxy refused the connection: {detail}")
    phase = _FAILED.get(type(exc))
    cause = _os_cause(exc)
    if phase is not None and cause is not None:
        # The operating system's reason, in the same words on every adapter (each loop's
        # library wraps it in texts of its own, or in none).
        number = cause.errno
        reason = os.strerror(number) if isinstance(number, int) and number > 0 else cause.strerror
        return TransportError(f"{origin}: {phase}: {reason}")
    return TransportError(f"{origin}: {type(exc).__name__}: {detail}")


_FAILED: dict[type[BaseException], str] = {
    httpcore.ConnectError: "cannot connect",
    httpcore.ReadError: "reading the response failed",
    httpcore.WriteError: "sending the request failed",
}


def _os_cause(exc: BaseException) -> OSError | None:
    """The first operating-system error (with a reason) behind ``exc``, groups included."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending and len(seen) < 64:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
