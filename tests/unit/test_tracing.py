"""Tracing hooks and the JSON log formatter, without sockets (an in-memory SDK provider)."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tracing_support import memory_tracing

from kubemoon_core import Failed, ObjectKey, Reconciled, Request, RequeueAfter, Response
from kubemoon_core._controller import WorkItem
from kubemoon_core._leader import NewLeader, StartedLeading
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import WebhookReply
from kubemoon_io import JsonLogFormatter, _tracing, object_context, tracing_enabled

RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with memory_tracing() as exporter:
        yield exporter


def _log_lines(emit: Any) -> list[dict[str, Any]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    log = logging.getLogger("kubemoon.test.tracing")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        emit(log)
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    return [json.loads(line) for line in lines]


def _runtime_tracer() -> Any:
    tracer = _tracing._tracer()
    assert tracer is not None
    return tracer


# -- off ---------------------------------------------------------------------------------------


def test_tracing_is_off_without_a_provider() -> None:
    # The test process never sets a global provider: the API's proxy means "off".
    assert not tracing_enabled()
    assert _tracing.trace_headers() == ()
    calls: list[str] = []

    class Owner:
        @_tracing.traced_request
        def send(self, request: Request, url: str) -> Response:
            calls.append(url)
            return Response(200)

    assert Owner().send(Request("GET", "/api/v1/pods"), "https://h/api/v1/pods").status_code == 200
    assert calls == ["https://h/api/v1/pods"]
    assert _tracing.review_span("POST", "/validate", [("traceparent", "x")]) is _tracing._NO_REVIEW


def test_without_the_extra_everything_still_works() -> None:
    # A fresh interpreter where `import opentelemetry` fails, as without kubemoon[otel].
    script = textwrap.dedent(
        """
        import io, json, logging, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError(name)
                return None
        sys.meta_path.insert(0, Block())
        import kubemoon_sync, kubemoon_io
        from kubemoon_io import JsonLogFormatter, object_context, _tracing
        from kubemoon_core import Request, Response
        assert "opentelemetry" not in sys.modules
        assert not kubemoon_io.tracing_enabled()
        assert _tracing.trace_headers() == ()
        class Owner:
            @_tracing.traced_request
            def send(self, request, url):
                return Response(204)
        assert Owner().send(Request("GET", "/api"), "https://h/api").status_code == 204
        _tracing.review_span("POST", "/v", []).end(None)
        record = logging.LogRecord("x", logging.INFO, "", 0, "hi", (), None)
        with object_context(controller="c", namespace="n", name="o"):
            line = json.loads(JsonLogFormatter().format(record))
        assert line["msg"] == "hi" and line["name"] == "o" and "trace_id" not in line, line
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


# -- logs --------------------------------------------------------------------------------------


def test_json_lines_carry_the_fields_and_the_span(spans: InMemorySpanExporter) -> None:
    tracer = _runtime_tracer()

    def emit(log: logging.Logger) -> None:
        log.info("outside %s", "any span")
        with tracer.start_as_current_span("work"):
            with object_context(controller="mirror", namespace="ns", name="obj"):
                log.warning("inside", extra={"reconcile_id": 7})
                log.info("explicit", extra={"object_name": "other"})
            log.info("keyed", extra={"key": "ns2/keyed", "controller": "c2"})

    outside, inside, explicit, keyed = _log_lines(emit)
    (span,) = spans.get_finished_spans()
    assert span.context is not None
    assert RFC3339_MS.match(outside["ts"]), outside["ts"]
    assert outside["level"] == "info"
    assert outside["msg"] == "outside any span"
    assert outside["logger"] == "kubemoon.test.tracing"
    assert "trace_id" not in outside and "controller" not in outside
    assert inside["trace_id"] == f"{span.context.trace_id:032x}"
    assert inside["span_id"] == f"{span.context.span_id:016x}"
    assert (inside["controller"], inside["namespace"], inside["name"]) == ("mirror", "ns", "obj")
    assert inside["level"] == "warning"
    assert inside["reconcile_id"] == 7
    assert explicit["name"] == "other"  # extra= wins over the context
    assert "object_name" not in explicit
    assert (keyed["controller"], keyed["namespace"], keyed["name"]) == ("c2", "ns2", "keyed")


