"""Every adapter puts the request span's ``traceparent`` on what it sends inside a span,
and nothing outside one (the scripted server records the headers); every adapter's
webhook server continues the caller's trace."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpcore
import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import PODS, Adapter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from tracing_support import memory_tracing

from kubemoon_core import AdmissionResponse, WebhookApp
from kubemoon_io import _tracing
from kubemoon_testing import Reply, ScriptedServer, WebhookCertificates

pytestmark = pytest.mark.fault


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with memory_tracing() as exporter:
        yield exporter


async def in_span(adapter: Adapter, work: Callable[[], Any]) -> None:
    """Run ``work`` (a call of the adapter's client) inside a span, on the adapter's side."""
    tracer = _tracing._tracer()
    assert tracer is not None
    if adapter.name == "sync":

        def run() -> None:
            with tracer.start_as_current_span("parent"):
                work()

        await trio.to_thread.run_sync(run)
        return

    async def run_async() -> None:
        with tracer.start_as_current_span("parent"):
            await work()

    if adapter.name == "trio":
        await run_async()
    else:
        await adapter.run(run_async())


def pod(name: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


async def test_requests_inside_a_span_carry_its_traceparent(
    adapter: Adapter, spans: InMemorySpanExporter
) -> None:
    async with ScriptedServer() as server:
        server.add(
            Reply.json(pod("outside")),
            Reply.json(pod("inside")),
            Reply.watch([("ADDED", pod("w"))]),
        )
        client = adapter.client(server.client_config(token="tracing-secret"))
        try:
            await adapter.call(client.get, PODS, "outside", namespace="ns")

            def work() -> Any:
                if adapter.name == "sync":
                    client.get(PODS, "inside", namespace="ns")
                    with client.watch(PODS, namespace="ns") as events:
                        return list(events)

                async def both() -> Any:
                    await client.get(PODS, "inside", namespace="ns")
                    async with client.watch(PODS, namespace="ns") as events:
                        return [event async for event in events]

                return both()

            await in_span(adapter, work)
        finally:
            await adapter.close(client)
    outside, inside, watch = server.requests
    assert outside.header("traceparent") is None
    get, opened, parent = spans.get_finished_spans()
    assert parent.name == "parent" and parent.context is not None
    for request, span in ((inside, get), (watch, opened)):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and span.parent.span_id == parent.context.span_id
        assert span.context is not None
        trace_id, span_id = request.header("traceparent").split("-")[1:3]  # type: ignore[union-attr]
        assert (trace_id, span_id) == (
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
        )
    assert dict(get.attributes or {})["http.response.status_code"] == 200
    assert dict(opened.attributes or {})["kubemoon.k8s.watch"] is True
    assert "tracing-secret" not in str(
        [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    )


CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_webhook_reviews_continue_the_callers_trace_on_every_adapter(
    adapter: Adapter, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    certs = WebhookCertificates.create(tmp_path / "certs")
    app = WebhookApp()
    app.validating("/validate", lambda request: AdmissionResponse.deny("no"), name="configmaps")
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        manager = adapter.module.Manager(client)
        server = adapter.module.WebhookServer(
            app,
            cert_file=certs.cert_file,
            key_file=certs.key_file,
            reload_interval=0.0,
            registry=manager.registry,
        )
        manager.add_webhook_server(server)
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            try:
                with trio.fail_after(10):
                    while not server.serving:
                        await trio.sleep(0.01)
                context = ssl.create_default_context(cadata=certs.ca_bundle.decode("ascii"))
                async with httpcore.AsyncConnectionPool(ssl_context=context) as pool:
                    for headers in ({"traceparent": CALLER, "tracestate": "k=v"}, {}):
                        response = await pool.request(
                            "POST",
                            f"{server.url}/validate?timeout=10s",
                            headers={"Content-Type": "application/json", **headers},
                            content=review(),
                        )
                        assert response.status == 200
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)
    continued, fresh = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert continued.name == "POST /validate"
    assert continued.context is not None and continued.parent is not None
    assert f"{continued.context.trace_id:032x}" == CALLER.split("-")[1]
    assert f"{continued.parent.span_id:016x}" == CALLER.split("-")[2]
    assert continued.context.trace_state.get("k") == "v"
    attributes = dict(continued.attributes or {})
    assert attributes["kubemoon.admission.operation"] == "CREATE"
    assert attributes["kubemoon.admission.allowed"] is False
    assert attributes["kubemoon.webhook"] == "configmaps"
    assert fresh.parent is None


def review() -> bytes:
    document = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "4b3f0d8e-0000-4000-8000-000000000000",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "CREATE",
            "namespace": "team-a",
            "name": "c",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap"},
        },
    }
    return json.dumps(document).encode()
