"""The webhook server over real TLS on 127.0.0.1: load, oversize and malformed requests,
timeouts, and certificate files replaced while it serves."""

from __future__ import annotations

import json
import logging
import ssl
import uuid
from pathlib import Path
from typing import Any

import h11
import httpcore
import pytest
import trio
from prometheus_client import CollectorRegistry

from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookApp
from kubemoon_testing import WebhookCertificates
from kubemoon_trio import WebhookServer

pytestmark = pytest.mark.fault


def review(uid: str | None = None, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "CREATE",
            "namespace": "team-a",
            "name": "c",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": data or {}},
        },
    }


def validate(request: AdmissionRequest) -> AdmissionResponse:
    assert request.object is not None
    if not request.object.get("data"):
        return AdmissionResponse.deny("data must not be empty")
    return AdmissionResponse.allow()


def explode(request: AdmissionRequest) -> AdmissionResponse:
    raise RuntimeError("handler bug")


def make_app() -> WebhookApp:
    app = WebhookApp()
    app.validating("/validate", validate, name="configmaps")
    app.validating("/explode", explode)
    return app


@pytest.fixture
def certs(tmp_path: Path) -> WebhookCertificates:
    return WebhookCertificates.create(tmp_path / "certs")


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


class Running:
    def __init__(self, server: WebhookServer, certs: WebhookCertificates) -> None:
        self.server = server
        self.certs = certs

    def context(self, ca: bytes | None = None) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=(ca or self.certs.ca_bundle).decode("ascii"))

    def pool(self, **kwargs: Any) -> httpcore.AsyncConnectionPool:
        return httpcore.AsyncConnectionPool(ssl_context=self.context(), **kwargs)

    async def post(
        self,
        pool: httpcore.AsyncConnectionPool,
        path: str,
        body: bytes,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        response = await pool.request(
            "POST",
            f"{self.server.url}{path}",
            headers={"Content-Type": content_type},
            content=body,
        )
        return response.status, response.content


@pytest.fixture
async def running(
    nursery: trio.Nursery, certs: WebhookCertificates, registry: CollectorRegistry
) -> Running:
    server = WebhookServer(
        make_app(),
        cert_file=certs.cert_file,
        key_file=certs.key_file,
        registry=registry,
        header_timeout=0.5,
        request_timeout=2.0,
        reload_interval=0.0,
    )
    await nursery.start(server.serve)
    return Running(server, certs)


def answer(body: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(body)["response"]
    return result


async def test_200_concurrent_reviews_are_all_answered(
    running: Running, registry: CollectorRegistry
) -> None:
    answers: dict[str, dict[str, Any]] = {}
    async with running.pool(max_connections=200) as pool:

        async def one(index: int) -> None:
            uid = f"uid-{index}"
            data = {"k": "v"} if index % 2 else {}
            status, body = await running.post(
                pool, "/validate?timeout=10s", json.dumps(review(uid, data)).encode()
            )
            assert status == 200
            answers[uid] = answer(body)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(200):
                    nursery.start_soon(one, index)
    assert len(answers) == 200
    for uid, result in answers.items():
        assert result["uid"] == uid
        assert result["allowed"] is (int(uid.split("-")[1]) % 2 == 1)
    sample = registry.get_sample_value
    labels = {"webhook": "configmaps", "code": "200"}
    assert sample("controller_runtime_webhook_requests_total", labels) == 200
    assert (
        sample("controller_runtime_webhook_latency_seconds_count", {"webhook": "configmaps"}) == 200
    )
    assert sample("controller_runtime_webhook_requests_in_flight", {"webhook": "configmaps"}) == 0


async def raw_exchange(
    running: Running, head: bytes, body_chunks: list[bytes], sent: list[int] | None = None
) -> h11.Response:
    """Send a request (the body maybe never fully), return the response head.

    ``sent`` collects how many body bytes had been sent when the response arrived.
    """
    tcp = await trio.open_tcp_stream("127.0.0.1", running.server.port)
    stream = trio.SSLStream(tcp, running.context(), server_hostname="127.0.0.1")
    client = h11.Connection(h11.CLIENT)
    received = trio.Event()
    response: list[h11.Response] = []
    count = [0]

    async def send() -> None:
        try:
            await stream.send_all(head)
            for chunk in body_chunks:
                if received.is_set():
                    break
                await stream.send_all(chunk)
                count[0] += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server answered and closed before we finished: expected

    async def receive() -> None:
        while not response:
            event = client.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                client.receive_data(data)
            elif isinstance(event, h11.Response):
                response.append(event)
            else:
                raise AssertionError(f"unexpected {event!r}")
        received.set()
        if sent is not None:
            sent.append(count[0])

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            nursery.start_soon(receive)
    await trio.aclose_forcefully(stream)
    return response[0]


def head(path: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1"] + [
        f"{name.replace('_', '-')}: {value}" for name, value in headers.items()
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_20_mib_body_gets_413_without_being_read(
    running: Running, registry: CollectorRegistry
) -> None:
    size = 20 * 1024 * 1024
    chunks = [b" " * 65536] * (size // 65536)
    sent: list[int] = []
    response = await raw_exchange(
        running,
        head("/validate", Content_Type="application/json", Content_Length=str(size)),
        chunks,
        sent,
    )
    assert response.status_code == 413
    assert sent[0] < size // 2, "the server answered before the body was sent"
    assert (b"connection", b"close") in response.headers
    # Without a Content-Length (chunked), the limit applies while reading.
    chunked = [b"10000\r\n" + b" " * 65536 + b"\r\n"] * (size // 65536)
    response = await raw_exchange(
        running,
        head("/validate", Content_Type="application/json", Transfer_Encoding="chunked"),
        chunked,
    )
    assert response.status_code == 413
    labels = {"webhook": "configmaps", "code": "413"}
    assert registry.get_sample_value("controller_runtime_webhook_requests_total", labels) == 2
    async with running.pool() as pool:
        status, body = await running.post(pool, "/validate", json.dumps(review("after")).encode())
    assert status == 200
    assert answer(body)["uid"] == "after"


async def test_errors_are_answered_and_the_server_keeps_serving(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kubemoon.webhook")
    async with running.pool() as pool:
        status, body = await running.post(
            pool, "/validate", b'{"apiVersion": "admission.k8s.io/v1"'
        )
        assert status == 400
        assert json.loads(body)["reason"] == "BadRequest"
        wrong = {**review(), "apiVersion": "admission.k8s.io/v1beta1"}
        status, body = await running.post(pool, "/validate", json.dumps(wrong).encode())
        assert status == 400
        assert "apiVersion" in json.loads(body)["message"]
        status, _ = await running.post(pool, "/validate", b"{}", content_type="text/plain")
        assert status == 415
        status, _ = await running.post(pool, "/nowhere", json.dumps(review()).encode())
        assert status == 404
        response = await pool.request("GET", f"{running.server.url}/validate")
        assert response.status == 405
        for _ in range(3):
            status, body = await running.post(pool, "/explode", json.dumps(review("x")).encode())
            # A failed call, not a review: the apiserver applies the failurePolicy.
            assert status == 500
            assert json.loads(body)["kind"] == "Status"
            assert "RuntimeError: handler bug" in json.loads(body)["message"]
        status, body = await running.post(
            pool, "/validate", json.dumps(review("ok", {"a": "b"})).encode()
        )
        assert status == 200
        assert answer(body) == {"uid": "ok", "allowed": True}
    # Structured logs: client errors at WARNING, answered reviews at DEBUG, with attributes;
    # a crashed handler at ERROR with its traceback. Both rate-limited: the second 400 of
    # the route and the 2nd and 3rd crash are held back.
    records = [r for r in caplog.records if r.name == "kubemoon.webhook" and hasattr(r, "status")]
    by_status = {r.status: r for r in records}  # type: ignore[attr-defined]
    assert by_status[404].levelno == logging.WARNING
    assert by_status[400].levelno == logging.WARNING
    assert len([r for r in records if r.status == 400]) == 1  # type: ignore[attr-defined]
    crashes = [r for r in records if r.status == 500]  # type: ignore[attr-defined]
    assert len(crashes) == 1
    assert crashes[0].levelno == logging.ERROR
    assert crashes[0].exc_info is not None
    assert crashes[0].exc_info[0] is RuntimeError
    assert "raise RuntimeError" in caplog.text  # the traceback names the handler's line
    assert by_status[415].webhook == "configmaps"  # type: ignore[attr-defined]
    answered = [r for r in records if getattr(r, "uid", "") == "ok"]
    assert len(answered) == 1
    assert answered[0].levelno == logging.DEBUG
    assert answered[0].outcome == "allowed"  # type: ignore[attr-defined]
    assert answered[0].duration_seconds >= 0  # type: ignore[attr-defined]


async def test_a_malformed_http_request_gets_400(running: Running) -> None:
    response = await raw_exchange(running, b"POST /validate HTTP/1.1\r\nbad header\r\n\r\n", [])
    assert response.status_code == 400


async def test_a_stalled_head_gets_408_and_the_connection_closes(running: Running) -> None:
    # header_timeout is 0.5 s: half a request line, then silence.
    with trio.fail_after(10):
        response = await raw_exchange(running, b"POST /validate HT", [])
    assert response.status_code == 408


async def test_a_stalled_body_gets_408(running: Running) -> None:
    with trio.fail_after(10):
        response = await raw_exchange(
            running,
            head("/validate", Content_Type="application/json", Content_Length="100") + b"{",
            [],
        )
    assert response.status_code == 408


async def test_certificate_files_replaced_mid_run(
    running: Running, certs: WebhookCertificates, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubemoon.webhook")
    old_cert = certs.cert_file.read_bytes()
    certs.rotate()  # the client trusts the old and the new CA from here on
    failures: list[BaseException] = []
    answered = 0
    swapped = trio.Event()

    async def hammer() -> None:
        nonlocal answered
        # A fresh pool per request: every request makes a new TLS handshake.
        while not swapped.is_set() or answered < 40:
            async with running.pool() as pool:
                try:
                    status, body = await running.post(
                        pool, "/validate", json.dumps(review("r", {"a": "b"})).encode()
                    )
                    assert status == 200
                    assert answer(body)["allowed"] is True
                    answered += 1
                except (httpcore.NetworkError, AssertionError) as exc:
                    failures.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(hammer)
        await trio.sleep(0.3)
        certs.write()  # cert, then key, then CA: a torn pair is visible for a moment
        swapped.set()
    assert failures == []
    assert running.server.certificate_reloads >= 1
    # A new connection now sees the new certificate, which only the new CA verifies.
    new_only = running.context(certs.ca_pem)
    tcp = await trio.open_tcp_stream("127.0.0.1", running.server.port)
    stream = trio.SSLStream(tcp, new_only, server_hostname="127.0.0.1")
    await stream.do_handshake()
    peer = stream.getpeercert(binary_form=True)
    await trio.aclose_forcefully(stream)
    assert peer is not None
    assert ssl.DER_cert_to_PEM_cert(peer).encode() == certs.cert_file.read_bytes()
    assert certs.cert_file.read_bytes() != old_cert
    assert any("certificate reloaded" in r.getMessage() for r in caplog.records)


async def test_a_kept_alive_connection_ends_after_a_certificate_reload(
    running: Running, certs: WebhookCertificates
) -> None:
    certs.rotate()
    tcp = await trio.open_tcp_stream("127.0.0.1", running.server.port)
    stream = trio.SSLStream(tcp, running.context(), server_hostname="127.0.0.1")
    client = h11.Connection(h11.CLIENT)

    async def exchange() -> h11.Response:
        body = json.dumps(review("k", {"a": "b"})).encode()
        request = h11.Request(
            method="POST",
            target="/validate",
            headers=[
                ("Host", "127.0.0.1"),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
            ],
        )
        await stream.send_all(
            client.send(request)
            + client.send(h11.Data(data=body))
            + client.send(h11.EndOfMessage())
        )
        response = None
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return response

    with trio.fail_after(10):
        first = await exchange()
        assert first.status_code == 200
        assert (b"connection", b"close") not in first.headers
        client.start_next_cycle()
        certs.write()
        second = await exchange()
    assert second.status_code == 200
    assert (b"connection", b"close") in second.headers
    assert running.server.certificate_reloads == 1
    await trio.aclose_forcefully(stream)


async def test_unusable_certificate_files_and_an_idle_server(tmp_path: Path) -> None:
    from kubemoon_core.errors import LocalProtocolError

    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(LocalProtocolError, match="cannot load the webhook certificate"):
        WebhookServer(
            make_app(),
            cert_file=tmp_path / "tls.crt",
            key_file=tmp_path / "tls.key",
            registry=CollectorRegistry(),
        )
    certs = WebhookCertificates.create(tmp_path / "good")
    server = WebhookServer(
        make_app(), cert_file=certs.cert_file, key_file=certs.key_file, registry=CollectorRegistry()
    )
    with pytest.raises(LocalProtocolError, match="not serving yet"):
        _ = server.port


async def test_a_torn_certificate_pair_keeps_the_previous_one(
    running: Running, certs: WebhookCertificates, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = WebhookCertificates.create(tmp_path / "other")
    certs.cert_file.write_bytes(other.cert_file.read_bytes())  # the new cert, the old key
    async with running.pool() as pool:
        status, _ = await running.post(pool, "/validate", json.dumps(review("t")).encode())
    assert status == 200  # served with the previous certificate, which the client trusts
    assert running.server.certificate_reloads == 0
    assert any("reload failed" in r.getMessage() for r in caplog.records)
    certs.key_file.write_bytes(other.key_file.read_bytes())  # the pair is complete
    async with httpcore.AsyncConnectionPool(ssl_context=running.context(other.ca_pem)) as pool:
        status, _ = await running.post(pool, "/validate", json.dumps(review("u")).encode())
    assert status == 200
    assert running.server.certificate_reloads == 1


async def test_a_client_leaving_mid_body_is_not_a_timeout(
    running: Running, registry: CollectorRegistry
) -> None:
    tcp = await trio.open_tcp_stream("127.0.0.1", running.server.port)
    stream = trio.SSLStream(tcp, running.context(), server_hostname="127.0.0.1")
    await stream.send_all(head("/validate", Content_Type="application/json", Content_Length="100"))
    await stream.send_all(b'{"apiVersion"')
    await trio.aclose_forcefully(stream)
    sample = registry.get_sample_value
    labels = {"webhook": "configmaps"}
    with trio.fail_after(5):
        while sample("controller_runtime_webhook_latency_seconds_count", labels) != 1:
            await trio.sleep(0.01)  # the server has finished with that request
    for code in ("400", "408"):
        assert sample("controller_runtime_webhook_requests_total", {**labels, "code": code}) is None
    assert sample("controller_runtime_webhook_requests_in_flight", labels) == 0
    async with running.pool() as pool:
        status, _ = await running.post(pool, "/validate", json.dumps(review("next")).encode())
    assert status == 200