def test_json_lines_are_one_line_and_never_raise() -> None:
    loop: list[Any] = []
    loop.append(loop)

    def emit(log: logging.Logger) -> None:
        log.info('forged\n{"level": "error", "msg": "fake"}')
        log.info("odd", extra={"loop": loop, "keys": {(1, 2): 3}, "blob": b"\xff", "ts": "x"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")

    forged, odd, failed = _log_lines(emit)
    assert forged["msg"].startswith("forged\n") and forged["level"] == "info"
    assert odd["ts"] != "x" and RFC3339_MS.match(odd["ts"])  # own fields are never overridden
    assert isinstance(odd["loop"], str) and isinstance(odd["keys"], str)
    assert odd["blob"] == "b'\\xff'"
    assert "ValueError: boom" in failed["exception"]


# -- propagation -------------------------------------------------------------------------------


def test_trace_headers_are_the_current_span(spans: InMemorySpanExporter) -> None:
    tracer = _runtime_tracer()
    with tracer.start_as_current_span("parent") as parent:
        headers = dict(_tracing.trace_headers())
        context = parent.get_span_context()
    # Sampled, and only that bit: kube-apiserver 1.35 and 1.36 drop a version-00
    # traceparent whose flags are above 02 (the SDK sets the W3C random bit too: 03).
    assert headers == {
        b"traceparent": (f"00-{context.trace_id:032x}-{context.span_id:016x}-01").encode()
    }


@pytest.mark.parametrize(
    ("flags", "sent"), [(0x00, "00"), (0x01, "01"), (0x02, "00"), (0x03, "01"), (0xFF, "01")]
)
def test_trace_headers_send_only_the_sampled_flag(flags: int, sent: str) -> None:
    # A current span with exactly these flags (the W3C random bit 02, unknown bits above).
    context = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=trace.TraceFlags(flags),
    )
    with trace.use_span(trace.NonRecordingSpan(context)):
        headers = dict(_tracing.trace_headers())
    assert headers == {
        b"traceparent": f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{sent}".encode()
    }


VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("traceparent", "garbage")],
        [("traceparent", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")],
        [("traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01")],
        [("traceparent", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01")],
        [("traceparent", VALID + "-extra")],
        [("traceparent", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01")],
        [("traceparent", "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01")],
        [("traceparent", VALID * 1000)],
    ],
)
def test_a_review_without_a_valid_traceparent_starts_a_trace(
    spans: InMemorySpanExporter, headers: list[tuple[str, str]]
) -> None:
    _tracing.review_span("POST", "/validate?timeout=10s", headers).end(None)
    (span,) = spans.get_finished_spans()
    assert span.parent is None
    assert span.kind is SpanKind.SERVER
    assert span.name == "POST /validate"
    assert trace.get_current_span() is trace.INVALID_SPAN  # the context was detached


def test_a_review_continues_the_callers_trace(spans: InMemorySpanExporter) -> None:
    state = ",".join(f"k{i}=v{i}" for i in range(40))  # over the 32 entries W3C allows
    review = _tracing.review_span(
        "POST", "/validate", [("TraceParent", VALID), ("tracestate", state)]
    )
    inner = trace.get_current_span().get_span_context()
    _tracing.note_review(
        json.dumps(
            {
                "request": {
                    "operation": "CREATE",
                    "namespace": "ns",
                    "name": "cm",
                    "resource": {"resource": "configmaps"},
                }
            }
        ).encode()
    )
    _tracing.note_review(b"{not json")
    _tracing.note_review(b"[" * 100000)
    review.end(WebhookReply(200, (), b"", webhook="validate", uid="u1", outcome="denied"))
    review.end(None)  # a second end is a no-op
    (span,) = spans.get_finished_spans()
    assert span.context is not None and span.parent is not None
    assert f"{span.context.trace_id:032x}" == VALID.split("-")[1]
    assert f"{span.parent.span_id:016x}" == VALID.split("-")[2]
    assert span.parent.is_remote
    assert inner.span_id == span.context.span_id
    attributes = dict(span.attributes or {})
    assert attributes["kubemoon.admission.operation"] == "CREATE"
    assert attributes["kubemoon.admission.allowed"] is False
    assert attributes["kubemoon.k8s.resource"] == "configmaps"
    assert attributes["http.response.status_code"] == 200
    assert len(span.context.trace_state) == 0  # an invalid tracestate is dropped


# -- API requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "route", "expected"),
    [
        (
            "/api/v1/namespaces/ns/configmaps/cm",
            "/api/v1/namespaces/{namespace}/configmaps/{name}",
            {"k8s.namespace.name": "ns", "kubemoon.k8s.resource": "configmaps"},
        ),
        (
            "/apis/kubemoon.dev/v1beta1/namespaces/ns/configmirrors/m/status",
            "/apis/kubemoon.dev/v1beta1/namespaces/{namespace}/configmirrors/{name}/status",
            {
                "k8s.namespace.name": "ns",
                "kubemoon.k8s.resource": "configmirrors.kubemoon.dev",
                "kubemoon.k8s.subresource": "status",
            },
        ),
        (
            "/api/v1/namespaces/ns",
            "/api/v1/namespaces/{name}",
            {"k8s.namespace.name": "ns", "kubemoon.k8s.resource": "namespaces"},
        ),
        ("/api/v1/pods", "/api/v1/pods", {"kubemoon.k8s.resource": "pods"}),
        ("/version", "/version", {}),
        ("/apis", "/apis", {}),
    ],
)
def test_routes_name_no_object(path: str, route: str, expected: dict[str, str]) -> None:
    assert _tracing._route(path) == (route, expected)


def test_urls_lose_their_credentials() -> None:
    assert _tracing._safe_url("https://u:p@h:6443/api?x=1") == "https://h:6443/api?x=1"
    assert _tracing._safe_url("https://h/api") == "https://h/api"


class _Client:
    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.seen: list[dict[bytes, bytes]] = []

    @_tracing.traced_request
    def exchange(self, request: Request, url: str) -> Response:
        self.seen.append(dict(_tracing.trace_headers()))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Response(answer)


def test_requests_are_client_spans_inside_a_span(spans: InMemorySpanExporter) -> None:
    client = _Client(200, 200, 401, OSError("cut"))
    url = "https://user:secret@127.0.0.1:6443/api/v1/namespaces/ns/pods/p"
    request = Request("GET", "/api/v1/namespaces/ns/pods/p")
    client.exchange(request, url)  # outside any span: no span, no header
    assert client.seen == [{}]
    tracer = _runtime_tracer()
    with tracer.start_as_current_span("reconcile"):
        client.exchange(request, url)
        client.exchange(request, url)  # the same request again: a resend
        with pytest.raises(OSError, match="cut"):
            client.exchange(Request("DELETE", "/api/v1/namespaces/ns/pods/p"), url)
    first, second, failed, parent = spans.get_finished_spans()
    assert parent.name == "reconcile"
    assert first.name == "GET /api/v1/namespaces/{namespace}/pods/{name}"
    assert first.kind is SpanKind.CLIENT
    assert first.parent is not None and parent.context is not None
    assert first.parent.span_id == parent.context.span_id
    attributes = dict(first.attributes or {})
    assert attributes == {
        "http.request.method": "GET",
        "url.full": "https://127.0.0.1:6443/api/v1/namespaces/ns/pods/p",
        "url.template": "/api/v1/namespaces/{namespace}/pods/{name}",
        "server.address": "127.0.0.1",
        "server.port": 6443,
        "k8s.namespace.name": "ns",
        "kubemoon.k8s.resource": "pods",
        "http.response.status_code": 200,
    }
    assert first.context is not None
    assert client.seen[1][b"traceparent"].decode().split("-")[2] == f"{first.context.span_id:016x}"
    assert dict(second.attributes or {})["http.request.resend_count"] == 1
    assert dict(second.attributes or {})["error.type"] == "401"
    assert second.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "OSError"
    assert "secret" not in json.dumps(
        [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    )


# -- reconciles, leaders -----------------------------------------------------------------------


class _Controller:
    name = "mirror"

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.logged: list[dict[str, Any]] = []

    @_tracing.traced_reconcile
    async def reconcile(self, item: WorkItem) -> Any:
        self.logged = _log_lines(lambda log: log.info("reconciling"))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def _item(namespace: str = "ns") -> WorkItem:
    return WorkItem(ObjectKey(namespace, "obj"), reconcile_id=3, started=0.0, requeues=1)


async def test_a_reconcile_is_a_root_span_with_its_outcome(spans: InMemorySpanExporter) -> None:
    tracer = _runtime_tracer()
    controller = _Controller(RequeueAfter(2.5))
    with tracer.start_as_current_span("unrelated"):
        await controller.reconcile(_item())
    await _Controller(Failed(RuntimeError("nope"))).reconcile(_item(""))
    with pytest.raises(KeyError):
        await _Controller(KeyError("escaped")).reconcile(_item())
    await _Controller(Reconciled()).reconcile(_item())
    requeued, _unrelated, failed, escaped, done = spans.get_finished_spans()
    assert requeued.name == "reconcile mirror" and requeued.parent is None
    attributes = dict(requeued.attributes or {})
    assert attributes["kubemoon.reconcile.result"] == "requeue_after"
    assert attributes["kubemoon.reconcile.requeue"] is True
    assert attributes["kubemoon.reconcile.requeue_after"] == 2.5
    assert attributes["kubemoon.key"] == "ns/obj"
    assert attributes["k8s.namespace.name"] == "ns"
    assert failed.status.status_code is StatusCode.ERROR
    assert "k8s.namespace.name" not in dict(failed.attributes or {})
    assert [e.name for e in failed.events] == ["exception"]
    assert escaped.status.status_code is StatusCode.ERROR
    assert dict(done.attributes or {})["kubemoon.reconcile.requeue"] is False
    (line,) = controller.logged
    assert requeued.context is not None
    assert line["trace_id"] == f"{requeued.context.trace_id:032x}"
    assert (line["controller"], line["namespace"], line["name"]) == ("mirror", "ns", "obj")


async def test_the_log_context_is_set_even_without_tracing() -> None:
    controller = _Controller(Reconciled())
    await controller.reconcile(_item())
    (line,) = controller.logged
    assert (line["controller"], line["name"]) == ("mirror", "obj")
    assert "trace_id" not in line


def test_leader_transitions_are_span_events(spans: InMemorySpanExporter) -> None:
    _tracing.leader_transition(StartedLeading(), "me")
    tracer = _runtime_tracer()
    with tracer.start_as_current_span("outer"):
        _tracing.leader_transition(NewLeader("other"), "me")
    alone, outer = spans.get_finished_spans()
    assert alone.name == "leader election"
    assert [(e.name, dict(e.attributes or {})) for e in alone.events] == [
        ("leader.started_leading", {"kubemoon.leader.identity": "me"})
    ]
    assert [e.name for e in outer.events] == ["leader.new_leader"]
    assert dict(outer.events[0].attributes or {})["kubemoon.leader.holder"] == "other"


def test_blocking_task_group_children_inherit_the_context(spans: InMemorySpanExporter) -> None:
    # As trio and asyncio tasks do: a write_all's requests are children of the reconcile.
    from kubemoon_io._logging import _object
    from kubemoon_sync import _backend

    seen: list[Any] = []
    with (
        _runtime_tracer().start_as_current_span("parent") as parent,
        object_context(controller="c", namespace="n", name="o"),
        _backend.TaskGroup() as group,
    ):
        for _ in range(2):
            group.start_soon(lambda: seen.append((trace.get_current_span(), _object.get())))
    assert seen == [(parent, ("c", "n", "o"))] * 2


def test_a_blocking_reconcile_is_a_span_too(spans: InMemorySpanExporter) -> None:
    class Blocking:
        name = "blocking"

        @_tracing.traced_reconcile
        def reconcile(self, item: WorkItem) -> Any:
            headers = dict(_tracing.trace_headers())
            assert headers[b"traceparent"]
            return Failed(ValueError("bad"))

    assert isinstance(Blocking().reconcile(_item()), Failed)
    (span,) = spans.get_finished_spans()
    assert span.name == "reconcile blocking"
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["kubemoon.reconcile.result"] == "error"


@pytest.mark.parametrize("provider", ["x", 3, object()])
def test_a_provider_must_be_a_tracer_provider(provider: Any) -> None:
    with pytest.raises(LocalProtocolError, match="TracerProvider"):
        _tracing.use_tracer_provider(provider)
    assert not tracing_enabled()


@pytest.mark.parametrize("fields", [["a"], "ab", {1: "x"}])
def test_static_fields_are_a_mapping_of_names(fields: Any) -> None:
    with pytest.raises(LocalProtocolError, match="static_fields"):
        JsonLogFormatter(fields)
    record = logging.LogRecord("x", logging.INFO, "", 0, "m", (), None)
    assert json.loads(JsonLogFormatter({"service": "s"}).format(record))["service"] == "s"
