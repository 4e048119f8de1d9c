"""The error hierarchy of KubeMoon.

Rules: every error any public method raises derives from :class:`KubeMoonError`; foreign
exceptions (``ValueError``, ``KeyError``, ``json.JSONDecodeError`` ...) are translated at the
boundary. ``LocalProtocolError`` blames the caller, ``RemoteProtocolError`` blames the peer.
"""

from __future__ import annotations

__all__ = [
    "DecodeError",
    "KubeMoonError",
    "LocalProtocolError",
    "RemoteProtocolError",
]


class KubeMoonError(Exception):
    """Base class of every error raised by KubeMoon."""


class LocalProtocolError(KubeMoonError):
    """The caller used the API in a way it does not allow (bad name, wrong state...)."""


class RemoteProtocolError(KubeMoonError):
    """The server sent something that breaks the protocol (bad JSON, bad framing...)."""


class DecodeError(RemoteProtocolError):
    """A document from the server does not have the expected shape.

    ``path`` names the offending place in JSON-path style (``groups[2].versions[0]``);
    ``offset`` is the byte offset in a stream, when the document came from one.
    """

    def __init__(self, message: str, *, path: str = "", offset: int | None = None) -> None:
        where = []
        if path:
            where.append(f"at {path}")
        if offset is not None:
            where.append(f"at byte {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.path = path
        self.offset = offset
