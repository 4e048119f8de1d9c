"""Prometheus metrics of a runtime, under the names controller-runtime and client-go use.

Rules: the numbers are plain data kept by the core machines and the client; this collector
only reads a snapshot at scrape time and shapes it, so nothing on the hot path touches
Prometheus objects. Names: ``controller_runtime_reconcile_*``, ``workqueue_*`` (label
``name``), ``leader_election_master_status``, ``rest_client_requests_total``, and the
reflector's ``kubemoon_reflector_*`` counters and ``kubemoon_cache_stale_reads_avoided_total``
(label ``resource``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kubemoon_core._reflector import ReflectorStats
from kubemoon_core.lowlevel import ControllerMetrics

__all__ = ["MetricsSnapshot", "MetricsSource", "RuntimeCollector"]


class MetricsSource(Protocol):
    """What a runtime exposes for scraping."""

    def controller_metrics(self) -> Sequence[tuple[str, ControllerMetrics]]:
        """(controller name, snapshot) for every controller."""

    def informer_stats(self) -> Sequence[tuple[str, ReflectorStats]]:
        """(informer name, reflector counters) for every informer."""

    def leader_status(self) -> tuple[str, bool] | None:
        """(lease name, leading) when electing, else None."""

    def request_counts(self) -> Mapping[tuple[str, str, str], int]:
        """Requests made: (code, method, host) -> count."""

    def stale_reads_avoided(self) -> Mapping[str, int]:
        """Cache reads answered with the runtime's own write: resource -> count."""


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Every figure of a :class:`MetricsSource`, read at one moment (a source itself).

    A runtime whose state belongs to an event loop offers ``metrics_snapshot()``: the
    collector then reads this, taken on the loop, instead of the live state, so a scrape
    from another thread (prometheus_client's own server) neither needs that loop's clock
    nor reads state the loop is changing, and every family comes from the same moment.
    """

    controllers: Sequence[tuple[str, ControllerMetrics]] = ()
    informers: Sequence[tuple[str, ReflectorStats]] = ()
    leader: tuple[str, bool] | None = None
    shards: Sequence[Any] = ()
    requests: Mapping[tuple[str, str, str], int] | None = None
    stale_reads: Mapping[str, int] | None = None

    @classmethod
    def of(cls, source: Any, now: float) -> MetricsSnapshot:
        """Every figure of ``source`` (a :class:`MetricsSource` whose ``controller_metrics``
        takes ``now``, optionally with ``shard_status``), copied at ``now``."""
        shards = getattr(source, "shard_status", None)
        return cls(
            controllers=list(source.controller_metrics(now)),
            informers=list(source.informer_stats()),
            leader=source.leader_status(),
            shards=list(shards()) if shards is not None else (),
            requests=dict(source.request_counts()),
            stale_reads=dict(source.stale_reads_avoided()),
        )

    def controller_metrics(self) -> Sequence[tuple[str, ControllerMetrics]]:
        """(controller name, snapshot) for every controller."""
        return self.controllers

    def informer_stats(self) -> Sequence[tuple[str, ReflectorStats]]:
        """(informer name, reflector counters) for every informer."""
        return self.informers

    def leader_status(self) -> tuple[str, bool] | None:
        """(lease name, leading) when electing, else None."""
        return self.leader

    def shard_status(self) -> Sequence[Any]:
        """The status of every sharded controller."""
        return self.shards

    def request_counts(self) -> Mapping[tuple[str, str, str], int]:
        """Requests made: (code, method, host) -> count."""
        return self.requests or {}

    def stale_reads_avoided(self) -> Mapping[str, int]:
        """Cache reads answered with the runtime's own write: resource -> count."""
        return self.stale_reads or {}


def _histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    buckets: Iterable[tuple[float, int]],
    count: int,
    total: float,
) -> None:
    pairs = [(repr(float(bound)), cumulative) for bound, cumulative in buckets]
    family.add_metric(labels, [*pairs, ("+Inf", count)], total)


