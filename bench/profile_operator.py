"""Profile the ConfigMirror operator's convergence (a tool, not a benchmark row).

``python bench/profile_operator.py [OUT.prof]`` runs the KubeMoon half of
``bench_operator.py`` (same apiserver setup, the same 300 mirrors x 3 targets, the same
command line) with the operator started under ``cProfile`` timed by ``time.process_time``
(CPU, not wall time: an idle wait costs nothing), stops it once it has converged and the
copies are verified, and prints the top functions by own and cumulative CPU time. The
profile includes start-up and imports; profiling slows the operator, so absolute times are
only good for ranking. Writes go through ``bench_operator``'s service-account kubeconfig.
"""

from __future__ import annotations

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


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "configmirror.prof").resolve()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wrapper = tmp / "profile_wrapper.py"
        wrapper.write_text(WRAPPER, encoding="utf-8")
        run = op.Run("KubeMoon configmirror (profiled)")
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
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
