"""ConfigMirror on 1 replica against 3 sharded replicas, on the real apiserver.

Three runs, each on a fresh ``kubemoon_testing.ApiServer`` (no controller manager) holding
only its own workload, so that no run's informers see another run's objects:

1. **1 replica**, unsharded (``python -m configmirror``), apiserver with the
   ``ShardedListAndWatch`` gate on (the unsharded operator does not use it);
2. **3 replicas** ``--sharded``, gate on: each replica's ConfigMirror informer lists and
   watches only its hash range (server-side sharding);
3. **3 replicas** ``--sharded``, gate off: the apiserver ignores the selector, so each
   replica receives every ConfigMirror and drops those outside its range (client-side).

The workload is bench_operator's: ``MIRRORS`` ConfigMaps and ``MIRRORS`` ConfigMirrors in
a source namespace, each mirrored into the same ``TARGETS`` target namespaces, created
before the operator processes start from cold. Every replica runs as the same
ServiceAccount with bench_operator's flags (``--workers``), and in the sharded runs with
``--sharded --shard-identity replica-<i> --lease-namespace`` and the default Lease timings.

**Measured**, per run: convergence (from the start of the processes until every mirror is
Ready=True, polled as a Table; then the copies are verified); per replica, at
convergence: CPU seconds (user + system, ``/proc/<pid>/stat``), peak RSS (``VmHWM``) and
the response bytes its informers received (``kubemoon_reflector_received_bytes_total``
from its ``/metrics``: LIST pages and watch streams, streaming lists included), in total
and for the sharded ConfigMirror informer alone.

Targets (issue 35, after issue 25): each sharded replica's CPU ≤ 0.4x and peak RSS
≤ 0.5x the single replica's; bytes received per replica with the gate ≤ 0.4x the single
replica's. Sharded, each
replica watches only the copies of its own mirrors (labelled with their mirror's owner
bucket); the sources (every ConfigMap that is no copy) stay cluster-wide, needed to map a
source to its mirrors, so every replica still receives and caches all of them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from _table import Row
from bench_operator import (
    MIRRORS_API,
    POLL_INTERVAL,
    ROOT,
    STOP_TIMEOUT,
    SYSTEM_NAMESPACE,
    TARGETS,
    WORKERS,
    Admin,
    Workload,
    cpu_seconds,
    install_crd,
    log_tail,
    mirror_uids,
    peak_rss_mib,
    ready_count,
    service_account_kubeconfig,
    source_data,
)

from kubemoon_testing import ApiServer, MissingBinariesError

MIRRORS = int(os.environ.get("BENCH_SHARDING_MIRRORS", "3000"))
REPLICAS = 3
# The whole module's time: each run waits for convergence at most its share of what is left
# (so 3,000 mirrors fit on a quiet machine; on a busy one a run may stop unconverged, and its
# row says so).
BUDGET = float(os.environ.get("BENCH_SHARDING_BUDGET", "480"))
MIN_WAIT = 60.0
TARGET_SHARE = 0.4
# Peak RSS: each replica keeps a fixed interpreter and library cost (~41 MiB) whatever its
# share, so the target is a half rather than a share near a third.
RSS_TARGET_SHARE = 0.5
GATE = "--feature-gates=ShardedListAndWatch=true"
CREATORS = 8
_RECEIVED = re.compile(r"^kubemoon_reflector_received_bytes_total\{([^}]*)\} (\S+)$", re.M)
_FRACTION = re.compile(r"^kubemoon_shard_owned_fraction\{[^}]*\} (\S+)$", re.M)


@dataclass
class Replica:
    """One operator process and what it used until the run converged."""

    name: str
    cpu_s: float | None = None
    rss_mib: float | None = None
    received: int = 0  # bytes, every informer
    mirrors_received: int = 0  # bytes, the ConfigMirror informer


@dataclass
class Run:
    """One configuration: its replicas, convergence and the copies verified."""

    name: str
    slug: str  # for file names
    sharded: bool
    gate: bool
    replicas: list[Replica] = field(default_factory=list)
    converge_s: float | None = None
    settle_s: float | None = None  # until every replica owned its third of the hash space
    copies_ok: int = 0
    error: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
        return text


def _settled(ports: list[int]) -> bool:
    """Whether every replica works on its share (a third of the hash space) alone."""
    try:
        fractions = [_FRACTION.findall(_metrics(port)) for port in ports]
    except OSError:
        return False
    share = 1 / len(ports)
    return all(len(f) == 1 and abs(float(f[0]) - share) < 0.02 for f in fractions)


def _received(port: int) -> tuple[int, int]:
    """(all informers, the ConfigMirror informer) bytes received, from ``/metrics``."""
    text = _metrics(port)
    total = mirrors = 0
    for labels, value in _RECEIVED.findall(text):
        n = int(float(value))
        total += n
        if 'name="configmirrors.kubemoon.dev' in labels:
            mirrors += n
    return total, mirrors


def _create_workload(server: ApiServer, work: Workload) -> None:
    """bench_operator's workload, created by ``CREATORS`` threads (3,000 mirrors: 6,000 POSTs)."""
    from concurrent.futures import ThreadPoolExecutor

    first = Admin(server)
    try:
        for namespace in [work.source, *work.targets]:
            labels = {"kubemoon.dev/accept-mirrors": "true"} if namespace in work.targets else {}
            first.request(
                "POST", "/api/v1/namespaces", {"metadata": {"name": namespace, "labels": labels}}
            )
    finally:
        first.close()

    def create(chunk: range) -> None:
        admin = Admin(server)
        try:
            for i in chunk:
                admin.request(
                    "POST",
                    f"/api/v1/namespaces/{work.source}/configmaps",
                    {"metadata": {"name": f"settings-{i:03d}"}, "data": source_data(i)},
                )
                admin.request(
                    "POST",
                    f"{MIRRORS_API}/namespaces/{work.source}/configmirrors",
                    {
                        "apiVersion": "kubemoon.dev/v1beta1",
                        "kind": "ConfigMirror",
                        "metadata": {"name": f"mirror-{i:03d}"},
                        "spec": {
                            "source": f"settings-{i:03d}",
                            "targets": {"namespaces": work.targets},
                        },
                    },
                )
        finally:
            admin.close()

    chunks = [range(k, work.mirrors, CREATORS) for k in range(CREATORS)]
    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(create, chunks))


