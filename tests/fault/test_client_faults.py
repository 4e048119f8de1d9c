"""Both clients against the scripted server over real TLS: the faults a real apiserver won't
produce on demand."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from fault_support import PODS, Adapter, plugin_runs

from kubemoon_core import KubeMoonError, Request
from kubemoon_core._client_config import ClientConfig, ExecConfig
from kubemoon_core.errors import (
    DecodeError,
    Expired,
    InternalError,
    LocalProtocolError,
    NotFound,
    TooManyRequests,
    Unauthorized,
)
from kubemoon_io import InsecureTLSWarning, TLSError, TransportError
from kubemoon_testing._scripted import RecordedRequest, Reply, ScriptedServer

pytestmark = pytest.mark.fault

SECRET = "s3cr3t-bearer-token"


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


async def test_crud_verbs_and_pagination(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(
            Reply.json(pod("a", "1")),
            Reply.json({"items": [pod("a", "1"), pod("b", "2")], "metadata": {"continue": "c1"}}),
            Reply.json({"items": [pod("c", "3")], "metadata": {"resourceVersion": "9"}}),
            Reply.json(pod("n", "4"), 201),
            Reply.json(pod("n", "5")),
            Reply.json(pod("n", "6")),
            Reply.json(pod("n", "7")),
            Reply.json({"kind": "Status", "status": "Success"}),
        )
        client = adapter.client(server.client_config(token=SECRET))
        try:
            assert (await adapter.call(client.get, PODS, "a", namespace="ns"))["metadata"][
                "name"
            ] == "a"
            items = client.list(PODS, namespace="ns")
            names = [item["metadata"]["name"] for item in await adapter.collect(items)]
            assert names == ["a", "b", "c"]
            assert items.resource_version == "9"
            await adapter.call(client.create, PODS, pod("n", ""), namespace="ns")
            await adapter.call(client.replace, PODS, pod("n", "4"), namespace="ns")
            await adapter.call(
                client.patch, PODS, "n", {"metadata": {"labels": {"a": "b"}}}, namespace="ns"
            )
            await adapter.call(
                client.apply, PODS, pod("n", ""), field_manager="test", namespace="ns"
            )
            await adapter.call(client.delete, PODS, "n", namespace="ns")
        finally:
            await adapter.close(client)
        seen = [(r.method, r.target) for r in server.requests]
        assert seen == [
            ("GET", "/api/v1/namespaces/ns/pods/a"),
            ("GET", "/api/v1/namespaces/ns/pods?limit=500"),
            ("GET", "/api/v1/namespaces/ns/pods?limit=500&continue=c1"),
            ("POST", "/api/v1/namespaces/ns/pods"),
            ("PUT", "/api/v1/namespaces/ns/pods/n"),
            ("PATCH", "/api/v1/namespaces/ns/pods/n"),
            ("PATCH", "/api/v1/namespaces/ns/pods/n?fieldManager=test&force=false"),
            ("DELETE", "/api/v1/namespaces/ns/pods/n"),
        ]
        requests = server.requests
        assert requests[3].json()["metadata"]["name"] == "n"
        assert requests[5].header("content-type") == "application/merge-patch+json"
        assert requests[6].header("content-type") == "application/apply-patch+yaml"
        assert all(r.header("authorization") == f"Bearer {SECRET}" for r in requests)
        assert all(r.header("host") == f"127.0.0.1:{server.port}" for r in requests)
        assert len({r.connection for r in requests}) == 1  # CRUD reuses one connection


async def test_non_2xx_is_a_typed_api_error(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.status_error(404, "NotFound", 'pods "x" not found'))
        server.add(Reply(502, b"<html>bad gateway</html>"))
        client = adapter.client(server.client_config())
        try:
            with pytest.raises(NotFound, match='pods "x" not found') as info:
                await adapter.call(client.get, PODS, "x", namespace="ns")
            assert info.value.code == 404
            with pytest.raises(KubeMoonError) as other:
                await adapter.call(client.get, PODS, "x", namespace="ns")
            assert other.value.code == 502  # type: ignore[attr-defined]
        finally:
            await adapter.close(client)


async def test_a_wrong_ca_is_a_clear_tls_error_naming_the_server(adapter: Adapter) -> None:
    other_ca = trustme.CA()
    async with ScriptedServer() as server:
        config = ClientConfig(server=server.url, ca_data=other_ca.cert_pem.bytes(), token=SECRET)
        client = adapter.client(config)
        try:
            with pytest.raises(TLSError) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        message = str(info.value)
        assert f"127.0.0.1:{server.port}" in message
        assert "certificate verify failed" in message or "unable to get local issuer" in message
        assert SECRET not in message
        assert server.requests == []  # the token never left the client


async def test_tls_server_name_overrides_the_verified_name(adapter: Adapter) -> None:
    async with ScriptedServer(hostnames=["kubernetes.default.svc"]) as server:
        client = adapter.client(server.client_config(tls_server_name="kubernetes.default.svc"))
        server.add(Reply.json(pod("a", "1")))
        try:
            assert (await adapter.call(client.get, PODS, "a", namespace="ns"))["kind"] == "Pod"
        finally:
            await adapter.close(client)
        plain = adapter.client(server.client_config())
        try:
            with pytest.raises(TLSError, match="127.0.0.1"):
                await adapter.call(plain.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(plain)


async def test_insecure_skip_tls_verify_warns_and_connects(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a", "1")))
        config = ClientConfig(server=server.url, insecure_skip_tls_verify=True, source="/k/config")
        with pytest.warns(InsecureTLSWarning, match="/k/config"):
            client = adapter.client(config)
        try:
            assert (await adapter.call(client.get, PODS, "a", namespace="ns"))["kind"] == "Pod"
        finally:
            await adapter.close(client)


async def test_client_certificate_data_goes_through_private_temporary_files(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl
    import stat
    import tempfile

    client_ca = trustme.CA()
    identity = client_ca.issue_cert("alice@example")
    modes: list[int] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: Any, keyfile: Any = None, password: Any = None) -> None:
        modes.extend(stat.S_IMODE(Path(p).stat().st_mode) for p in (certfile, keyfile))
        original(self, certfile, keyfile, password)

    server = ScriptedServer(client_ca=client_ca)
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    async with server:
        server.add(Reply.json(pod("a", "1")))
        config = server.client_config(
            client_cert_data=identity.cert_chain_pems[0].bytes(),
            client_key_data=identity.private_key_pem.bytes(),
        )
        client = adapter.client(config)
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert server.requests[0].peer_certificate_subject == "alice@example"
    assert modes == [0o600, 0o600]
    assert list(tmp_path.iterdir()) == []  # deleted at once


async def test_the_token_goes_only_to_the_origin(adapter: Adapter) -> None:
    async with ScriptedServer() as elsewhere, ScriptedServer() as server:
        server.add(
            Reply(302, headers=(("Location", f"{elsewhere.url}/api/v1/namespaces/ns/pods/a"),))
        )
        client = adapter.client(server.client_config(token=SECRET))
        try:
            with pytest.raises(KubeMoonError) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
            assert info.value.code == 302  # type: ignore[attr-defined]
            with pytest.raises(LocalProtocolError):
                await adapter.call(client.send, Request("GET", f"{elsewhere.url}/api"))
            with pytest.raises(LocalProtocolError):
                await adapter.call(client.send, Request("GET", "//evil.example/api"))
        finally:
            await adapter.close(client)
        assert elsewhere.requests == []
        assert [r.header("authorization") for r in server.requests] == [f"Bearer {SECRET}"]


async def test_retry_after_is_honoured(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(
            Reply.status_error(429, "TooManyRequests", retry_after=1),
            Reply.json(pod("a", "1")),
        )
        client = adapter.client(server.client_config())
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        first, second = server.requests
        assert second.at - first.at >= 0.95
        # Without Retry-After a 429 or 5xx is the caller's to handle: no blind retries.
        server.add(
            Reply.status_error(429, "TooManyRequests"), Reply.status_error(500, "InternalError")
        )
        client = adapter.client(server.client_config(), max_retries=0)
        try:
            with pytest.raises(TooManyRequests):
                await adapter.call(client.get, PODS, "a", namespace="ns")
            with pytest.raises(InternalError):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert len(server.requests) == 4


async def test_a_401_refreshes_the_exec_credential_once_and_retries_once(
    adapter: Adapter, tmp_path: Path, exec_plugin: Any
) -> None:
    def handler(request: RecordedRequest) -> Reply:
        if request.header("authorization") == "Bearer exec-secret-2":
            return Reply.json(pod("a", "1"))
        return Reply.status_error(401, "Unauthorized")

    async with ScriptedServer(handler) as server:
        client = adapter.client(server.client_config(exec=exec_plugin()))
        try:
            assert (await adapter.call(client.get, PODS, "a", namespace="ns"))["kind"] == "Pod"
            assert plugin_runs(tmp_path) == 2
            assert [r.header("authorization") for r in server.requests] == [
                "Bearer exec-secret-1",
                "Bearer exec-secret-2",
            ]
            # The refreshed token is cached: no new run while it works.
            await adapter.call(client.get, PODS, "a", namespace="ns")
            assert plugin_runs(tmp_path) == 2
            # A 401 for the refreshed credential refreshes once more, retries once, gives up.
            server.handler = lambda request: Reply.status_error(401, "Unauthorized")
            with pytest.raises(Unauthorized) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
            assert plugin_runs(tmp_path) == 3
            assert len(server.requests) == 5
            assert "exec-secret" not in str(info.value)
            assert "exec-secret" not in repr(client)
        finally:
            await adapter.close(client)
    info_file = tmp_path / "runs.info"
    assert '"interactive": false' in info_file.read_text()


async def test_exec_credentials_are_cached_until_their_expiry(
    adapter: Adapter, tmp_path: Path, exec_plugin: Any
) -> None:
    async with ScriptedServer(lambda request: Reply.json(pod("a", "1"))) as server:
        ca_file = tmp_path / "ca.pem"
        ca_file.write_bytes(server.ca_pem)
        plugin = exec_plugin("2999-01-01T00:00:00Z", provide_cluster_info=True)
        config = ClientConfig(server=server.url, ca_file=str(ca_file), exec=plugin)
        future = adapter.client(config)
        try:
            for _ in range(3):
                await adapter.call(future.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(future)
        assert plugin_runs(tmp_path) == 1
        info = json.loads((tmp_path / "runs.info").read_text())
        assert info["apiVersion"] == "client.authentication.k8s.io/v1"
        assert info["spec"]["interactive"] is False
        cluster = info["spec"]["cluster"]
        assert cluster["server"] == server.url
        assert base64.b64decode(cluster["certificate-authority-data"]) == server.ca_pem
        past = exec_plugin("2000-01-01T00:00:00Z", "client.authentication.k8s.io/v1beta1")
        expired = adapter.client(server.client_config(exec=past))
        try:
            for _ in range(2):
                await adapter.call(expired.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(expired)
        assert plugin_runs(tmp_path) == 3


async def test_a_failing_exec_plugin_is_a_config_error(adapter: Adapter, tmp_path: Path) -> None:
    from kubemoon_core._client_config import ConfigError

    async with ScriptedServer() as server:
        missing = ExecConfig(
            "client.authentication.k8s.io/v1beta1",
            str(tmp_path / "no-such-plugin"),
            install_hint="install the plugin",
        )
        client = adapter.client(server.client_config(exec=missing))
        try:
            with pytest.raises(ConfigError, match="install the plugin"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert server.requests == []


async def test_a_rotated_token_file_is_reread(adapter: Adapter, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a", "1")), Reply.json(pod("a", "1")))
        client = adapter.client(server.client_config(token_file=str(token), token="static"))
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
            token.write_text("second-token-longer\n")
            await adapter.call(client.get, PODS, "a", namespace="ns")
            # A 401 forces a re-read even when the file looks unchanged (same size, same
            # mtime): the retry carries the new token.
            before = token.stat()
            token.write_text("third--token-longer\n")
            os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
            server.add(Reply.status_error(401, "Unauthorized"), Reply.json(pod("a", "1")))
            await adapter.call(client.get, PODS, "a", namespace="ns")
            # A 401 with a token that did not change is not retried.
            server.add(Reply.status_error(401, "Unauthorized"))
            with pytest.raises(Unauthorized):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
    assert [r.header("authorization") for r in server.requests] == [
        "Bearer first-token",
        "Bearer second-token-longer",
        "Bearer second-token-longer",
        "Bearer third--token-longer",
        "Bearer third--token-longer",
    ]


async def test_basic_auth_header(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.json(pod("a", "1")))
        client = adapter.client(server.client_config(username="admin", password="pw"))
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert server.requests[0].header("authorization") == "Basic YWRtaW46cHc="


# -- watch streams ----------------------------------------------------------------------------

EVENTS = [("ADDED", pod("a", "11")), ("MODIFIED", pod("a", "12")), ("DELETED", pod("a", "13"))]


async def test_watch_delivers_events_across_any_chunking(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        for size in (1, 3, 50):
            server.add(Reply.watch(EVENTS, chunk_size=size))
        client = adapter.client(server.client_config())
        try:
            for _ in range(3):
                events = await adapter.watch_all(client)
                assert [(e.type, e.resource_version) for e in events] == [
                    ("ADDED", "11"),
                    ("MODIFIED", "12"),
                    ("DELETED", "13"),
                ]
        finally:
            await adapter.close(client)
        assert all(r.query["watch"] == "1" for r in server.requests)


@pytest.mark.parametrize("close_notify", [True, False])
async def test_a_truncated_stream_is_a_break_never_silently_dropped(
    adapter: Adapter, close_notify: bool
) -> None:
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config())
        try:
            for offset in (1, 40, 95, 140, 200):
                server.add(
                    Reply.watch(EVENTS, chunk_size=64, drop_after=offset, close_notify=close_notify)
                )
                got: list[Any] = []
                with pytest.raises(TransportError, match="127.0.0.1"):
                    await adapter.watch_collect(client, got)
                # Only events whose line was complete before the cut came through.
                assert len(got) < len(EVENTS)
            assert client.connection_count == 0
        finally:
            await adapter.close(client)


async def test_a_stream_ending_inside_an_event_is_an_error(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        # Properly terminated chunked body, but the last line is incomplete.
        server.add(Reply(200, chunks=(b'{"type":"ADDED","object":{"metadata":{}}}\n{"type":"ADD',)))
        client = adapter.client(server.client_config())
        got: list[Any] = []
        try:
            with pytest.raises(DecodeError, match="ended inside an event"):
                await adapter.watch_collect(client, got)
        finally:
            await adapter.close(client)
        assert [e.type for e in got] == ["ADDED"]


async def test_a_malformed_line_is_a_typed_error(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply(200, chunks=(b'{"type":"ADDED","object":{}}\n', b"{not json}\n")))
        client = adapter.client(server.client_config())
        try:
            with pytest.raises(DecodeError) as info:
                await adapter.watch_all(client)
        finally:
            await adapter.close(client)
        assert info.value.offset == 29
        assert isinstance(info.value, KubeMoonError)


async def test_events_before_a_malformed_line_in_the_same_chunk_come_first(
    adapter: Adapter,
) -> None:
    good = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'
    chunk = good + good.replace(b'"a"', b'"b"') + b"{not json}\n" + good
    async with ScriptedServer() as server:
        server.add(Reply(200, chunks=(chunk,)))
        client = adapter.client(server.client_config())
        got: list[Any] = []
        try:
            with pytest.raises(DecodeError) as info:
                await adapter.watch_collect(client, got)
        finally:
            await adapter.close(client)
        # As if the stream had been cut just before the bad line; nothing after it.
        assert [e.object["metadata"]["name"] for e in got] == ["a", "b"]
        assert info.value.offset == 2 * len(good)


async def test_a_watch_error_event_raises_its_api_error(adapter: Adapter) -> None:
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    async with ScriptedServer() as server:
        server.add(Reply.watch([("ADDED", pod("a", "11")), ("ERROR", expired)]))
        server.add(Reply.status_error(410, "Expired", "too old resource version"))
        client = adapter.client(server.client_config())
        got: list[Any] = []
        try:
            with pytest.raises(Expired, match="too old"):
                await adapter.watch_collect(client, got)
            assert [e.type for e in got] == ["ADDED"]
            with pytest.raises(Expired, match="too old resource version"):
                await adapter.watch_all(client)
        finally:
            await adapter.close(client)


async def test_a_watch_has_its_own_connection_and_never_blocks_crud(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.watch(EVENTS[:1], stall=True))
        client = adapter.client(server.client_config(), max_connections=1)
        got: list[Any] = []
        try:
            async with trio.open_nursery() as nursery:
                if adapter.name == "trio":
                    nursery.start_soon(adapter.watch_collect, client, got)
                    await server.wait(lambda: len(got) == 1)
                    server.add(Reply.json(pod("b", "2")))
                    assert (await client.get(PODS, "b", namespace="ns"))["kind"] == "Pod"
                    assert client.connection_count == 2
                    nursery.cancel_scope.cancel()
                elif adapter.name == "asyncio":
                    watch = await adapter.call(client.watch(PODS, namespace="ns").__aenter__)
                    first = await adapter.call(watch.__anext__)
                    server.add(Reply.json(pod("b", "2")))
                    assert (await adapter.call(client.get, PODS, "b", namespace="ns"))[
                        "kind"
                    ] == "Pod"
                    assert client.connection_count == 2
                    assert first.type == "ADDED"
                    await adapter.call(watch.aclose)
                else:
                    watch = await trio.to_thread.run_sync(
                        client.watch(PODS, namespace="ns").__enter__
                    )
                    first = await trio.to_thread.run_sync(lambda: next(iter(watch)))
                    server.add(Reply.json(pod("b", "2")))
                    assert (await adapter.call(client.get, PODS, "b", namespace="ns"))[
                        "kind"
                    ] == "Pod"
                    assert client.connection_count == 2
                    assert first.type == "ADDED"
                    await trio.to_thread.run_sync(watch.close)
            assert client.connection_count == 1  # the CRUD connection, kept alive
            await server.wait(lambda: server.open_connections == 1)
        finally:
            await adapter.close(client)
        await server.wait(lambda: server.open_connections == 0)
        watch_request, get_request = server.requests
        assert watch_request.connection != get_request.connection


async def test_cancelling_a_trio_watch_leaks_no_connection() -> None:
    import kubemoon_trio

    async with ScriptedServer() as server:
        server.add(Reply.watch(EVENTS[:1], stall=True))
        async with kubemoon_trio.Client(server.client_config()) as client:
            got: list[Any] = []

            async def consume() -> None:
                async with client.watch(PODS, namespace="ns") as events:
                    async for event in events:
                        got.append(event)

            with trio.move_on_after(0.3):
                await consume()
            assert [e.type for e in got] == ["ADDED"]
            assert client.connection_count == 0
            await server.wait(lambda: server.open_connections == 0)


async def test_secrets_never_reach_logs_reprs_or_errors(
    adapter: Adapter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with ScriptedServer() as server:
        server.add(
            Reply.status_error(429, "TooManyRequests", retry_after=0),
            Reply.status_error(401, "Unauthorized"),
            Reply(500, b"oops"),
        )
        client = adapter.client(server.client_config(token=SECRET), max_retries=1)
        errors: list[BaseException] = []
        try:
            for _ in range(2):
                try:
                    await adapter.call(client.get, PODS, "a", namespace="ns")
                except KubeMoonError as exc:
                    errors.append(exc)
        finally:
            await adapter.close(client)
        assert len(errors) == 2
        texts = [
            caplog.text,
            repr(client),
            repr(client.config),
            *map(str, errors),
            *map(repr, errors),
        ]
        assert all(SECRET not in text for text in texts)
        assert "retrying" in caplog.text


def test_blocking_calls_create_no_thread_and_no_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading

    import kubemoon_sync

    loops: list[object] = []
    original = asyncio.new_event_loop

    def counting() -> asyncio.AbstractEventLoop:
        loops.append(object())
        return original()

    monkeypatch.setattr(asyncio, "new_event_loop", counting)
    monkeypatch.setattr(asyncio.events, "new_event_loop", counting)
    server = ScriptedServer(lambda request: Reply.json(pod("a", "1")))
    with server, kubemoon_sync.Client(server.client_config(token=SECRET)) as client:
        client.get(PODS, "a", namespace="ns")  # warm up: connection made
        before = set(threading.enumerate())
        started = time.monotonic()
        for _ in range(1000):
            client.get(PODS, "a", namespace="ns")
        elapsed = time.monotonic() - started
        # No thread was started (threads of earlier tests may have ended meanwhile).
        assert set(threading.enumerate()) - before == set()
        assert loops == []
    assert len(server.requests) == 1001
    assert elapsed < 20


async def test_a_token_that_cannot_be_a_header_is_refused_without_echo(adapter: Adapter) -> None:
    from kubemoon_core._client_config import ConfigError

    async with ScriptedServer() as server:
        for token in ("s3cret\r\nX-Evil: 1", "s3cret-\u00e9\u4e2d"):
            client = adapter.client(server.client_config(token=token))
            try:
                with pytest.raises(ConfigError, match="not allowed in an HTTP header") as info:
                    await adapter.call(client.get, PODS, "a", namespace="ns")
            finally:
                await adapter.close(client)
            assert "s3cret" not in str(info.value)
        assert server.requests == []


async def test_a_plugin_token_that_cannot_be_a_header_names_the_plugin(
    adapter: Adapter, tmp_path: Path
) -> None:
    """An exec plugin's token with a NUL byte is refused, unechoed, naming the plugin that
    printed it (the error used to name neither the plugin nor its file)."""
    from kubemoon_core._client_config import ConfigError
    from kubemoon_core.kubeconfig import ExecConfig

    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "s3cret\u0000x"},
    }
    script = tmp_path / "plugin.py"
    script.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    exec_config = ExecConfig(
        api_version="client.authentication.k8s.io/v1",
        command=sys.executable,
        args=(str(script),),
        interactive_mode="Never",
        source=str(tmp_path / "kubeconfig"),
    )
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(exec=exec_config))
        try:
            with pytest.raises(ConfigError, match="not allowed in an HTTP header") as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert f"exec {sys.executable}" in str(info.value)
        assert str(tmp_path / "kubeconfig") in str(info.value)
        assert "s3cret" not in str(info.value)
        assert server.requests == []


async def test_closing_the_trio_client_ends_a_watch_read_by_another_task() -> None:
    import kubemoon_trio

    async with ScriptedServer() as server:
        server.add(Reply.watch(EVENTS[:1], stall=True))
        client = kubemoon_trio.Client(server.client_config())
        got: list[Any] = []
        ended: list[BaseException | None] = []
        first = trio.Event()

        async def consume() -> None:
            try:
                async with client.watch(PODS, namespace="ns") as events:
                    async for event in events:
                        got.append(event)
                        first.set()
            except kubemoon_trio.TransportError as exc:
                ended.append(exc)
            else:
                ended.append(None)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                await first.wait()
                await trio.sleep(0.05)  # the consumer is now blocked reading the stalled stream
                await client.aclose()
        assert [e.type for e in got] == ["ADDED"]
        assert len(ended) == 1
        assert client.connection_count == 0
        await server.wait(lambda: server.open_connections == 0)


async def test_watches_left_by_break_leak_no_connection(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        for _ in range(20):
            server.add(Reply.watch(EVENTS[:2], stall=True))
        client = adapter.client(server.client_config())
        try:
            for _ in range(20):
                first = await adapter.first_event(client)
                assert first.type == "ADDED"
            assert client.connection_count == 0
            await server.wait(lambda: server.open_connections == 0)
            # Iterating outside the block is refused before any request is made.
            with pytest.raises(LocalProtocolError, match="inside its block"):
                await adapter.iterate_unentered(client)
            assert len(server.requests) == 20
        finally:
            await adapter.close(client)


async def test_a_stalled_tls_handshake_is_a_timeout_within_the_connect_timeout(
    adapter: Adapter,
) -> None:
    # A server that accepts the connection and never answers the ClientHello. Every adapter
    # raises TransportTimeout (not TLSError: nothing about TLS failed) after its 1 s connect
    # timeout, well before the 30 s total.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    held: list[trio.SocketStream] = []

    async def hold(listener: trio.SocketListener) -> None:
        while True:
            held.append(await listener.accept())

    config = ClientConfig(server=f"https://127.0.0.1:{port}", ca_data=trustme.CA().cert_pem.bytes())
    client = adapter.client(config, timeout=1.0, total_timeout=30.0)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold, listeners[0])
            started = time.monotonic()
            try:
                with pytest.raises(TransportError) as info:
                    await adapter.call(client.get, PODS, "a", namespace="ns")
            finally:
                nursery.cancel_scope.cancel()
        assert type(info.value).__name__ == "TransportTimeout"
        assert not isinstance(info.value, TLSError)
        assert str(info.value) == (
            f"https://127.0.0.1:{port}: timed out connecting (TCP connection or TLS handshake)"
        )
        assert time.monotonic() - started < 10  # the connect timeout, not the total
        assert held  # the connection was made: it is the handshake that stalled
    finally:
        await adapter.close(client)
        for stream in held:
            await stream.aclose()
        await listeners[0].aclose()


async def test_refused_and_reset_connections_read_the_same_on_every_adapter(
    adapter: Adapter,
) -> None:
    import socket
    import struct

    # A port nobody listens on.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    free = probe.getsockname()[1]
    probe.close()
    client = adapter.client(ClientConfig(server=f"http://127.0.0.1:{free}"))
    try:
        with pytest.raises(TransportError) as refused:
            await adapter.call(client.get, PODS, "a", namespace="ns")
    finally:
        await adapter.close(client)
    assert str(refused.value) == f"http://127.0.0.1:{free}: cannot connect: Connection refused"

    # A server that resets the connection (RST) after reading the request.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def reset(listener: trio.SocketListener) -> None:
        while True:
            stream = await listener.accept()
            await stream.receive_some(65536)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()

    client = adapter.client(ClientConfig(server=f"http://127.0.0.1:{port}"))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reset, listeners[0])
            try:
                with pytest.raises(TransportError) as broken:
                    await adapter.call(client.get, PODS, "a", namespace="ns")
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await adapter.close(client)
        await listeners[0].aclose()
    assert type(broken.value) is TransportError
    assert str(broken.value) == (
        f"http://127.0.0.1:{port}: reading the response failed: Connection reset by peer"
    )


@pytest.mark.parametrize(
    ("timeout", "total", "expected"),
    [
        (1.0, 30.0, "timed out connecting (TCP connection or TLS handshake)"),
        (30.0, 1.0, "GET /api/v1/namespaces/ns/pods/a took longer than 1 s"),
    ],
)
async def test_a_handshake_trickled_byte_by_byte_stops_at_the_first_bound(
    adapter: Adapter, timeout: float, total: float, expected: str
) -> None:
    # A proxy that relays the server's bytes (its TLS handshake first) one at a time every
    # 20 ms: the whole exchange would take minutes, no single read ever waits long. Every
    # adapter stops at the connect timeout or the total deadline, whichever comes first.
    client_left = trio.Event()

    async def pump(source: trio.SocketStream, sink: trio.SocketStream, slow: bool) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                try:
                    data = await source.receive_some(65536)
                except trio.BrokenResourceError:
                    # A socket closed with trickled bytes still unread is reset, not
                    # ended: the client closed its connection all the same.
                    data = b""
                if not data:
                    break
                for i in range(len(data) if slow else 1):
                    if slow:
                        await trio.sleep(0.02)
                    await sink.send_all(data[i : i + 1] if slow else data)
            if not slow:
                client_left.set()  # the client closed its connection

    async with ScriptedServer() as server, trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        streams: list[trio.SocketStream] = []

        async def relay(listener: trio.SocketListener) -> None:
            while True:
                client_side = await listener.accept()
                server_side = await trio.open_tcp_stream("127.0.0.1", server.port)
                streams.extend((client_side, server_side))
                nursery.start_soon(pump, client_side, server_side, False)
                nursery.start_soon(pump, server_side, client_side, True)

        nursery.start_soon(relay, listeners[0])
        config = server.client_config(server=f"https://127.0.0.1:{port}")
        client = adapter.client(config, timeout=timeout, total_timeout=total)
        started = time.monotonic()
        try:
            with pytest.raises(TransportError) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
            # The interrupted connection was closed (not left to the garbage collector).
            with trio.fail_after(5):
                await client_left.wait()
        finally:
            await adapter.close(client)
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                for stream in streams:
                    await stream.aclose()
                await listeners[0].aclose()
        assert type(info.value).__name__ == "TransportTimeout"
        assert str(info.value) == f"https://127.0.0.1:{port}: {expected}"
        assert time.monotonic() - started < 10


async def test_crud_past_the_connection_cap_waits_for_a_free_connection(adapter: Adapter) -> None:
    # Six concurrent GETs on a client of two connections, each answer held back a little:
    # four wait for a free connection, none opens a third, and every one gets its answer.
    async with ScriptedServer() as server:
        server.add(*(dataclasses.replace(Reply.json(pod(f"p{i}", str(i))), delay=0.2)
                     for i in range(6)))  # fmt: skip
        client = adapter.client(server.client_config(), max_connections=2)
        names: list[str] = []
        try:

            async def get_one(i: int) -> None:
                got = await adapter.call(client.get, PODS, f"p{i}", namespace="ns")
                names.append(got["metadata"]["name"])

            async with trio.open_nursery() as nursery:
                for i in range(6):
                    nursery.start_soon(get_one, i)
            assert sorted(names) == [f"p{i}" for i in range(6)]
            assert server.connections_opened == 2
            assert client.connection_count == 2  # both kept alive for the next requests
            server.add(Reply.json(pod("again", "7")))
            await adapter.call(client.get, PODS, "again", namespace="ns")
            assert server.connections_opened == 2  # an idle connection was reused
        finally:
            await adapter.close(client)
        await server.wait(lambda: server.open_connections == 0)
        assert client.connection_count == 0


async def test_waiting_for_a_free_connection_is_bounded_by_the_timeout(adapter: Adapter) -> None:
    # One connection, busy with an answer whose head trickles in (never too slow for a read
    # timeout); a second request waits for it no longer than the client's timeout.
    async with ScriptedServer() as server:
        server.add(dataclasses.replace(Reply.json(pod("slow", "1")), trickle=0.02))
        client = adapter.client(server.client_config(), max_connections=1, timeout=0.3)
        try:
            async with trio.open_nursery() as nursery:
                slow: list[Any] = []

                async def first() -> None:
                    slow.append(await adapter.call(client.get, PODS, "slow", namespace="ns"))

                nursery.start_soon(first)
                await server.wait(lambda: len(server.requests) == 1)
                with pytest.raises(TransportError, match="waiting for a free connection") as info:
                    await adapter.call(client.get, PODS, "other", namespace="ns")
                assert type(info.value).__name__ == "TransportTimeout"
            assert slow[0]["metadata"]["name"] == "slow"
            assert len(server.requests) == 1  # the second request never went out
            assert server.connections_opened == 1
        finally:
            await adapter.close(client)
