"""The webhook server and the probe port against hostile anonymous clients, on every
adapter: idle sockets, slow and pipelined requests, oversized bodies, garbage TLS, clients
without the certificate mutual TLS asks for, and handlers that crash or run long.

Every scenario runs the generated server of each adapter (trio, asyncio, blocking) under a
Manager, and attacks it over real TLS on 127.0.0.1 with blocking sockets on worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
import trustme
from adapter_driver import call_soon, start_background
from fault_support import Adapter
from prometheus_client import CollectorRegistry

from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, Converter, WebhookApp
from kubemoon_testing import ScriptedServer, WebhookCertificates

pytestmark = pytest.mark.fault


def review_body(data: dict[str, str] | None = None, *, uid: str | None = None) -> bytes:
    document = {
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
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": data or {"k": "v"}},
        },
    }
    return json.dumps(document).encode()


def on_a_loop_thread() -> bool:
    """True when called on a thread that runs a trio or asyncio event loop."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        pass
    else:
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Handlers:
    def __init__(self) -> None:
        self.on_loop: list[bool] = []
        self.collector: list[bool] = []

    def big(self, request: AdmissionRequest) -> AdmissionResponse:
        self.on_loop.append(on_a_loop_thread())
        self.collector.append(gc.isenabled())
        return AdmissionResponse.allow()

    def allow(self, request: AdmissionRequest) -> AdmissionResponse:
        self.on_loop.append(on_a_loop_thread())
        return AdmissionResponse.allow()

    async def allow_async(self, request: AdmissionRequest) -> AdmissionResponse:
        self.on_loop.append(on_a_loop_thread())
        return AdmissionResponse.allow()

    async def spin_async(self, request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    def spin(self, request: AdmissionRequest) -> AdmissionResponse:
        """20 ms of CPU on the calling thread: beyond the loop's budget."""
        self.on_loop.append(on_a_loop_thread())
        start = time.thread_time()
        while time.thread_time() - start < 0.02:
            pass
        return AdmissionResponse.allow()

    def explode(self, request: AdmissionRequest) -> AdmissionResponse:
        raise RuntimeError("handler bug")

    def fat(self, request: AdmissionRequest) -> AdmissionResponse:
        assert request.object is not None
        padded = {**request.object, "metadata": {"annotations": {"pad": "x" * 65536}}}
        return AdmissionResponse.patched(request.object, padded)  # an ~90 KB answer

    def unencodable(self, request: AdmissionRequest) -> AdmissionResponse:
        assert request.object is not None
        mutated = {**request.object, "when": object()}
        return AdmissionResponse.patched(request.object, mutated)


def make_app(handlers: Handlers) -> WebhookApp:
    app = WebhookApp()
    app.validating("/validate", handlers.allow, name="configmaps")
    app.validating("/small", handlers.allow, max_body_size=1000)
    app.validating("/explode", handlers.explode)
    app.validating("/spin", handlers.spin, name="spin")
    app.validating("/avalidate", handlers.allow_async, name="avalidate")
    app.validating("/aspin", handlers.spin_async, name="aspin")
    app.mutating("/fat", handlers.fat)
    app.mutating("/unencodable", handlers.unencodable)
    app.validating("/big", handlers.big, max_body_size=4 << 20)
    app.conversion("/convert", Converter())
    return app


class Target:
    """The running server, seen from a client on 127.0.0.1."""

    def __init__(self, server: Any, certs: WebhookCertificates) -> None:
        self.server = server
        self.certs = certs
        self.port: int = server.port

    def context(self, client: trustme.LeafCert | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.certs.ca_bundle.decode("ascii"))
        if client is not None:
            client.private_key_and_cert_chain_pem.write_to_path(
                str(self.certs.directory / "client.pem")
            )
            context.load_cert_chain(str(self.certs.directory / "client.pem"))
        return context

    def tls(self, client: trustme.LeafCert | None = None) -> ssl.SSLSocket:
        """A handshaken TLS connection (blocking; call from a worker thread)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            return self.context(client).wrap_socket(sock, server_hostname="127.0.0.1")
        except BaseException:
            sock.close()
            raise

    def exchange(
        self, data: bytes, *, responses: int = 1, client: trustme.LeafCert | None = None
    ) -> list[tuple[int, bytes]]:
        """Send ``data`` on a new connection and read ``responses`` answers (blocking)."""
        with self.tls(client) as sock:
            sock.sendall(data)
            return read_responses(sock, responses)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return self.exchange(request(path, body))[0]


def request(path: str, body: bytes, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: webhook", "Content-Type: application/json"]
    lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """Up to ``count`` answers (fewer if the server closes first)."""
    conn = h11.Connection(h11.CLIENT)

    def sent() -> None:  # the raw bytes went already; this only moves h11's client state
        conn.send(h11.Request(method="POST", target="/", headers=[("Host", "w")]))
        conn.send(h11.EndOfMessage())

    sent()
    answers: list[tuple[int, bytes]] = []
    status = 0
    body = b""
    while len(answers) < count:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status, body = event.status_code, b""
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            answers.append((status, body))
            if len(answers) < count:
                conn.start_next_cycle()
                sent()
        elif isinstance(event, h11.ConnectionClosed):
            break
    return answers


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed ``sock`` without a word (waits up to 10 s)."""
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


@asynccontextmanager
async def serving(
    adapter: Adapter, tmp_path: Path, handlers: Handlers, **options: Any
) -> AsyncIterator[Target]:
    """The adapter's WebhookServer under a Manager, with ``options`` (its metrics go to the
    Manager's registry unless ``registry`` is one of them)."""
    certs = WebhookCertificates.create(tmp_path / "certs")
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(client, check_permissions=False)
        server = adapter.module.WebhookServer(
            make_app(handlers),
            cert_file=certs.cert_file,
            key_file=certs.key_file,
            **{"registry": manager.registry, **options},
        )
        manager.add_webhook_server(server)
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            try:
                with trio.fail_after(10):
                    while not server.serving:
                        await trio.sleep(0.01)
                yield Target(server, certs)
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)


