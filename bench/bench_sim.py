"""The simulated API server (``kubemoon_testing.sim``): its request rate, the cost of one
ConfigMirror scenario and of a Hypothesis run of them, against the real kube-apiserver.

- *Requests per second*: a realistic request mix through the real ``kubemoon_trio.Client``
  on the simulated transport (unframed, the default: the client's httpcore request object
  handed to the simulator and its answer handed back, the model behind it), inside
  ``trio.run`` on a ``MockClock(autojump_threshold=0)`` as simulations run: for each of
  ``OBJECTS`` ConfigMaps of about 600 bytes, create, get, a JSON merge patch, a replace
  (the object just read, its resourceVersion as precondition), a LIST of the namespace
  by label selector with ``limit=50`` (one page), and a delete; with a second get before
  the replace, seven requests an object.
  Wall time (``time.perf_counter``) of the whole mix, best of ``ROUNDS``; the figure is
  the server's count of requests answered (``SimulatedCluster.requests``) over it.
  The same mix on the framed transport (``framing=True``: HTTP/1.1 bytes through h11 on
  both ends, which checks the framing), rounds interleaved with the unframed ones.
- *The same mix on the real kube-apiserver* (``kubemoon_testing.ApiServer``, the cached
  binaries, ``controller_manager=False``), the same client over TLS on loopback, in the
  same process, rounds interleaved with the simulator's so a noisy neighbour slows both:
  the ratio is the simulator's rate over the real server's (a faithful simulator that
  answers slower than the real server would make simulations pointless).
- *One ConfigMirror scenario*: ``mirror_run("single", seed, 50, 0)`` of
  ``tests/property/test_sim_configmirror.py`` (imported, not copied): the real
  ``ConfigMirrorOperator`` as its command line builds it, three mirrors copied into
  three target namespaces, 50 fault steps drawn by ``FaultSchedule.generate`` over 40
  virtual seconds (pauses of 20 to 40 s, dropped and expired watches, compactions,
  injected 409/429/500/503), run until converged and quiet, then every invariant of that
  suite checked (``check_run``). Wall time per scenario, median over ``SCENARIOS``
  seeds.
- *A Hypothesis run*: ``@given(seed=...)`` with ``max_examples=EXAMPLES``,
  ``derandomize=True``, no database, each example one such scenario with its checks:
  total wall time.

No row asserts a time: targets are reported met or not. A row whose target is not met
ends with where the time goes, from the profiles in bench/README.md ("The simulator
benchmark"), which say how they were taken.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _table import Row

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "property"))

OBJECTS = 200
ROUNDS = 5
SCENARIOS = 15
EXAMPLES = 200
FAULTS = 50
RATE_TARGET = 5_000.0
SCENARIO_TARGET = 0.100
RUN_TARGET = 30.0

# Where the time goes (cProfile, bench/README.md "The simulator benchmark"), for rows whose
# target is not met.
RATE_PROFILE = (
    "profile (unframed transport): the client's own code above its pool (request "
    "building, tracing, deadlines, body reading, decoding) and trio about 57 %, the "
    "simulator's answers 28 % (the model's copies, JSON, validation), the transport 15 %; "
    "the rate tracks the machine's load (client-bound: a server answering instantly "
    "gives about 1.5x)"
)
SCENARIO_PROFILE = (
    "profile (unframed transport): the operator's real runtime and client on trio (trio "
    "37 %, kubemoon_core 9 %, kubemoon_trio 7 %, json 6 %); the simulator's answers 10 % "
    "(SimulatedCluster.answer, cumulative), its transport 16 % with them"
)


def configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"bench": "sim"}},
        "data": {f"key-{j}": f"value {j} " + "x" * 100 for j in range(5)},
    }


async def request_mix(client: Any, namespace: str, tag: str) -> int:
    """The mix on ``client`` (a ``kubemoon_trio.Client``): six requests per object."""
    from kubemoon_core import GroupVersionResource, ListOptions, PatchType

    cms = GroupVersionResource("", "v1", "configmaps")
    selected = ListOptions(label_selector="bench=sim", limit=50)
    sent = 0
    for i in range(OBJECTS):
        name = f"{tag}-{i:04d}"
        await client.create(cms, configmap(name), namespace=namespace)
        current = await client.get(cms, name, namespace=namespace)
        await client.patch(
            cms,
            name,
            {"data": {"key-0": f"patched {i}"}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        current = await client.get(cms, name, namespace=namespace)
        current["data"]["key-1"] = f"replaced {i}"
        await client.replace(cms, current, namespace=namespace)
        async for _ in client.list(cms, namespace=namespace, options=selected):
            pass
        await client.delete(cms, name, namespace=namespace)
        sent += 7
    return sent


def _simulated_mix(tag: str, framing: bool = False) -> tuple[float, int]:
    """Wall seconds and requests answered for one mix on a fresh simulated cluster (on
    the framed transport with ``framing``)."""
    import trio
    import trio.testing

    from kubemoon_testing.sim import SimulatedCluster

    async def main() -> tuple[float, int]:
        cluster = SimulatedCluster(seed=1)
        async with cluster.client(identity="bench", framing=framing) as client:
            start = time.perf_counter()
            sent = await request_mix(client, "default", tag)
            elapsed = time.perf_counter() - start
        assert cluster.requests == sent, (cluster.requests, sent)
        cluster.check()
        return elapsed, sent

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _rates(server: Any | None) -> tuple[list[float], list[float], list[float], int]:
    """Interleaved rounds: the simulator's req/s, unframed and framed, and (if
    ``server``) the real server's."""
    import trio

    sim: list[float] = []
    framed: list[float] = []
    real: list[float] = []
    sent = 0
    run_real: Callable[[str], Awaitable[tuple[float, int]]] | None = None
    if server is not None:
        import kubemoon_trio
        from kubemoon_io import load_kubeconfig
        from kubemoon_io import ssl_context as make_ssl_context

        namespace = server.create_namespace(prefix="bench-sim")
        config = load_kubeconfig(str(server.kubeconfig_path))
        ctx = make_ssl_context(config)

        async def real_mix(tag: str) -> tuple[float, int]:
            async with kubemoon_trio.Client(config, ssl_context=ctx) as client:
                await request_mix(client, namespace, f"warm-{tag}")  # connections warm
                start = time.perf_counter()
                count = await request_mix(client, namespace, tag)
                return time.perf_counter() - start, count

        run_real = real_mix
    _simulated_mix("warm")
    _simulated_mix("warm", framing=True)
    for round_ in range(ROUNDS):
        elapsed, sent = _simulated_mix(f"s{round_}")
        sim.append(sent / elapsed)
        elapsed, count = _simulated_mix(f"f{round_}", framing=True)
        framed.append(count / elapsed)
        if run_real is not None:
            elapsed, count = trio.run(run_real, f"r{round_}")
            real.append(count / elapsed)
    return sim, framed, real, sent


