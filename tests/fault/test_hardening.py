"""Bounded resources and time on every adapter: body caps, total deadlines, silent
watches, exec plugins that hang or flood, and a probes port under idle connections."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import PODS, Adapter

from kubemoon_core.errors import ConfigError
from kubemoon_core.kubeconfig import ExecConfig
from kubemoon_io import ResponseTooLarge, TransportTimeout
from kubemoon_testing import Reply, ScriptedServer

pytestmark = pytest.mark.fault


def big_pod(size: int) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "a", "namespace": "ns"}, "data": "x" * size}


async def test_a_body_over_the_cap_is_refused_and_its_connection_closed(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.json(big_pod(200_000)), Reply.json(big_pod(10)))
        client = adapter.client(server.client_config(), max_body_size=100_000)
        try:
            with pytest.raises(ResponseTooLarge, match="exceeds 100000 bytes"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
            assert client.connection_count == 0
            # The client is still usable; a body under the cap is read whole.
            small = await adapter.call(client.get, PODS, "a", namespace="ns")
            assert small["data"] == "x" * 10
        finally:
            await adapter.close(client)


async def test_a_trickling_body_stops_at_the_total_deadline(adapter: Adapter) -> None:
    body = json.dumps(big_pod(40)).encode()
    chunks: list[bytes | float] = []
    for i in range(0, len(body), 4):
        chunks += [body[i : i + 4], 0.25]
    async with ScriptedServer() as server:
        server.add(
            Reply(body=b"", chunks=tuple(chunks), headers=(("Content-Type", "application/json"),))
        )
        client = adapter.client(server.client_config(), timeout=2.0, total_timeout=1.0)
        started = time.monotonic()
        try:
            with pytest.raises(TransportTimeout, match=r"GET .*pods/a took longer than 1 s"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        # The whole body would take ~6 s; the call ends near its 1 s deadline.
        assert time.monotonic() - started < 3.0


async def test_a_silent_watch_ends_with_a_timeout(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        server.add(Reply.watch([], stall=True))
        client = adapter.client(server.client_config())
        try:
            with pytest.raises(TransportTimeout, match="stalled"):
                await adapter.watch_all(client, read_timeout=0.5)
        finally:
            await adapter.close(client)


async def test_a_silent_watch_times_out_after_its_server_side_timeout(adapter: Adapter) -> None:
    from kubemoon_core import ListOptions

    async with ScriptedServer() as server:
        server.add(Reply.watch([], stall=True))
        # No read_timeout given: timeoutSeconds (1 s) plus the idle margin (0.5 s) applies.
        client = adapter.client(server.client_config(), watch_idle_margin=0.5)
        started = time.monotonic()
        try:
            with pytest.raises(TransportTimeout, match="stalled"):
                await adapter.watch_all(client, options=ListOptions(timeout_seconds=1))
        finally:
            await adapter.close(client)
        assert 1.2 < time.monotonic() - started < 5


HANGING = "import time\ntime.sleep(60)\n"
FLOODING = "import sys\nsys.stdout.write('x' * (2 << 20))\n"


def plugin(tmp_path: Path, code: str) -> ExecConfig:
    script = tmp_path / "plugin.py"
    script.write_text(code)
    return ExecConfig(
        api_version="client.authentication.k8s.io/v1",
        command=sys.executable,
        args=(str(script),),
        interactive_mode="Never",
        source=str(tmp_path / "kubeconfig"),
    )


async def test_a_hanging_exec_plugin_is_killed_and_named(adapter: Adapter, tmp_path: Path) -> None:
    async with ScriptedServer() as server:
        client = adapter.client(
            server.client_config(exec=plugin(tmp_path, HANGING)), exec_timeout=1.0
        )
        started = time.monotonic()
        try:
            with pytest.raises(ConfigError, match=r"exec .*python.*no answer within 1 s"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert time.monotonic() - started < 10
        assert server.requests == []


async def test_a_plugin_whose_background_child_holds_stdout_is_bounded(
    adapter: Adapter, tmp_path: Path
) -> None:
    """The plugin prints a token and exits, but a process it started in the background
    keeps its stdout open for 30 s. Killing the plugin did not end the blocking adapter's
    read (it waited for the child, however long), and asyncio left the pipe's transport
    open; every adapter now gives up at the plugin's timeout and closes everything."""
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        'print(\'{"apiVersion": "client.authentication.k8s.io/v1", '
        '"kind": "ExecCredential", "status": {"token": "t"}}\')\n'
    )
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(exec=plugin(tmp_path, code)), exec_timeout=1.0)
        started = time.monotonic()
        try:
            with pytest.raises(ConfigError, match=r"exec .*python.*no answer within 1 s"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
            elapsed = time.monotonic() - started
        finally:
            await adapter.close(client)
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        assert elapsed < 20  # far below the 30 s the background child holds the pipe
        assert server.requests == []


async def test_a_hanging_exec_plugin_is_reported_as_the_plugins_timeout_not_the_calls(
    adapter: Adapter, tmp_path: Path
) -> None:
    # The plugin's own timeout (1 s) is longer than the call's (0.5 s): the plugin's run does
    # not count against the call, so every adapter names the plugin and its timeout.
    async with ScriptedServer() as server:
        client = adapter.client(
            server.client_config(exec=plugin(tmp_path, HANGING)),
            exec_timeout=1.0,
            total_timeout=0.5,
        )
        try:
            with pytest.raises(ConfigError) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert f"exec {sys.executable}" in str(info.value)
        assert "no answer within 1 s; the plugin was killed" in str(info.value)
        assert server.requests == []


async def test_the_call_deadline_starts_after_the_exec_plugin(
    adapter: Adapter, tmp_path: Path
) -> None:
    # A slow but working plugin (0.6 s) before a call whose deadline is 0.5 s: the request
    # is still made and answered.
    slow = (
        "import json, time\ntime.sleep(0.6)\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',"
        " 'kind': 'ExecCredential', 'status': {'token': 'slow-token'}}))\n"
    )
    async with ScriptedServer() as server:
        server.add(Reply.json(big_pod(1)))
        client = adapter.client(
            server.client_config(exec=plugin(tmp_path, slow)), exec_timeout=20.0, total_timeout=0.5
        )
        try:
            got = await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert got["data"] == "x"
        assert server.requests[0].header("authorization") == "Bearer slow-token"


def test_the_timeout_defaults_are_the_same_on_every_adapter(adapter: Adapter) -> None:
    import inspect

    from kubemoon_io import PLUGIN_TIMEOUT

    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(adapter.module.Client).parameters.items()
        if "timeout" in name
    }
    assert defaults == {"timeout": 30.0, "total_timeout": 60.0, "exec_timeout": PLUGIN_TIMEOUT}
    assert PLUGIN_TIMEOUT == 60.0


