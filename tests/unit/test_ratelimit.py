"""Rate limiters: exponential, fast/slow, token bucket, max-of, and kubernetes#132805."""

from __future__ import annotations

import pytest

from kubemoon_core._ratelimit import (
    BucketRateLimiter,
    ExponentialRateLimiter,
    FastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_rate_limiter,
)
from kubemoon_core.errors import LocalProtocolError


def test_exponential_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter = ExponentialRateLimiter()
    now, delays = 0.0, []
    for _ in range(20):
        delay = limiter.when("k", now)
        delays.append(delay)
        now += delay  # each failure is reported once the previous delay has elapsed
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[12] == pytest.approx(0.005 * 2**12)  # 20.48 s
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues("k") == 20


def test_exponential_never_overflows() -> None:
    limiter = ExponentialRateLimiter(base=1.0, cap=2.0)
    now = 0.0
    for _ in range(2000):
        now += limiter.when("k", now)
    assert limiter.when("k", now) == 2.0
    assert limiter.num_requeues("k") == 2001


def test_exponential_keys_are_independent_and_forget_resets() -> None:
    limiter = ExponentialRateLimiter()
    assert limiter.when("a", 0.0) == 0.005
    assert limiter.when("a", 1.0) == 0.01
    assert limiter.when("b", 1.0) == 0.005
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a", 2.0) == 0.005
    limiter.forget("never-seen")  # harmless


def test_premature_failure_does_not_inflate_backoff_kubernetes_132805() -> None:
    """A key reconciled early by unrelated events, failing again, keeps its backoff."""
    limiter = ExponentialRateLimiter(base=1.0, cap=1000.0)
    assert limiter.when("rs", 0.0) == 1.0  # retry due at 1.0
    assert limiter.when("rs", 1.0) == 2.0  # counted: due at 3.0
    # Spurious triggers reconcile it at 1.5, 2.0 and 2.9; each fails before 3.0.
    assert limiter.when("rs", 1.5) == pytest.approx(1.5)
    assert limiter.when("rs", 2.0) == pytest.approx(1.0)
    assert limiter.when("rs", 2.9) == pytest.approx(0.1)
    assert limiter.num_requeues("rs") == 2  # not 5
    assert limiter.when("rs", 3.0) == 4.0  # the real retry doubles once


def test_fast_slow() -> None:
    limiter = FastSlowRateLimiter(fast_delay=0.5, slow_delay=10.0, max_fast_attempts=2)
    assert limiter.when("k", 0.0) == 0.5
    assert limiter.when("k", 0.5) == 0.5
    assert limiter.when("k", 1.0) == 10.0
    assert limiter.when("k", 5.0) == pytest.approx(6.0)  # early: not counted
    assert limiter.num_requeues("k") == 3
    limiter.forget("k")
    assert limiter.when("k", 20.0) == 0.5
    assert "max_fast_attempts=2" in repr(limiter)


def test_fast_slow_with_no_fast_attempts() -> None:
    assert FastSlowRateLimiter(1.0, 3.0, 0).when("k", 0.0) == 3.0


def test_bucket_allows_burst_then_spreads_at_qps() -> None:
    limiter = BucketRateLimiter(qps=10.0, burst=3)
    assert [limiter.when(i, 0.0) for i in range(3)] == [0.0, 0.0, 0.0]
    # Tokens are reserved: each further failure waits one more tenth of a second.
    assert [limiter.when(i, 0.0) for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert limiter.tokens(0.0) == pytest.approx(-3.0)
    assert limiter.tokens(0.25) == pytest.approx(-0.5)
    assert limiter.when("x", 0.3) == pytest.approx(0.1)  # refilled to 0, one more reserved
    assert limiter.num_requeues("x") == 0
    limiter.forget("x")  # the bucket is shared: nothing to forget


def test_bucket_refill_caps_at_burst_and_ignores_old_now() -> None:
    limiter = BucketRateLimiter(qps=1.0, burst=2)
    assert limiter.tokens(5.0) == 2.0  # never used: full
    assert limiter.when("a", 100.0) == 0.0
    assert limiter.tokens(10_000.0) == 2.0
    assert limiter.when("a", 50.0) == 0.0  # a stale now refills nothing
    assert limiter.tokens(50.0) == 0.0
    assert limiter.when("a", 100.0) == pytest.approx(1.0)
    assert repr(limiter) == "BucketRateLimiter(qps=1.0, burst=2)"


def test_default_is_max_of_exponential_and_bucket() -> None:
    limiter = default_rate_limiter()
    kinds = [type(member) for member in limiter.limiters]
    assert kinds == [ExponentialRateLimiter, BucketRateLimiter]
    assert "ExponentialRateLimiter(base=0.005, cap=1000.0)" in repr(limiter)
    # 100 distinct failing keys at once use the burst; the 101st waits for the bucket.
    delays = [limiter.when(f"k{i}", 0.0) for i in range(101)]
    assert delays[:100] == [0.005] * 100
    assert delays[100] == pytest.approx(0.1)
    assert limiter.num_requeues("k1") == 1
    limiter.forget("k1")
    assert limiter.num_requeues("k1") == 0


def test_max_of_asks_every_member() -> None:
    slow = FastSlowRateLimiter(1.0, 100.0, 1)
    fast = ExponentialRateLimiter(0.5, 8.0)
    limiter = MaxOfRateLimiter(slow, fast)
    assert limiter.when("k", 0.0) == 1.0
    assert limiter.when("k", 1.0) == 100.0
    assert limiter.num_requeues("k") == 2
    assert fast.num_requeues("k") == 2


def test_custom_limiter_subclass() -> None:
    class Constant(RateLimiter):
        def when(self, key: object, now: float) -> float:
            return 7.0

        def forget(self, key: object) -> None:
            pass

        def num_requeues(self, key: object) -> int:
            return 0

    assert MaxOfRateLimiter(Constant(), ExponentialRateLimiter()).when("k", 0.0) == 7.0


@pytest.mark.parametrize(
    "build",
    [
        lambda: ExponentialRateLimiter(base=0),
        lambda: ExponentialRateLimiter(base=-1.0),
        lambda: ExponentialRateLimiter(base=True),
        lambda: ExponentialRateLimiter(cap=float("inf")),
        lambda: ExponentialRateLimiter(base="1"),  # type: ignore[arg-type]
        lambda: ExponentialRateLimiter(base=2.0, cap=1.0),
        lambda: FastSlowRateLimiter(1.0, 2.0, -1),
        lambda: FastSlowRateLimiter(1.0, 2.0, 1.5),  # type: ignore[arg-type]
        lambda: FastSlowRateLimiter(1.0, 2.0, True),
        lambda: FastSlowRateLimiter(0.0, 2.0, 1),
        lambda: BucketRateLimiter(qps=0.0),
        lambda: BucketRateLimiter(burst=0),
        lambda: BucketRateLimiter(burst=True),
        lambda: MaxOfRateLimiter(),
        lambda: MaxOfRateLimiter(ExponentialRateLimiter(), "nope"),  # type: ignore[arg-type]
    ],
)
def test_invalid_configuration(build: object) -> None:
    with pytest.raises(LocalProtocolError):
        build()  # type: ignore[operator]
