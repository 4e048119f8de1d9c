"""Regression (attacker's pass, round four): a tenant's heavily labelled ConfigMaps blew
the operator's memory, metadata-only caches notwithstanding.

Since issue 31 every ConfigMap is cached as metadata only. That bounded ``data``, not the
metadata itself: labels have no total size limit but the object's (etcd's 1.5 MiB), so a
ConfigMap can carry 14,000 labels of 63-character values (about 1.1 MB of labels) and
still be stored. The metadata-only informer kept every label, about 3 MiB of Python
objects each, and decoded whole LIST pages of them. A tenant allowed to create ConfigMaps
in its own namespace (every namespace admin) creates ``COUNT`` of them; the deployed
limit is 256 Mi (deploy/base/deployment.yaml), past which the pod is OOM-killed,
restarts, relists the same objects and is killed again. Measured on kube-apiserver
1.37.2 before the fix: 40 ConfigMaps, peak RSS 265 MiB (173 MiB kept after the caches
synced); 60, 376 MiB.

Now a metadata-only cache keeps out (with an ERROR naming it) an object whose labels
hold more than ``MAX_CACHED_LABEL_CHARS`` characters, and a LIST page of several objects
is held to ``PAGE_BODY_LIMIT`` bytes (a larger one is asked for again in halves), so
neither what is kept nor what is decoded at once grows with a tenant's metadata.
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

COUNT = 60
LABELS = 14_000  # of 63-character values: about 1.1 MB per ConfigMap, under etcd's limit
LIMIT_MIB = 256  # deploy/base/deployment.yaml: resources.limits.memory


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_a_tenants_heavily_labelled_configmaps_do_not_blow_the_operators_memory(
    configmirror_api: ApiServer, client: Client, tmp_path: Path
) -> None:
    home = configmirror_api.create_namespace(prefix="bloat-home")
    target = configmirror_api.create_namespace(prefix="bloat-target")
    hog = configmirror_api.create_namespace(prefix="bloat-hog")
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
    labels = {f"k{j:05d}": "v" * 63 for j in range(LABELS)}
    for i in range(COUNT):
        big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i}"}}
        big["metadata"]["labels"] = labels
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
            assert process.poll() is None, f"the operator exited ({process.returncode})"
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
        f"peak RSS {peak:.0f} MiB with {COUNT} ConfigMaps of {LABELS} labels in another "
        f"tenant's namespace (nobody's source): past the deployed {LIMIT_MIB} Mi limit"
    )
