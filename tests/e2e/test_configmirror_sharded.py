"""ConfigMirror run sharded (``--sharded``) on the real apiserver (gate off: client-side).

Two ``python -m configmirror --sharded`` processes split the mirrors of a namespace,
serve the shard status on ``/readyz?verbose`` and ``/metrics``, and leave the group on
SIGTERM; two in-process replicas authenticated as the ServiceAccount of
``deploy/overlays/cert-manager/rbac.yaml`` converge with nothing beyond those rules.
"""

from __future__ import annotations

import functools
import json
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import RunningOperator, StartOperator, eventually
from test_configmirror import Scenario, configmap, mirror
from test_configmirror_rbac import install_rbac, service_account_client, wait_until_allowed

from configmirror import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_UID_ANNOTATION,
    ConfigMirrorOperator,
    OperatorOptions,
)
from kubemoon_core import LEASES
from kubemoon_core.sharding import (
    CLAIMS_ANNOTATION,
    LEAVING_ANNOTATION,
    OWNER_BUCKET_LABEL,
    OWNER_BUCKETS,
    assign_ranges,
    bucket_range,
    owner_bucket_label,
    shard_hash,
)
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, ShardingConfig

pytestmark = pytest.mark.integration

MIRRORS = 12
TIMINGS = ("--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "0.5")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _mirrors(client: Client, s: Scenario) -> None:
    for n in range(MIRRORS):
        source = f"source-{n:02d}"
        await client.create(CONFIGMAPS, configmap(source, {"n": str(n)}), namespace=s.home)
        body = mirror(f"m{n:02d}", source, s.targets)
        await client.create(CONFIGMIRRORS, body, namespace=s.home)


async def _all_ready(s: Scenario) -> bool:
    states = [await s.ready(f"m{n:02d}") for n in range(MIRRORS)]
    return all(state is not None and state[0] == "True" for state in states)


async def test_two_sharded_programs_split_the_mirrors_and_leave_on_sigterm(
    configmirror_api: ApiServer, client: Client
) -> None:
    s = Scenario(configmirror_api, client)
    await _mirrors(client, s)
    processes: list[subprocess.Popen[str]] = []
    ports: dict[int, int] = {}

    def read_logs(index: int, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            entry = json.loads(line)
            if entry["msg"].startswith("probes on"):
                ports[index] = int(entry["msg"].rsplit(":", 1)[1])

    try:
        async with trio.open_nursery() as nursery:
            for index in range(2):
                argv = [
                    sys.executable, "-m", "configmirror",
                    "--kubeconfig", str(configmirror_api.kubeconfig_path),
                    "--namespace", s.home,
                    "--probe-address", "127.0.0.1:0",
                    "--sharded", "--shard-identity", f"replica-{index}",
                    "--lease-namespace", s.home, *TIMINGS,
                    "--log-format", "json",
                ]  # fmt: skip
                process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
                processes.append(process)
                nursery.start_soon(
                    functools.partial(
                        trio.to_thread.run_sync,
                        functools.partial(read_logs, index, process),
                        abandon_on_cancel=True,
                    )
                )
            await eventually(lambda: _all_ready(s), what="every mirror ready")
            await eventually(
                lambda: trio.to_thread.run_sync(lambda: len(ports) == 2), what="probe ports"
            )
            totals = []
            for index in range(2):
                base = f"http://127.0.0.1:{ports[index]}"
                fraction = (
                    f'kubemoon_shard_owned_fraction{{controller="configmirror",'
                    f'identity="replica-{index}"}} 0.5'
                )

                async def half(url: str = f"{base}/metrics", line: str = fraction) -> bool:
                    return line in (await trio.to_thread.run_sync(_get, url))[1]

                await eventually(half, what=f"replica-{index} owns half the hash space")

                async def ready(url: str = f"{base}/readyz?verbose") -> bool:
                    return (await trio.to_thread.run_sync(_get, url))[0] == 200

                await eventually(ready, what=f"replica-{index} ready (its range listed)")
                code, text = await trio.to_thread.run_sync(_get, f"{base}/readyz?verbose")
                assert code == 200, text
                assert text.startswith("ok\n")
                assert f"controller configmirror: sharded as replica-{index}" in text
                assert "client-side" in text  # the session apiserver has the gate off
                assert (await trio.to_thread.run_sync(_get, f"{base}/readyz")) == (200, "ok\n")
                _, metrics = await trio.to_thread.run_sync(_get, f"{base}/metrics")
                assert 'kubemoon_shard_server_side{controller="configmirror"} 0.0' in metrics
                success = (
                    'controller_runtime_reconcile_total{controller="configmirror",'
                    'result="success"} '
                )
                line = next(x for x in metrics.splitlines() if x.startswith(success))
                totals.append(float(line.rsplit(" ", 1)[1]))
            assert sum(totals) >= MIRRORS
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                assert await trio.to_thread.run_sync(process.wait, 30) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stderr is not None
            process.stderr.close()
    for index in range(2):
        lease = await client.get(LEASES, f"configmirror-replica-{index}", namespace=s.home)
        annotations = lease["metadata"]["annotations"]
        assert annotations[CLAIMS_ANNOTATION] == ""  # released on SIGTERM
        assert annotations[LEAVING_ANNOTATION] == "true"


async def _copies_follow_the_shards(
    client: Client, s: Scenario, operators: list[ConfigMirrorOperator]
) -> None:
    """Every copy carries its mirror's owner bucket; each replica's copies cache holds
    exactly the copies of its own mirrors; a copy relabelled by hand is repaired."""
    uids = {}
    for n in range(MIRRORS):
        body = await client.get(CONFIGMIRRORS, f"m{n:02d}", namespace=s.home)
        uids[body["metadata"]["uid"]] = f"m{n:02d}"
    copies = [
        c
        for target in s.targets
        async for c in client.list(CONFIGMAPS, namespace=target)
        if OWNER_UID_ANNOTATION in (c["metadata"].get("annotations") or {})
    ]
    assert len(copies) == MIRRORS * len(s.targets)
    for c in copies:
        uid = c["metadata"]["annotations"][OWNER_UID_ANNOTATION]
        assert c["metadata"]["labels"][OWNER_BUCKET_LABEL] == owner_bucket_label(uid)

    def cached(operator: ConfigMirrorOperator) -> set[tuple[str, str]]:
        cache = operator.copies_cache()
        return {
            (o["metadata"]["namespace"], o["metadata"]["name"])
            for o in cache.objects()
            if o["metadata"]["namespace"] in s.targets
        }

    def own(operator: ConfigMirrorOperator) -> set[tuple[str, str]]:
        mirrors = {
            o["metadata"]["uid"]
            for o in operator.manager.controllers[0].primary.objects()
            if o["metadata"]["namespace"] == s.home
        }
        return {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for c in copies
            if c["metadata"]["annotations"][OWNER_UID_ANNOTATION] in mirrors
        }

    async def exact() -> bool:
        return all(cached(o) == own(o) for o in operators)

    await eventually(exact, what="each replica caches exactly its own mirrors' copies")
    first, second = (own(o) for o in operators)
    assert first and second and not first & second
    assert len(first | second) == len(copies)
    # Relabel one of the first replica's copies into one of the second's buckets, and
    # strip the label of another: both are repaired by their mirror's replica.
    foreign = next(iter(own(operators[1])))
    wrong = (await client.get(CONFIGMAPS, foreign[1], namespace=foreign[0]))["metadata"]
    moved, stripped = sorted(own(operators[0]))[:2]
    for (namespace, name), value in (
        (moved, wrong["labels"][OWNER_BUCKET_LABEL]),
        (stripped, None),
    ):
        body = await client.get(CONFIGMAPS, name, namespace=namespace)
        want = body["metadata"]["labels"][OWNER_BUCKET_LABEL]
        assert want != value
        if value is None:
            del body["metadata"]["labels"][OWNER_BUCKET_LABEL]
        else:
            body["metadata"]["labels"][OWNER_BUCKET_LABEL] = value
        await client.replace(CONFIGMAPS, body, namespace=namespace)

        async def repaired(namespace: str = namespace, name: str = name, want: str = want) -> bool:
            body = await client.get(CONFIGMAPS, name, namespace=namespace)
            return bool(body["metadata"]["labels"].get(OWNER_BUCKET_LABEL) == want)

        await eventually(repaired, what=f"{namespace}/{name} relabelled back to {want}")
    await eventually(exact, what="the repaired copies back in their replica's cache")
    # A tenant's look-alike copy that no replica's copies cache holds (a bucket label no
    # range selects) still blocks the target and is reported as a conflict.
    target = s.targets[0]
    decoy = configmap("taken", {"x": "tenant"})
    decoy["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_BUCKET_LABEL: "zz"}
    await client.create(CONFIGMAPS, decoy, namespace=target)
    await client.create(CONFIGMAPS, configmap("taken", {"x": "source"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("mt", "taken", s.targets), namespace=s.home)

    async def conflict() -> bool:
        state = await s.ready("mt")
        return state is not None and state[:2] == ("False", "TargetConflict")

    await eventually(conflict, what="the hidden look-alike reported as a conflict")
    assert (await client.get(CONFIGMAPS, "taken", namespace=target))["data"] == {"x": "tenant"}


async def test_sharded_replicas_need_nothing_beyond_deploy_rbac(
    configmirror_api: ApiServer, client: Client, tmp_path: Path
) -> None:
    server = configmirror_api
    operator_namespace = server.create_namespace(prefix="cm-system")
    user = install_rbac(server, operator_namespace, secrets.token_hex(4), overlay="sharded")
    wait_until_allowed(server, user, operator_namespace)
    s = Scenario(server, client)
    await _mirrors(client, s)
    timings: dict[str, Any] = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        service_account_client(server, operator_namespace, tmp_path / "a") as ca,
        service_account_client(server, operator_namespace, tmp_path / "b") as cb,
    ):
        operators = [
            ConfigMirrorOperator(
                sa,
                OperatorOptions(
                    namespaces=(s.home,),
                    sharding=ShardingConfig(identity=name, namespace=operator_namespace, **timings),
                ),
            )
            for sa, name in ((ca, "a"), (cb, "b"))
        ]
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for operator in operators:
                    await nursery.start(operator.manager.run)
                await eventually(lambda: _all_ready(s), what="every mirror ready")

                async def split() -> bool:
                    fractions = [o.manager.shard_status()[0].fraction for o in operators]
                    return fractions == [0.5, 0.5]

                await eventually(split, what="two halves")
                await _copies_follow_the_shards(client, s, operators)
                for operator in operators:
                    manager = operator.manager
                    assert manager.readiness_problems() == []
                    ((_, metrics),) = manager.controller_metrics()
                    assert metrics.reconcile_errors_total == 0
                    (status,) = manager.shard_status()
                    assert status.server_side is False
                    assert status.fraction == 0.5
                    manager.stop()


async def test_a_relabelled_copy_is_deleted_with_its_mirror(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    """Issue 31, defect 7: a copy whose owner-bucket label a tenant changed (to a value no
    range selects, or to the other replica's bucket) is in no cache of its mirror's replica.
    Deleting the mirror while the labels are wrong still deletes every copy before the
    finalizer goes: the owner annotation decides, not the labels. (The replicas are stopped
    while the labels are changed and the mirror deleted, so no repair can come first.)"""
    s = Scenario(configmirror_api, client, targets=3)
    await client.create(CONFIGMAPS, configmap("settings", {"k": "v"}), namespace=s.home)
    created = await client.create(
        CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home
    )
    uid = created["metadata"]["uid"]
    timings: dict[str, Any] = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}

    async def start_both() -> list[RunningOperator]:
        return [
            await start_operator(
                namespaces=(s.home,),
                sharding=ShardingConfig(identity=name, namespace=s.home, **timings),
            )
            for name in ("a", "b")
        ]

    replicas = await start_both()
    await eventually(lambda: s.copies_are({"k": "v"}), what="the copies", timeout=60)
    for replica in replicas:
        await replica.stop()
    ranges = assign_ranges(["a", "b"])
    (owner,) = [n for n, r in ranges.items() if r.contains_hash(shard_hash(created))]
    (other,) = set(ranges) - {owner}
    foreign = next(
        f"{b:02x}"
        for b in range(OWNER_BUCKETS)
        if ranges[other].contains_hash(bucket_range(b).start)
    )
    relabel = {s.targets[0]: "zz", s.targets[1]: foreign}
    for namespace, value in relabel.items():
        body = await client.get(CONFIGMAPS, "settings", namespace=namespace)
        assert body["metadata"]["labels"][OWNER_BUCKET_LABEL] == owner_bucket_label(uid)
        body["metadata"]["labels"][OWNER_BUCKET_LABEL] = value
        await client.replace(CONFIGMAPS, body, namespace=namespace)
    await client.delete(CONFIGMIRRORS, "m", namespace=s.home)
    assert await s.mirror() is not None  # held by the finalizer
    await start_both()

    async def mirror_gone() -> bool:
        return await s.mirror() is None

    await eventually(mirror_gone, what="the mirror deleted", timeout=60)
    # The finalizer went only once every copy was gone, the relabelled ones too.
    left = {t: c["metadata"].get("labels") for t in s.targets if (c := await s.copy(t))}
    assert left == {}