async def test_a_flooding_exec_plugin_is_refused(adapter: Adapter, tmp_path: Path) -> None:
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(exec=plugin(tmp_path, FLOODING)))
        try:
            with pytest.raises(ConfigError, match="more than 1048576 bytes"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert server.requests == []


async def test_idle_connections_cannot_starve_the_probes_port(adapter: Adapter) -> None:
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(
            client, probe_address=("127.0.0.1", 0), check_permissions=False
        )
        manager.probes.header_timeout = 1.0
        manager.probes.max_connections = 8
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            with trio.fail_after(10):
                while manager.probe_port is None:
                    await trio.sleep(0.01)
            port = manager.probe_port
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
            try:
                await trio.sleep(0.3)
                assert manager.probes.open_connections <= 8
                # The newest make room by closing the idlest (see test_webhook_hostile.py).
                assert manager.probes.evicted_connections >= 32
                # The idle ones are dropped after the header timeout; then a request is served.
                await trio.sleep(1.5)

                def ask() -> bytes:
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                        sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                        return sock.recv(4096)

                answer = await trio.to_thread.run_sync(ask)
                assert answer.startswith(b"HTTP/1.1 200")
            finally:
                for sock in idle:
                    sock.close()
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)


def test_credentials_over_plain_http_warn_and_log(
    adapter: Adapter, caplog: pytest.LogCaptureFixture
) -> None:
    from kubemoon_core.kubeconfig import ClientConfig
    from kubemoon_io import InsecureTLSWarning

    config = ClientConfig(server="http://127.0.0.1:1", token="t0ken")
    with pytest.warns(InsecureTLSWarning, match="http"):
        client = adapter.module.Client(config)
    assert any("http" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    assert "t0ken" not in caplog.text
    del client


async def test_a_trickling_response_head_stops_at_the_total_deadline(adapter: Adapter) -> None:
    # One byte of the head every 0.2 s: no single read ever waits the 5 s read timeout, and
    # the whole head would take half a minute. Every adapter ends the call at its 1 s
    # deadline with the same error (the blocking one derives each read's socket timeout
    # from the time left).
    async with ScriptedServer() as server:
        reply = Reply.json(big_pod(10), headers=(("X-Pad", "p" * 60),))
        server.add(dataclasses.replace(reply, trickle=0.2))
        client = adapter.client(server.client_config(), timeout=5.0, total_timeout=1.0)
        started = time.monotonic()
        try:
            with pytest.raises(TransportTimeout, match=r"GET .*pods/a took longer than 1 s"):
                await adapter.call(client.get, PODS, "a", namespace="ns")
            assert client.connection_count == 0
        finally:
            await adapter.close(client)
        assert time.monotonic() - started < 4.0  # not the ~30 s the whole head takes


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_cancelling_a_plugin_run_at_any_moment_leaves_no_child_running(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Cancelled while the child is being started, or while it runs: it is killed and reaped
    # by the run itself (asyncio used to leave a child started mid-cancellation running
    # until its transport was closed at garbage collection, which its debug mode reports).
    import asyncio
    import gc

    import kubemoon_asyncio._backend
    import kubemoon_trio._backend

    argv = (sys.executable, "-c", "import time; time.sleep(30)")
    delays = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.2)

    async def on_asyncio() -> None:
        for delay in delays:
            run = kubemoon_asyncio._backend.run_process(argv, {}, timeout=10, output_limit=10)
            task = asyncio.ensure_future(run)
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    async def on_trio() -> None:
        for delay in delays:
            with trio.move_on_after(delay):
                await kubemoon_trio._backend.run_process(argv, {}, timeout=10, output_limit=10)

    started = time.monotonic()
    if loop == "asyncio":
        asyncio.run(on_asyncio(), debug=True)
    else:
        trio.run(on_trio)
    gc.collect()  # a leaked transport or process would warn (an error here) now
    assert not [r for r in caplog.records if "running child process" in r.getMessage()]
    assert time.monotonic() - started < 20  # no run waited for its 30 s child


def _open_tls_client(port: int, ca: Any) -> Any:
    """A blocking TLS connection to 127.0.0.1:port, handshake done, left idle."""
    import ssl

    context = ssl.create_default_context()
    ca.configure_trust(context)
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        return context.wrap_socket(raw, server_hostname="127.0.0.1")
    except BaseException:
        raw.close()
        raise


def _closed_by_server(sock: Any) -> bool:
    """True if the server closed the connection (EOF or reset); False if it stays open."""
    import ssl

    sock.settimeout(5)
    try:
        return sock.recv(100) == b""
    except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


async def test_a_stopped_tls_server_closes_open_connections_quietly(
    adapter: Adapter, caplog: pytest.LogCaptureFixture
) -> None:
    # serve_tls (the webhook server's) stopped with an idle connection open: the connection
    # is closed, and nothing is logged (asyncio on Python 3.11 used to keep serving it after
    # the stop and then log "Exception in callback ... CancelledError" for it).
    import ssl

    import trustme

    ca = trustme.CA()
    certificate = ca.issue_cert("127.0.0.1")

    def server_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        certificate.configure_cert(context)
        return context

    backend = adapter.module._backend
    seen: list[bytes] = []

    if adapter.name == "trio":

        async def idle(stream: Any) -> None:
            seen.append(await stream.receive_some())

        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                lambda task_status: backend.serve_tls(
                    idle,
                    "127.0.0.1",
                    0,
                    server_context,
                    handshake_timeout=5,
                    task_status=task_status,
                )
            )
            sock = await trio.to_thread.run_sync(_open_tls_client, port, ca)
            await trio.sleep(0.2)
            nursery.cancel_scope.cancel()
        closed = await trio.to_thread.run_sync(_closed_by_server, sock)
    elif adapter.name == "asyncio":
        import asyncio

        async def idle_async(stream: Any) -> None:
            seen.append(await stream.receive_some())

        async def scenario() -> bool:
            async with backend.TaskGroup() as group:
                port = await group.start(
                    lambda task_status: backend.serve_tls(
                        idle_async,
                        "127.0.0.1",
                        0,
                        server_context,
                        handshake_timeout=5,
                        task_status=task_status,
                    )
                )
                sock = await asyncio.to_thread(_open_tls_client, port, ca)
                await asyncio.sleep(0.2)
                group.cancel()
            return await asyncio.to_thread(_closed_by_server, sock)

        closed = await adapter.run(scenario())
    else:

        def idle_sync(stream: Any) -> None:
            seen.append(stream.receive_some())

        def scenario_sync() -> bool:
            with backend.TaskGroup() as group:
                port = group.start(
                    lambda task_status: backend.serve_tls(
                        idle_sync,
                        "127.0.0.1",
                        0,
                        server_context,
                        handshake_timeout=5,
                        task_status=task_status,
                    )
                )
                sock = _open_tls_client(port, ca)
                time.sleep(0.2)
                group.cancel()
            return _closed_by_server(sock)

        closed = await trio.to_thread.run_sync(scenario_sync)
    if adapter.name == "asyncio":
        # The loop must run a moment more for a leftover task's callback to log.
        await adapter.run(__import__("asyncio").sleep(0.1))
    assert closed, "the connection was left open after the server stopped"
    assert seen == []  # the handler was stopped, it never saw data or an end
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_stream_read_stops_at_its_deadline_on_every_adapter(adapter: Adapter) -> None:
    # StreamResponse.receive(deadline) (the informer's stall deadline) against a stream that
    # stays silent: every adapter raises TransportTimeout at the deadline, though the
    # stream's own read timeout is far longer (the blocking adapter used to ignore the
    # deadline and wait for the read timeout).
    from kubemoon_core import watch_request

    backend = adapter.module._backend
    async with ScriptedServer() as server:
        server.add(Reply.watch([("ADDED", pod_object("a"))], stall=True))
        client = adapter.client(server.client_config())
        request = watch_request(PODS, namespace="ns")

        def first_then_silence_sync() -> tuple[bytes, str]:
            stream = client.open_stream(request, read_timeout=60.0, check=True)
            try:
                first = stream.receive()
                try:
                    stream.receive(backend.current_time() + 0.5)
                except TransportTimeout as exc:
                    return first, str(exc)
                return first, "no timeout"
            finally:
                stream.close()

        async def first_then_silence() -> tuple[bytes, str]:
            stream = await client.open_stream(request, read_timeout=60.0, check=True)
            try:
                first = await stream.receive()
                try:
                    await stream.receive(backend.current_time() + 0.5)
                except TransportTimeout as exc:
                    return first, str(exc)
                return first, "no timeout"
            finally:
                await stream.aclose()

        started = time.monotonic()
        try:
            if adapter.name == "sync":
                first, error = await trio.to_thread.run_sync(first_then_silence_sync)
            else:
                first, error = await adapter.call(first_then_silence)
        finally:
            await adapter.close(client)
        assert b'"ADDED"' in first
        assert error.endswith("the stream stalled")
        assert time.monotonic() - started < 10  # the 0.5 s deadline, not the 60 s timeout


