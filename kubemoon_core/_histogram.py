"""Histograms as plain data, in Prometheus's layout, for adapters to export.

Rules: a bucket counts the observations less than or equal to its upper bound (``le``);
snapshots carry cumulative counts, with +Inf implied by ``count``. Observing is O(log b)
for b buckets and allocates nothing. The bucket bounds are the ones controller-runtime
registers, so dashboards written for Go operators read KubeMoon's series unchanged.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["QUEUE_DURATION_BUCKETS", "RECONCILE_TIME_BUCKETS", "Histogram"]

QUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(float(f"1e{k}") for k in range(-8, 4))
"""Bounds of ``workqueue_queue_duration_seconds`` and ``workqueue_work_duration_seconds``:
10 ns to 1000 s by powers of ten (controller-runtime's 12 buckets; client-go's own
provider stops at 10 s, which puts every slow reconcile in +Inf)."""

RECONCILE_TIME_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
    5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip
"""Bounds of ``controller_runtime_reconcile_time_seconds`` (5 ms to 60 s)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """A snapshot of a histogram: upper bounds, cumulative counts, count and sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int = 0
    sum: float = 0.0

    @property
    def buckets(self) -> tuple[tuple[float, int], ...]:
        """``(upper bound, cumulative count)`` pairs; +Inf is ``count``."""
        return tuple(zip(self.bounds, self.cumulative, strict=True))


class _Recorder:
    """The mutable side of a :class:`Histogram`: per-bucket counts, count and sum."""

    __slots__ = ("_bounds", "_counts", "count", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last slot is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation of ``value``."""
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self.count += 1
        self.sum += value

    def fold(self, values: list[float]) -> None:
        """Count every value of ``values`` (negative ones as 0) and empty the list.

        Hot paths append durations to a list and fold it in batches: sorting once and
        bisecting per bound costs far less than a Python-level step per observation.
        """
        values.sort()
        counts, upper = self._counts, bisect.bisect_right
        below = 0
        for index, bound in enumerate(self._bounds):
            at_most = upper(values, bound)
            counts[index] += at_most - below
            below = at_most
        counts[-1] += len(values) - below
        self.count += len(values)
        self.sum += sum(values[bisect.bisect_left(values, 0.0) :])
        values.clear()

    def snapshot(self) -> Histogram:
        """The current state, with cumulative counts."""
        cumulative: list[int] = []
        total = 0
        for count in self._counts[:-1]:
            total += count
            cumulative.append(total)
        return Histogram(self._bounds, tuple(cumulative), self.count, self.sum)
