"""The ConfigMirror operator against the same operator written with kopf and with
controller-runtime in Go (``bench/controller_runtime``, built here with the machine's Go),
on a real apiserver.

One kube-apiserver (``kubemoon_testing.ApiServer``) with an audit log (``Metadata`` level,
batch mode so that writing it stays off the requests' path). Each operator runs as its own
ServiceAccount, bound to ``cluster-admin`` so that both take the same authorization path;
the audit log tells their requests apart by ``user.username`` and logs nobody else's. The
operators run one after the other, each on fresh namespaces: a source namespace holding
300 ConfigMaps and 300 ConfigMirrors (each mirroring its own source into the same 3 target
namespaces: 900 copies), created before the operator process starts from cold.

Measured per operator:

- convergence: from process start until all 300 ConfigMirrors are Ready=True, polled
  every 0.25 s by the admin with a LIST rendered as a Table (printer columns only, so
  the polling costs the shared CPUs little); the 900 copies are then checked (data and
  owner annotation);
- API requests and writes (create, update, patch, delete) by the operator's identity in
  that window, in the 5 s after it (trailing work) and in the following 60 s of steady
  state, and how many were answered 409;
- CPU seconds (user + system, ``/proc/<pid>/stat``) of the operator process to converge
  and in the steady window, and its peak RSS; for context, the CPU that kube-apiserver
  and etcd used meanwhile, and the CPU that other processes on the machine used (the
  machine may be shared: a busy neighbour slows both operators down).

Both operators start from bytecode: kopf is installed in site-packages, compiled when pip
installed it, and KubeMoon's packages (an editable install, sources only) are compiled
with ``compileall`` before the runs, as installing them from a wheel would. Otherwise,
with ``PYTHONDONTWRITEBYTECODE`` set, every KubeMoon start would compile its ~100 modules
again (about 0.2 s of CPU counted against its convergence).

KubeMoon runs first, then kopf, then controller-runtime; kopf is restricted to its own
four namespaces (``-n`` for each), the other two watch ConfigMaps cluster-wide, and the
ConfigMaps of each finished run are deleted so that every cluster-wide informer sees only
its own. Each operator is stopped with SIGTERM before the next one starts. Every wait is
bounded: an operator that does not converge in ``CONVERGE_TIMEOUT`` seconds fails its rows.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _table import Row
from operator_floor import WRITES, Floor, measure_floor, median_floor
from operator_reaction import SETTLE_TIMEOUT, UPDATES, Reaction, measure_reaction

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubemoon_testing import ApiServer, ApiServerError, MissingBinariesError  # noqa: E402

MIRRORS = 300
SCALE_MIRRORS = 3000
TARGETS = 3
WORKERS = 4
SETTLE_SECONDS = 5.0
STEADY_SECONDS = 60.0
CONVERGE_TIMEOUT = 300.0
SCALE_CONVERGE_TIMEOUT = 900.0
POLL_INTERVAL = 0.25
FLOOR_ROUNDS = 3  # rounds of the bare-httpcore floor: two before KubeMoon's run, one after
DISTURBED_CPU = 0.5  # seconds of other processes' CPU that make a run "disturbed"
STOP_TIMEOUT = 20.0
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
SYSTEM_NAMESPACE = "bench-operators"
KOPF_FILE = Path(__file__).resolve().with_name("kopf_configmirror.py")
# The same operator on controller-runtime in Go, built here with the machine's Go.
CR_MODULE = Path(__file__).resolve().with_name("controller_runtime")
CR_BUILD_TIMEOUT = 900.0
# The storage version: no conversion webhook is needed to create and read it.
MIRRORS_API = "/apis/kubemoon.dev/v1beta1"

# ServiceAccount names in SYSTEM_NAMESPACE: one identity per run, so the audit log tells
# the runs apart.
OPERATORS = ("kubemoon", "kopf", "cr", "kubemoon-scale", "kopf-scale", "cr-scale")
# Only the operators' requests are logged: the orchestration's are not counted anyway.
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: [{", ".join(f"system:serviceaccount:{SYSTEM_NAMESPACE}:{n}" for n in OPERATORS)}]
  - level: None
"""


# -- a small keep-alive client for the orchestration (independent of KubeMoon's) -------------


class Admin:
    """Blocking JSON requests as the admin, on one kept-alive connection."""

    def __init__(self, server: ApiServer) -> None:
        self.port = server.port
        self.token = server.admin_token
        self.context_cafile = str(server.ca_file)
        self.context = ssl.create_default_context(cafile=self.context_cafile)
        self.conn: http.client.HTTPSConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        ok: tuple[int, ...] = (200, 201),
        *,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, context=self.context, timeout=30
                )
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = resp.read()
            except (OSError, http.client.HTTPException):
                self.close()  # a dropped keep-alive connection: one retry on a new one
                if attempt:
                    raise
                continue
            if resp.status not in ok:
                raise ApiServerError(f"{method} {path} -> {resp.status}: {payload[:300]!r}")
            return json.loads(payload) if payload else None
        raise AssertionError("unreachable")


# -- identities --------------------------------------------------------------------------------


