"""Regression (issue 31): a tenant's own big ConfigMaps labelled as copies must not OOM the
operator.

Every ConfigMap that was not a copy was already cached as metadata only
(test_configmirror_memory_bounded.py), but the copies were cached in full, selected by the
label ``app.kubernetes.io/managed-by=kubemoon-configmirror`` (sharded: that label AND one
of the replica's owner buckets). Any tenant may put those labels on its own ConfigMaps, in
its own namespace: ``COUNT`` of about 1 MB each, labelled so, were all cached with their
data, and the operator's peak RSS went past its deployed 256 Mi limit (measured before the
fix: 537 MiB, sharded or not), so it is OOM-killed and no mirror is served.

Expected: no ConfigMap is held in full in the operator's memory by virtue of its labels
(copies are cached as metadata too; what a copy holds is known from the digest of the data
the operator wrote and, for a version someone else wrote, from one GET whose answer is not
kept). The operator stays inside its limit, every mirror converges, and a copy whose data a
tenant edits (leaving the digest annotation as it was) is still repaired.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from conftest import accept_mirrors, eventually

from configmirror import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_UID_ANNOTATION,
)
from kubemoon_core.errors import NotFound
from kubemoon_core.sharding import OWNER_BUCKET_LABEL, owner_bucket_label
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

COUNT = 200
SIZE = 1_000_000  # bytes of data per ConfigMap, under the apiserver's 1 MiB object limit
LIMIT_MIB = 256  # deploy/base/deployment.yaml: resources.limits.memory
MIRRORS = 3
TIMINGS = ("--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "0.5")


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def hog(configmirror_api: ApiServer) -> Iterator[str]:
    """A tenant's namespace holding ``COUNT`` ConfigMaps of ``SIZE`` bytes, each labelled
    as a copy (the managed-by label and an owner bucket), for the module's tests."""
    server = configmirror_api
    namespace = server.create_namespace(prefix="lookalike-hog")
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for i in range(COUNT):
        big = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"big-{i}",
                "labels": {
                    MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                    OWNER_BUCKET_LABEL: owner_bucket_label(f"tenant-{i}"),
                },
            },
            "data": {"blob": chr(ord("a") + i % 26) * SIZE},
        }
        answer = server.request("POST", path, body=json.dumps(big).encode())
        assert answer.status == 201, answer.body[:300]
    yield namespace
    for i in range(COUNT):
        server.request("DELETE", f"{path}/big-{i}")


async def _data(client: Client, namespace: str, name: str) -> dict[str, str] | None:
    try:
        found = await client.get(CONFIGMAPS, name, namespace=namespace)
    except NotFound:
        return None
    data: dict[str, str] = found.get("data") or {}
    return data


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
async def test_configmaps_labelled_as_copies_are_not_cached_in_full(
    configmirror_api: ApiServer, client: Client, hog: str, tmp_path: Path, sharded: bool
) -> None:
    server = configmirror_api
    home = server.create_namespace(prefix="lookalike-home")
    targets = [server.create_namespace(prefix="lookalike-target") for _ in range(2)]
    for target in targets:
        accept_mirrors(server, target)
    for n in range(MIRRORS):
        source = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"settings-{n}"},
            "data": {"n": str(n)},
        }
        await client.create(CONFIGMAPS, source, namespace=home)
        mirror = {
            "apiVersion": "kubemoon.dev/v1alpha1",
            "kind": "ConfigMirror",
            "metadata": {"name": f"m{n}"},
            "spec": {"source": f"settings-{n}", "targetNamespaces": targets},
        }
        created = await client.create(CONFIGMIRRORS, mirror, namespace=home)
    # Half the tenant's ConfigMaps also claim to belong to the last mirror (its UID is on
    # every copy, readable by whoever receives one): left alone, never read in full.
    uid = created["metadata"]["uid"]
    for i in range(0, COUNT, 2):
        patch = {"metadata": {"annotations": {OWNER_UID_ANNOTATION: uid}}}
        await client.patch(CONFIGMAPS, f"big-{i}", patch, namespace=hog)

    log = (tmp_path / "operator.log").open("w")
    argv = [
        sys.executable, "-m", "configmirror",
        "--kubeconfig", str(server.kubeconfig_path),
        "--namespace", home,
        "--probe-address", "127.0.0.1:0",
    ]  # fmt: skip
    if sharded:
        argv += ["--sharded", "--shard-identity", "only", "--lease-namespace", home, *TIMINGS]
    process = subprocess.Popen(argv, stderr=log, stdout=log)
    try:

        async def converged() -> bool:
            for n in range(MIRRORS):
                for target in targets:
                    if await _data(client, target, f"settings-{n}") != {"n": str(n)}:
                        return False
            return True

        await eventually(converged, timeout=180, what="every mirror's copies")
        # A tenant edits a copy's data and leaves every label and annotation as it was.
        copy = await client.get(CONFIGMAPS, "settings-0", namespace=targets[0])
        copy["data"] = {"n": "edited by the tenant"}
        await client.replace(CONFIGMAPS, copy, namespace=targets[0])
        await eventually(converged, timeout=60, what="the edited copy repaired")
        await trio.sleep(2)
        peak = _peak_rss_mib(process.pid)
        assert process.poll() is None, "the operator exited"
    finally:
        process.kill()
        process.wait()
        log.close()
    print(f"peak RSS ({'sharded' if sharded else 'unsharded'}): {peak:.0f} MiB")
    assert peak < LIMIT_MIB, (
        f"peak RSS {peak:.0f} MiB with {COUNT} ConfigMaps of {SIZE} bytes labelled as copies "
        f"in a tenant's namespace: past the deployed {LIMIT_MIB} Mi limit"
    )
