"""Rate limiters: how long a work item waits before it is retried.

Rules: a limiter is a pure function of its own state and the ``now`` it is given (monotonic
seconds); it reads no clock. ``when(key, now)`` records one failure of ``key`` and returns
the delay in seconds before the key may be retried; ``forget(key)`` clears what the limiter
knows about ``key``; ``num_requeues(key)`` is how many failures it has counted.

Per-key limiters do not count a failure reported before the delay they last returned has
elapsed (kubernetes#132805): a key reconciled early because of an unrelated event, that
fails again, keeps its backoff rather than climbing it. Such a ``when`` returns the time
left of the pending delay, so the queue keeps the same deadline.

Limiters compose: :class:`MaxOfRateLimiter` asks every member and returns the longest
delay; :func:`default_rate_limiter` is client-go's controller default, the maximum of a
per-key exponential backoff (5 ms doubling to 1000 s) and a global token bucket (10 qps,
burst 100).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Hashable

from ._errors import LocalProtocolError

__all__ = [
    "BucketRateLimiter",
    "ExponentialRateLimiter",
    "FastSlowRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_rate_limiter",
]


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise LocalProtocolError(f"{name} must be a positive number, got {value!r}")
    if math.isinf(value):
        raise LocalProtocolError(f"{name} must be finite, got {value!r}")
    return float(value)


class RateLimiter(abc.ABC):
    """The interface every limiter implements; see the module rules."""

    @abc.abstractmethod
    def when(self, key: Hashable, now: float) -> float:
        """Record a failure of ``key`` at ``now``; return the delay before its retry."""

    @abc.abstractmethod
    def forget(self, key: Hashable) -> None:
        """Stop tracking ``key``: its next failure starts from scratch."""

    @abc.abstractmethod
    def num_requeues(self, key: Hashable) -> int:
        """How many failures of ``key`` this limiter has counted."""


class ExponentialRateLimiter(RateLimiter):
    """Per-key exponential backoff: ``base * 2**failures``, capped at ``cap`` seconds.

    The n-th counted failure of a key waits ``base * 2**(n-1)``; defaults are client-go's
    controller values (5 ms, 1000 s). A failure reported before the previous delay of the
    same key has elapsed is not counted (see the module rules).
    """

    __slots__ = ("_base", "_cap", "_entries", "_max_exponent")

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self._base = _positive("base", base)
        self._cap = _positive("cap", cap)
        if self._cap < self._base:
            raise LocalProtocolError(f"cap ({cap}) must not be below base ({base})")
        # The smallest exponent that reaches the cap: larger ones would only overflow.
        self._max_exponent = math.ceil(math.log2(self._cap / self._base))
        # key -> (counted failures, monotonic time at which the last delay ends)
        self._entries: dict[Hashable, tuple[int, float]] = {}

    def when(self, key: Hashable, now: float) -> float:
        """Count a failure (unless one is still pending) and return the delay."""
        failures, ready_at = self._entries.get(key, (0, now))
        if now < ready_at:
            return ready_at - now
        delay = min(self._base * 2.0 ** min(failures, self._max_exponent), self._cap)
        self._entries[key] = (failures + 1, now + delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset the backoff of ``key``."""
        self._entries.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        """Counted failures of ``key``."""
        return self._entries.get(key, (0, 0.0))[0]

    def __repr__(self) -> str:
        return f"ExponentialRateLimiter(base={self._base}, cap={self._cap})"