def service_account_kubeconfig(server: ApiServer, admin: Admin, name: str, path: Path) -> str:
    """Create ServiceAccount ``name`` bound to cluster-admin; write a kubeconfig for it."""
    base = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts"
    admin.request("POST", base, {"metadata": {"name": name}})
    admin.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"bench-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SYSTEM_NAMESPACE}],
        },
    )
    answer = admin.request(
        "POST",
        f"{base}/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    config = {  # JSON is YAML: every kubeconfig loader reads it
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "bench",
                "cluster": {"server": server.url, "certificate-authority": str(server.ca_file)},
            }
        ],
        "users": [{"name": name, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": name, "context": {"cluster": "bench", "user": name}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    path.chmod(0o600)
    return f"system:serviceaccount:{SYSTEM_NAMESPACE}:{name}"


# -- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One operator's namespaces: a source namespace and the shared target namespaces."""

    prefix: str
    mirrors: int = MIRRORS

    @property
    def source(self) -> str:
        return f"{self.prefix}-src"

    @property
    def targets(self) -> list[str]:
        return [f"{self.prefix}-t{i}" for i in range(1, TARGETS + 1)]


def source_data(i: int) -> dict[str, str]:
    return {f"key-{j}": f"value {i} {j} " + "x" * 40 for j in range(5)}


def create_workload(admin: Admin, work: Workload) -> None:
    for namespace in [work.source, *work.targets]:
        # ConfigMirror targets are opt-in (issue 15); the kopf operator ignores the label.
        labels = {"kubemoon.dev/accept-mirrors": "true"} if namespace in work.targets else {}
        admin.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": namespace, "labels": labels}}
        )
    for i in range(work.mirrors):
        admin.request(
            "POST",
            f"/api/v1/namespaces/{work.source}/configmaps",
            {"metadata": {"name": f"settings-{i:03d}"}, "data": source_data(i)},
        )
    for i in range(work.mirrors):
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


def ready_count(admin: Admin, work: Workload) -> int:
    """How many mirrors are Ready=True: a LIST as a Table of the printer columns only."""
    table = admin.request(
        "GET",
        f"{MIRRORS_API}/namespaces/{work.source}/configmirrors?includeObject=None",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    names = [column["name"] for column in table["columnDefinitions"]]
    ready = names.index("Ready")
    return sum(1 for row in table["rows"] if row["cells"][ready] == "True")


def mirror_uids(admin: Admin, work: Workload) -> dict[str, str]:
    items = admin.request("GET", f"{MIRRORS_API}/namespaces/{work.source}/configmirrors")["items"]
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in items}


def verify_copies(admin: Admin, work: Workload, uids: dict[str, str]) -> int:
    """How many of the expected copies exist with the source's data and the owner's UID."""
    good = 0
    for namespace in work.targets:
        items = admin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")["items"]
        for item in items:
            name = item["metadata"]["name"]
            if not name.startswith("settings-"):
                continue
            i = int(name.removeprefix("settings-"))
            owner = (item["metadata"].get("annotations") or {}).get("kubemoon.dev/owner-uid")
            if owner == uids.get(f"mirror-{i:03d}") and item.get("data") == source_data(i):
                good += 1
    return good


# -- the operator process ----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of ``pid`` so far, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def server_cpu_seconds() -> float:
    """CPU so far of this process's kube-apiserver and etcd children (the test server)."""
    total = 0.0
    parent = str(os.getpid())
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == parent and comm in ("kube-apiserver", "etcd"):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores), from ``/proc/stat``."""
    fields = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU of this process (the orchestration: setup, polling)."""
    times = os.times()
    return times.user + times.system


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " / ".join(line.strip()[:200] for line in text.splitlines()[-lines:])


@dataclass
class Run:
    """What one operator did."""

    name: str
    username: str = ""
    error: str | None = None
    converge_s: float | None = None
    copies_ok: int = 0
    cpu_converge: float | None = None
    cpu_steady: float | None = None
    server_cpu_converge: float | None = None
    server_cpu_steady: float | None = None
    other_cpu_converge: float | None = None  # other processes on the machine meanwhile
    rss_mib: float | None = None
    exit_code: int | None = None
    windows: dict[str, float] = field(default_factory=dict)  # wall-clock boundaries
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # window -> verb counts
    conflicts: dict[str, int] = field(default_factory=dict)  # window -> 409 answers
    first_request_s: float | None = None  # after process start: imports and startup
    mirrors: int = MIRRORS
    reaction: Reaction | None = None


