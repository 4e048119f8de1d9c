"""OpenTelemetry traces from a reconcile into kube-apiserver and etcd, and back out to a
webhook, received over OTLP/gRPC by a receiver in the test (the real kube-apiserver).

kube-apiserver 1.37 adopts the W3C ``traceparent`` of trusted callers only
(``system:masters``, ``system:monitoring``); for anyone else its SERVER span starts a trace
of its own that links to the caller's span. Spans reach the receiver in batches (the
apiserver's every ~5 s), so every check polls.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CollectorRegistry
from tracing_support import OtlpReceiver, ReceivedSpan

from kubemoon_core import GroupVersionResource, Reconciled, delete_request
from kubemoon_core.errors import AlreadyExists
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookApp, ca_bundle_patch
from kubemoon_io import JsonLogFormatter, use_tracer_provider
from kubemoon_testing import (
    LIMITED_USER,
    MONITORING_USER,
    SUPPORTED_RELEASES,
    ApiServer,
    WebhookCertificates,
    default_binary_dir,
)
from kubemoon_testing._versions import selected_version
from kubemoon_trio import Client, Manager, ReconcileContext, WebhookServer

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
NAMESPACES = GroupVersionResource("", "v1", "namespaces")
VALIDATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)
SERVICE = "kubemoon-tracing-test"
SERVER, CLIENT = 2, 3  # OTLP SpanKind values
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
OLDEST = SUPPORTED_RELEASES[0].version


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def kube_tracing_endpoint(otlp_receiver: OtlpReceiver) -> str:
    return otlp_receiver.endpoint


@pytest.fixture(scope="session")
def oldest_tracing_apiserver(kube_tracing_endpoint: str) -> Iterator[ApiServer]:
    """A tracing kube-apiserver of the oldest supported release (1.35 vendors an older
    propagator than 1.37: it discards a traceparent whose flags are above 02)."""
    with ApiServer(
        version=OLDEST,
        controller_manager=False,
        tracing_endpoint=kube_tracing_endpoint,
        tracing_sampling_rate_per_million=1_000_000,
    ) as server:
        yield server


def _oldest_skipped() -> str | None:
    if selected_version() == OLDEST:
        return f"this run's kube_apiserver_tracing is {OLDEST} already"
    if not os.access(default_binary_dir(OLDEST) / "kube-apiserver", os.X_OK):
        return f"kube-apiserver {OLDEST} is not built (make testenv builds it)"
    return None


# The run's tracing server, and one of the oldest supported release.
SERVERS = pytest.mark.parametrize(
    "server_fixture",
    [
        "kube_apiserver_tracing",
        pytest.param(
            "oldest_tracing_apiserver",
            marks=pytest.mark.skipif(_oldest_skipped() is not None, reason=str(_oldest_skipped())),
        ),
    ],
)


@pytest.fixture
def provider(otlp_receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    """The operator's SDK: OTLP/gRPC to the receiver, batched as in production."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    exporter = OTLPSpanExporter(endpoint=f"http://{otlp_receiver.endpoint}", insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    use_tracer_provider(provider)
    yield provider
    use_tracer_provider(None)
    provider.shutdown()


def client_for(server: ApiServer, user: str, namespace: str) -> Client:
    return Client(
        ClientConfig(
            server=server.url,
            ca_file=str(server.ca_file),
            token=server.tokens[user],
            namespace=namespace,
        )
    )


def namespace_for(server: ApiServer, user: str) -> str:
    namespace = server.create_namespace(prefix="tracing")
    server.grant_namespace_access(namespace, user=user, verbs=ALL_VERBS)
    return namespace


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [
        s for s in spans if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id
    ]


def descendants(spans: list[ReceivedSpan], root: ReceivedSpan) -> list[ReceivedSpan]:
    found, frontier = [], [root]
    while frontier:
        kids = children(spans, frontier.pop())
        found.extend(kids)
        frontier.extend(kids)
    return found


def tree(spans: list[ReceivedSpan], root: ReceivedSpan, depth: int = 0) -> list[str]:
    """The trace under ``root`` as indented lines (printed into docs/observability.rst)."""
    line = f"{'  ' * depth}{root.name}  [{root.service}]"
    lines = [line]
    for kid in sorted(children(spans, root), key=lambda s: s.start):
        lines.extend(tree(spans, kid, depth + 1))
    return lines


