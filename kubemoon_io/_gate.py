"""The send guard: which writes of the current task a Lease gates (a ``contextvars`` variable).

Rules: a runtime sets a guard around work that a leadership or a shard range authorises
(a reconcile); every adapter's client calls it for each write (any method but GET) made
in that context -- tasks and threads the work starts inherit it -- immediately before the
request's first byte is written, after a connection was taken and its TLS handshake done,
and again before the body. A guard raises :class:`~kubemoon_core.AuthorityLost` to stop
the write; nothing is sent then. Reads, and the Lease renewals (made outside any guarded
context), are never gated.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

from kubemoon_core import WriteGate

__all__ = ["SendGuard", "current_send_guard", "gate_guard", "gated_writes"]

SendGuard = Callable[[str], None]
"""Called with the write (``"PUT /api/v1/..."``) right before it is sent; raises to stop it."""

_guard: contextvars.ContextVar[SendGuard | None] = contextvars.ContextVar(
    "kubemoon_send_guard", default=None
)


def current_send_guard() -> SendGuard | None:
    """The guard of the current context's writes, if any."""
    return _guard.get()


@contextlib.contextmanager
def gated_writes(guard: SendGuard | None) -> Iterator[None]:
    """Gate every write made inside the block (and by the tasks it starts) with ``guard``."""
    token = _guard.set(guard)
    try:
        yield
    finally:
        _guard.reset(token)


def gate_guard(gate: WriteGate, clock: Callable[[], float]) -> SendGuard:
    """A guard that checks ``gate`` at ``clock()`` (the adapter's monotonic clock)."""

    def guard(what: str) -> None:
        gate.check(clock(), what)

    return guard