def run_operator(
    admin: Admin,
    work: Workload,
    run: Run,
    *,
    argv: list[str],
    env: dict[str, str],
    log: Path,
    steady: bool = True,
    timeout: float = CONVERGE_TIMEOUT,
) -> None:
    """Start the operator from cold and time convergence; with ``steady``, then watch 60 s
    of steady state and measure the reaction latency."""
    run.mirrors = work.mirrors
    create_workload(admin, work)
    server_before = server_cpu_seconds()
    busy_before, own_before = machine_busy_seconds(), own_cpu_seconds()
    run.windows["start"] = time.time()
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        while True:
            ready = ready_count(admin, work)
            if ready == work.mirrors:
                break
            if proc.poll() is not None:
                run.error = f"exited with {proc.returncode} ({ready}/{work.mirrors} Ready): " + (
                    log_tail(log)
                )
                return
            if time.monotonic() - started > timeout:
                run.error = f"did not converge: {ready}/{work.mirrors} Ready after {timeout:.0f} s"
                run.cpu_converge = cpu_seconds(proc.pid)
                run.server_cpu_converge = server_cpu_seconds() - server_before
                run.rss_mib = peak_rss_mib(proc.pid)
                return
            time.sleep(POLL_INTERVAL)
        run.converge_s = time.monotonic() - started
        run.windows["converged"] = time.time()
        run.cpu_converge = cpu_seconds(proc.pid)
        run.server_cpu_converge = server_cpu_seconds() - server_before
        if run.cpu_converge is not None:
            busy = machine_busy_seconds() - busy_before
            ours = run.cpu_converge + run.server_cpu_converge + own_cpu_seconds() - own_before
            run.other_cpu_converge = max(0.0, busy - ours)
        if not steady:
            run.rss_mib = peak_rss_mib(proc.pid)
            run.copies_ok = verify_copies(admin, work, mirror_uids(admin, work))
            return
        time.sleep(SETTLE_SECONDS)
        run.windows["steady"] = time.time()
        cpu_before, server_before = cpu_seconds(proc.pid), server_cpu_seconds()
        time.sleep(STEADY_SECONDS)
        run.windows["end"] = time.time()
        cpu_after = cpu_seconds(proc.pid)
        run.server_cpu_steady = server_cpu_seconds() - server_before
        if cpu_before is not None and cpu_after is not None:
            run.cpu_steady = cpu_after - cpu_before
        run.rss_mib = peak_rss_mib(proc.pid)
        ready = ready_count(admin, work)
        if ready != work.mirrors:
            run.error = f"only {ready}/{work.mirrors} still Ready after the steady window"
        run.copies_ok = verify_copies(admin, work, mirror_uids(admin, work))
        # Last: it changes the first source, which the copy check compares with.
        run.reaction = measure_reaction(admin, work.source, work.targets)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        run.exit_code = proc.returncode


def clear_configmaps(admin: Admin, work: Workload) -> None:
    """Delete the ConfigMaps of a finished run (its operator is stopped), so that the next
    operator's cluster-wide ConfigMap informer holds only its own."""
    for namespace in [work.source, *work.targets]:
        admin.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps", ok=(200,))


# -- the controller-runtime operator ----------------------------------------------------------


@dataclass(frozen=True)
class GoBuild:
    """The controller-runtime operator's binary and what it was built from, or why not."""

    binary: Path | None
    label: str  # "controller-runtime v0.25.3, go1.26.8" or the reason it is missing


def build_controller_runtime(out_dir: Path) -> GoBuild:
    """``go build`` bench/controller_runtime into ``out_dir`` (modules from the module
    proxy into Go's module cache, objects into Go's build cache: both outside the clone)."""
    go = shutil.which("go")
    if go is None:
        return GoBuild(None, "go is not installed")
    found = re.search(
        r"sigs\.k8s\.io/controller-runtime (v\S+)", (CR_MODULE / "go.mod").read_text("utf-8")
    )
    version = found.group(1) if found else "(unknown version)"
    binary = out_dir / "configmirror-cr"
    try:
        built = subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(binary), "."],
            cwd=CR_MODULE, capture_output=True, text=True, timeout=CR_BUILD_TIMEOUT, check=False,
        )  # fmt: skip
        goversion = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GoBuild(None, f"go build failed: {type(exc).__name__}: {exc}")
    if built.returncode != 0:
        tail = " / ".join(built.stderr.strip().splitlines()[-3:])[:300]
        return GoBuild(None, f"go build failed ({built.returncode}): {tail}")
    return GoBuild(binary, f"controller-runtime {version}, {goversion}")


def _cr_argv(binary: Path, config: Path, work: Workload) -> list[str]:
    return [
        str(binary), "--kubeconfig", str(config), "--namespace", work.source,
        "--workers", str(WORKERS), "--probe-address", "127.0.0.1:0",
    ]  # fmt: skip


# -- the audit log -----------------------------------------------------------------------------


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_events(path: Path) -> Iterator[dict[str, Any]]:
    """One event per request (the last stage seen of each auditID)."""
    last: dict[str, dict[str, Any]] = {}
    with path.open(encoding="utf-8") as log:
        for line in log:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                last[event["auditID"]] = event
    yield from last.values()


def count_requests(path: Path, runs: list[Run]) -> None:
    """Fill each run's per-window verb counts from the audit log."""
    by_user = {run.username: run for run in runs if run.username}
    for run in runs:
        for window in ("converge", "tail", "steady"):
            run.counts[window] = Counter()
            run.conflicts[window] = 0
    for event in audit_events(path):
        owner = by_user.get(event.get("user", {}).get("username", ""))
        if owner is None or "converged" not in owner.windows:
            continue
        at = _timestamp(event["requestReceivedTimestamp"])
        w = owner.windows
        if at >= w["start"]:
            since = at - w["start"]
            if owner.first_request_s is None or since < owner.first_request_s:
                owner.first_request_s = since
        if w["start"] <= at <= w["converged"]:
            window = "converge"
        elif "steady" in w and w["converged"] < at <= w["steady"]:
            window = "tail"
        elif "end" in w and w["steady"] < at <= w["end"]:
            window = "steady"
        else:
            continue
        owner.counts[window][event["verb"]] += 1
        if (event.get("responseStatus") or {}).get("code") == 409:
            owner.conflicts[window] += 1