@SERVERS
async def test_a_reconcile_trace_runs_through_the_apiserver_into_etcd(
    server_fixture: str,
    request: pytest.FixtureRequest,
    otlp_receiver: OtlpReceiver,
    provider: TracerProvider,
) -> None:
    server: ApiServer = request.getfixturevalue(server_fixture)
    namespace = namespace_for(server, MONITORING_USER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    controller_log = logging.getLogger("kubemoon.controller.tracer")
    controller_log.addHandler(handler)
    controller_log.setLevel(logging.INFO)
    copied = trio.Event()

    async def reconcile(ctx: ReconcileContext) -> Reconciled:
        if ctx.name != "source":
            return Reconciled()
        ctx.log.info("copying %s", ctx.name)
        try:
            await ctx.client.create(
                CONFIGMAPS, {"metadata": {"name": "copy"}, "data": {"a": "1"}}, namespace=namespace
            )
        except AlreadyExists:
            pass
        copied.set()
        return Reconciled()

    try:
        async with client_for(server, MONITORING_USER, namespace) as client:
            # The identity holds ConfigMap rights in its namespace only (Events, which the
            # derived RBAC includes, are not what this test is about), so the start-up
            # permission check would rightly keep the controller from starting.
            manager = Manager(client, check_permissions=False)
            manager.controller(
                "tracer", CONFIGMAPS, kind="ConfigMap", namespace=namespace
            ).complete(reconcile)
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    await nursery.start(manager.run)
                    await client.create(
                        CONFIGMAPS, {"metadata": {"name": "source"}}, namespace=namespace
                    )
                    await copied.wait()
                    manager.stop()
    finally:
        controller_log.removeHandler(handler)
    provider.force_flush()

    def complete(spans: list[ReceivedSpan]) -> Any:
        for reconciled in spans:
            if reconciled.service != SERVICE or reconciled.name != "reconcile tracer":
                continue
            if reconciled.attributes.get("kubemoon.key") != f"{namespace}/source":
                continue
            for request in children(spans, reconciled):
                if request.kind != CLIENT or not request.name.startswith("POST "):
                    continue
                for api in children(spans, request):
                    storage = [s for s in descendants(spans, api) if "etcd" in s.name.lower()]
                    if api.kind == SERVER and api.service != SERVICE and storage:
                        return reconciled, request, api, storage
        return None

    reconciled, request, api, storage = await trio.to_thread.run_sync(
        otlp_receiver.wait_for, complete
    )
    spans = otlp_receiver.snapshot()
    print("\n".join(tree(spans, reconciled)))  # the tree in docs/observability.rst
    assert reconciled.attributes["kubemoon.controller"] == "tracer"
    assert reconciled.attributes["kubemoon.reconcile.result"] == "success"
    assert request.name == "POST /api/v1/namespaces/{namespace}/configmaps"
    assert request.attributes["http.request.method"] == "POST"
    assert request.attributes["http.response.status_code"] == 201
    assert request.attributes["k8s.namespace.name"] == namespace
    assert request.attributes["server.address"] == "127.0.0.1"
    assert api.name.startswith("POST /api/v1/namespaces/")
    assert api.trace_id == reconciled.trace_id
    assert all(s.trace_id == reconciled.trace_id for s in storage)
    # The log line made inside the reconcile carries the reconcile's trace.
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    copying = [line for line in lines if line["msg"].endswith("copying source")]
    assert copying, lines
    assert {line["trace_id"] for line in copying} == {reconciled.trace_id}
    assert copying[0]["controller"] == "tracer"
    assert copying[0]["namespace"] == namespace
    assert copying[0]["name"] == "source"


@SERVERS
async def test_an_untrusted_callers_request_is_linked_not_adopted(
    server_fixture: str,
    request: pytest.FixtureRequest,
    otlp_receiver: OtlpReceiver,
    provider: TracerProvider,
) -> None:
    server: ApiServer = request.getfixturevalue(server_fixture)
    namespace = namespace_for(server, LIMITED_USER)
    tracer = provider.get_tracer("test")
    async with client_for(server, LIMITED_USER, namespace) as client:
        with tracer.start_as_current_span("untrusted work") as work:
            await client.create(CONFIGMAPS, {"metadata": {"name": "linked"}}, namespace=namespace)
    provider.force_flush()
    trace_id = f"{work.get_span_context().trace_id:032x}"

    def linked(spans: list[ReceivedSpan]) -> Any:
        requests = [
            s
            for s in spans
            if s.trace_id == trace_id and s.kind == CLIENT and s.name.startswith("POST ")
        ]
        for request in requests:
            for api in spans:
                if api.service != SERVICE and (trace_id, request.span_id) in api.links:
                    return request, api
        return None

    request, api = await trio.to_thread.run_sync(otlp_receiver.wait_for, linked)
    assert api.kind == SERVER
    assert api.trace_id != trace_id  # a trace of its own ...
    assert api.parent_span_id == ""  # ... rooted at its SERVER span
    assert not [s for s in otlp_receiver.snapshot() if s.parent_span_id == request.span_id]


@pytest.fixture
async def webhook(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[tuple[int, bytes]]:
    def allow(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    app = WebhookApp()
    app.validating("/validate", allow)
    certs = WebhookCertificates.create(tmp_path / "certs")
    server = WebhookServer(
        app,
        cert_file=certs.cert_file,
        key_file=certs.key_file,
        port=0,
        registry=CollectorRegistry(),
        reload_interval=0.0,
    )
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[int]) -> None:
        with scope:
            await server.serve(task_status=task_status)

    port = await nursery.start(run)
    yield port, certs.ca_bundle
    scope.cancel()


async def test_an_admission_review_continues_the_apiservers_webhook_call(
    kube_apiserver_tracing: ApiServer,
    otlp_receiver: OtlpReceiver,
    provider: TracerProvider,
    webhook: tuple[int, bytes],
) -> None:
    server = kube_apiserver_tracing
    port, bundle = webhook
    namespace = namespace_for(server, MONITORING_USER)
    name = f"kubemoon-tracing-{namespace}"
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as admin:
        await admin.patch(NAMESPACES, namespace, {"metadata": {"labels": {"tracing": namespace}}})
        created = await admin.create(
            VALIDATING,
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": "validate.kubemoon.dev",
                        "clientConfig": {"url": f"https://127.0.0.1:{port}/validate"},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {"tracing": namespace}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            },
        )
        await admin.request(ca_bundle_patch(created, bundle))
        try:
            tracer = provider.get_tracer("test")
            async with client_for(server, MONITORING_USER, namespace) as client:
                for attempt in range(100):  # until the apiserver has the configuration
                    with tracer.start_as_current_span("apply") as work:
                        await client.create(
                            CONFIGMAPS, {"metadata": {"name": f"cm-{attempt}"}}, namespace=namespace
                        )
                    trace_id = f"{work.get_span_context().trace_id:032x}"
                    provider.force_flush()
                    await trio.sleep(0.2)
                    reviews = [
                        s
                        for s in otlp_receiver.snapshot()
                        if s.service == SERVICE and s.kind == SERVER and s.trace_id == trace_id
                    ]
                    if reviews:
                        break
                else:
                    raise AssertionError("the webhook was never called")
        finally:
            await admin.send(delete_request(VALIDATING, name))
    (review,) = reviews
    assert review.name == "POST /validate"
    assert review.attributes["kubemoon.admission.operation"] == "CREATE"
    assert review.attributes["kubemoon.admission.allowed"] is True

    def caller(spans: list[ReceivedSpan]) -> Any:
        return next(
            (s for s in spans if s.service != SERVICE and s.span_id == review.parent_span_id),
            None,
        )

    webhook_call = await trio.to_thread.run_sync(otlp_receiver.wait_for, caller)
    assert webhook_call.trace_id == trace_id
    assert webhook_call.kind == CLIENT
    spans = otlp_receiver.snapshot()
    (root,) = [s for s in spans if s.trace_id == trace_id and s.parent_span_id == ""]
    print("\n".join(tree(spans, root)))


async def test_configmirror_traces_as_the_otel_variables_say(
    kube_apiserver_tracing: ApiServer, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    server = kube_apiserver_tracing
    environment = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{otlp_receiver.endpoint}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_SERVICE_NAME": "configmirror-e2e",
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    argv = [
        sys.executable,
        "-m",
        "configmirror",
        "--kubeconfig",
        str(server.kubeconfig_path),
        "--log-format",
        "json",
        "--probe-address",
        "127.0.0.1:0",
    ]
    log_path = tmp_path / "configmirror.log"
    with log_path.open("w") as log_file:
        process = subprocess.Popen(argv, env=environment, stderr=log_file)
        try:
            spans = await trio.to_thread.run_sync(
                otlp_receiver.wait_for,
                lambda spans: [
                    s
                    for s in spans
                    if s.service == "configmirror-e2e" and s.name.startswith("informer list")
                ],
            )
        finally:
            process.send_signal(signal.SIGTERM)
            await trio.to_thread.run_sync(process.wait, 30)
    assert process.returncode == 0, log_path.read_text()[-2000:]
    names = {s.attributes["kubemoon.informer"] for s in spans}
    assert "namespaces" in names or "configmaps" in names, names
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert any(line["msg"].startswith("tracing: OTLP grpc to http://127.0.0.1:") for line in lines)
    assert all({"ts", "level", "msg", "logger"} <= line.keys() for line in lines)
