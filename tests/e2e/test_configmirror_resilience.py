"""ConfigMirror in the long run, against the real apiserver: leader election, an apiserver
restart, a forced 410, the in-cluster configuration, the program's probes and SIGTERM."""

from __future__ import annotations

import base64
import functools
import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import StartOperator, eventually
from test_configmirror import Scenario, configmap, mirror

from configmirror import CONFIGMAPS, CONFIGMIRRORS, ConfigMirrorOperator, OperatorOptions
from kubemoon_core import LEASES
from kubemoon_core.lowlevel import RelistReason
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, LeaderElectionConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def scenario(configmirror_api: ApiServer, client: Client) -> Scenario:
    return Scenario(configmirror_api, client)


async def update_source(client: Client, namespace: str, data: dict[str, str]) -> None:
    source = await client.get(CONFIGMAPS, "settings", namespace=namespace)
    source["data"] = data
    await client.replace(CONFIGMAPS, source, namespace=namespace)


async def test_only_the_leader_reconciles_and_a_crash_hands_over(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario

    def election(identity: str) -> LeaderElectionConfig:
        return LeaderElectionConfig(
            "kubemoon-configmirror",
            s.home,
            identity=identity,
            lease_duration=3.0,
            renew_deadline=2.0,
            retry_period=0.5,
        )

    first = await start_operator(namespaces=(s.home,), leader_election=election("replica-1"))
    second = await start_operator(namespaces=(s.home,), leader_election=election("replica-2"))

    async def one_leader() -> bool:
        return first.reconciling != second.reconciling

    await eventually(one_leader, what="one leader")
    leader, follower = (first, second) if first.reconciling else (second, first)
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await eventually(lambda: s.copies_are({"a": "1"}), what="the leader's work")
    assert leader.operator.writes > 0
    assert follower.operator.writes == 0
    assert not follower.reconciling

    leader.crash()  # no release: the follower must wait for the lease to expire
    started = trio.current_time()

    async def follower_leads() -> bool:
        return follower.reconciling

    await eventually(follower_leads, timeout=15, what="hand-over")
    # Within the lease duration plus the retry period (with jitter) of the crash.
    assert trio.current_time() - started < 3.0 + 0.5 * 2.2 + 1.0
    await update_source(client, s.home, {"a": "2"})
    await eventually(lambda: s.copies_are({"a": "2"}), what="the new leader's work")
    assert follower.operator.writes > 0


async def test_survives_an_apiserver_restart(
    configmirror_api: ApiServer, scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    running = await start_operator(namespaces=(s.home,), stall_margin=5.0)
    await eventually(lambda: s.copies_are({"a": "1"}), what="first sync")
    await trio.to_thread.run_sync(configmirror_api.restart_apiserver)
    await update_source(client, s.home, {"a": "after-restart"})
    await eventually(lambda: s.copies_are({"a": "after-restart"}), timeout=40, what="convergence")
    stats = running.operator.configmaps.reflector.stats
    assert stats.watch_restarts + stats.relists + stats.failures >= 1


def _etcd_put(server: ApiServer, key: bytes) -> None:
    payload = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(b"x").decode()}
    request = urllib.request.Request(
        f"{server.etcd_url}/v3/kv/put", data=json.dumps(payload).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


async def test_a_forced_410_relists_and_converges(
    configmirror_api: ApiServer, scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    running = await start_operator(namespaces=(s.home,), stall_margin=5.0)
    await eventually(lambda: s.copies_are({"a": "1"}), what="first sync")
    # Move etcd past every resourceVersion the informers hold and compact: after the
    # restart their watches resume from a compacted revision, and the server says 410.
    for i in range(3):
        await trio.to_thread.run_sync(_etcd_put, configmirror_api, f"/kubemoon-test/{i}".encode())
    await trio.to_thread.run_sync(configmirror_api.compact)
    await trio.to_thread.run_sync(configmirror_api.restart_apiserver)
    await update_source(client, s.home, {"a": "after-410"})
    await eventually(lambda: s.copies_are({"a": "after-410"}), timeout=40, what="convergence")
    reasons = running.operator.configmaps.reflector.stats.relist_reasons
    assert reasons.get(RelistReason.WATCH_EXPIRED, 0) >= 1, reasons


async def test_in_cluster_configuration(
    configmirror_api: ApiServer,
    scenario: Scenario,
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
) -> None:
    s = scenario
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(configmirror_api.admin_token)
    (account / "ca.crt").write_text(configmirror_api.ca_pem)
    (account / "namespace").write_text(s.home)
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(configmirror_api.port),
    }
    from kubemoon_io import load_in_cluster_config

    config = load_in_cluster_config(base_dir=str(account), env=env)
    assert config.namespace == s.home
    async with Client(config) as in_cluster:
        await client.create(CONFIGMAPS, configmap("settings", {"a": "pod"}), namespace=s.home)
        await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
        operator = ConfigMirrorOperator(in_cluster, OperatorOptions(namespaces=(s.home,)))
        scope = trio.CancelScope()
        done = trio.Event()

        async def run() -> None:
            with scope:
                await operator.manager.run()
            done.set()

        nursery.start_soon(run)
        await eventually(lambda: s.copies_are({"a": "pod"}), what="in-cluster sync")
        scope.cancel()
        await done.wait()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def test_the_program_serves_probes_and_stops_cleanly_on_sigterm(
    configmirror_api: ApiServer, scenario: Scenario, client: Client
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    argv = [
        sys.executable, "-m", "configmirror",
        "--kubeconfig", str(configmirror_api.kubeconfig_path),
        "--namespace", s.home,
        "--probe-address", "127.0.0.1:0",
        "--leader-elect", "--lease-namespace", s.home,
        "--log-format", "json",
    ]  # fmt: skip
    # The runtime reports the first GET of a missing Lease (404) as a readiness problem
    # that never clears (see test_readyz_is_ok_when_the_lease_did_not_exist): start from
    # an existing, unheld Lease so /readyz is checked for everything else.
    await client.create(
        LEASES,
        {"metadata": {"name": "kubemoon-configmirror"}, "spec": {}},
        namespace=s.home,
    )
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    lines: list[dict[str, Any]] = []
    port: list[int] = []

    def read_logs() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            entry = json.loads(line)
            lines.append(entry)
            if entry["msg"].startswith("probes on"):
                port.append(int(entry["msg"].rsplit(":", 1)[1]))

    try:
        async with trio.open_nursery() as nursery:
            # Abandoned on failure, so the process is killed below and the thread ends.
            nursery.start_soon(
                functools.partial(trio.to_thread.run_sync, read_logs, abandon_on_cancel=True)
            )
            await eventually(lambda: trio.to_thread.run_sync(lambda: bool(port)), what="probe port")
            base = f"http://127.0.0.1:{port[0]}"
            await eventually(lambda: s.copies_are({"a": "1"}), what="sync by the program")
            assert await trio.to_thread.run_sync(_get, f"{base}/healthz") == (200, "ok\n")
            assert await trio.to_thread.run_sync(_get, f"{base}/readyz") == (200, "ok\n")
            code, metrics = await trio.to_thread.run_sync(_get, f"{base}/metrics")
            assert code == 200
            success = (
                'controller_runtime_reconcile_total{controller="configmirror",result="success"}'
            )
            assert success in metrics
            lease = f"{s.home}/kubemoon-configmirror"
            assert f'leader_election_master_status{{name="{lease}"}} 1.0' in metrics
            assert 'kubemoon_reflector_relists_total{name="namespaces' in metrics
            assert (await trio.to_thread.run_sync(_get, f"{base}/nothing"))[0] == 404
            process.send_signal(signal.SIGTERM)
            assert await trio.to_thread.run_sync(process.wait, 30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()
    reconcile_logs = [e for e in lines if "reconcile_id" in e]
    assert reconcile_logs, "no structured log line carried a reconcile id"
    assert all("key" in e for e in reconcile_logs)
    assert any(e["msg"].startswith("stopping") for e in lines)
    # The lease was released: no holder any more.
    lease = await client.get(LEASES, "kubemoon-configmirror", namespace=s.home)
    assert not lease["spec"].get("holderIdentity")


async def test_readyz_is_ok_when_the_lease_did_not_exist(
    scenario: Scenario, start_operator: StartOperator
) -> None:
    s = scenario
    election = LeaderElectionConfig("kubemoon-configmirror", s.home, identity="only")
    running = await start_operator(namespaces=(s.home,), leader_election=election)
    manager = running.operator.manager
    with trio.fail_after(20):
        await manager.wait_leading()
        await manager.wait_synced()
    await trio.sleep(0.5)
    assert manager.readiness_problems() == []
