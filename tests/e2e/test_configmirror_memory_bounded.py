"""Regression: one tenant's own ConfigMaps (no mirror names them) must not OOM the operator,
whether they are big in ``data`` or in their labels.

The deployed operator's memory limit is 256 Mi (deploy/base/deployment.yaml): past it the
pod is OOM-killed, restarts, relists the same objects and is killed again, so no tenant's
mirror is served. A tenant allowed to create ConfigMaps in its own namespace (every
namespace admin) fills it; nothing refers to those ConfigMaps.

- **Data** (:func:`test_a_tenants_big_configmaps_do_not_blow_the_operators_memory`): the
  operator used to cache every ConfigMap of the cluster, data included (the sharded variant
  every ConfigMap that is not a copy, cluster-wide, on every replica). 200 ConfigMaps of
  about 1 MB: peak RSS 532 MiB before the fix.
- **Labels** (:func:`test_a_tenants_heavily_labelled_configmaps_do_not_blow_the_operators_memory`,
  the attacker's pass of round four): metadata-only caches bounded ``data``, not the
  metadata itself. Labels have no total size limit but the object's (etcd's 1.5 MiB), so a
  ConfigMap can carry 14,000 labels of 63-character values (about 1.1 MB) and still be
  stored; the metadata-only informer kept every label (about 3 MiB of Python objects each)
  and decoded whole LIST pages of them: 60 such ConfigMaps, peak 376 MiB (40: 265 MiB,
  173 MiB kept after the caches synced). Now a metadata-only cache keeps out an object
  whose labels hold more than ``MAX_CACHED_LABEL_CHARS`` characters, and a LIST page of
  several objects is held to ``PAGE_BODY_LIMIT`` bytes (a heavier one is asked for again in
  halves): 104 MiB.

Expected (DESIGN.md: "whatever the apiserver stores (any depth, any size, any number)
either decodes or is kept out of the cache"; "each is bounded in size"): what the operator
keeps of, and decodes at once from, a ConfigMap that is nobody's source does not grow with
that ConfigMap, so the operator stays inside its deployed limit.
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

LIMIT_MIB = 256  # deploy/base/deployment.yaml: resources.limits.memory
COUNT = 200
SIZE = 1_000_000  # bytes of data per ConfigMap, under the apiserver's 1 MiB object limit
LABELLED = 60
LABELS = 14_000  # of 63-character values: about 1.1 MB per ConfigMap, under etcd's limit


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def _peak_beside(
    server: ApiServer, client: Client, tmp_path: Path, hogs: list[dict[str, Any]], prefix: str
) -> float:
    """The operator's peak RSS (MiB) until it has mirrored one source, with ``hogs``
    created in another tenant's namespace first (and deleted after)."""
    home = server.create_namespace(prefix=f"{prefix}-home")
    target = server.create_namespace(prefix=f"{prefix}-target")
    hog = server.create_namespace(prefix=f"{prefix}-hog")
    accept_mirrors(server, target)
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
    for big in hogs:  # the other tenant fills its own namespace
        await client.create(CONFIGMAPS, big, namespace=hog)
    log = (tmp_path / "operator.log").open("w")
    argv = [
        sys.executable, "-m", "configmirror",
        "--kubeconfig", str(server.kubeconfig_path),
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
        return _peak_rss_mib(process.pid)
    finally:
        process.kill()
        process.wait()
        log.close()
        for big in hogs:
            try:
                await client.delete(CONFIGMAPS, big["metadata"]["name"], namespace=hog)
            except NotFound:
                pass


async def test_a_tenants_big_configmaps_do_not_blow_the_operators_memory(
    configmirror_api: ApiServer, client: Client, tmp_path: Path
) -> None:
    blobs = [chr(ord("a") + k) * SIZE for k in range(26)]  # shared, not 200 MB in the test
    hogs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"big-{i}"},
            "data": {"blob": blobs[i % 26]},
        }
        for i in range(COUNT)
    ]
    peak = await _peak_beside(configmirror_api, client, tmp_path, hogs, "mem")
    assert peak < LIMIT_MIB, (
        f"peak RSS {peak:.0f} MiB with {COUNT} ConfigMaps of {SIZE} bytes in another "
        f"tenant's namespace (nobody's source): past the deployed {LIMIT_MIB} Mi limit"
    )


async def test_a_tenants_heavily_labelled_configmaps_do_not_blow_the_operators_memory(
    configmirror_api: ApiServer, client: Client, tmp_path: Path
) -> None:
    labels = {f"k{j:05d}": "v" * 63 for j in range(LABELS)}
    hogs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"big-{i}", "labels": labels},
        }
        for i in range(LABELLED)
    ]
    peak = await _peak_beside(configmirror_api, client, tmp_path, hogs, "bloat")
    assert peak < LIMIT_MIB, (
        f"peak RSS {peak:.0f} MiB with {LABELLED} ConfigMaps of {LABELS} labels in another "
        f"tenant's namespace (nobody's source): past the deployed {LIMIT_MIB} Mi limit"
    )