def _scenario(seed: int) -> tuple[float, list[str]]:
    from test_sim_configmirror import check_run, mirror_run

    start = time.perf_counter()
    run = mirror_run("single", seed, FAULTS, 0)
    failures = check_run(run, "single")
    return time.perf_counter() - start, failures


def _hypothesis_run() -> tuple[float, int, list[str]]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    failed: list[str] = []
    examples = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(seed=st.integers(0, 2**16))
    def run(seed: int) -> None:
        nonlocal examples
        examples += 1
        _, failures = _scenario(seed)
        if failures:  # reported, not raised: a failure would stop the run to shrink it
            failed.append(f"seed {seed}: {failures[0]}")

    start = time.perf_counter()
    run()
    return time.perf_counter() - start, examples, failed


def rows() -> list[Row]:
    """Measure and return the table rows."""
    from kubemoon_testing import ApiServer, MissingBinariesError

    out: list[Row] = []
    load_start = os.getloadavg()
    server = None
    why = ""
    try:
        server = ApiServer(controller_manager=False).start()
    except MissingBinariesError as exc:
        why = str(exc)
    try:
        sim, framed, real, sent = _rates(server)
    finally:
        if server is not None:
            server.stop()
    best = max(sim)
    mix = (
        f"{OBJECTS} ConfigMaps of ~0.6 KB x (create, get, merge patch, get, replace, "
        f"LIST by label limit=50, delete): {sent:,} requests, real kubemoon_trio.Client"
    )
    out.append(
        Row(
            "simulated API requests per second of wall time",
            f"{mix} on the simulated transport, MockClock; best of {ROUNDS}",
            f"{best:,.0f} req/s (median {statistics.median(sim):,.0f}; "
            f"{1e6 / best:.0f} µs per request)"
            + ("" if best >= RATE_TARGET else f"; {RATE_PROFILE}"),
            f"≥ {RATE_TARGET:,.0f} req/s",
            best >= RATE_TARGET,
        )
    )
    out.append(
        Row(
            "the same mix on the framed simulated transport",
            f"{mix} as HTTP/1.1 bytes through h11 on both ends (framing=True), MockClock; "
            f"best of {ROUNDS}, rounds interleaved with the row above",
            f"{max(framed):,.0f} req/s (median {statistics.median(framed):,.0f}); the "
            f"unframed transport {statistics.median(sim) / statistics.median(framed):.1f}x "
            "its rate (medians)",
        )
    )
    if real:
        ratios = [s / r for s, r in zip(sim, real, strict=True)]
        out.append(
            Row(
                "the same mix on the real kube-apiserver",
                f"{mix} over TLS on loopback, kube-apiserver v1.37.2 + etcd; best of {ROUNDS}",
                f"{max(real):,.0f} req/s (median {statistics.median(real):,.0f})",
            )
        )
        out.append(
            Row(
                "simulator vs real kube-apiserver, same mix",
                f"{ROUNDS} interleaved rounds, same process and client",
                f"{statistics.median(ratios):.2f}x the real server's rate (median of "
                f"per-round ratios)",
                "≥ 1x (faster than the real server)",
                statistics.median(ratios) >= 1.0,
            )
        )
    else:
        out.append(
            Row(
                "simulator vs real kube-apiserver, same mix",
                mix,
                f"not measured: {why}",
                "≥ 1x",
                False,
            )
        )
    scenario_rows(out)
    load_end = os.getloadavg()
    out.append(
        Row(
            "machine load during this module's run",
            "load average (1, 5, 15 min) at its start and end; the machine is shared",
            f"{', '.join(f'{x:.2f}' for x in load_start)} -> "
            f"{', '.join(f'{x:.2f}' for x in load_end)}",
        )
    )
    return out


