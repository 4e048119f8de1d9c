"""Bounded resources and time on every adapter: body caps, total deadlines, silent
watches, exec plugins that hang or flood, and a probes port under idle connections."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import PODS, Adapter

from kubemoon_core import ConfigError, ExecConfig
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
            with pytest.raises(TransportTimeout):
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
        manager = adapter.module.Manager(client, probe_address=("127.0.0.1", 0))
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
    from kubemoon_core import ClientConfig
    from kubemoon_io import InsecureTLSWarning

    config = ClientConfig(server="http://127.0.0.1:1", token="t0ken")
    with pytest.warns(InsecureTLSWarning, match="http"):
        client = adapter.module.Client(config)
    assert any("http" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    assert "t0ken" not in caplog.text
    del client
