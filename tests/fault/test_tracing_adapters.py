"""Every adapter puts the request span's ``traceparent`` on what it sends inside a span,
and nothing outside one (the scripted server records the headers); every adapter's
webhook server continues the caller's trace."""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpcore
import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import PODS, Adapter, Collection, run_informer
from fault_support import pod as fault_pod
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tracing_support import memory_tracing

from kubemoon_core.webhooks import AdmissionResponse, WebhookApp
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
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(client, check_permissions=False)
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


async def test_informer_lists_and_watches_are_spans_counting_relists(
    adapter: Adapter, spans: InMemorySpanExporter
) -> None:
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    events = [("MODIFIED", fault_pod("a", "11")), ("ADDED", fault_pod("c", "12"))]

    def page(rv: str, *items: dict[str, Any]) -> Reply:
        return Reply.json({"kind": "PodList", "metadata": {"resourceVersion": rv}, "items": items})

    collection = Collection(
        [fault_pod("a", "9")],
        events,
        plan=[Reply.watch([events[0], ("ERROR", expired)])],
        list_plan=[page("10", fault_pod("a", "9")), page("11", fault_pod("a", "11"))],
    )
    changes: list[Any] = []
    async with ScriptedServer(collection.handler) as server:
        client = adapter.client(server.client_config(token="t"))
        try:
            informer = adapter.informer(client, on_change=changes.append)
            await run_informer(adapter, informer, lambda: len(changes) >= 3)
        finally:
            await adapter.close(client)
    finished = spans.get_finished_spans()
    lists = [s for s in finished if s.name == "informer list pods in ns"]
    watches = [s for s in finished if s.name == "informer watch pods in ns"]
    assert [dict(s.attributes or {})["kubemoon.reflector.relists"] for s in lists] == [0, 1]
    assert dict(lists[1].attributes or {})["kubemoon.reflector.last_relist_reason"]
    # The relist succeeded: the reflector's last error (the 410) does not mark it.
    assert [s.status.status_code for s in lists] == [StatusCode.UNSET] * 2
    gone = watches[0]
    assert dict(gone.attributes or {})["kubemoon.reflector.relist"]  # ended by the 410
    # The reflector backed off after it (kubemoon_reflector_failures_total): an error.
    assert gone.status.status_code is StatusCode.ERROR
    assert dict(gone.attributes or {})["kubemoon.reflector.events"] == 1
    for parent in lists + watches[:1]:
        assert parent.parent is None and parent.context is not None
        (request,) = [
            s
            for s in finished
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]
        assert request.kind is SpanKind.CLIENT
    # Each request carried its own span's traceparent.
    assert all(r.header("traceparent") for r in collection.lists + collection.watches)


async def test_hostile_trace_headers_on_the_webhook_port_are_bounded(
    spans: InMemorySpanExporter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Anyone who reaches the webhook port chooses these headers, not only the apiserver.
    import kubemoon_trio

    certs = WebhookCertificates.create(tmp_path / "certs")
    app = WebhookApp()
    app.validating("/validate", lambda request: AdmissionResponse.allow(), name="configmaps")
    server = kubemoon_trio.WebhookServer(
        app, cert_file=certs.cert_file, key_file=certs.key_file, reload_interval=0.0
    )
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    entries = ",".join(f"k{i}={'v' * 200}" for i in range(100))  # 100 entries, ~20 KB
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        context = ssl.create_default_context(cadata=certs.ca_bundle.decode("ascii"))
        async with httpcore.AsyncConnectionPool(ssl_context=context) as pool:

            async def post(headers: list[tuple[str, str]]) -> int:
                response = await pool.request(
                    "POST",
                    f"{server.url}/validate",
                    headers=[("Content-Type", "application/json"), *headers],
                    content=review(),
                )
                return response.status

            assert await post([("traceparent", CALLER), ("traceparent", other)] * 20) == 200
            assert await post([("traceparent", CALLER), ("tracestate", entries)]) == 200
            huge = [("traceparent", CALLER), ("tracestate", "k=" + "v" * 60_000)]
            assert await post(huge) == 200  # under the head limit: the tracestate is dropped
            long_parent = [("traceparent", CALLER + "-" + "f" * 1000)]
            assert await post(long_parent) == 200  # not W3C: a fresh trace
            too_big = [("traceparent", CALLER), ("tracestate", "k=" + "v" * 200_000)]
            assert await post(too_big) >= 400  # over the head limit: refused, no span
            assert await post([("traceparent", CALLER)]) == 200  # still serving
        nursery.cancel_scope.cancel()
    reviews = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert len(reviews) == 5
    fresh = reviews.pop(3)
    assert fresh.parent is None
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]  # no log flood
    for span in reviews:
        assert span.context is not None
        assert f"{span.context.trace_id:032x}" == CALLER.split("-")[1]  # the first one wins
        assert len(span.context.trace_state) == 0  # over 32 entries: dropped, not kept