def _verify(admin: Admin, work: Workload) -> int:
    """The copies with the source's data and the owner's uid (bench_operator's check)."""
    from bench_operator import verify_copies

    return verify_copies(admin, work, mirror_uids(admin, work))


def measure_run(run: Run, tmp: Path, deadline: float, runs_after: int) -> None:
    """Start an apiserver, create the workload, run the replicas until convergence (or
    until this run's share of the time left before ``deadline``)."""
    begun = time.monotonic()
    extra = [GATE] if run.gate else []
    with ApiServer(extra_args=extra, controller_manager=False) as server:
        admin = Admin(server)
        procs: list[tuple[Replica, subprocess.Popen[bytes], int, Path]] = []
        try:
            install_crd(admin)
            admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": SYSTEM_NAMESPACE}})
            config = tmp / "sharding.kubeconfig"  # its stem is the context name
            service_account_kubeconfig(server, admin, "sharding", config)
            work = Workload(f"shard-{run.slug}", MIRRORS)
            _create_workload(server, work)
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            count = REPLICAS if run.sharded else 1
            started = time.monotonic()
            setup = started - begun
            timeout = max(MIN_WAIT, (deadline - started - runs_after * setup) / (runs_after + 1))
            for i in range(count):
                port = _free_port()
                argv = [
                    sys.executable, "-m", "configmirror", "--kubeconfig", str(config),
                    "--context", config.stem, "--probe-address", f"127.0.0.1:{port}",
                    "--workers", str(WORKERS), "--namespace", work.source,
                ]  # fmt: skip
                if run.sharded:
                    argv += [
                        "--sharded", "--shard-identity", f"replica-{i}",
                        "--lease-namespace", SYSTEM_NAMESPACE,
                    ]  # fmt: skip
                log = tmp / f"{run.slug}-{i}.log"
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                    )
                replica = Replica(f"replica-{i}")
                run.replicas.append(replica)
                procs.append((replica, proc, port, log))
            while True:
                if run.sharded and run.settle_s is None and _settled([p for _, _, p, _ in procs]):
                    run.settle_s = time.monotonic() - started
                ready = ready_count(admin, work)
                if ready == work.mirrors:
                    run.converge_s = time.monotonic() - started
                    break
                dead = [(r, p, log) for r, p, _, log in procs if p.poll() is not None]
                if dead:
                    r, p, log = dead[0]
                    run.error = f"{r.name} exited with {p.returncode}: {log_tail(log)}"
                    break
                if time.monotonic() - started > timeout:
                    run.error = (
                        f"did not converge in its share of the module's time: "
                        f"{ready}/{work.mirrors} Ready after {timeout:.0f} s"
                    )
                    break
                time.sleep(POLL_INTERVAL)
            for replica, proc, port, _ in procs:
                replica.cpu_s = cpu_seconds(proc.pid)
                replica.rss_mib = peak_rss_mib(proc.pid)
                with contextlib.suppress(OSError):
                    replica.received, replica.mirrors_received = _received(port)
            if run.converge_s is not None:
                run.copies_ok = _verify(admin, work)
        finally:
            for _, proc, _, _ in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for _, proc, _, _ in procs:
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            admin.close()


# -- rows --------------------------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _each(values: Iterable[str]) -> str:
    return ", ".join(values)


def run_row(run: Run, inputs: str) -> Row:
    copies = MIRRORS * TARGETS
    per = [
        f"{r.name} {r.cpu_s:.1f} s CPU, peak RSS {r.rss_mib:.0f} MiB, received "
        f"{_mib(r.received)} ({_mib(r.mirrors_received)} of ConfigMirrors)"
        for r in run.replicas
        if r.cpu_s is not None and r.rss_mib is not None
    ]
    if run.converge_s is None:
        seen = f"; until then: {_each(per)}" if per else ""
        return Row(f"sharding: {run.name}, convergence", inputs, f"failed: {run.error}{seen}",
                   "converges", False)  # fmt: skip
    settled = (
        f"; membership settled (each replica on a third) {run.settle_s:.1f} s after the start"
        if run.settle_s is not None
        else ("; membership had not settled at convergence" if run.sharded else "")
    )
    return Row(
        f"sharding: {run.name}, convergence",
        inputs,
        f"{run.converge_s:.1f} s to {MIRRORS}/{MIRRORS} Ready{settled}; "
        f"{run.copies_ok}/{copies} copies verified; {_each(per)}",
        "converges",
        run.copies_ok == copies,
    )


