"""Profile the ConfigMirror operator's convergence (a tool, not a benchmark row).

``python bench/profile_operator.py [OUT.prof]`` runs the KubeMoon half of
``bench_operator.py`` (same apiserver setup, the same 300 mirrors x 3 targets, the same
command line) with the operator started under ``cProfile`` timed by ``time.process_time``
(CPU, not wall time: an idle wait costs nothing), stops it once it has converged and the
copies are verified, and prints the top functions by own and cumulative CPU time. The
profile includes start-up and imports; profiling slows the operator, so absolute times are
only good for ranking. Writes go through ``bench_operator``'s service-account kubeconfig.

``PROFILE_WITH=py-spy`` samples the operator with py-spy instead (``pip install py-spy``;
1000 samples/s, only while the GIL is held, so an idle wait costs nothing, and far less
distortion than cProfile's per-call overhead): OUT is then py-spy's raw (collapsed
stacks) output, and the summary printed is the share of samples by own frame and by
module of the frame.
"""

from __future__ import annotations

import collections
import os
import pstats
import sys
import tempfile
from pathlib import Path

import bench_operator as op

WRAPPER = """\
import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = ["configmirror", *sys.argv[2:]]
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    runpy.run_module("configmirror", run_name="__main__", alter_sys=True)
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""

SPY_WRAPPER = """\
import os, runpy, signal, subprocess, sys, time
out = sys.argv[1]
sys.argv = ["configmirror", *sys.argv[2:]]
spy = subprocess.Popen(
    [sys.executable.rsplit("/", 1)[0] + "/py-spy", "record", "-f", "raw", "-r", "1000",
     "--nonblocking", "--gil", "-o", out, "--pid", str(os.getpid())],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
time.sleep(0.5)  # py-spy attaches
try:
    runpy.run_module("configmirror", run_name="__main__", alter_sys=True)
finally:
    spy.send_signal(signal.SIGINT)
    spy.wait()
"""


def summarize_spy(path: Path) -> None:
    """Share of samples by own (innermost) frame, by module, and by runtime step."""
    own: collections.Counter[str] = collections.Counter()
    modules: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] += n
        where = leaf[leaf.find("(") + 1 : leaf.rfind(":")]
        modules[where.split("site-packages/")[-1].split("python3.11/")[-1]] += n
    print(f"{total} samples")
    for title, counter in (("own frame", own), ("module", modules)):
        print(f"-- by {title}")
        for key, n in counter.most_common(40):
            print(f"{n / total:6.1%} {n:6d}  {key}")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "configmirror.prof").resolve()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wrapper = tmp / "profile_wrapper.py"
        spy = os.environ.get("PROFILE_WITH") == "py-spy"
        wrapper.write_text(SPY_WRAPPER if spy else WRAPPER, encoding="utf-8")
        run = op.Run("KubeMoon configmirror (profiled)")
        op.compile_bytecode()
        with op.ApiServer(controller_manager=False) as server:
            admin = op.Admin(server)
            try:
                op.install_crd(admin)
                admin.request(
                    "POST", "/api/v1/namespaces", {"metadata": {"name": op.SYSTEM_NAMESPACE}}
                )
                env = {k: v for k, v in op.os.environ.items() if k != "KUBECONFIG"}
                work = op.Workload("prof-kubemoon")
                config = tmp / "kubemoon.kubeconfig"
                run.username = op.service_account_kubeconfig(server, admin, "kubemoon", config)
                argv = [
                    sys.executable, str(wrapper), str(out), "--kubeconfig", str(config),
                    "--context", "kubemoon", "--probe-address", "127.0.0.1:0",
                    "--workers", str(op.WORKERS), "--namespace", work.source,
                ]  # fmt: skip
                # Convergence only: no steady window, no reaction latency.
                op.run_operator(
                    admin, work, run, argv=argv, env=env, log=tmp / "operator.log", steady=False
                )
            finally:
                admin.close()
                if keep := op.os.environ.get("BENCH_KEEP_LOGS"):
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    (Path(keep) / "operator.log").write_bytes((tmp / "operator.log").read_bytes())
        print(
            f"converged in {run.converge_s} s, CPU {run.cpu_converge} s, copies ok "
            f"{run.copies_ok}, error {run.error}, exit {run.exit_code}"
        )
    if spy:
        summarize_spy(out)
        return 0
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
