"""An exec credential plugin that starts hanging while a Manager leads, on the real
kube-apiserver and every adapter: the Lease cannot be renewed, and the failure is loud
(``LeadershipLost`` out of ``run``, naming the Lease) and bounded -- it does not wait for
the plugin's own (longer) timeout."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from adapter_driver import ADAPTERS, Adapter, start_background

from kubemoon_core.kubeconfig import ClientConfig, ExecConfig
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

PLUGIN = """
import datetime, json, pathlib, sys, time
runs = pathlib.Path(sys.argv[1])
count = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(count + 1))
if count:
    time.sleep(120)  # from the second run on: hangs
expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": sys.argv[2], "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
"""


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


async def test_a_plugin_that_starts_hanging_loses_the_lease_loudly_and_soon(
    adapter: Adapter,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    nursery: trio.Nursery,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    km = adapter.module
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    runs = tmp_path / "runs"
    config = ClientConfig(
        server=kube_apiserver.url,
        ca_file=str(kube_apiserver.ca_file),
        exec=ExecConfig(
            api_version="client.authentication.k8s.io/v1",
            command=sys.executable,
            args=(str(script), str(runs), kube_apiserver.admin_token),
            interactive_mode="Never",
            source=str(tmp_path / "kubeconfig"),
        ),
    )
    client = km.Client(config, exec_timeout=30.0)
    election = km.LeaderElectionConfig(
        "exec-lease",
        kube_namespace,
        identity="exec-leader",
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=0.5,
    )
    manager = km.Manager(client, leader_election=election)
    failures: list[BaseException] = []

    def run_blocking() -> None:
        try:
            manager.run()
        except Exception as exc:
            failures.append(exc)

    async def run_async() -> None:
        try:
            await manager.run()
        except Exception as exc:
            failures.append(exc)

    started = time.monotonic()
    run = await start_background(
        adapter, nursery, run_blocking if adapter.name == "sync" else run_async
    )
    try:
        await run.wait(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        await adapter.close(client)
    # Loud: run() ends with LeadershipLost naming the Lease, and a WARNING names the
    # plugin that held the renewal up.
    assert [type(f).__name__ for f in failures] == ["LeadershipLost"], failures
    assert f"{kube_namespace}/exec-lease" in str(failures[0])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"exec credential plugin {sys.executable} was still running" in w for w in warnings
    ), warnings
    # Bounded by the renew deadline, not by the plugin's 30 s timeout: before the fix the
    # blocking adapter kept leading on an expired Lease until the plugin was killed.
    assert elapsed < 20
    assert int(runs.read_text()) >= 2  # the second run hung