def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return trio.to_thread.run_sync(lambda: fn(*args))


async def test_idle_sockets_make_room_and_reviews_are_still_answered(
    adapter: Adapter, tmp_path: Path
) -> None:
    handlers = Handlers()
    async with serving(adapter, tmp_path, handlers, max_connections=4) as target:
        idle = [await in_thread(target.tls) for _ in range(12)]
        try:
            # Each new connection beyond 4 closed the idlest one: only the newest stay.
            assert await in_thread(closed_by_server, idle[0])
            status, body = await in_thread(target.post, "/validate", review_body())
            assert status == 200
            assert json.loads(body)["response"]["allowed"] is True
            assert target.server.evicted_connections >= 9
            assert target.server.refused_connections == 0
            assert target.server.open_connections <= 4
        finally:
            for sock in idle:
                sock.close()


async def test_a_connection_that_never_asks_is_closed(adapter: Adapter, tmp_path: Path) -> None:
    options = {"first_request_timeout": 0.3, "header_timeout": 0.5}
    async with serving(adapter, tmp_path, Handlers(), **options) as target:
        with await in_thread(target.tls) as sock:
            assert await in_thread(closed_by_server, sock)
        # A slowloris head (one byte, then silence) gets 408 after header_timeout.
        with await in_thread(target.tls) as sock:
            sock.sendall(b"P")
            answers = await in_thread(read_responses, sock, 1)
            assert [status for status, _ in answers] == [408]