def pod_object(name: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("timeout", -1.0),
        ("timeout", float("nan")),
        ("timeout", 0),
        ("total_timeout", float("inf")),
        ("total_timeout", -1.0),
        ("exec_timeout", -1.0),
        ("exec_timeout", float("nan")),
        ("watch_idle_margin", "30"),
        ("max_connections", 0),
        ("max_body_size", -1),
        ("max_retries", True),
    ],
)
def test_unusable_limits_are_refused_alike_on_every_adapter(
    adapter: Adapter, argument: str, value: object
) -> None:
    # Each used to fail its own way, if at all: trio's ValueError from its clock, the
    # blocking socket's "Timeout value out of range", asyncio's instant timeout.
    from kubemoon_core.errors import LocalProtocolError
    from kubemoon_core.kubeconfig import ClientConfig

    config = ClientConfig(server="https://127.0.0.1:1", token="t")
    with pytest.raises(LocalProtocolError, match=f"^{argument} must be .*, not {value!r}$"):
        adapter.module.Client(config, **{argument: value})


async def test_a_calls_own_limit_and_a_watch_read_timeout_are_checked(adapter: Adapter) -> None:
    from kubemoon_core import get_request
    from kubemoon_core.errors import LocalProtocolError

    async with ScriptedServer() as server:
        server.add(Reply.json(big_pod(1)))
        client = adapter.client(server.client_config())
        try:
            with pytest.raises(LocalProtocolError, match="^timeout must be a finite number"):
                await adapter.call(client.send, get_request(PODS, "a"), timeout=float("nan"))
            with pytest.raises(LocalProtocolError, match="^read_timeout must be a finite"):
                client.watch(PODS, read_timeout=-5.0)
            # Zero or less is a limit already reached, on every adapter.
            with pytest.raises(TransportTimeout, match="took longer than 0 s"):
                await adapter.call(client.send, get_request(PODS, "a"), timeout=0)
        finally:
            await adapter.close(client)
        assert server.requests == []
