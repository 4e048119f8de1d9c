"""Exponential backoff with jitter, driven by the caller's clock.

Rules: the nominal delay starts at ``initial`` and is multiplied by ``factor`` after every
failure, up to ``cap``; jitter only ever shortens it (by up to ``jitter`` of it), so the cap
is a true maximum while retries of many clients still spread out. After ``reset_after``
seconds without a failure (counted from the end of the last delay, when the retried
attempt started) the next delay starts from ``initial`` again. Randomness comes from the
injected ``random.Random``; time only from the ``now`` arguments.
"""

from __future__ import annotations

import random

from ._errors import LocalProtocolError

__all__ = ["Backoff"]


class Backoff:
    """Delays between retries: 0.8 s doubling to 30 s, reset after 2 minutes healthy.

    Call :meth:`next_delay` when an attempt fails; sleep for the delay it returns (the
    adapter does), then retry.
    """

    __slots__ = (
        "_attempts",
        "_cap",
        "_factor",
        "_initial",
        "_jitter",
        "_nominal",
        "_reset_after",
        "_retry_at",
        "_rng",
    )

    def __init__(
        self,
        rng: random.Random,
        *,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.25,
        reset_after: float = 120.0,
    ) -> None:
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a random.Random")
        if not 0 < initial <= cap:
            raise LocalProtocolError("backoff needs 0 < initial <= cap")
        if factor < 1:
            raise LocalProtocolError("backoff factor must be at least 1")
        if not 0 <= jitter < 1:
            raise LocalProtocolError("backoff jitter must be in [0, 1)")
        if reset_after < 0:
            raise LocalProtocolError("reset_after must not be negative")
        self._rng = rng
        self._initial = float(initial)
        self._cap = float(cap)
        self._factor = float(factor)
        self._jitter = float(jitter)
        self._reset_after = float(reset_after)
        self._attempts = 0
        self._nominal = 0.0  # the last delay before jitter; 0 when there was none
        # When the last delay ended, i.e. when the retried attempt began.
        self._retry_at: float | None = None

    @property
    def attempts(self) -> int:
        """Failures counted since the last reset."""
        return self._attempts

    def next_delay(self, now: float) -> float:
        """Record a failure at ``now`` and return how long to wait before retrying."""
        if self._retry_at is not None and now - self._retry_at >= self._reset_after:
            self.reset()  # healthy for long enough: forget the old failures
        if self._attempts:
            self._nominal = min(self._nominal * self._factor, self._cap)
        else:
            self._nominal = self._initial
        delay = self._nominal * (1.0 - self._jitter * self._rng.random())
        self._attempts += 1
        self._retry_at = now + delay
        return delay

    def reset(self) -> None:
        """Forget every failure: the next delay starts from ``initial``."""
        self._attempts = 0
        self._nominal = 0.0
        self._retry_at = None