async def test_pipelined_requests_are_answered_in_order(
    adapter: Adapter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kubemoon.webhook")
    async with serving(adapter, tmp_path, Handlers()) as target:
        first, second = review_body(uid="one"), review_body(uid="two")
        data = request("/validate", first) + request("/validate", second)
        answers = await in_thread(lambda: target.exchange(data, responses=2))
        assert [status for status, _ in answers] == [200, 200]
        assert [json.loads(body)["response"]["uid"] for _, body in answers] == ["one", "two"]
    assert "connection failed" not in caplog.text


async def test_bodies_beyond_the_route_limit_are_refused_unread(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with serving(adapter, tmp_path, Handlers()) as target:
        # Declared too large: 413 from the head alone, nothing of the body sent.
        for path, length in (("/small", 1001), ("/validate", 64 << 20)):
            head = request(path, b"").replace(b"Content-Length: 0", b"Content-Length: %d" % length)
            assert [s for s, _ in await in_thread(target.exchange, head)] == [413]
        # Chunked, growing past the limit: 413 as soon as it is past.
        chunked = (
            b"POST /small HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"x" * 1024 + b"\r\n"
        )
        assert [s for s, _ in await in_thread(target.exchange, chunked)] == [413]
        # Within the limit the same route answers.
        status, _ = await in_thread(target.post, "/small", review_body())
        assert status == 200


async def test_handlers_run_off_the_loop_when_no_review_may_stay_on_it(
    adapter: Adapter, tmp_path: Path
) -> None:
    handlers = Handlers()
    options = {"handler_threads": 2, "inline_body_size": 0}
    async with serving(adapter, tmp_path, handlers, **options) as target:
        for _ in range(3):
            status, _ = await in_thread(target.post, "/validate", review_body())
            assert status == 200
    assert handlers.on_loop == [False, False, False]


async def test_small_reviews_are_answered_on_the_loop_and_larger_ones_off_it(
    adapter: Adapter, tmp_path: Path
) -> None:
    """Where each review is decoded (the JSON backend records its thread): an async
    handler's review of at most ``inline_body_size`` bytes on the loop, a longer one on a
    worker thread (the async handler itself is always awaited on the loop)."""
    from kubemoon_core import _json

    name, loads, dumps = _json._backend
    decoded_on_loop: list[bool] = []

    def recording_loads(data: bytes | str) -> Any:
        if b"AdmissionReview" in (data if isinstance(data, bytes) else data.encode()):
            decoded_on_loop.append(on_a_loop_thread())
        return loads(data)

    handlers = Handlers()
    # The blocking twin takes plain handlers only (and has no loop).
    path = "/validate" if adapter.name == "sync" else "/avalidate"
    _json.set_json_backend("recording", recording_loads, dumps)
    try:
        async with serving(adapter, tmp_path, handlers, inline_body_size=4096) as target:
            small = review_body()
            over = review_body({f"k{i}": "v" * 64 for i in range(60)})  # ~4.5 KiB
            at = review_body(uid="u" * (4096 - len(small) + 36))  # exactly 4096 bytes
            assert len(small) < 4096 < len(over)
            assert len(at) == 4096
            for body in (small, over, at, over, small):
                status, answer = await in_thread(target.post, path, body)
                assert status == 200
                assert json.loads(answer)["response"]["allowed"] is True
            assert target.server.threaded_webhooks == frozenset()
    finally:
        _json.set_json_backend(name, loads, dumps)
    on_loop = adapter.name != "sync"
    assert decoded_on_loop == [on_loop, False, on_loop, False, on_loop]
    assert len(handlers.on_loop) == 5


async def test_the_reviews_metric_counts_which_reviews_skipped_the_thread_hop(
    adapter: Adapter, tmp_path: Path
) -> None:
    """``kubemoon_webhook_reviews_total{where}``: an async handler's review of at most
    ``inline_body_size`` bytes is counted ``loop`` (answered without a thread hop), a
    longer one and a plain handler's small one ``worker_thread``."""
    handlers = Handlers()
    # Its own registry: the Manager's also collects the Manager's figures, on its loop.
    registry = CollectorRegistry()
    # The blocking twin takes plain handlers only, so every review goes to a worker thread.
    blocking = adapter.name == "sync"
    async_path = "/validate" if blocking else "/avalidate"
    small = review_body()
    over = review_body({f"k{i}": "v" * 64 for i in range(60)})  # ~4.5 KiB
    assert len(small) < 4096 < len(over)
    async with serving(
        adapter, tmp_path, handlers, inline_body_size=4096, registry=registry
    ) as target:

        def count(webhook: str, where: str) -> float:
            labels = {"webhook": webhook, "where": where}
            value = registry.get_sample_value("kubemoon_webhook_reviews_total", labels)
            return 0.0 if value is None else value

        for path, body in ((async_path, small), (async_path, over), (async_path, small)):
            status, _ = await in_thread(target.post, path, body)
            assert status == 200
        status, _ = await in_thread(target.post, "/validate", small)
        assert status == 200
        if blocking:
            assert count("configmaps", "loop") == 0
            assert count("configmaps", "worker_thread") == 4
        else:
            assert count("avalidate", "loop") == 2
            assert count("avalidate", "worker_thread") == 1
            assert count("configmaps", "loop") == 0
            assert count("configmaps", "worker_thread") == 1
        assert target.server.threaded_webhooks == frozenset()
    assert len(handlers.on_loop) == 4


async def test_a_plain_handler_s_small_review_runs_on_a_worker_thread(
    adapter: Adapter, tmp_path: Path
) -> None:
    # A ``def`` handler is the user's synchronous code, which may block (a network call):
    # never on the loop that also renews the Lease, however small the review.
    handlers = Handlers()
    async with serving(adapter, tmp_path, handlers, inline_body_size=4096) as target:
        for _ in range(3):
            status, _ = await in_thread(target.post, "/validate", review_body())
            assert status == 200
    assert handlers.on_loop == [False, False, False]


async def test_the_loop_answers_while_a_large_review_is_still_being_decoded(
    adapter: Adapter, tmp_path: Path
) -> None:
    """A large review's decoding is held (the JSON backend waits for the test) while a
    small review is sent on another connection: it is answered, so the large review was
    being decoded on another thread than the loop's (were it on the loop, nothing else
    would be answered until the decoder returned)."""
    from kubemoon_core import _json

    name, loads, dumps = _json._backend
    release = threading.Event()
    decoding = threading.Event()
    where: list[bool] = []

    def held_loads(data: bytes | str) -> Any:
        if len(data) > 64 * 1024:
            where.append(on_a_loop_thread())
            decoding.set()
            release.wait(30)
        return loads(data)

    handlers = Handlers()
    _json.set_json_backend("held", held_loads, dumps)
    try:
        async with serving(adapter, tmp_path, handlers) as target:
            large = review_body({f"k{i}": "v" * 64 for i in range(2000)})  # ~150 KiB
            async with trio.open_nursery() as nursery:
                answers: list[tuple[int, bytes]] = []

                async def post_large() -> None:
                    answers.append(await in_thread(target.post, "/big", large))

                nursery.start_soon(post_large)
                assert await in_thread(decoding.wait, 10)
                small_path = "/validate" if adapter.name == "sync" else "/avalidate"
                try:
                    status, answer = await in_thread(target.post, small_path, review_body())
                    assert status == 200
                    assert json.loads(answer)["response"]["allowed"] is True
                    assert not release.is_set()  # answered while the decoder was held
                finally:
                    release.set()
            assert [status for status, _ in answers] == [200]
    finally:
        release.set()
        _json.set_json_backend(name, loads, dumps)
    assert where == [False]
    # The small review on the loop (the blocking twin has none), the large one off it.
    assert handlers.on_loop == [adapter.name != "sync", False]


async def test_a_route_whose_review_holds_the_loop_is_moved_to_worker_threads(
    adapter: Adapter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A review whose decoding spends 20 ms of CPU (the JSON backend spins for bodies
    marked so) is a strike against its route; three move the route off the loop."""
    if adapter.name == "sync":
        pytest.skip("the blocking twin runs every (plain) handler on a worker thread")
    from kubemoon_core import _json

    name, loads, dumps = _json._backend
    decoded_on_loop: list[bool] = []

    def spinning_loads(data: bytes | str) -> Any:
        raw = data if isinstance(data, bytes) else data.encode()
        if b"spin-me" in raw:
            decoded_on_loop.append(on_a_loop_thread())
            start = time.thread_time()
            while time.thread_time() - start < 0.02:
                pass
        return loads(data)

    caplog.set_level(logging.WARNING, logger="kubemoon.webhook")
    costly, cheap = review_body(uid="spin-me"), review_body()
    _json.set_json_backend("spinning", spinning_loads, dumps)
    try:
        async with serving(adapter, tmp_path, Handlers()) as target:
            for path, body in (("/avalidate", cheap), ("/aspin", costly), ("/aspin", costly)):
                status, _ = await in_thread(target.post, path, body)
                assert status == 200
            assert target.server.threaded_webhooks == frozenset()  # two strikes: still on it
            for path, body in (("/aspin", costly), ("/aspin", costly), ("/avalidate", cheap)):
                status, _ = await in_thread(target.post, path, body)
                assert status == 200
            assert target.server.threaded_webhooks == frozenset({"aspin"})
    finally:
        _json.set_json_backend(name, loads, dumps)
    # /aspin's first three reviews were decoded on the loop; the fourth on a worker thread.
    assert decoded_on_loop == [True, True, True, False]
    moved = [r for r in caplog.records if "now run on worker threads" in r.getMessage()]
    assert len(moved) == 1
    assert moved[0].webhook == "aspin"  # type: ignore[attr-defined]


async def test_failures_are_http_500_and_logged_once(
    adapter: Adapter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kubemoon.webhook")
    async with serving(adapter, tmp_path, Handlers()) as target:
        for _ in range(3):
            status, body = await in_thread(target.post, "/explode", review_body())
            assert status == 500
            assert json.loads(body)["reason"] == "InternalError"
        status, body = await in_thread(target.post, "/unencodable", review_body())
        assert status == 500
        assert "cannot be encoded" in json.loads(body)["message"]
        for _ in range(2):
            status, _ = await in_thread(target.post, "/validate", b"{nope")
            assert status == 400
        for index in range(3):  # paths a client chooses do not open new log keys
            status, _ = await in_thread(target.post, f"/nowhere-{index}", b"{}")
            assert status == 404
    records = [r for r in caplog.records if hasattr(r, "status")]
    crashes = [r for r in records if r.status == 500]  # type: ignore[attr-defined]
    assert [r.levelno for r in crashes] == [logging.ERROR, logging.ERROR]  # one per kind
    assert all(r.exc_info is not None for r in crashes)
    client_errors = [r for r in records if r.status == 400]  # type: ignore[attr-defined]
    assert [r.levelno for r in client_errors] == [logging.WARNING]
    assert len([r for r in records if r.status == 404]) == 1  # type: ignore[attr-defined]


async def test_mutual_tls_refuses_a_client_without_the_certificate(
    adapter: Adapter, tmp_path: Path
) -> None:
    apiserver_ca = trustme.CA()
    ca_file = tmp_path / "client-ca.crt"
    apiserver_ca.cert_pem.write_to_path(str(ca_file))
    stranger_ca = trustme.CA()
    handlers = Handlers()
    async with serving(adapter, tmp_path, handlers, client_ca_file=ca_file) as target:
        apiserver = apiserver_ca.issue_cert("kube-apiserver")
        data = request("/validate", review_body())
        answers = await in_thread(lambda: target.exchange(data, client=apiserver))
        assert [s for s, _ in answers] == [200]
        calls = len(handlers.on_loop)

        # A certificate from another CA fails the handshake.
        def stranger() -> list[tuple[int, bytes]]:
            try:
                return target.exchange(data, client=stranger_ca.issue_cert("kube-apiserver"))
            except (ssl.SSLError, ConnectionError, h11.RemoteProtocolError):
                return []  # refused in or right after the handshake (TLS 1.3)

        assert await in_thread(stranger) == []
        # No certificate: every admission route answers 403 and no handler runs.
        for path in ("/validate", "/fat", "/explode"):
            answers = await in_thread(lambda p=path: target.exchange(request(p, review_body())))
            assert [s for s, _ in answers] == [403], path
            assert b"verified certificate" in answers[0][1]
        assert len(handlers.on_loop) == calls
        # The server still serves the apiserver.
        answers = await in_thread(lambda: target.exchange(data, client=apiserver))
        assert [s for s, _ in answers] == [200]


async def test_mutual_tls_leaves_conversion_to_callers_without_a_certificate(
    adapter: Adapter, tmp_path: Path
) -> None:
    """The API server presents its admission client certificate to admission webhooks
    only: a CRD's conversion webhook on the same server must answer it without one (on
    the real apiserver: tests/e2e/test_configmirror_self_managed.py)."""
    ca_file = tmp_path / "client-ca.crt"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u", "desiredAPIVersion": "example.com/v1", "objects": []},
    }
    async with serving(adapter, tmp_path, Handlers(), client_ca_file=ca_file) as target:
        status, body = await in_thread(lambda: target.post("/convert", json.dumps(review).encode()))
    assert status == 200, body
    assert json.loads(body)["response"]["result"]["status"] == "Success"


async def test_garbage_instead_of_tls_costs_one_connection(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with serving(adapter, tmp_path, Handlers()) as target:

        def garbage() -> bool:
            with socket.create_connection(("127.0.0.1", target.port), timeout=10) as sock:
                sock.sendall(os.urandom(4096))
                return closed_by_server(sock)

        for _ in range(5):
            assert await in_thread(garbage)
        status, _ = await in_thread(target.post, "/validate", review_body())
        assert status == 200


async def test_a_forged_tls_record_after_the_handshake_is_no_error(
    adapter: Adapter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad TLS record after a good handshake ends that connection quietly on every
    adapter: asyncio and the blocking twin let ``ssl.SSLError`` escape as a server
    bug, one ERROR with a traceback per connection, which an anonymous client could repeat
    without limit."""
    async with serving(adapter, tmp_path, Handlers()) as target:

        def forged() -> bool:
            with target.tls() as tls:
                tls.sendall(b"POST /validate HTTP/1.1\r\n")
                # A record of application data the session keys never made.
                socket.socket.sendall(tls, b"\x17\x03\x03\x00\x20" + os.urandom(32))
                return closed_by_server(tls)

        with caplog.at_level(logging.DEBUG, logger="kubemoon"):
            for _ in range(5):
                assert await in_thread(forged)
            status, _ = await in_thread(target.post, "/validate", review_body())
        assert status == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


async def test_idle_sockets_never_fail_the_liveness_probe(adapter: Adapter) -> None:
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(
            client, probe_address=("127.0.0.1", 0), check_permissions=False
        )
        manager.probes.max_connections = 8
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            with trio.fail_after(10):
                while manager.probe_port is None:
                    await trio.sleep(0.01)
            port = manager.probe_port
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
            lock = threading.Lock()
            try:

                def ask(path: str) -> bytes:
                    with lock, socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                        return sock.recv(4096)

                # While the 40 idle sockets are still open: 12 checks in a row pass.
                for _ in range(12):
                    assert (await in_thread(ask, "/healthz")).startswith(b"HTTP/1.1 200")
                assert manager.probes.evicted_connections >= 32
                assert manager.probes.refused_connections == 0
                assert manager.probes.open_connections <= 8
            finally:
                for sock in idle:
                    sock.close()
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)


async def test_a_large_review_is_handled_off_the_loop_with_the_collector_paused(
    adapter: Adapter, tmp_path: Path
) -> None:
    handlers = Handlers()
    async with serving(adapter, tmp_path, handlers) as target:
        large = review_body({f"k{i}": "v" * 64 for i in range(6000)})  # ~450 KiB
        small = review_body()
        for body in (large, small, large):
            status, answer = await in_thread(target.post, "/big", body)
            assert status == 200
            assert json.loads(answer)["response"]["allowed"] is True
    # /big's handler is a plain one: every review on a worker thread, however small.
    assert handlers.on_loop == [False, False, False]
    # Paused for the two large reviews only, and running again afterwards.
    assert handlers.collector == [False, True, False]
    assert gc.isenabled()


async def test_sockets_that_never_start_tls_make_room_for_new_ones(
    adapter: Adapter, tmp_path: Path
) -> None:
    # A handshake timeout far beyond the test: only the cap on handshakes closes them.
    options = {"max_handshakes": 8, "handshake_timeout": 600.0}
    async with serving(adapter, tmp_path, Handlers(), **options) as target:

        def silent() -> socket.socket:
            return socket.create_connection(("127.0.0.1", target.port), timeout=10)

        raw = [await in_thread(silent) for _ in range(20)]
        try:
            assert await in_thread(closed_by_server, raw[0])
            status, _ = await in_thread(target.post, "/validate", review_body())
            assert status == 200
        finally:
            for sock in raw:
                sock.close()


async def test_slow_heads_cannot_push_out_a_fresh_connection(
    adapter: Adapter, tmp_path: Path
) -> None:
    options = {"max_connections": 3, "header_timeout": 60.0}
    async with serving(adapter, tmp_path, Handlers(), **options) as target:
        sockets = [await in_thread(target.tls) for _ in range(2)]
        try:
            for sock in sockets:
                sock.sendall(b"P")  # a head begun, never finished
                await trio.sleep(0.5)  # so that the first is the older one
            await trio.sleep(1.0)  # both older than the idle grace
            fresh = await in_thread(target.tls)  # the API server, about to ask
            sockets.append(fresh)
            # The cap is reached: the newcomer's arrival closes someone (once its handshake
            # is done on the server's side too, so it stays open).
            sockets.append(await in_thread(target.tls))
            # The oldest slow head made room, not the fresh connection.
            assert await in_thread(closed_by_server, sockets[0])
            fresh.sendall(request("/validate", review_body()))
            assert [s for s, _ in await in_thread(read_responses, fresh, 1)] == [200]
        finally:
            for sock in sockets:
                sock.close()


async def test_serving_raises_the_open_file_limit(adapter: Adapter, tmp_path: Path) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1048576 if hard == resource.RLIM_INFINITY else hard
    if target <= 512:
        pytest.fail(f"this machine's hard open-file limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))  # a container's stingy default
    try:
        async with serving(adapter, tmp_path, Handlers()):
            assert resource.getrlimit(resource.RLIMIT_NOFILE) == (target, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))


async def test_a_peer_that_stops_reading_answers_cannot_hold_its_slot(
    adapter: Adapter, tmp_path: Path
) -> None:
    options = {"max_connections": 2, "request_timeout": 600.0}
    async with serving(adapter, tmp_path, Handlers(), **options) as target:
        flood = await in_thread(target.tls)
        # Reviews with ~90 KB answers pipelined by the thousand, the answers never read:
        # the server's send blocks once the socket buffers are full.
        ask = request("/fat", review_body())

        def send() -> None:
            with contextlib.suppress(OSError):  # ends when the server closes the connection
                flood.sendall(ask * 2000)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        slots = target.server._connections._slots

        def stuck() -> bool:  # on the server's clock: trio's own, or the monotonic one
            now = trio.current_time() if adapter.name == "trio" else time.monotonic()
            return any(s.state.name == "SENDING" and now - s.since > 1.5 for s in list(slots))

        with trio.fail_after(60):
            while not stuck():
                await trio.sleep(0.1)
        fresh = await in_thread(target.tls)  # the API server
        newcomer = await in_thread(target.tls)  # the cap is reached again
        try:
            # The stuck sender made room, not the fresh connection: the server closed it,
            # which ends the flood's blocked sendall.
            await in_thread(sender.join, 10)
            assert not sender.is_alive()
            fresh.sendall(request("/validate", review_body()))
            assert [s for s, _ in await in_thread(read_responses, fresh, 1)] == [200]
            assert target.server.refused_connections == 0
        finally:
            for sock in (flood, fresh, newcomer):
                sock.close()


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER 0), as a client that vanishes does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def test_a_client_that_resets_cannot_stop_the_probe_port(adapter: Adapter) -> None:
    """A peer that resets the connection while the probe server reads its request or
    sends its answers costs that connection only: before the fix the ConnectionError
    escaped the probe server and ended Manager.run -- one anonymous client stopped the
    whole operator."""
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(
            client, probe_address=("127.0.0.1", 0), check_permissions=False
        )
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            with trio.fail_after(10):
                while manager.probe_port is None:
                    await trio.sleep(0.01)
            port = manager.probe_port

            def ask(path: str) -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                    return sock.recv(4096)

            def attack() -> None:
                for round_ in range(20):
                    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                    if round_ % 2:  # answers pile up unread, then the peer resets
                        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
                        time.sleep(0.05)
                    else:  # half a request head, then a reset mid-read
                        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
                        time.sleep(0.01)
                    reset(sock)

            try:
                await in_thread(attack)
                await trio.sleep(0.5)
                for _ in range(5):
                    assert (await in_thread(ask, "/healthz")).startswith(b"HTTP/1.1 200")
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)
