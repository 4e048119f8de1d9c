"""The send guard: which writes of the current task a Lease gates (a ``contextvars`` variable).

Rules: a runtime sets a guard around work that a leadership or a shard range authorises
(a reconcile); every adapter's client calls it for each write (any method but GET) made
in that context -- tasks and threads the work starts inherit it -- immediately before the
request's first byte is written, after a connection was taken and its TLS handshake done,
and again before the body. A guard raises :class:`~kubemoon_core.errors.AuthorityLost` to stop
the write; nothing is sent then. Reads, and the Lease renewals (made outside any guarded
context), are never gated.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

from kubemoon_core.lowlevel import WriteGate

__all__ = [
    "SendGuard",
    "arm_send_guard",
    "check_armed_guard",
    "current_send_guard",
    "disarm_send_guard",
    "gate_guard",
    "gated_writes",
]

SendGuard = Callable[[str], None]
"""Called with the write (``"PUT /api/v1/..."``) right before it is sent; raises to stop it."""

_guard: contextvars.ContextVar[SendGuard | None] = contextvars.ContextVar(
    "kubemoon_send_guard", default=None
)


# The guard of the request whose bytes the current task is writing, armed by the client
# when httpcore starts sending a gated write and disarmed once its answer's head is read:
# each adapter's network stream checks it immediately before handing bytes to the socket
# (after h11 framed them, and after the trio stream held them back to send in one piece).
_armed: contextvars.ContextVar[tuple[SendGuard, str] | None] = contextvars.ContextVar(
    "kubemoon_armed_guard", default=None
)


def arm_send_guard(guard: SendGuard, what: str) -> None:
    """From now on in this task, check ``guard`` before every socket write (the client)."""
    _armed.set((guard, what))


def disarm_send_guard() -> None:
    """Stop checking a guard before socket writes in this task (the client)."""
    _armed.set(None)


def check_armed_guard() -> None:
    """Run the armed guard, if any (the adapters' network streams, right before a send)."""
    armed = _armed.get()
    if armed is not None:
        armed[0](armed[1])


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