# -- rows --------------------------------------------------------------------------------------


def _writes(counts: Counter[str]) -> int:
    return sum(n for verb, n in counts.items() if verb in WRITE_VERBS)


def _breakdown(counts: Counter[str]) -> str:
    verbs = sorted(counts, key=lambda v: (v not in WRITE_VERBS, -counts[v], v))
    return ", ".join(f"{counts[v]} {v}" for v in verbs) or "none"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def operator_rows(run: Run, inputs: str) -> list[Row]:
    name = run.name
    if run.converge_s is None:
        return [Row(f"operator: {name}, convergence", inputs, f"failed: {run.error}", "", False)]
    c, t, s = run.counts["converge"], run.counts["tail"], run.counts["steady"]
    copies = run.mirrors * TARGETS
    note = f"; {run.error}" if run.error else ""
    rss = f"{run.rss_mib:.0f} MiB" if run.rss_mib is not None else "n/a"
    rows = [
        Row(
            f"operator: {name}, convergence",
            inputs,
            f"{run.converge_s:.1f} s to {run.mirrors}/{run.mirrors} Ready; "
            f"{run.copies_ok}/{copies} copies verified; other processes on the machine "
            f"used {_seconds(run.other_cpu_converge)} CPU meanwhile{note}",
            "",
            None if run.copies_ok == copies and not run.error else False,
        ),
        Row(
            f"operator: {name}, API requests to converge",
            inputs,
            f"{c.total()} requests ({_breakdown(c)}): {_writes(c)} writes, "
            f"{run.conflicts['converge']} answered 409; in the {SETTLE_SECONDS:.0f} s after: "
            f"{t.total()} requests, {_writes(t)} writes",
        ),
        Row(
            f"operator: {name}, CPU to converge",
            inputs,
            f"{_seconds(run.cpu_converge)} user+sys, peak RSS {rss}; first request "
            f"{_seconds(run.first_request_s)} after start; kube-apiserver + etcd meanwhile: "
            f"{_seconds(run.server_cpu_converge)} CPU",
        ),
    ]
    steady = Row(
        f"operator: {name}, steady state",
        f"{STEADY_SECONDS:.0f} s idle after convergence (+{SETTLE_SECONDS:.0f} s settle)",
        f"{s.total()} requests ({_breakdown(s)}), {_writes(s)} writes, "
        f"CPU {_seconds(run.cpu_steady)}; "
        f"kube-apiserver + etcd: {_seconds(run.server_cpu_steady)} CPU",
    )
    rows.append(steady)
    return rows


def _disturbed(*runs: Run) -> str:
    """A warning when other processes took noticeable CPU while an operator converged."""
    noisy = [
        f"{run.other_cpu_converge:.1f} s during {run.name}'s"
        for run in runs
        if run.other_cpu_converge is not None and run.other_cpu_converge > DISTURBED_CPU
    ]
    return f"; disturbed: other processes used {' and '.join(noisy)} run" if noisy else ""


def comparison_rows(kubemoon: Run, kopf: Run) -> list[Row]:
    rows: list[Row] = []
    both = kubemoon.converge_s is not None and kopf.converge_s is not None
    if not both or kubemoon.converge_s is None or kopf.converge_s is None:
        failed = kubemoon if kubemoon.converge_s is None else kopf
        why = f"{failed.name} did not run to convergence: {failed.error}"
        met = False if kubemoon.converge_s is None else None
        rows.append(Row("operator: convergence, kopf / KubeMoon", "", why, "≥ 3x", met))
        rows.append(Row("operator: CPU to converge, KubeMoon / kopf", "", why, "≤ 1/3", met))
    else:
        speedup = kopf.converge_s / kubemoon.converge_s
        rows.append(
            Row(
                "operator: convergence, kopf / KubeMoon",
                f"{MIRRORS} mirrors, cold start",
                f"KubeMoon {speedup:.2f}x faster ({kubemoon.converge_s:.1f} s vs "
                f"{kopf.converge_s:.1f} s){_disturbed(kubemoon, kopf)}",
                "≥ 3x",
                speedup >= 3,
            )
        )
        if kubemoon.cpu_converge is not None and kopf.cpu_converge:
            share = kubemoon.cpu_converge / kopf.cpu_converge
            rows.append(
                Row(
                    "operator: CPU to converge, KubeMoon / kopf",
                    f"{MIRRORS} mirrors, cold start",
                    f"{share:.2f} ({kubemoon.cpu_converge:.2f} s vs {kopf.cpu_converge:.2f} s)",
                    "≤ 1/3",
                    share <= 1 / 3,
                )
            )
    if kubemoon.converge_s is not None:
        writes = _writes(kubemoon.counts["steady"])
        rows.append(
            Row(
                "operator: KubeMoon writes in steady state",
                f"{STEADY_SECONDS:.0f} s after convergence",
                f"{writes} writes",
                "0 writes",
                writes == 0,
            )
        )
    return rows