class RuntimeCollector(Collector):
    """A ``prometheus_client`` collector reading a :class:`MetricsSource` at each scrape."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        """Build every family from fresh snapshots (one, taken at once, when offered)."""
        source: Any = self._source
        snapshot = getattr(source, "metrics_snapshot", None)
        if snapshot is not None:
            source = snapshot()
        controllers = list(source.controller_metrics())
        yield from self._reconcile_families(controllers)
        yield from self._queue_families(controllers)
        yield from self._informer_families(source.informer_stats())
        leader = source.leader_status()
        if leader is not None:
            status = GaugeMetricFamily(
                "leader_election_master_status",
                "1 while this process holds the lease, else 0.",
                labels=["name"],
            )
            status.add_metric([leader[0]], 1.0 if leader[1] else 0.0)
            yield status
        shards = getattr(source, "shard_status", None)
        if shards is not None:
            yield from self._shard_families(shards())
        requests = CounterMetricFamily(
            "rest_client_requests",
            "Requests made to the API server, by status code, method and host.",
            labels=["code", "method", "host"],
        )
        for (code, method, host), count in sorted(source.request_counts().items()):
            requests.add_metric([code, method, host], count)
        yield requests
        avoided = CounterMetricFamily(
            "kubemoon_cache_stale_reads_avoided",
            "Cache reads answered with this process's own write because the cache lagged.",
            labels=["resource"],
        )
        for resource, count in sorted(source.stale_reads_avoided().items()):
            avoided.add_metric([resource], count)
        yield avoided

    def _shard_families(self, statuses: Iterable[Any]) -> Iterator[Metric]:
        server = GaugeMetricFamily(
            "kubemoon_shard_server_side",
            "1 when the API server filters this sharded controller's lists and watches "
            "(ShardedListAndWatch), 0 when they are filtered client-side.",
            labels=["controller"],
        )
        ranges = GaugeMetricFamily(
            "kubemoon_shard_owned_ranges",
            "Hash ranges this replica works on now, per sharded controller.",
            labels=["controller", "identity"],
        )
        fraction = GaugeMetricFamily(
            "kubemoon_shard_owned_fraction",
            "The share of the hash space this replica works on now, per sharded controller.",
            labels=["controller", "identity"],
        )
        dropped = CounterMetricFamily(
            "kubemoon_shard_dropped_keys",
            "Keys not reconciled because their object is outside this replica's ranges.",
            labels=["controller"],
        )
        for status in statuses:
            server.add_metric([status.controller], 1.0 if status.server_side else 0.0)
            ranges.add_metric([status.controller, status.identity], len(status.ranges))
            fraction.add_metric([status.controller, status.identity], status.fraction)
            dropped.add_metric([status.controller], status.dropped)
        yield from (server, ranges, fraction, dropped)

    def _reconcile_families(
        self, controllers: list[tuple[str, ControllerMetrics]]
    ) -> Iterator[Metric]:
        total = CounterMetricFamily(
            "controller_runtime_reconcile",
            "Reconciles per controller and result.",
            labels=["controller", "result"],
        )
        errors = CounterMetricFamily(
            "controller_runtime_reconcile_errors",
            "Reconciles that returned an error, per controller.",
            labels=["controller"],
        )
        duration = HistogramMetricFamily(
            "controller_runtime_reconcile_time_seconds",
            "Time spent in each reconcile, per controller.",
            labels=["controller"],
        )
        workers = GaugeMetricFamily(
            "controller_runtime_active_workers",
            "Workers running a reconcile, per controller.",
            labels=["controller"],
        )
        for name, snapshot in controllers:
            for label, count in snapshot.reconcile_total.items():
                total.add_metric([name, label], count)
            errors.add_metric([name], snapshot.reconcile_errors_total)
            time_ = snapshot.reconcile_time
            _histogram(duration, [name], time_.buckets, time_.count, time_.sum)
            workers.add_metric([name], snapshot.active_workers)
        yield from (total, errors, duration, workers)

    def _queue_families(self, controllers: list[tuple[str, ControllerMetrics]]) -> Iterator[Metric]:
        def family(kind: type[Any], name: str, help_text: str) -> Any:
            return kind(name, help_text, labels=["name"])

        depth = family(GaugeMetricFamily, "workqueue_depth", "Keys waiting in the queue.")
        adds = family(CounterMetricFamily, "workqueue_adds", "Keys added to the queue.")
        retries = family(CounterMetricFamily, "workqueue_retries", "Rate-limited re-adds.")
        unfinished = family(
            GaugeMetricFamily,
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress that has not finished.",
        )
        longest = family(
            GaugeMetricFamily,
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest running reconcile has been running.",
        )
        queue_duration = family(
            HistogramMetricFamily,
            "workqueue_queue_duration_seconds",
            "Seconds a key waits in the queue before it is processed.",
        )
        work_duration = family(
            HistogramMetricFamily,
            "workqueue_work_duration_seconds",
            "Seconds processing a key takes.",
        )
        for name, snapshot in controllers:
            queue = snapshot.queue
            depth.add_metric([name], queue.depth)
            adds.add_metric([name], queue.adds)
            retries.add_metric([name], queue.retries)
            unfinished.add_metric([name], queue.unfinished_work_seconds)
            longest.add_metric([name], queue.longest_running_processor_seconds)
            for family_, histogram in (
                (queue_duration, queue.queue_duration),
                (work_duration, queue.work_duration),
            ):
                _histogram(family_, [name], histogram.buckets, histogram.count, histogram.sum)
        yield from (depth, adds, retries, unfinished, longest, queue_duration, work_duration)

    def _informer_families(
        self, informers: Sequence[tuple[str, ReflectorStats]]
    ) -> Iterator[Metric]:
        relists = CounterMetricFamily(
            "kubemoon_reflector_relists", "Lists started again after the first.", labels=["name"]
        )
        restarts = CounterMetricFamily(
            "kubemoon_reflector_watch_restarts",
            "Watches resumed without a relist.",
            labels=["name"],
        )
        events = CounterMetricFamily(
            "kubemoon_reflector_events", "Watch events received.", labels=["name"]
        )
        failures = CounterMetricFamily(
            "kubemoon_reflector_failures", "Failed requests that backed off.", labels=["name"]
        )
        received = CounterMetricFamily(
            "kubemoon_reflector_received_bytes",
            "Response body bytes received: LIST pages (list) and watch streams, streaming "
            "lists included (watch).",
            labels=["name", "kind"],
        )
        kept_out = GaugeMetricFamily(
            "kubemoon_reflector_kept_out_objects",
            "Objects the server holds that the cache keeps out (too deeply nested to "
            "decode, or not storable): not cached, not reconciled.",
            labels=["name"],
        )
        shrinks = CounterMetricFamily(
            "kubemoon_reflector_page_shrinks",
            "LIST pages asked for again with half the limit after exceeding the body cap.",
            labels=["name"],
        )
        for name, stats in informers:
            kept_out.add_metric([name], stats.kept_out)
            shrinks.add_metric([name], stats.page_shrinks)
            relists.add_metric([name], stats.relists)
            restarts.add_metric([name], stats.watch_restarts)
            events.add_metric([name], stats.events)
            failures.add_metric([name], stats.failures)
            received.add_metric([name, "list"], stats.list_bytes)
            received.add_metric([name, "watch"], stats.watch_bytes)
        yield from (relists, restarts, events, failures, received, kept_out, shrinks)
