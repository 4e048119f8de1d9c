"""The version tier: the integration and end-to-end tiers on each older supported minor.

Usage: ``python scripts/test_versions.py [--all] [1.35 1.36 ...]`` (``make test-versions``,
part of ``make test``). The newest release runs the full suite in ``make test`` itself;
this runs, for each other supported release (``kubemoon_testing.SUPPORTED_RELEASES``)
whose binaries ``kubemoon-testenv build --version ...`` has cached, ``pytest
--kubernetes-version <release>`` on the tiers below, and prints the pass/skip/fail
counts and the time of each. A release whose binaries are not built is skipped with a
message saying how to build them; the exit status is non-zero when any run failed.

By default the older minors run a subset (:data:`SUBSET`): every integration test, and
the end-to-end tests of the library against the server, leaving out the end-to-end
scenarios that exercise ConfigMirror's own logic at length and the simulator's
differential test (:data:`NEWEST_ONLY`: the same code paths on every version, or a model
of the newest release only). ``--all`` runs both tiers in full. docs/support.rst says
why and what it costs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("tests/integration", "tests/e2e")
#: Modules run on the newest release only (unless --all): long ConfigMirror end-to-end
#: scenarios whose server-facing calls the integration tier covers on every version, and
#: the simulator's differential test (it models the newest release and skips on the others).
NEWEST_ONLY = (
    "tests/integration/test_sim_vs_apiserver.py",
    "tests/e2e/test_configmirror_resilience.py",
    "tests/e2e/test_sharded_configmirror.py",
    "tests/e2e/test_configmirror_sharded.py",
    "tests/e2e/test_demo_waits.py",
)
SUBSET = "integration and e2e, without " + ", ".join(Path(p).name for p in NEWEST_ONLY)
_COUNT = re.compile(r"(\d+) (passed|skipped|failed|errors?|xfailed|xpassed|deselected)")


def _counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line."""
    lines = [line for line in output.splitlines() if " in " in line and _COUNT.search(line)]
    if not lines:
        return {}
    return {
        kind.rstrip("s") if kind.startswith("error") else kind: int(n)
        for n, kind in _COUNT.findall(lines[-1])
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minors", nargs="*", help="only these minors (1.35 ...)")
    parser.add_argument("--all", action="store_true", help="the full tiers, not the subset")
    parser.add_argument(
        "--pytest", default=str(ROOT / ".venv" / "bin" / "pytest"), help="pytest to run"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from kubemoon_testing import SUPPORTED_RELEASES, default_binary_dir  # noqa: PLC0415

    newest = SUPPORTED_RELEASES[-1]
    releases = [
        r
        for r in SUPPORTED_RELEASES
        if (r.minor_version in args.minors if args.minors else r is not newest)
    ]
    results: list[str] = []
    failed = False
    for release in releases:
        binaries = default_binary_dir(release.version)
        needed = ("kube-apiserver", "etcd", "kube-controller-manager", "kubectl")
        if not all(os.access(binaries / name, os.X_OK) for name in needed):
            line = (
                f"{release.version}: skipped, binaries not built in {binaries} "
                f"(`kubemoon-testenv build --version {release.version}` or `make testenv`)"
            )
            print(f"== {line}", flush=True)
            results.append(line)
            continue
        argv = [args.pytest, "-q", "-p", "no:cacheprovider", "-rfEs"]
        argv += ["--kubernetes-version", release.version, *TIERS]
        if not args.all:
            argv += [f"--ignore={path}" for path in NEWEST_ONLY]
        what = "integration and e2e" if args.all else SUBSET
        print(f"== {release.version}: {what}", flush=True)
        start = time.monotonic()
        # Streamed as it comes (a run takes minutes) and kept for the summary line.
        with subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            output = []
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                output.append(line)
            code = proc.wait()
        took = time.monotonic() - start
        counts = _counts("".join(output))
        shown = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "no summary"
        line = f"{release.version}: {shown} in {took / 60:.1f} min"
        print(f"== {line}", flush=True)
        results.append(line)
        failed = failed or code != 0
    print("== version tier: " + ("; ".join(results) or "no older release supported"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