def _cpu_per_write(run: Run) -> tuple[float, int] | None:
    """CPU seconds per write over the convergence, and the writes, or None."""
    writes = _writes(run.counts.get("converge", Counter()))
    if run.cpu_converge is None or not writes:
        return None
    return run.cpu_converge / writes, writes


def cost_rows(kubemoon: Run, floor: Floor | None) -> list[Row]:
    """KubeMoon's CPU per write against bare httpcore's, and against the servers' CPU."""
    inputs = (
        f"{MIRRORS} mirrors, cold start; floor: {WRITES} bare creates of a copy-sized "
        f"ConfigMap, median of {FLOOR_ROUNDS} rounds around the run"
    )
    per = _cpu_per_write(kubemoon)
    if per is None or floor is None:
        why = kubemoon.error or "no CPU or write count"
        return [Row("operator: KubeMoon CPU per converged write vs bare httpcore", inputs,
                    f"not measured: {why}", "≤ 1.5x", False)]  # fmt: skip
    cpu, writes = per
    ratio = cpu / floor.blocking
    rows = [
        Row(
            "operator: KubeMoon CPU per converged write vs bare httpcore",
            inputs,
            f"{cpu * 1e3:.2f} ms per write ({writes} writes in {kubemoon.cpu_converge:.2f} s); "
            f"bare httpcore.ConnectionPool {floor.blocking * 1e3:.2f} ms: {ratio:.2f}x "
            f"(httpcore.AsyncConnectionPool on trio {floor.trio * 1e3:.2f} ms: "
            f"{cpu / floor.trio:.2f}x; on asyncio {floor.asyncio * 1e3:.2f} ms)",
            "≤ 1.5x the blocking floor",
            ratio <= 1.5,
        )
    ]
    if kubemoon.server_cpu_converge:
        share = (kubemoon.cpu_converge or 0.0) / kubemoon.server_cpu_converge
        rows.append(
            Row(
                "operator: KubeMoon CPU vs kube-apiserver + etcd CPU, same convergence",
                f"{MIRRORS} mirrors, cold start",
                f"{share:.0%} ({kubemoon.cpu_converge:.2f} s vs "
                f"{kubemoon.server_cpu_converge:.2f} s; the servers spent "
                f"{kubemoon.server_cpu_converge / writes * 1e3:.2f} ms per write)",
                "≤ 25%",
                share <= 0.25,
            )
        )
    return rows


def reaction_rows(kubemoon: Run, kopf: Run, cr: Run | None = None) -> list[Row]:
    """Reaction latency of each operator, and KubeMoon's p99 against kopf's and
    controller-runtime's."""
    inputs = (
        f"source of 1 mirror x {TARGETS} targets patched {UPDATES} times, every 0.1 s, "
        "converged and idle operator"
    )
    rows: list[Row] = []
    for run in (kubemoon, kopf, *((cr,) if cr is not None else ())):
        r = run.reaction
        if r is None or r.error:
            why = (r.error if r else None) or run.error or "not measured"
            rows.append(Row(f"operator: {run.name}, reaction latency", inputs, f"failed: {why}"))
            continue
        rows.append(
            Row(
                f"operator: {run.name}, reaction latency",
                inputs,
                f"p50 {r.p50 * 1e3:.1f} ms, p99 {r.p99 * 1e3:.1f} ms, max "
                f"{max(r.latencies) * 1e3:.1f} ms; {len(r.latencies)}/{UPDATES} updates reached "
                f"every copy within {SETTLE_TIMEOUT:.0f} s of the last; {r.floor_text()}",
                "",
                (None if not r.missing else False) if run is kubemoon else None,
            )
        )
    ours, theirs = kubemoon.reaction, kopf.reaction
    if ours and theirs and ours.latencies and theirs.latencies:
        share = ours.p99 / theirs.p99
        rows.append(
            Row(
                "operator: reaction latency p99, KubeMoon / kopf",
                "same run, same apiserver",
                f"{share:.2f} ({ours.p99 * 1e3:.1f} ms vs {theirs.p99 * 1e3:.1f} ms; p50 "
                f"{ours.p50 * 1e3:.1f} vs {theirs.p50 * 1e3:.1f} ms)",
                "≤ 1/3",
                share <= 1 / 3 and not ours.missing,
            )
        )
    anchor = cr.reaction if cr is not None else None
    if cr is not None and (anchor is None or not anchor.latencies):
        why = (anchor.error if anchor else None) or cr.error or "not measured"
        name = "operator: reaction latency p99, KubeMoon / controller-runtime"
        rows.append(Row(name, "same run, same apiserver", f"not measured: {why}", "≤ 1.5x", False))
    elif anchor is not None and ours and ours.latencies:
        share = ours.p99 / anchor.p99
        rows.append(
            Row(
                "operator: reaction latency p99, KubeMoon / controller-runtime",
                "same run, same apiserver",
                f"{share:.2f}x ({ours.p99 * 1e3:.1f} ms vs {anchor.p99 * 1e3:.1f} ms; p50 "
                f"{ours.p50 * 1e3:.1f} vs {anchor.p50 * 1e3:.1f} ms)",
                "≤ 1.5x",
                share <= 1.5 and not ours.missing,
            )
        )
    return rows


