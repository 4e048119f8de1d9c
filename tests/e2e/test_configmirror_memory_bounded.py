"""Regression: one tenant's own ConfigMaps (no mirror names them) must not OOM the operator.

The operator used to cache every ConfigMap of the cluster, data included, whether or not a
ConfigMirror names it as its source (the sharded variant every ConfigMap that is not a
copy, cluster-wide, on every replica). A tenant allowed to create ConfigMaps in its own
namespace (every namespace admin) creates ``COUNT`` ConfigMaps of about 1 MB there. The
deployed operator's memory limit is 256 Mi (deploy/base/deployment.yaml): past it the pod
is OOM-killed, restarts, relists the same objects and is killed again, so no tenant's
mirror is served (measured before the fix: peak RSS 532 MiB).

Expected (DESIGN.md: "whatever the apiserver stores (any depth, any size, any number)
either decodes or is kept out of the cache"; "each is bounded in size"): what the operator
keeps of a ConfigMap that is nobody's source does not grow with that ConfigMap's size, so
the operator stays inside its deployed limit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

COUNT = 200
SIZE = 1_000_000  # bytes of data per ConfigMap, under the apiserver's 1 MiB object limit
LIMIT_MIB = 256  # deploy/base/deployment.yaml: resources.limits.memory


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_a_tenants_big_configmaps_do_not_blow_the_operators_memory(
    configmirror_api: ApiServer, client: Client, tmp_path: Path
) -> None:
    home = configmirror_api.create_namespace(prefix="mem-home")
    target = configmirror_api.create_namespace(prefix="mem-target")
    hog = configmirror_api.create_namespace(prefix="mem-hog")
    accept_mirrors(configmirror_api, target)
    source: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"a": "1"},
    }
    await client.create(CONFIGMAPS, source, namespace=home)
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": [target]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=home)
    # The other tenant fills its own namespace; nothing refers to these ConfigMaps.
    for i in range(COUNT):
        big = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"big-{i}"},
            "data": {"blob": chr(ord("a") + i % 26) * SIZE},
        }
        await client.create(CONFIGMAPS, big, namespace=hog)

    log = (tmp_path / "operator.log").open("w")
    argv = [
        sys.executable, "-m", "configmirror",
        "--kubeconfig", str(configmirror_api.kubeconfig_path),
        "--namespace", home,
        "--probe-address", "127.0.0.1:0",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stderr=log, stdout=log)
    try:

        async def copied() -> bool:
            try:
                await client.get(CONFIGMAPS, "settings", namespace=target)
            except NotFound:
                return False
            return True

        await eventually(copied, timeout=120, what="the copy made after the caches synced")
        await trio.sleep(2)
        peak = _peak_rss_mib(process.pid)
    finally:
        process.kill()
        process.wait()
        log.close()
        for i in range(COUNT):
            try:
                await client.delete(CONFIGMAPS, f"big-{i}", namespace=hog)
            except NotFound:
                pass
    assert peak < LIMIT_MIB, (
        f"peak RSS {peak:.0f} MiB with {COUNT} ConfigMaps of {SIZE} bytes in another "
        f"tenant's namespace (nobody's source): past the deployed {LIMIT_MIB} Mi limit"
    )