class FastSlowRateLimiter(RateLimiter):
    """Per-key: ``max_fast_attempts`` retries after ``fast_delay``, then ``slow_delay``.

    Like client-go's ItemFastSlowRateLimiter, and, like :class:`ExponentialRateLimiter`, it
    does not count a failure reported before the previous delay has elapsed.
    """

    __slots__ = ("_entries", "_fast", "_max_fast", "_slow")

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self._fast = _positive("fast_delay", fast_delay)
        self._slow = _positive("slow_delay", slow_delay)
        if isinstance(max_fast_attempts, bool) or not isinstance(max_fast_attempts, int):
            raise LocalProtocolError("max_fast_attempts must be an integer")
        if max_fast_attempts < 0:
            raise LocalProtocolError("max_fast_attempts must not be negative")
        self._max_fast = max_fast_attempts
        self._entries: dict[Hashable, tuple[int, float]] = {}

    def when(self, key: Hashable, now: float) -> float:
        """Count a failure (unless one is still pending) and return the delay."""
        attempts, ready_at = self._entries.get(key, (0, now))
        if now < ready_at:
            return ready_at - now
        attempts += 1
        delay = self._fast if attempts <= self._max_fast else self._slow
        self._entries[key] = (attempts, now + delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset the attempts of ``key``."""
        self._entries.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        """Counted failures of ``key``."""
        return self._entries.get(key, (0, 0.0))[0]

    def __repr__(self) -> str:
        return (
            f"FastSlowRateLimiter(fast_delay={self._fast}, slow_delay={self._slow}, "
            f"max_fast_attempts={self._max_fast})"
        )


class BucketRateLimiter(RateLimiter):
    """A global token bucket: ``qps`` tokens a second, at most ``burst`` saved up.

    Every ``when`` takes a token, whatever the key; when none is left it reserves a future
    one and returns the wait for it, so a flood of failures is spread at ``qps``. Time is
    only what the callers pass as ``now``; a ``now`` older than one seen before refills
    nothing. The bucket counts no per-key failures: ``num_requeues`` is always 0.
    """

    __slots__ = ("_burst", "_last", "_qps", "_tokens")

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self._qps = _positive("qps", qps)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise LocalProtocolError(f"burst must be a positive integer, got {burst!r}")
        self._burst = burst
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, key: Hashable, now: float) -> float:
        """Take a token at ``now``; return how long until it is really available."""
        self._tokens = self.tokens(now)
        if self._last is None or now > self._last:
            self._last = now
        self._tokens -= 1.0
        return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def tokens(self, now: float) -> float:
        """Tokens available at ``now`` (negative when future tokens are reserved)."""
        if self._last is None or now <= self._last:
            return self._tokens
        return min(float(self._burst), self._tokens + (now - self._last) * self._qps)

    def forget(self, key: Hashable) -> None:
        """Nothing to forget: the bucket is shared by all keys."""

    def num_requeues(self, key: Hashable) -> int:
        """Always 0: the bucket counts no per-key failures."""
        return 0

    def __repr__(self) -> str:
        return f"BucketRateLimiter(qps={self._qps}, burst={self._burst})"


class MaxOfRateLimiter(RateLimiter):
    """Asks every member limiter and returns the longest delay.

    Every member records the failure (each ``when`` is called, in order); ``forget``
    reaches all of them and ``num_requeues`` is the largest count among them.
    """

    __slots__ = ("_limiters",)

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise LocalProtocolError("MaxOfRateLimiter needs at least one limiter")
        for limiter in limiters:
            if not isinstance(limiter, RateLimiter):
                raise LocalProtocolError(f"not a RateLimiter: {limiter!r}")
        self._limiters = limiters

    @property
    def limiters(self) -> tuple[RateLimiter, ...]:
        """The member limiters, in the order they are asked."""
        return self._limiters

    def when(self, key: Hashable, now: float) -> float:
        """The longest delay any member asks for."""
        return max([limiter.when(key, now) for limiter in self._limiters])

    def forget(self, key: Hashable) -> None:
        """Forget ``key`` in every member."""
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        """The largest failure count among the members."""
        return max(limiter.num_requeues(key) for limiter in self._limiters)

    def __repr__(self) -> str:
        return f"MaxOfRateLimiter({', '.join(map(repr, self._limiters))})"


def default_rate_limiter() -> MaxOfRateLimiter:
    """client-go's default controller limiter: max(exponential 5 ms..1000 s, bucket 10/100)."""
    return MaxOfRateLimiter(ExponentialRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100))