def scale_rows(
    small: Run, kubemoon: Run | None, kopf: Run | None, cr: Run | None = None
) -> list[Row]:
    """The 3,000-mirror runs: convergence, CPU per write against the 300-mirror run, RSS."""
    inputs = f"{SCALE_MIRRORS} ConfigMirrors x {TARGETS} targets = {SCALE_MIRRORS * TARGETS} copies"
    rows: list[Row] = []
    for run in (kubemoon, kopf, cr):
        if run is None:
            continue
        if run.converge_s is None:
            seen = f"; {_seconds(run.cpu_converge)} CPU meanwhile" if run.cpu_converge else ""
            rss = f", peak RSS {run.rss_mib:.0f} MiB" if run.rss_mib else ""
            rows.append(Row(f"operator at scale: {run.name}", inputs,
                            f"failed: {run.error}{seen}{rss}", "converges", False))  # fmt: skip
            continue
        per = _cpu_per_write(run)
        cost = f"{per[0] * 1e3:.2f} ms CPU per write ({per[1]} writes)" if per else "n/a"
        rss = f"{run.rss_mib:.0f} MiB" if run.rss_mib is not None else "n/a"
        ok = run.copies_ok == SCALE_MIRRORS * TARGETS
        c = run.counts.get("converge", Counter())
        rows.append(
            Row(
                f"operator at scale: {run.name}",
                inputs,
                f"converged in {run.converge_s:.1f} s, {run.copies_ok}/{SCALE_MIRRORS * TARGETS} "
                f"copies verified; {_seconds(run.cpu_converge)} CPU, {cost}; peak RSS {rss}; "
                f"{c.total()} requests ({_breakdown(c)}), {run.conflicts.get('converge', 0)} "
                f"answered 409; kube-apiserver + etcd: {_seconds(run.server_cpu_converge)} CPU"
                f"{_disturbed(run)}",
                "converges",
                ok,
            )
        )
    big = _cpu_per_write(kubemoon) if kubemoon is not None else None
    base = _cpu_per_write(small)
    if big is not None and base is not None:
        growth = big[0] / base[0]
        rows.append(
            Row(
                f"operator at scale: KubeMoon CPU per write, {SCALE_MIRRORS} vs {MIRRORS} mirrors",
                "same run",
                f"{growth:.2f}x ({big[0] * 1e3:.2f} vs {base[0] * 1e3:.2f} ms)",
                "≤ 1.2x",
                growth <= 1.2,
            )
        )
    if kubemoon is not None and kopf is not None and kubemoon.rss_mib and kopf.rss_mib:
        unfinished = " (kopf had not converged)" if kopf.converge_s is None else ""
        rows.append(
            Row(
                f"operator at scale: peak RSS, KubeMoon / kopf at {SCALE_MIRRORS} mirrors",
                "same run",
                f"{kubemoon.rss_mib / kopf.rss_mib:.2f} ({kubemoon.rss_mib:.0f} MiB vs "
                f"{kopf.rss_mib:.0f} MiB{unfinished})",
            )
        )
    return rows


def anchor_rows(
    kubemoon: Run, cr: Run, kubemoon_scale: Run | None, cr_scale: Run | None
) -> list[Row]:
    """KubeMoon against the controller-runtime operator, same run, same apiserver: CPU per
    converged write (target ≤ 2x) at both sizes, peak RSS at 3,000 mirrors (≤ 1.0x), and
    for context convergence and CPU to converge."""
    rows: list[Row] = []
    sizes = [(MIRRORS, kubemoon, cr)]
    if kubemoon_scale is not None or cr_scale is not None:
        sizes.append((SCALE_MIRRORS, kubemoon_scale or Run("KubeMoon configmirror"),
                      cr_scale or Run("controller-runtime")))  # fmt: skip
    for mirrors, ours, theirs in sizes:
        where = "operator" if mirrors == MIRRORS else "operator at scale"
        inputs = f"{mirrors} mirrors x {TARGETS} targets, cold start, same run"
        name = f"{where}: CPU per converged write, KubeMoon / controller-runtime"
        a, b = _cpu_per_write(ours), _cpu_per_write(theirs)
        failed = next((r for r in (ours, theirs) if r.converge_s is None), None)
        if failed is not None or a is None or b is None:
            why = failed.error if failed is not None else "no CPU or write count"
            rows.append(Row(name, inputs, f"not measured: {why}", "≤ 2x", False))
            continue
        ratio = a[0] / b[0]
        rows.append(
            Row(
                name,
                inputs,
                f"{ratio:.2f}x ({a[0] * 1e3:.2f} ms vs {b[0] * 1e3:.2f} ms; {a[1]} vs {b[1]} "
                f"writes in {ours.cpu_converge:.2f} s vs {theirs.cpu_converge:.2f} s CPU)"
                f"{_disturbed(ours, theirs)}",
                "≤ 2x",
                ratio <= 2.0,
            )
        )
        assert ours.converge_s is not None
        assert theirs.converge_s is not None
        rows.append(
            Row(
                f"{where}: convergence and CPU to converge, KubeMoon / controller-runtime",
                inputs,
                f"convergence {ours.converge_s / theirs.converge_s:.2f}x ({ours.converge_s:.1f} s "
                f"vs {theirs.converge_s:.1f} s); CPU "
                f"{(ours.cpu_converge or 0.0) / (theirs.cpu_converge or 1.0):.2f}x",
            )
        )
        if ours.rss_mib and theirs.rss_mib:
            share = ours.rss_mib / theirs.rss_mib
            big = mirrors == SCALE_MIRRORS
            rows.append(
                Row(
                    f"{where}: peak RSS, KubeMoon / controller-runtime at {mirrors} mirrors",
                    "same run",
                    f"{share:.2f}x ({ours.rss_mib:.0f} MiB vs {theirs.rss_mib:.0f} MiB)",
                    "≤ 1.0x" if big else "",
                    share <= 1.0 if big else None,
                )
            )
    return rows


