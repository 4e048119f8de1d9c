"""Making configuration values and server-supplied text safe to print.

Rules: pure string functions. A URL keeps its scheme, host and path but never its user
information (``user:password@``); text shown to a person has its control and format
characters (terminal escapes, bidi overrides) written as ``U+XXXX``, as client-go does
for an exec plugin's install hint, and is cut to a bounded length.
"""

from __future__ import annotations

import unicodedata

# printable and redact_url are for the core's own modules.
__all__ = ["REDACTED"]

REDACTED = "--- REDACTED ---"

# Whitespace controls that format text rather than drive the terminal (tab to carriage
# return); every other character of Unicode category C is escaped.
_SPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r")


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` of its authority replaced by ``REDACTED@``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    # The authority ends at the first "/", "?" or "#"; user information ends at its last "@".
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, end)
    if at < 0:
        return url
    return f"{scheme}{sep}{REDACTED}@{rest[at + 1 :]}"


def printable(text: str, limit: int = 200) -> str:
    """``text`` with control and format characters escaped as ``U+XXXX``, at most ``limit``
    characters of it (``...`` marks a cut)."""
    cut = text[:limit]
    out = "".join(
        ch
        if ch in _SPACE_CONTROLS or unicodedata.category(ch)[0] in "LMNPSZ"
        else f"U+{ord(ch):04X}"
        for ch in cut
    )
    return out + "..." if len(text) > limit else out