def _share_row(
    what: str,
    single: float | None,
    values: list[float | None],
    unit: str,
    target: bool,
    *,
    note: str = "",
    share: float = TARGET_SHARE,
) -> Row:
    inputs = f"{MIRRORS} mirrors: each of {REPLICAS} sharded replicas against 1 replica"
    known = [v for v in values if v is not None]
    if single is None or not single or len(known) != len(values) or not known:
        return Row(what, inputs, "not measured", f"≤ {share}x" if target else "",
                   False if target else None)  # fmt: skip
    worst = max(known) / single
    shown = _each(f"{v / single:.2f}" for v in known)
    return Row(
        what,
        inputs,
        f"{worst:.2f}x at most ({shown}; single replica {single:,.1f} {unit}){note}",
        f"≤ {share}x" if target else "",
        worst <= share if target else None,
    )


def _unconverged(*runs: Run) -> str:
    late = [run.name for run in runs if run.converge_s is None]
    return f"; not at convergence: {' and '.join(late)} hit the time limit" if late else ""


def ratio_rows(single: Run, on: Run, off: Run) -> list[Row]:
    one = single.replicas[0] if single.replicas else Replica("none")
    mib = 2**20
    note_on = _unconverged(single, on)
    rows = [
        _share_row(
            "sharding: CPU to converge per replica, 3 sharded (gate on) / 1",
            one.cpu_s,
            [r.cpu_s for r in on.replicas],
            "s",
            True,
            note=note_on,
        ),
        _share_row(
            "sharding: peak RSS per replica, 3 sharded (gate on) / 1",
            one.rss_mib,
            [r.rss_mib for r in on.replicas],
            "MiB",
            True,
            note=note_on,
            share=RSS_TARGET_SHARE,
        ),
    ]
    for run, target in ((on, True), (off, False)):
        how = "server-side (gate on)" if run.gate else "client-side (gate off)"
        rows.append(
            _share_row(
                f"sharding: bytes received per replica, every informer, {how} / 1 replica",
                one.received / mib if one.received else None,
                [r.received / mib if r.received else None for r in run.replicas],
                "MiB",
                target,
                note=_unconverged(single, run),
            )
        )
        rows.append(
            _share_row(
                f"sharding: bytes received per replica, the ConfigMirror informer, {how} / 1",
                one.mirrors_received / mib if one.mirrors_received else None,
                [r.mirrors_received / mib if r.mirrors_received else None for r in run.replicas],
                "MiB",
                target,
                note=_unconverged(single, run),
            )
        )
    times = [r.converge_s for r in (single, on, off)]
    if all(t is not None for t in times):
        rows.append(
            Row(
                "sharding: convergence, 1 replica / 3 sharded (gate on) / 3 sharded (gate off)",
                f"{MIRRORS} mirrors x {TARGETS} targets, cold start",
                " / ".join(f"{t:.1f} s" for t in times if t is not None),
            )
        )
    return rows


def rows() -> list[Row]:
    """Three runs (1 replica; 3 sharded, gate on; 3 sharded, gate off) and the ratios."""
    inputs = (
        f"{MIRRORS} ConfigMirrors x {TARGETS} targets = {MIRRORS * TARGETS} copies, "
        f"--workers {WORKERS} per replica, fresh apiserver per run"
    )
    runs = [
        Run("1 replica (unsharded)", "single", sharded=False, gate=True),
        Run(f"{REPLICAS} replicas --sharded, gate on (server-side)", "on", sharded=True, gate=True),
        Run(
            f"{REPLICAS} replicas --sharded, gate off (client-side)",
            "off",
            sharded=True,
            gate=False,
        ),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-sharding-") as tmp:
        deadline = time.monotonic() + BUDGET
        for k, run in enumerate(runs):
            try:
                measure_run(run, Path(tmp), deadline, len(runs) - 1 - k)
            except MissingBinariesError as exc:
                reason = str(exc).splitlines()[0]
                return [Row("sharding: 1 vs 3 replicas", inputs, f"not run: {reason}")]
            except Exception as exc:  # a failed run is a failed row, not a lost table
                run.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if os.environ.get("BENCH_KEEP_LOGS"):
            keep = Path(os.environ["BENCH_KEEP_LOGS"])
            keep.mkdir(parents=True, exist_ok=True)
            for log in Path(tmp).glob("*.log"):
                with contextlib.suppress(OSError):
                    (keep / log.name).write_bytes(log.read_bytes())
    out = [run_row(run, inputs) for run in runs]
    out += ratio_rows(*runs)
    return out


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_sharding"))