# -- the benchmark -----------------------------------------------------------------------------


def kopf_missing() -> str | None:
    """Why kopf cannot run here, or None."""
    for module in ("kopf", "kubernetes_asyncio"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -r bench/requirements.txt)"
    return None


PACKAGES = ("kubemoon_core", "kubemoon_io", "kubemoon_trio", "configmirror")


def compile_bytecode() -> None:
    """Compile the KubeMoon packages the operator imports (see the module's docstring)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(ROOT / p) for p in PACKAGES)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def install_crd(admin: Admin) -> None:
    # The v1beta1 version alone: deploy/crd.yaml also serves v1alpha1 through a conversion
    # webhook, which the benchmark does not run, and with that Service missing the
    # apiserver spent 10.6 s of CPU per idle minute (2.1 s with v1beta1 alone).
    from configmirror._api import ConfigMirrorV1beta1
    from kubemoon_core.typed import crd_manifest

    crd = crd_manifest(ConfigMirrorV1beta1)
    admin.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.request("GET", f"{MIRRORS_API}/configmirrors")
            return
        except ApiServerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class Measured:
    """Every run of one benchmark: 300 mirrors per operator, the scale runs, the floor."""

    kubemoon: Run
    kopf: Run
    cr: Run = field(default_factory=lambda: Run("controller-runtime"))
    kubemoon_scale: Run | None = None
    kopf_scale: Run | None = None
    cr_scale: Run | None = None
    floor: Floor | None = None
    cr_label: str = ""  # what the Go operator was built from


def _kubemoon_argv(config: Path, work: Workload) -> list[str]:
    return [
        sys.executable, "-m", "configmirror", "--kubeconfig", str(config),
        "--context", config.stem, "--probe-address", "127.0.0.1:0",
        "--workers", str(WORKERS), "--namespace", work.source,
    ]  # fmt: skip


def _kopf_argv(work: Workload) -> list[str]:
    argv = [sys.executable, "-m", "kopf", "run", str(KOPF_FILE), "--standalone"]
    for namespace in [work.source, *work.targets]:
        argv += ["-n", namespace]
    return argv


def measure(tmp: Path, *, scale: bool = True, cpu_only: bool = False) -> Measured:
    policy, audit_log = tmp / "audit-policy.yaml", tmp / "audit.log"
    policy.write_text(AUDIT_POLICY, encoding="utf-8")
    result = Measured(Run("KubeMoon configmirror"), Run("kopf"))
    # Batch mode: events are written by a goroutine, off the requests' path.
    extra = [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-mode=batch",
    ]
    compile_bytecode()
    # Built before the apiserver starts: the build's CPU is no operator's.
    build = build_controller_runtime(tmp)
    result.cr_label = build.label
    if build.binary is None:
        result.cr.error = build.label
    elif cpu_only:
        result.cr.error = "left out (BENCH_OPERATOR_ONLY=cpu)"
    # No controller manager: its garbage collector would watch and add load to the run.
    with ApiServer(extra_args=extra, controller_manager=False) as server:
        admin = Admin(server)
        try:
            install_crd(admin)
            admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": SYSTEM_NAMESPACE}})
            admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench-floor"}})
            # The floor first, on a server holding nothing else yet: two rounds now and
            # one after KubeMoon's run, the median of each pool (see operator_floor).
            floors = [
                measure_floor(admin, "bench-floor", source_data(0), tag=f"r{n}-")
                for n in range(FLOOR_ROUNDS - 1)
            ]
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            if (missing := kopf_missing()) is not None:
                result.kopf.error = missing
            elif cpu_only:
                result.kopf.error = missing = "left out (BENCH_OPERATOR_ONLY=cpu)"

            def kubemoon(run: Run, identity: str, work: Workload, **how: Any) -> None:
                config = tmp / f"{identity}.kubeconfig"
                run.username = service_account_kubeconfig(server, admin, identity, config)
                argv = _kubemoon_argv(config, work)
                log = tmp / f"{identity}.log"
                run_operator(admin, work, run, argv=argv, env=env, log=log, **how)
                clear_configmaps(admin, work)

            def controller_runtime(run: Run, identity: str, work: Workload, **how: Any) -> None:
                assert build.binary is not None
                config = tmp / f"{identity}.kubeconfig"
                run.username = service_account_kubeconfig(server, admin, identity, config)
                argv = _cr_argv(build.binary, config, work)
                log = tmp / f"{identity}.log"
                run_operator(admin, work, run, argv=argv, env=env, log=log, **how)
                clear_configmaps(admin, work)

            def kopf(run: Run, identity: str, work: Workload, **how: Any) -> None:
                config = tmp / f"{identity}.kubeconfig"
                run.username = service_account_kubeconfig(server, admin, identity, config)
                run_env = {**env, "KUBECONFIG": str(config)}
                log = tmp / f"{identity}.log"
                run_operator(admin, work, run, argv=_kopf_argv(work), env=run_env, log=log, **how)
                clear_configmaps(admin, work)

            work = Workload("bench-kubemoon", MIRRORS)
            kubemoon(result.kubemoon, "kubemoon", work, steady=not cpu_only)
            floors.append(measure_floor(admin, "bench-floor", source_data(0), tag="last-"))
            result.floor = median_floor(floors)
            if missing is None:
                kopf(result.kopf, "kopf", Workload("bench-kopf", MIRRORS))
            if result.cr.error is None:
                controller_runtime(result.cr, "cr", Workload("bench-cr", MIRRORS))
            if scale:
                how = {"steady": False, "timeout": SCALE_CONVERGE_TIMEOUT}
                result.kubemoon_scale = Run("KubeMoon configmirror")
                work = Workload("scale-kubemoon", SCALE_MIRRORS)
                kubemoon(result.kubemoon_scale, "kubemoon-scale", work, **how)
                if missing is None:
                    result.kopf_scale = Run("kopf")
                    kopf(
                        result.kopf_scale,
                        "kopf-scale",
                        Workload("scale-kopf", SCALE_MIRRORS),
                        **how,
                    )
                if build.binary is not None:
                    result.cr_scale = Run("controller-runtime")
                    work = Workload("scale-cr", SCALE_MIRRORS)
                    controller_runtime(result.cr_scale, "cr-scale", work, **how)
            runs = [
                result.kubemoon, result.kopf, result.cr,
                result.kubemoon_scale, result.kopf_scale, result.cr_scale,
            ]  # fmt: skip
            count_requests(audit_log, [run for run in runs if run is not None])
        finally:
            admin.close()
    return result


def rows() -> list[Row]:
    """Run both operators on one apiserver; the rows of each and the comparisons.

    ``BENCH_OPERATOR_SCALE=0`` leaves out the 3,000-mirror runs (about 10 minutes).
    ``BENCH_OPERATOR_ONLY=cpu`` runs only the floor and KubeMoon's 300-mirror convergence
    (no steady window, no reaction latency, no kopf, no scale runs: about a minute) and
    returns the rows of KubeMoon's convergence and of its CPU per converged write.
    """
    inputs = f"{MIRRORS} ConfigMirrors x {TARGETS} targets = {MIRRORS * TARGETS} copies"
    cpu_only = os.environ.get("BENCH_OPERATOR_ONLY", "") == "cpu"
    scale = os.environ.get("BENCH_OPERATOR_SCALE", "1") != "0" and not cpu_only
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        try:
            measured = measure(Path(tmp), scale=scale, cpu_only=cpu_only)
        except MissingBinariesError as exc:
            reason = str(exc).splitlines()[0]
            return [Row("operator: KubeMoon vs kopf", inputs, f"not run: {reason}", "", None)]
        except Exception as exc:  # a failed run is a failed row, not a lost table
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return [Row("operator: KubeMoon vs kopf", inputs, f"failed: {reason}", "", False)]
        if os.environ.get("BENCH_KEEP_LOGS"):
            keep = Path(os.environ["BENCH_KEEP_LOGS"])
            keep.mkdir(parents=True, exist_ok=True)
            for log in Path(tmp).glob("*.log"):
                with contextlib.suppress(OSError):
                    (keep / log.name).write_bytes(log.read_bytes())
    kubemoon, kopf = measured.kubemoon, measured.kopf
    kubemoon_inputs = f"{inputs}, --workers {WORKERS}"
    out = operator_rows(kubemoon, kubemoon_inputs)
    if cpu_only:
        return out + cost_rows(kubemoon, measured.floor)
    if kopf.converge_s is None and kopf.username == "":
        out.append(Row("operator: kopf", inputs, f"not run: {kopf.error}", "", None))
    else:
        out += operator_rows(kopf, f"{inputs}, kopf {_kopf_version()}")
    cr = measured.cr
    cr_inputs = f"{inputs}, {measured.cr_label}, MaxConcurrentReconciles {WORKERS}"
    if cr.converge_s is None and cr.username == "":
        out.append(Row("operator: controller-runtime", inputs, f"not run: {cr.error}", "", False))
    else:
        out += operator_rows(cr, cr_inputs)
    out += comparison_rows(kubemoon, kopf)
    out += cost_rows(kubemoon, measured.floor)
    out += reaction_rows(kubemoon, kopf, cr)
    if scale:
        out += scale_rows(kubemoon, measured.kubemoon_scale, measured.kopf_scale, measured.cr_scale)
    out += anchor_rows(kubemoon, cr, measured.kubemoon_scale, measured.cr_scale)
    return out


def _kopf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kopf")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_operator"))
