"""The send guard: which writes of the current task a Lease gates (a ``contextvars`` variable).

Rules: a runtime sets a guard around work that a leadership or a shard range authorises
(a reconcile); every adapter's client calls it for each write (any method but GET) made
in that context -- tasks and threads the work starts inherit it -- immediately before the
request's first byte is written, after a connection was taken and its TLS handshake done,
and again before the body. A guard raises :class:`~kubemoon_core.errors.AuthorityLost` to stop
the write; nothing is sent then. Reads, and the Lease renewals (made outside any guarded
context), are never gated.

No check in the process closes the last window: a process frozen while the kernel is
still inside the ``send`` system call of a gated write may finish that call when it is
resumed, so the bytes reach the API server after the authority ended (measured on the
real apiserver: a leader frozen for 8 s while four reconciles wrote, 4 rounds of
66). So after the bytes are handed over the guard is asked again
(:func:`report_late_send`): a write whose authority lapsed while it was being sent is
logged at WARNING and counted (:data:`LATE_SENDS`), never silent.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator

from kubemoon_core.errors import AuthorityLost
from kubemoon_core.lowlevel import WriteGate

__all__ = [
    "LATE_SENDS",
    "SendGuard",
    "arm_send_guard",
    "check_armed_guard",
    "current_send_guard",
    "disarm_send_guard",
    "gate_guard",
    "gated_writes",
    "report_late_send",
]

logger = logging.getLogger("kubemoon.gate")

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


class _LateSends:
    """How many gated writes of this process were still being sent when their authority
    lapsed (see :func:`report_late_send`)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __repr__(self) -> str:
        return f"<late gated sends: {self.count}>"


LATE_SENDS = _LateSends()
"""The count of gated writes whose authority lapsed while their bytes were being sent:
each may have reached the API server after another replica took the work over."""


def report_late_send() -> None:
    """Ask the armed guard again once a gated write's bytes were handed to the socket (the
    adapters' network streams): if the authority lapsed meanwhile -- the process was frozen
    or starved inside the send -- log a WARNING naming the write and count it in
    :data:`LATE_SENDS`. The write is not undone (it may already be at the server)."""
    armed = _armed.get()
    if armed is None:
        return
    guard, what = armed
    try:
        guard(what)
    except AuthorityLost as exc:
        LATE_SENDS.count += 1
        logger.warning(
            "a gated write was being sent when its authority lapsed (the process was "
            "frozen or starved inside the send), so it may reach the API server after "
            "another replica took the work over: %s",
            str(exc).removeprefix("not sending "),
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
