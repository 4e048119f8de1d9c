"""Admission webhook throughput and p99 latency: KubeMoon's server against kopf's, one core each.

The same validating rule (deny a ConfigMap without data) is served by
``kubemoon_trio.WebhookServer`` and by kopf's ``WebhookServer`` (aiohttp) with a
``@kopf.on.validate`` handler dispatched through kopf's own admission machinery
(``serve_admission_request``, as ``kopf run`` wires it), each written both ways: as an
``async def`` handler (awaited on the loop; KubeMoon answers its small reviews there
without a thread hop) and as a plain ``def`` one (user code that may block: KubeMoon runs
it on its worker threads, kopf on its executor's). Each server runs in a child
process pinned to CPU 0; the load generator (this process) is pinned to CPU 1 and keeps
``CONNECTIONS`` TLS keep-alive connections busy, one review in flight on each. Half the
reviews are allowed, half denied. Figures on a shared machine are noisy: the ratio, taken
in the same run, is the figure to read, and the server CPU per review (read from
/proc) is the one that load on the machine disturbs least. The servers and clients run at
nice -10 where allowed: on a core shared with other jobs the scheduler gives each thread
its share, so a server with more threads (worker threads, kopf's executor) would otherwise
get more of the core than a single-threaded one.

``python bench_webhook.py serve kubemoon|inline|threads|kopf|kopf-def <cert dir> <port
file>`` runs one server: ``kubemoon`` with its defaults and the async handler (reviews up
to ``inline_body_size`` answered on the loop, longer ones on worker threads), ``inline``
with every review on the loop (the worker threads patched out: the fastest it can be),
``threads`` with the plain handler (every review decoded, handled and encoded on a worker
thread, one hop), ``kopf`` and ``kopf-def`` kopf with the async and the plain handler. The
rows compare them in the same run (rounds alternate the servers; the paired figure is the
median of the per-round ratios), and time the costliest review of each size on the loop
with each JSON backend (the measurement behind the 64 KiB default).

The attack rows: the KubeMoon server also runs a Lease-renewal-like task on its loop
(wake every ``RENEW_PERIOD`` s, record how late), while ``ATTACKERS`` anonymous clients
(another process, on the client core) each send ``ATTACK_BODY`` -byte reviews in a loop
for ``ATTACK_SECONDS`` and the usual load measures reviews/s beside them. Once against the
default route limit (the attack is refused with 413 from the request head), once against a
route that raised its limit to accept them (decoded, defaulted and answered off the loop),
and once with the worst reviews still answered on the loop (64 KiB of one-character keys).
``python bench_webhook.py attack <port> <path> <ca file> <seconds>`` runs the attackers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
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
ROUNDS = int(os.environ.get("KUBEMOON_BENCH_WEBHOOK_ROUNDS", "3"))
ATTACKERS = 6
ATTACK_BODY = 7 * 1024 * 1024
ATTACK_SECONDS = float(os.environ.get("KUBEMOON_BENCH_ATTACK_SECONDS", "60"))
RENEW_PERIOD = 0.5


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


def _serve_kubemoon(certs: Path, port_file: Path, *, variant: str = "kubemoon") -> None:
    """``kubemoon``: the defaults (an async handler's small reviews on the loop, large ones
    on threads); ``threads``: the same rule as a plain ``def`` handler, so every review is
    decoded, handled and encoded on a worker thread in one hop (the path before small
    reviews stayed on the loop, and a plain handler's now); ``inline``: every review on the
    loop, with no budget either (worker threads patched out)."""
    import trio
    from prometheus_client import CollectorRegistry

    from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookApp
    from kubemoon_trio import WebhookServer

    options: dict[str, Any] = {}
    if variant == "inline":
        options["inline_body_size"] = 0
    if variant == "inline":
        # The A/B of the worker threads: handle every review on the loop, as before them.
        from kubemoon_trio import _webhook_server

        async def on_the_loop(fn: Any, limiter: Any) -> Any:
            return fn()

        _webhook_server.run_in_thread = on_the_loop  # type: ignore[assignment]

    async def validate(request: AdmissionRequest) -> AdmissionResponse:
        # async: a review of an async handler may stay on the loop (a plain one may block)
        if not (request.object or {}).get("data"):
            return AdmissionResponse.deny("data must not be empty")
        return AdmissionResponse.allow()

    def validate_plain(request: AdmissionRequest) -> AdmissionResponse:
        if not (request.object or {}).get("data"):
            return AdmissionResponse.deny("data must not be empty")
        return AdmissionResponse.allow()

    app = WebhookApp()
    app.validating("/configmaps", validate_plain if variant == "threads" else validate)
    server = WebhookServer(
        app,
        cert_file=certs / "tls.crt",
        key_file=certs / "tls.key",
        registry=CollectorRegistry(),
        **options,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            port_file.write_text(str(port))

    trio.run(main)


def _big_review() -> bytes:
    """A ~7 MiB mutating review: a custom object whose spec lists ~60,000 targets."""
    targets = []
    size = 0
    while size < ATTACK_BODY - 4096:
        item = {"namespace": f"team-{len(targets):07d}", "labels": {"tier": "gold"}}
        targets.append(item)
        size += 60
    review = json.loads(_review(1))
    review["request"]["kind"] = {"group": "kubemoon.dev", "version": "v1", "kind": "Mirror"}
    review["request"]["object"] = {
        "apiVersion": "kubemoon.dev/v1",
        "kind": "Mirror",
        "metadata": {"name": "big", "namespace": "team-a"},
        "spec": {"targets": targets},
    }
    return json.dumps(review).encode()


def _worst_small_review() -> bytes:
    """The costliest review to decode that is still handled on the loop: a ConfigMap of
    one-character keys and values, as many as fit in ``inline_body_size`` bytes (many
    keys: the most objects per byte that a review of strings can carry)."""
    from kubemoon_trio import DEFAULT_INLINE_BODY_SIZE

    review = json.loads(_review(1))
    review["request"]["object"]["data"] = {}
    empty = len(json.dumps(review, separators=(",", ":")))
    data = {}
    size, index = empty, 0
    while True:
        key = f"{index:x}"
        if size + len(key) + 6 > DEFAULT_INLINE_BODY_SIZE:
            break
        data[key] = ""
        size += len(key) + 6
        index += 1
    review["request"]["object"]["data"] = data
    body = json.dumps(review, separators=(",", ":")).encode()
    assert len(body) <= DEFAULT_INLINE_BODY_SIZE, len(body)
    return body


def _serve_attacked(certs: Path, port_file: Path, stats_file: Path) -> None:
    """The KubeMoon server with a renewal-like task on its loop and a defaulting route."""
    import copy

    import trio
    from prometheus_client import CollectorRegistry

    from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookApp
    from kubemoon_trio import WebhookServer

    async def validate(request: AdmissionRequest) -> AdmissionResponse:
        # async: a review of an async handler may stay on the loop (a plain one may block)
        if not (request.object or {}).get("data"):
            return AdmissionResponse.deny("data must not be empty")
        return AdmissionResponse.allow()

    def default(request: AdmissionRequest) -> AdmissionResponse:
        # Defaulting that touches every list element: the worst case for a JSON patch.
        assert request.object is not None
        mutated = copy.deepcopy(request.object)
        for target in mutated.get("spec", {}).get("targets", []):
            target.setdefault("mode", "copy")
        return AdmissionResponse.patched(request.object, mutated)

    app = WebhookApp()
    app.validating("/configmaps", validate)
    app.mutating("/mutate-default", default)  # the default 1 MiB limit
    app.mutating("/mutate-raised", default, max_body_size=8 * 1024 * 1024)
    app.validating("/validate-small", validate)  # the worst small reviews, on the loop
    server = WebhookServer(
        app,
        cert_file=certs / "tls.crt",
        key_file=certs / "tls.key",
        registry=CollectorRegistry(),
    )

    moved: list[str] = []

    class Moved(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "now run on worker threads" in record.getMessage():
                moved.append(record.getMessage())

    logging.getLogger("kubemoon.webhook").addHandler(Moved(logging.WARNING))

    def rss_kib(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0

    async def renewals() -> None:
        latest = 0.0
        ticks = 0
        start_rss = rss_kib("VmRSS")
        due = trio.current_time() + RENEW_PERIOD
        while True:
            await trio.sleep_until(due)
            late = trio.current_time() - due
            latest = max(latest, late)
            ticks += 1
            stats = {
                "max_late": latest,
                "ticks": ticks,
                "rss_start_kib": start_rss,
                "rss_kib": rss_kib("VmRSS"),
                "rss_peak_kib": rss_kib("VmHWM"),
                "threaded": sorted(server.threaded_webhooks),
                "moved": moved[:3],
            }
            stats_file.write_text(json.dumps(stats))
            due += RENEW_PERIOD
            if due < trio.current_time():  # never a burst of catch-up ticks
                due = trio.current_time() + RENEW_PERIOD

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            nursery.start_soon(renewals)
            port_file.write_text(str(port))

    trio.run(main)


def _attack(port: int, path: str, ca: bytes, seconds: float) -> None:
    """ATTACKERS clients sending the big review to ``path`` in a loop for ``seconds``."""
    import h11
    import trio

    body = _worst_small_review() if path == "/validate-small" else _big_review()
    context = ssl.create_default_context(cadata=ca.decode("ascii"))
    head = (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sent = [0, 0, 0]  # reviews sent whole, answers read, connections made

    async def attacker() -> None:
        while True:
            try:
                tcp = await trio.open_tcp_stream("127.0.0.1", port)
                sent[2] += 1
                stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
                conn = h11.Connection(h11.CLIENT)
                conn.send(h11.Request(method="POST", target=path, headers=[("Host", "x")]))
                conn.send(h11.EndOfMessage())

                async def send(stream: trio.SSLStream[trio.SocketStream]) -> None:
                    try:
                        await stream.send_all(head + body)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return  # refused before the end of the body
                    sent[0] += 1

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send, stream)
                    while True:
                        event = conn.next_event()
                        if event is h11.NEED_DATA:
                            conn.receive_data(await stream.receive_some(1 << 20))
                        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                            sent[1] += 1
                            nursery.cancel_scope.cancel()
                            break
                await trio.aclose_forcefully(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.ProtocolError):
                await trio.sleep(0.01)  # refused or reset: connect again

    async def main() -> None:
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for _ in range(ATTACKERS):
                    nursery.start_soon(attacker)

    trio.run(main)
    print(json.dumps({"sent": sent[0], "answered": sent[1], "connections": sent[2]}))


def _serve_kopf(certs: Path, port_file: Path, *, plain: bool) -> None:
    """kopf's server with the same rule as an ``async def`` handler (awaited on its loop,
    like KubeMoon's default row), or as a plain ``def`` one (``plain``: kopf runs it on its
    executor's threads)."""
    import asyncio
    import functools

    import kopf
    from kopf._cogs.structs import ephemera, references
    from kopf._core.engines.admission import serve_admission_request
    from kopf._core.engines.indexing import OperatorIndexers
    from kopf._core.reactor.inventory import ResourceMemories

    registry = kopf.OperatorRegistry()

    async def validate(body: Any, **_: Any) -> None:
        if not body.get("data"):
            raise kopf.AdmissionError("data must not be empty")

    def validate_plain(body: Any, **_: Any) -> None:
        if not body.get("data"):
            raise kopf.AdmissionError("data must not be empty")

    kopf.on.validate("configmaps", id="configmaps", registry=registry)(
        validate_plain if plain else validate
    )

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


def _favour() -> None:
    """Nice -10 for this process and so for every server and client it starts (when
    allowed): on a core shared with other jobs, the scheduler's share per thread otherwise
    favours whichever server runs more threads (every variant, and kopf, get the same)."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -10)


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
    share: float  # of its core the server got in the round (its CPU seconds per second)


def _measure(name: str, certs: Path) -> _Result:
    port_file = certs / f"{name}.port"
    port_file.unlink(missing_ok=True)  # from an earlier round
    if name.startswith("kopf"):
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
            ready = text.endswith(" ready") if name.startswith("kopf") else text.isdigit()
            if ready:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} webhook server did not start")
            time.sleep(0.05)
        port = int(text.split()[0])
        path = "/configmaps"
        rate, latencies, wrong, cpu = _load(port, path, (certs / "ca.crt").read_bytes(), proc.pid)
        return _Result(rate, _p99(latencies), wrong, cpu / REVIEWS, rate * cpu / REVIEWS)
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass(frozen=True)
class _Attacked:
    rate: float
    max_late: float
    ticks: int
    rss_start_mib: float
    rss_peak_mib: float
    rss_end_mib: float
    attacks_sent: int
    connections: int
    threaded: tuple[str, ...]


def _measure_attacked(path: str, certs: Path) -> _Attacked:
    """Reviews/s of the usual load while ATTACKERS hammer ``path``, and the loop's lateness."""
    port_file = certs / "attacked.port"
    stats_file = certs / "attacked.stats"
    port_file.unlink(missing_ok=True)
    stats_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "serve-attacked", str(certs), str(port_file), str(stats_file)],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    attack = None
    try:
        os.sched_setaffinity(proc.pid, {SERVER_CPU})
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().isdigit()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the attacked webhook server did not start")
            time.sleep(0.05)
        port = int(port_file.read_text())
        ca = certs / "ca.crt"
        time.sleep(2 * RENEW_PERIOD)  # the first stats: RSS before the attack
        attack = subprocess.Popen(
            [sys.executable, __file__, "attack", str(port), path, str(ca), str(ATTACK_SECONDS)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        os.sched_setaffinity(attack.pid, {CLIENT_CPU})
        start = time.monotonic()
        rates = []
        while time.monotonic() - start < ATTACK_SECONDS - 5:
            rate, _latencies, wrong, _cpu = _load(port, "/configmaps", ca.read_bytes(), proc.pid)
            if wrong:
                raise RuntimeError(f"{wrong} wrong answers under attack")
            rates.append(rate)
        out, _ = attack.communicate(timeout=ATTACK_SECONDS + 60)
        counts = json.loads(out)
        stats = json.loads(stats_file.read_text())
        return _Attacked(
            rate=sorted(rates)[len(rates) // 2],
            max_late=stats["max_late"],
            ticks=stats["ticks"],
            rss_start_mib=stats["rss_start_kib"] / 1024,
            rss_peak_mib=stats["rss_peak_kib"] / 1024,
            rss_end_mib=stats["rss_kib"] / 1024,
            attacks_sent=counts["sent"],
            connections=counts["connections"],
            threaded=tuple(stats.get("moved", ())) or tuple(stats.get("threaded", ())),
        )
    finally:
        if attack is not None and attack.poll() is None:
            attack.kill()
            attack.wait(10)
        proc.terminate()
        proc.wait(10)


def _attack_row(name: str, path: str, certs: Path, baseline: float) -> Row:
    a = _measure_attacked(path, certs)
    small = path == "/validate-small"
    what = (
        f"{len(_worst_small_review()) >> 10} KiB worst-case"
        if small
        else (f"{ATTACK_BODY >> 20} MiB")
    )
    inputs = (
        f"{ATTACKERS} clients each sending {what} reviews to {path} in a loop "
        f"for {ATTACK_SECONDS:.0f} s ({a.connections:,} connections, {a.attacks_sent:,} reviews "
        f"sent whole); renewal task every "
        f"{RENEW_PERIOD} s on the server's loop; the usual load beside them, server on 1 core"
    )
    ratio = a.rate / baseline
    moved = "; ".join(a.threaded) if a.threaded else "none"
    result = (
        f"renewals at most {a.max_late * 1000:.0f} ms late ({a.ticks} ticks); "
        f"RSS {a.rss_start_mib:.0f} -> peak {a.rss_peak_mib:.0f} MiB (end {a.rss_end_mib:.0f}); "
        f"the usual load {a.rate:,.0f} reviews/s = {ratio:.0%} of the same run's unattacked "
        "median (the attack's own TLS handshakes and reviews share the server's core); "
        f"webhooks moved off the loop: {moved}"
    )
    return Row(name, inputs, result, "renewals <= 1 s late", a.max_late <= 1.0)


def _inline_cost() -> list[Row]:
    """How long the costliest reviews take to answer on the loop, by size and JSON backend
    (the measurement behind ``inline_body_size``): decode, a trivial validating handler,
    encode, as WebhookApp.dispatch does them; best of 5 timings."""
    from kubemoon_core import _json
    from kubemoon_core.webhooks import (
        AdmissionRequest,
        AdmissionResponse,
        PendingAdmission,
        WebhookApp,
    )
    from kubemoon_trio import DEFAULT_INLINE_BODY_SIZE

    def validate(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    app = WebhookApp()
    app.validating("/v", validate, max_body_size=8 << 20)
    headers = [("Content-Type", "application/json")]

    def body(size: int, shape: str) -> bytes:
        review = json.loads(_review(1))
        obj = review["request"]["object"]
        room = size - len(json.dumps(review, separators=(",", ":"))) - 16
        if shape == "keys":  # one-character values under distinct short keys
            data: dict[str, str] = {}
            index = 0
            while room > 0:
                key = f"{index:x}"
                data[key] = ""
                room -= len(key) + 6
                index += 1
            obj["data"] = data
        else:  # empty objects in a list: the most containers per byte
            obj["spec"] = [{}] * (room // 3)
        return json.dumps(review, separators=(",", ":")).encode()

    def cost(data: bytes) -> float:
        reps = max(3, min(100, int(2e6 / len(data))))
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(reps):
                reply = app.dispatch("POST", "/v", headers, data, prechecked=True)
            best = min(best, (time.perf_counter() - start) / reps)
        assert not isinstance(reply, PendingAdmission)
        assert reply.status == 200
        return best

    backends = (
        ("json", _json.use_standard_json),
        ("orjson", _json.use_fast_json),
        ("msgspec", _json.use_msgspec_json),
    )
    threshold = DEFAULT_INLINE_BODY_SIZE
    sizes = (1024, 16 * 1024, threshold, 4 * threshold)
    rows = []
    worst_at_threshold = 0.0
    try:
        for name, use in backends:
            use()
            parts = []
            for size in sizes:
                typical = cost(_review(1)) if size == 1024 else None
                worst = max(cost(body(size, "keys")), cost(body(size, "empties")))
                if size == threshold:
                    worst_at_threshold = max(worst_at_threshold, worst)
                label = f"{size >> 10} KiB"
                figure = f"{label} {worst * 1000:.2f} ms"
                if typical is not None:
                    figure = f"typical 1 KiB review {typical * 1e6:.0f} µs; worst {figure}"
                parts.append(figure)
            rows.append(
                Row(
                    f"webhook: worst review answered on the loop, by size ({name})",
                    "WebhookApp.dispatch (decode, trivial validating handler, encode) of the "
                    "costliest body of each size: max of 1-char keys in data and empty "
                    "objects in a list; best of 5",
                    "; ".join(parts),
                )
            )
    finally:
        _json.use_standard_json()
    rows.append(
        Row(
            "webhook: inline_body_size (reviews at most this long are answered on the loop)",
            f"default {threshold >> 10} KiB; a route whose reviews keep taking more than 5 ms "
            "of CPU on the loop (three strikes) moves to worker threads",
            f"the worst {threshold >> 10} KiB review takes {worst_at_threshold * 1000:.2f} ms "
            "on the loop with the slowest backend",
            "worst review at the threshold <= 5 ms (the move-to-threads budget)",
            worst_at_threshold <= 0.005,
        )
    )
    return rows


def _best(results: list[_Result]) -> _Result:
    """The round with the highest rate, and the least CPU per review of all rounds."""
    best = max(results, key=lambda r: r.rate)
    cpu = min(r.cpu_per_review for r in results)
    return _Result(best.rate, best.p99, sum(r.wrong for r in results), cpu, best.share)


def _describe(r: _Result) -> str:
    return (
        f"{r.rate:,.0f} reviews/s, p99 {r.p99 * 1000:.1f} ms, "
        f"server CPU {r.cpu_per_review * 1e6:,.0f} µs/review "
        f"({1 / r.cpu_per_review:,.0f} reviews per CPU-second; the server had "
        f"{r.share:.0%} of its core), {r.wrong} wrong answers"
    )


def rows() -> list[Row]:
    """KubeMoon and kopf, each on one core, the same reviews from the same client."""
    from kubemoon_testing import WebhookCertificates

    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return [Row("webhook: admission reviews", "", "skipped: needs 2 CPUs and Linux")]
    os.sched_setaffinity(0, {CLIENT_CPU})
    _favour()
    inputs = (
        f"{REVIEWS} validating reviews (half denied) after {WARMUP} warm-up, "
        f"{CONNECTIONS} TLS keep-alive connections, server pinned to 1 core, "
        f"best of {ROUNDS} alternating rounds"
    )
    measured: dict[str, list[_Result]] = {
        "kubemoon": [],
        "inline": [],
        "threads": [],
        "kopf": [],
        "kopf-def": [],
    }
    with tempfile.TemporaryDirectory() as directory:
        certs = WebhookCertificates.create(directory)
        for round_ in range(ROUNDS):
            # Every other round in reverse, so a drift in the machine's load within a round
            # does not always favour the same server.
            order = list(measured) if round_ % 2 == 0 else list(reversed(measured))
            for name in order:
                measured[name].append(_measure(name, certs.directory))
        baseline = sorted(r.rate for r in measured["kubemoon"])[ROUNDS // 2]
        attacked = [
            _attack_row(
                "webhook under attack: default 1 MiB route limit (refused with 413)",
                "/mutate-default",
                certs.directory,
                baseline,
            ),
            _attack_row(
                "webhook under attack: route limit raised to 8 MiB (reviews decoded and defaulted)",
                "/mutate-raised",
                certs.directory,
                baseline,
            ),
            _attack_row(
                "webhook under attack: the worst reviews small enough to be answered on the loop",
                "/validate-small",
                certs.directory,
                baseline,
            ),
        ]

    def median_ratio(a: str, b: str) -> float:
        """The median of the per-round ratios of the reviews/s (a round runs the servers
        back to back): the figure a target is judged on, as load on a shared machine moves
        between rounds far more than within one."""
        ratios = sorted(x.rate / y.rate for x, y in zip(measured[a], measured[b], strict=True))
        return ratios[ROUNDS // 2]

    k, f = _best(measured["kubemoon"]), _best(measured["kopf"])
    fd = _best(measured["kopf-def"])
    inline = _best(measured["inline"])
    threads = _best(measured["threads"])

    def versus(a: str, x: _Result, b: str, y: _Result) -> Row:
        median = median_ratio(*keys[a, b])
        return Row(
            f"webhook: {a} / {b}",
            "same run, same client, same reviews",
            f"{median:.2f}x the reviews/s (median of the {ROUNDS} per-round ratios; best "
            f"rounds {x.rate:,.0f} vs {y.rate:,.0f}, {x.rate / y.rate:.2f}x; p99 "
            f"{x.p99 * 1000:.1f} vs {y.p99 * 1000:.1f} ms); kopf's server uses "
            f"{y.cpu_per_review / x.cpu_per_review:.2f}x KubeMoon's CPU per review",
            "reviews/s >= 1.5x kopf's (median of the per-round ratios)",
            median >= 1.5,
        )

    keys = {
        ("KubeMoon defaults", "kopf (async def handler)"): ("kubemoon", "kopf"),
        ("KubeMoon defaults", "kopf (def handler)"): ("kubemoon", "kopf-def"),
        ("KubeMoon def handler", "kopf (def handler)"): ("threads", "kopf-def"),
    }
    return [
        Row(
            "webhook: KubeMoon WebhookServer (trio, h11), defaults (async def handler: small "
            "reviews on the loop)",
            inputs,
            _describe(k),
        ),
        Row(
            "webhook: KubeMoon WebhookServer, def handler (every review on a worker thread)",
            inputs,
            _describe(threads),
        ),
        Row(
            "webhook: kopf 1.45.2 WebhookServer (aiohttp) + @kopf.on.validate async def",
            inputs,
            _describe(f),
        ),
        Row(
            "webhook: kopf 1.45.2 WebhookServer (aiohttp) + @kopf.on.validate def (executor)",
            inputs,
            _describe(fd),
        ),
        versus("KubeMoon defaults", k, "kopf (async def handler)", f),
        versus("KubeMoon defaults", k, "kopf (def handler)", fd),
        versus("KubeMoon def handler", threads, "kopf (def handler)", fd),
        Row(
            "webhook: defaults / every review on the loop (A/B of the same server)",
            inputs,
            f"{median_ratio('kubemoon', 'inline'):.0%} of the reviews/s (median of the "
            f"{ROUNDS} per-round ratios; best rounds {k.rate:,.0f} vs {inline.rate:,.0f}, "
            f"{k.rate / inline.rate:.0%}); "
            f"p99 {k.p99 * 1000:.1f} vs {inline.p99 * 1000:.1f} ms; CPU per review "
            f"{k.cpu_per_review * 1e6:,.0f} vs {inline.cpu_per_review * 1e6:,.0f} µs "
            f"({inline.cpu_per_review / k.cpu_per_review:.0%} of the reviews per CPU-second)",
            "reviews/s >= 90% of on-the-loop (median of the per-round ratios)",
            median_ratio("kubemoon", "inline") >= 0.9,
        ),
        Row(
            "webhook: every review on a worker thread (def handler) / on the loop",
            inputs,
            f"{median_ratio('threads', 'inline'):.0%} of the reviews/s (median of the "
            f"{ROUNDS} per-round ratios; best rounds {threads.rate:,.0f} vs "
            f"{inline.rate:,.0f}); "
            f"p99 {threads.p99 * 1000:.1f} vs {inline.p99 * 1000:.1f} ms; "
            f"CPU per review {threads.cpu_per_review * 1e6:,.0f} vs "
            f"{inline.cpu_per_review * 1e6:,.0f} µs "
            f"({inline.cpu_per_review / threads.cpu_per_review:.0%} of the reviews per "
            "CPU-second)",
        ),
        *_inline_cost(),
        *attacked,
    ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve-attacked":
        _serve_attacked(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[1] == "attack":
        _attack(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]).read_bytes(), float(sys.argv[5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "serve":
        logging.basicConfig(level=logging.WARNING)
        if sys.argv[2].startswith("kopf"):
            _serve_kopf(Path(sys.argv[3]), Path(sys.argv[4]), plain=sys.argv[2] == "kopf-def")
        else:
            _serve_kubemoon(Path(sys.argv[3]), Path(sys.argv[4]), variant=sys.argv[2])
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        for row in rows():
            print(row)
