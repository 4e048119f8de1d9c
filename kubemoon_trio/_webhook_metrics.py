"""The webhook server's metrics: controller-runtime's names, registered once per registry.

Rules: ``controller_runtime_webhook_requests_total`` (by webhook and HTTP code),
``controller_runtime_webhook_latency_seconds`` and
``controller_runtime_webhook_requests_in_flight`` (by webhook), as controller-runtime
names them, so existing dashboards work, and KubeMoon's own
``kubemoon_webhook_reviews_total`` (by webhook and ``where``: ``loop`` for a review decoded,
handled and encoded without a thread hop, ``worker_thread`` for one sent to the worker
threads). Several servers sharing one registry share one
set of collectors (kept per registry, weakly, so a dropped registry is freed); the default
is prometheus_client's ``REGISTRY``. Labels are webhook names and status codes only, never
a path a client chose, so the series are bounded. Labelled children are looked up once.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["WebhookMetrics", "metrics_for"]


class WebhookMetrics:
    """controller-runtime's webhook metrics, once per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415 - optional

        self.requests = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )
        self.reviews = Counter(
            "kubemoon_webhook_reviews",
            "Reviews by where they were decoded: on the event loop (no thread hop) or on a "
            "worker thread.",
            ["webhook", "where"],
            registry=registry,
        )
        # Labelled children, looked up once: the label lookup costs more than the update.
        self._children: dict[str, tuple[Any, Any]] = {}
        self._counters: dict[tuple[str, int], Any] = {}
        self._placed: dict[tuple[str, bool], Any] = {}

    def children(self, webhook: str) -> tuple[Any, Any]:
        """The in-flight gauge and the latency histogram of one webhook."""
        found = self._children.get(webhook)
        if found is None:
            found = (self.in_flight.labels(webhook), self.latency.labels(webhook))
            self._children[webhook] = found
        return found

    def count(self, webhook: str, status: int) -> None:
        """Count one answered request."""
        counter = self._counters.get((webhook, status))
        if counter is None:
            counter = self._counters[webhook, status] = self.requests.labels(webhook, str(status))
        counter.inc()

    def placed(self, webhook: str, on_the_loop: bool) -> None:
        """Count one review decoded on the loop (``on_the_loop``) or on a worker thread."""
        counter = self._placed.get((webhook, on_the_loop))
        if counter is None:
            where = "loop" if on_the_loop else "worker_thread"
            counter = self._placed[webhook, on_the_loop] = self.reviews.labels(webhook, where)
        counter.inc()


_BY_REGISTRY: weakref.WeakKeyDictionary[Any, WebhookMetrics] = weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry | None) -> WebhookMetrics:
    if registry is None:
        from prometheus_client import REGISTRY  # noqa: PLC0415 - optional dependency

        registry = REGISTRY
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = WebhookMetrics(registry)
    return metrics