async def test_bad_tracestates_log_a_bounded_number_of_safe_warnings_on_every_adapter(
    adapter: Adapter, spans: InMemorySpanExporter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller chooses ``tracestate``: 100 malformed ones (33 entries, a bad key, non-ASCII
    and control characters) give at most a few rate-limited WARNING lines, none quoting
    the caller's text, and the reviews are still answered in the caller's trace."""
    certs = WebhookCertificates.create(tmp_path / "certs")
    app = WebhookApp()
    app.validating("/validate", lambda request: AdmissionResponse.allow(), name="configmaps")
    bad = [
        ",".join(f"k{i}=v" for i in range(33)),
        "Bad-Key=v",
        "k=\u00e9\u00e9\x1b[31mINJECTED",
    ]
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(client, check_permissions=False)
        server = adapter.module.WebhookServer(
            app,
            cert_file=certs.cert_file,
            key_file=certs.key_file,
            reload_interval=0.0,
            registry=manager.registry,
        )
        manager.add_webhook_server(server)
        caplog.set_level(logging.DEBUG)
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            try:
                with trio.fail_after(10):
                    while not server.serving:
                        await trio.sleep(0.01)
                context = ssl.create_default_context(cadata=certs.ca_bundle.decode("ascii"))
                async with httpcore.AsyncConnectionPool(ssl_context=context) as pool:
                    for i in range(100):
                        state = bad[i % len(bad)].encode("utf-8")
                        response = await pool.request(
                            "POST",
                            f"{server.url}/validate?timeout=10s",
                            headers=[
                                (b"Content-Type", b"application/json"),
                                (b"traceparent", CALLER.encode()),
                                (b"tracestate", state),
                            ],
                            content=review(),
                        )
                        assert response.status == 200
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) <= 3, [r.getMessage() for r in warnings]
    for record in warnings:
        text = record.getMessage()
        assert "tracestate" in text
        for raw in ("\u00e9", "\x1b", "INJECTED", "Bad-Key", "k32"):
            assert raw not in text, text
    reviews = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert len(reviews) == 100
    for span in reviews:
        assert span.context is not None
        assert f"{span.context.trace_id:032x}" == CALLER.split("-")[1]
        assert len(span.context.trace_state) == 0


def test_a_long_valid_tracestate_is_propagated_cut_to_the_cap(
    spans: InMemorySpanExporter,
) -> None:
    """A valid 7.8 KiB tracestate continues the trace, but what every request the handler
    makes carries is at most 512 characters: long members first, then from the end."""
    members = [f"k{i}=" + "v" * 230 for i in range(30)]  # 30 x 235 = ~7 KiB
    members[1:1] = [f"s{i}=short{i}" for i in range(2)]
    state = ",".join(members)
    assert 7_000 < len(state) <= 8192
    review_span_ = _tracing.review_span(
        "POST", "/validate", [("traceparent", CALLER), ("tracestate", state)]
    )
    assert review_span_.ignored is None
    try:
        headers = dict(_tracing.trace_headers())
    finally:
        review_span_.end(None)
    sent = headers[b"tracestate"].decode()
    assert len(sent) <= _tracing.MAX_PROPAGATED_TRACESTATE
    assert sent == "s0=short0,s1=short1"
    assert headers[b"traceparent"].decode().split("-")[1] == CALLER.split("-")[1]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("a=1,b=2", "a=1,b=2"),
        (",".join(f"k{i:02d}=" + "v" * 60 for i in range(10)), None),
        ("big=" + "v" * 600 + ",a=1", "a=1"),
    ],
)
def test_the_propagated_tracestate_cap(state: str, expected: str | None) -> None:
    out = _tracing.propagated_tracestate(state)
    assert len(out) <= _tracing.MAX_PROPAGATED_TRACESTATE
    if expected is not None:
        assert out == expected
    else:  # members are dropped from the end, whole, in order
        assert state.startswith(out) and len(out) > 400 and out.count(",") == 6
