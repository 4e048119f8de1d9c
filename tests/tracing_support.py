"""Helpers of the tracing tests: an in-memory SDK provider and a small OTLP/gRPC receiver.

The receiver is built on the official ``opentelemetry-proto`` messages and ``grpcio``
(the dev extra): it accepts ``TraceService/Export`` on 127.0.0.1 and keeps every span,
so a test can read what the operator and kube-apiserver exported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kubemoon_io import use_tracer_provider

__all__ = ["OtlpReceiver", "ReceivedSpan", "forget_global_tracer_provider", "memory_tracing"]


@contextmanager
def memory_tracing() -> Iterator[InMemorySpanExporter]:
    """Trace with an SDK provider exporting to memory for the block, then switch back off."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


def forget_global_tracer_provider() -> None:
    """Shut down and unset a global TracerProvider that code under test set.

    The OpenTelemetry API lets a process set its global provider once and never unset it;
    code run by a test (a docs page's example) must not leave tracing on for every later
    test of the session. This reaches into the API's module state, in tests only.
    """
    from opentelemetry import trace

    provider = getattr(trace, "_TRACER_PROVIDER", None)
    if provider is None:
        return
    shutdown = getattr(provider, "shutdown", None)
    if callable(shutdown):
        shutdown()
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = type(trace._TRACER_PROVIDER_SET_ONCE)()


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received over OTLP, with hex ids."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    start: int
    events: tuple[str, ...] = field(default=())


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=tuple((k.trace_id.hex(), k.span_id.hex()) for k in span.links),
                            start=span.start_time_unix_nano,
                            events=tuple(e.name for e in span.events),
                        )
                    )
        with self._receiver.lock:
            self._receiver.spans.extend(spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """An OTLP/gRPC trace receiver on 127.0.0.1 (insecure, as kube-apiserver exports)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        """``host:port`` for an OTLP/gRPC exporter."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        """Start serving."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop at once."""
        self._server.stop(None).wait()

    def snapshot(self) -> list[ReceivedSpan]:
        """The spans received so far."""
        with self.lock:
            return list(self.spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], Any], timeout: float = 30.0
    ) -> Any:
        """Poll until ``predicate(spans)`` is truthy (kube-apiserver batches every ~5 s)."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate(self.snapshot())
            if result:
                return result
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.snapshot()})
                raise AssertionError(f"spans never arrived; received: {names}")
            time.sleep(0.2)
