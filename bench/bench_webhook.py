"""Admission webhook throughput and p99 latency: KubeMoon's server against kopf's, one core each.

The same validating rule (deny a ConfigMap without data) is served by
``kubemoon_trio.WebhookServer`` and by kopf's ``WebhookServer`` (aiohttp) with a
``@kopf.on.validate`` handler dispatched through kopf's own admission machinery
(``serve_admission_request``, as ``kopf run`` wires it). Each server runs in a child
process pinned to CPU 0; the load generator (this process) is pinned to CPU 1 and keeps
``CONNECTIONS`` TLS keep-alive connections busy, one review in flight on each. Half the
reviews are allowed, half denied. Figures on a shared machine are noisy: the ratio, taken
in the same run, is the figure to read, and the server CPU per review (read from
/proc) is the one that load on the machine disturbs least.

``python bench_webhook.py serve kubemoon|kopf <cert dir> <port file>`` runs one server.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _table import Row

ROOT = Path(__file__).resolve().parent.parent
CONNECTIONS = 8
WARMUP = 300
REVIEWS = 4000
SERVER_CPU = 0
CLIENT_CPU = 1
ROUNDS = 3


def _review(index: int) -> bytes:
    data = {"key": "value"} if index % 2 else {}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"uid-{index}",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": f"cm-{index}",
                "namespace": "team-a",
                "operation": "CREATE",
                "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                "object": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{index}", "namespace": "team-a"},
                    "data": data,
                },
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    ).encode()


# --- the servers (child processes) ---------------------------------------------------------


def _serve_kubemoon(certs: Path, port_file: Path) -> None:
    import trio
    from prometheus_client import CollectorRegistry

    from kubemoon_core import AdmissionRequest, AdmissionResponse, WebhookApp
    from kubemoon_trio import WebhookServer

    def validate(request: AdmissionRequest) -> AdmissionResponse:
        if not (request.object or {}).get("data"):
            return AdmissionResponse.deny("data must not be empty")
        return AdmissionResponse.allow()

    app = WebhookApp()
    app.validating("/configmaps", validate)
    server = WebhookServer(
        app,
        cert_file=certs / "tls.crt",
        key_file=certs / "tls.key",
        registry=CollectorRegistry(),
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            port_file.write_text(str(port))

    trio.run(main)


def _serve_kopf(certs: Path, port_file: Path) -> None:
    import asyncio
    import functools

    import kopf
    from kopf._cogs.structs import ephemera, references
    from kopf._core.engines.admission import serve_admission_request
    from kopf._core.engines.indexing import OperatorIndexers
    from kopf._core.reactor.inventory import ResourceMemories

    registry = kopf.OperatorRegistry()

    @kopf.on.validate("configmaps", id="configmaps", registry=registry)
    def validate(body: Any, **_: Any) -> None:
        if not body.get("data"):
            raise kopf.AdmissionError("data must not be empty")

    configmaps = references.Resource(
        group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True
    )
    fn = functools.partial(
        serve_admission_request,
        settings=kopf.OperatorSettings(),
        memories=ResourceMemories(),
        memobase=ephemera.AnyMemo(kopf.Memo()),
        registry=registry,
        insights=references.Insights(webhook_resources={configmaps}),
        indices=OperatorIndexers().indices,
    )

    async def main() -> None:
        server = kopf.WebhookServer(
            addr="127.0.0.1",
            port=int(port_file.read_text()),
            certfile=str(certs / "tls.crt"),
            pkeyfile=str(certs / "tls.key"),
        )
        async with server:
            async for _config in server(fn):
                port_file.write_text(port_file.read_text() + " ready")
                await asyncio.Event().wait()

    asyncio.run(main())


# --- the load generator ----------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(port: int, path: str, ca: bytes, pid: int) -> tuple[float, list[float], int, float]:
    """Reviews per second, per-review latencies, wrong answers, server CPU seconds used."""
    import h11
    import trio

    context = ssl.create_default_context(cadata=ca.decode("ascii"))
    wrong = 0

    async def worker(indices: list[int], latencies: list[float] | None) -> None:
        nonlocal wrong
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
        conn = h11.Connection(h11.CLIENT)
        for index in indices:
            body = _review(index)
            start = time.perf_counter()
            data = conn.send(
                h11.Request(
                    method="POST",
                    target=f"{path}?timeout=10s",
                    headers=[
                        ("Host", f"127.0.0.1:{port}"),
                        ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body))),
                    ],
                )
            )
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            await stream.send_all(data)
            chunks = []
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
            if latencies is not None:
                latencies.append(time.perf_counter() - start)
            answer = json.loads(b"".join(chunks))["response"]
            if (
                status != 200
                or answer["uid"] != f"uid-{index}"
                or answer["allowed"] != bool(index % 2)
            ):
                wrong += 1
            conn.start_next_cycle()
        await trio.aclose_forcefully(stream)

    async def run(total: int, latencies: list[float] | None) -> float:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for c in range(CONNECTIONS):
                nursery.start_soon(worker, list(range(c, total, CONNECTIONS)), latencies)
        return time.perf_counter() - start

    async def main() -> tuple[float, list[float], float]:
        await run(WARMUP, None)
        latencies: list[float] = []
        cpu = _cpu_seconds(pid)
        elapsed = await run(REVIEWS, latencies)
        return REVIEWS / elapsed, latencies, _cpu_seconds(pid) - cpu

    rate, latencies, cpu = trio.run(main)
    return rate, latencies, wrong, cpu


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@dataclass(frozen=True)
class _Result:
    rate: float
    p99: float
    wrong: int
    cpu_per_review: float


def _measure(name: str, certs: Path) -> _Result:
    port_file = certs / f"{name}.port"
    port_file.unlink(missing_ok=True)  # from an earlier round
    if name == "kopf":
        import socket

        with socket.socket() as sock:  # kopf wants a port up front
            sock.bind(("127.0.0.1", 0))
            port_file.write_text(str(sock.getsockname()[1]))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "serve", name, str(certs), str(port_file)],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # kopf logs every denial at ERROR level
    )
    try:
        os.sched_setaffinity(proc.pid, {SERVER_CPU})
        deadline = time.monotonic() + 30
        while True:
            text = port_file.read_text() if port_file.exists() else ""
            ready = text.endswith(" ready") if name == "kopf" else text.isdigit()
            if ready:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} webhook server did not start")
            time.sleep(0.05)
        port = int(text.split()[0])
        path = "/configmaps"
        rate, latencies, wrong, cpu = _load(port, path, (certs / "ca.crt").read_bytes(), proc.pid)
        return _Result(rate, _p99(latencies), wrong, cpu / REVIEWS)
    finally:
        proc.terminate()
        proc.wait(10)


def _best(results: list[_Result]) -> _Result:
    """The round with the highest rate, and the least CPU per review of all rounds."""
    best = max(results, key=lambda r: r.rate)
    cpu = min(r.cpu_per_review for r in results)
    return _Result(best.rate, best.p99, sum(r.wrong for r in results), cpu)


def _describe(r: _Result) -> str:
    return (
        f"{r.rate:,.0f} reviews/s, p99 {r.p99 * 1000:.1f} ms, "
        f"server CPU {r.cpu_per_review * 1e6:,.0f} µs/review, {r.wrong} wrong answers"
    )


def rows() -> list[Row]:
    """KubeMoon and kopf, each on one core, the same reviews from the same client."""
    from kubemoon_testing import WebhookCertificates

    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return [Row("webhook: admission reviews", "", "skipped: needs 2 CPUs and Linux")]
    os.sched_setaffinity(0, {CLIENT_CPU})
    inputs = (
        f"{REVIEWS} validating reviews (half denied) after {WARMUP} warm-up, "
        f"{CONNECTIONS} TLS keep-alive connections, server pinned to 1 core, "
        f"best of {ROUNDS} alternating rounds"
    )
    measured: dict[str, list[_Result]] = {"kubemoon": [], "kopf": []}
    with tempfile.TemporaryDirectory() as directory:
        certs = WebhookCertificates.create(directory)
        for _ in range(ROUNDS):
            for name, results in measured.items():
                results.append(_measure(name, certs.directory))
    k, f = _best(measured["kubemoon"]), _best(measured["kopf"])
    ratio = k.rate / f.rate
    cpu_ratio = f.cpu_per_review / k.cpu_per_review
    return [
        Row("webhook: KubeMoon WebhookServer (trio, h11)", inputs, _describe(k)),
        Row(
            "webhook: kopf 1.45.2 WebhookServer (aiohttp) + @kopf.on.validate",
            inputs,
            _describe(f),
        ),
        Row(
            "webhook: KubeMoon / kopf",
            "same run, same client, same reviews",
            f"{ratio:.2f}x the reviews/s (p99 {k.p99 * 1000:.1f} vs {f.p99 * 1000:.1f} ms); "
            f"kopf's server uses {cpu_ratio:.2f}x KubeMoon's CPU per review",
        ),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        logging.basicConfig(level=logging.WARNING)
        serve = _serve_kubemoon if sys.argv[2] == "kubemoon" else _serve_kopf
        serve(Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        for row in rows():
            print(row)