def scenario_rows(out: list[Row]) -> None:
    _scenario(0)  # imports and first-call costs out of the figures
    times: list[float] = []
    failing = []
    for seed in range(1, SCENARIOS + 1):
        elapsed, failures = _scenario(seed)
        times.append(elapsed)
        if failures:
            failing.append(seed)
    median = statistics.median(times)
    note = f"; failing seeds {failing}" if failing else "; every run's invariants held"
    out.append(
        Row(
            "ConfigMirror scenario on the simulator, wall time",
            f"3 mirrors x 3 targets, 1 replica, {FAULTS} fault steps "
            f"(FaultSchedule.generate over 40 virtual s), run to convergence + quiet, "
            f"checks included; {SCENARIOS} seeds",
            f"{1e3 * median:.0f} ms median (min {1e3 * min(times):.0f}, max "
            f"{1e3 * max(times):.0f}){note}"
            + ("" if median <= SCENARIO_TARGET else f"; {SCENARIO_PROFILE}"),
            f"≤ {1e3 * SCENARIO_TARGET:.0f} ms",
            median <= SCENARIO_TARGET,
        )
    )
    total, examples, failed = _hypothesis_run()
    note = f"; failed: {failed[:3]}" if failed else "; no example failed"
    out.append(
        Row(
            "Hypothesis run of ConfigMirror scenarios, total wall time",
            f"@given(seed), {examples} examples, derandomize=True, each the scenario above",
            f"{total:.1f} s ({1e3 * total / max(examples, 1):.0f} ms per example){note}"
            + ("" if total <= RUN_TARGET else "; each example is the scenario above"),
            f"≤ {RUN_TARGET:.0f} s",
            total <= RUN_TARGET,
        )
    )


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_sim alone"))
