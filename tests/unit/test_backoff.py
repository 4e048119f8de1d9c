"""Backoff: 0.8 s doubling to 30 s, jitter that only shortens, reset after 2 minutes healthy."""

from __future__ import annotations

import random

import pytest

from kubemoon_core._backoff import Backoff
from kubemoon_core.errors import LocalProtocolError


def test_without_jitter_the_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(random.Random(0), jitter=0.0)
    now = 0.0
    delays = []
    for _ in range(9):
        delay = backoff.next_delay(now)
        delays.append(delay)
        now += delay + 1.0  # each retry fails a second after it starts
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]
    assert backoff.attempts == 9


def test_jitter_shortens_by_at_most_its_fraction_and_comes_from_the_rng() -> None:
    a = Backoff(random.Random(7))
    b = Backoff(random.Random(7))
    nominal = 0.8
    for i in range(12):
        delay = a.next_delay(float(i))
        assert delay == b.next_delay(float(i))  # the injected rng decides
        assert 0.75 * nominal <= delay <= nominal
        nominal = min(nominal * 2, 30.0)
    spread = {round(Backoff(random.Random(seed)).next_delay(0.0), 6) for seed in range(20)}
    assert len(spread) > 10


def test_two_minutes_healthy_resets_the_delay() -> None:
    backoff = Backoff(random.Random(0), jitter=0.0)
    for _ in range(5):
        backoff.next_delay(0.0)
    last = backoff.next_delay(0.0)
    assert last == 25.6
    # The retry started at 25.6 s; it failed again 119 s later: not healthy long enough.
    assert backoff.next_delay(25.6 + 119.0) == 30.0
    retry_started = 25.6 + 119.0 + 30.0
    assert backoff.next_delay(retry_started + 120.0) == 0.8
    assert backoff.attempts == 1


def test_reset_forgets_every_failure() -> None:
    backoff = Backoff(random.Random(0), jitter=0.0)
    backoff.next_delay(0.0)
    backoff.next_delay(0.0)
    backoff.reset()
    assert backoff.attempts == 0
    assert backoff.next_delay(0.0) == 0.8


def test_the_parameters_are_configurable() -> None:
    backoff = Backoff(
        random.Random(0), initial=1.0, cap=5.0, factor=3.0, jitter=0.0, reset_after=10.0
    )
    assert [backoff.next_delay(0.0) for _ in range(3)] == [1.0, 3.0, 5.0]
    assert backoff.next_delay(5.0 + 10.0) == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rng": None},
        {"initial": 0.0},
        {"initial": 40.0},
        {"factor": 0.5},
        {"jitter": 1.0},
        {"jitter": -0.1},
        {"reset_after": -1.0},
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, object]) -> None:
    rng = kwargs.pop("rng", random.Random(0))
    with pytest.raises(LocalProtocolError):
        Backoff(rng, **kwargs)  # type: ignore[arg-type]
