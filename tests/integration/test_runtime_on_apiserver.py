"""The runtime (manager, builder, shared informers, events, probes, metrics) on the real
kube-apiserver: loud failures, shared watches, bounded Events, metric names."""

from __future__ import annotations

import logging
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import CacheSyncTimeout, Forbidden, LeaderElectionTimeout, NotFound
from kubemoon_core.lowlevel import EventRecorder as EventMachine
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, EventRecorder, LeaderElectionConfig, Manager

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")


def client_for(server: ApiServer, context: str | None = None) -> Client:
    return Client.from_kubeconfig(str(server.kubeconfig_path), context=context)


async def http_get(port: int, path: str) -> tuple[int, str]:
    """GET a probe path: (status, body)."""

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read().decode()

    return await trio.to_thread.run_sync(get)


async def noop(ctx: Any) -> Reconciled:
    return Reconciled()


async def test_missing_rbac_is_loud_and_readyz_says_why(
    kube_apiserver: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with client_for(kube_apiserver, "nobody") as client:
        manager = Manager(client, probe_address=("127.0.0.1", 0))
        manager.controller("watcher", CONFIGMAPS, kind="ConfigMap").complete(noop)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                with trio.fail_after(10):
                    while not any(
                        r.levelno >= logging.WARNING
                        and all(w in r.getMessage() for w in ("configmaps", "list", "forbidden"))
                        for r in caplog.records
                    ):
                        await trio.sleep(0.05)
                assert manager.probe_port is not None
                status, body = await http_get(manager.probe_port, "/readyz")
                assert status == 503
                assert "configmaps: list forbidden" in body
                assert (await http_get(manager.probe_port, "/healthz"))[0] == 200
                with pytest.raises(CacheSyncTimeout) as caught:
                    await manager.wait_synced(timeout=0.5)
                assert isinstance(caught.value.last_error, Forbidden)
                manager.stop()
    # Logged once for the distinct error, not once per retry.
    loud = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "forbidden" in r.getMessage()
    ]
    assert 1 <= len(loud) <= 2


async def test_a_lease_in_a_missing_namespace_is_loud_and_waiting_to_lead_times_out(
    kube_apiserver: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with client_for(kube_apiserver) as client:
        election = LeaderElectionConfig("lease", "no-such-namespace-anywhere", retry_period=0.2)
        manager = Manager(client, leader_election=election)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                with pytest.raises(LeaderElectionTimeout) as caught:
                    await manager.wait_leading(timeout=2)
                assert isinstance(caught.value.last_error, NotFound)
                manager.stop()
    assert any(r.levelno >= logging.WARNING and "leases" in r.getMessage() for r in caplog.records)


def _requests(metrics: str, verb: str, namespace_scope: bool = True) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if labels.get("resource") != "configmaps" or labels.get("verb") != verb:
            continue
        if namespace_scope and labels.get("scope") != "namespace":
            continue
        total += float(line.rsplit(" ", 1)[1])
    return total


async def test_two_controllers_share_one_list_and_one_watch(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    def counts() -> tuple[float, float]:
        text = kube_apiserver.request("GET", "/metrics").body.decode()
        return _requests(text, "LIST"), _requests(text, "WATCH")

    seen: dict[str, list[str]] = {"first": [], "second": []}

    def recorder(name: str) -> Any:
        async def reconcile(ctx: Any) -> Reconciled:
            seen[name].append(ctx.name)
            return Reconciled()

        return reconcile

    before = counts()
    async with client_for(kube_apiserver) as client:
        manager = Manager(client)
        for name in seen:
            manager.controller(
                name, CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
            ).complete(recorder(name))
        assert len(manager.informers) == 1
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await manager.wait_synced(timeout=10)
                await client.create(
                    CONFIGMAPS, {"metadata": {"name": "shared", "namespace": kube_namespace}}
                )
                while not all("shared" in names for names in seen.values()):
                    await trio.sleep(0.05)
                ((_, stats),) = manager.informer_stats()
                manager.stop()
    after = counts()
    # The one informer listed once and watched once. The server's counters agree at least
    # that far: the namespace controller of kube-controller-manager may list ConfigMaps of
    # earlier tests' deleted namespaces meanwhile, so they are a lower bound only.
    assert (stats.syncs, stats.relists, stats.watch_restarts) == (1, 0, 0)
    assert after[0] - before[0] >= 1.0 and after[1] - before[1] >= 1.0


async def test_identical_warnings_make_at_most_two_event_writes(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    async with client_for(kube_apiserver) as client:
        target = await client.create(
            CONFIGMAPS, {"metadata": {"name": "noisy", "namespace": kube_namespace}}
        )
        target = {"apiVersion": "v1", "kind": "ConfigMap", **target}
        machine = EventMachine("kubemoon.dev/test", "replica-1", flush_interval=1.0)
        recorder = EventRecorder(client, "kubemoon.dev/test", "replica-1", machine=machine)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(recorder.run)
                for _ in range(100):
                    recorder.record(target, "Warning", "Broken", "the same problem again")
                while recorder.writes < 2:
                    await trio.sleep(0.05)
                await trio.sleep(1.5)  # another flush interval: nothing more is due
                nursery.cancel_scope.cancel()
        assert recorder.writes == 2
        listed = [e async for e in client.list(EVENTS, namespace=kube_namespace)]
        mine = [e for e in listed if e["regarding"]["name"] == "noisy"]
        assert len(mine) == 1
        assert mine[0]["reason"] == "Broken"
        assert mine[0]["series"]["count"] == 100


async def test_an_event_recurring_after_its_first_write_is_written_as_its_series(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    """The writer sleeps with no deadline once the first write is answered: the second
    record wakes it, and the series update goes out one flush interval later."""
    async with client_for(kube_apiserver) as client:
        target = await client.create(
            CONFIGMAPS, {"metadata": {"name": "recurring", "namespace": kube_namespace}}
        )
        target = {"apiVersion": "v1", "kind": "ConfigMap", **target}
        machine = EventMachine("kubemoon.dev/test", "replica-1", flush_interval=1.0)
        recorder = EventRecorder(client, "kubemoon.dev/test", "replica-1", machine=machine)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(recorder.run)
                recorder.record(target, "Warning", "Again", "the same problem")
                while recorder.writes < 1:
                    await trio.sleep(0.05)
                await trio.sleep(0.2)  # the writer is asleep, nothing due
                recorder.record(target, "Warning", "Again", "the same problem")
                while recorder.writes < 2:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        listed = [e async for e in client.list(EVENTS, namespace=kube_namespace)]
        (mine,) = [e for e in listed if e["regarding"]["name"] == "recurring"]
        assert mine["series"]["count"] == 2


async def test_metrics_use_controller_runtime_names(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    async with client_for(kube_apiserver) as client:
        election = LeaderElectionConfig("metrics-test", kube_namespace)
        manager = Manager(client, leader_election=election, probe_address=("127.0.0.1", 0))
        done = trio.Event()

        async def reconcile(ctx: Any) -> Reconciled:
            done.set()
            return Reconciled()

        manager.controller("cms", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
            reconcile
        )
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await client.create(
                    CONFIGMAPS, {"metadata": {"name": "m", "namespace": kube_namespace}}
                )
                await done.wait()
                await trio.sleep(0.1)
                assert manager.probe_port is not None
                status, text = await http_get(manager.probe_port, "/metrics")
                manager.stop()
    assert status == 200
    host = client.config.host_header
    expected = [
        'controller_runtime_reconcile_total{controller="cms",result="success"}',
        'controller_runtime_reconcile_errors_total{controller="cms"}',
        'controller_runtime_reconcile_time_seconds_bucket{controller="cms",le="',
        'workqueue_depth{name="cms"}',
        'workqueue_adds_total{name="cms"}',
        'workqueue_retries_total{name="cms"}',
        'workqueue_queue_duration_seconds_bucket{le="',
        'workqueue_work_duration_seconds_bucket{le="',
        'workqueue_unfinished_work_seconds{name="cms"}',
        'workqueue_longest_running_processor_seconds{name="cms"}',
        f'leader_election_master_status{{name="{kube_namespace}/metrics-test"}} 1.0',
        f'rest_client_requests_total{{code="201",host="{host}",method="POST"}}',
        "kubemoon_reflector_relists_total{",
    ]
    missing = [name for name in expected if name not in text]
    assert missing == []
    assert re.search(
        r'controller_runtime_reconcile_total\{controller="cms",result="success"\} [1-9]', text
    )
    # The bytes each informer received, LIST pages and watch bodies apart.
    received = {
        kind: float(value)
        for kind, value in re.findall(
            r'kubemoon_reflector_received_bytes_total\{(?=[^}]*name="configmaps[^"]*")'
            r'[^}]*kind="(list|watch)"[^}]*\} (\S+)',
            text,
        )
    }
    assert set(received) == {"list", "watch"}, text
    # "m" came in the first list or as a watch event, depending on the race with the sync.
    assert received["list"] + received["watch"] > len("m")


async def test_a_raising_mapper_is_logged_and_the_informer_keeps_running(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    reconciled: list[str] = []

    async def reconcile(ctx: Any) -> Reconciled:
        reconciled.append(ctx.name)
        return Reconciled()

    def broken_mapper(change: Any) -> list[Any]:
        raise RuntimeError("mapper bug")

    async with client_for(kube_apiserver) as client:
        manager = Manager(client)
        manager.controller(
            "robust", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
        ).watches(CONFIGMAPS, broken_mapper, namespace=kube_namespace).complete(reconcile)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await manager.wait_synced(timeout=10)
                for name in ("one", "two"):
                    await client.create(
                        CONFIGMAPS, {"metadata": {"name": name, "namespace": kube_namespace}}
                    )
                while sorted(set(reconciled)) != ["one", "two"]:
                    await trio.sleep(0.05)
                manager.stop()
    informer = next(iter(manager.informers))
    assert informer.handler_errors >= 2
    assert any("mapper bug" in (r.exc_text or "") or r.exc_info for r in caplog.records)
    # The line names the controller, the source and the object.
    lines = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    for name in ("one", "two"):
        assert (
            "controller robust: the watches:configmaps mapper or predicate failed on a change "
            f"of {kube_namespace}/{name}"
        ) in lines


async def test_metadata_only_caches_hold_metadata_and_follow_changes(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    async with client_for(kube_apiserver) as client:
        await client.create(
            CONFIGMAPS,
            {
                "metadata": {"name": "big", "namespace": kube_namespace, "labels": {"a": "b"}},
                "data": {"payload": "x" * 10_000},
            },
        )
        manager = Manager(client)
        full = manager.cache(CONFIGMAPS, namespace=kube_namespace)
        slim = manager.cache(CONFIGMAPS, namespace=kube_namespace, metadata_only=True)
        assert len(manager.informers) == 2
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                await manager.wait_synced(timeout=10)
                obj = slim.get("big", kube_namespace)
                assert obj is not None
                assert obj["kind"] == "PartialObjectMetadata"
                assert obj["metadata"]["labels"] == {"a": "b"}
                assert "data" not in obj
                assert full.get("big", kube_namespace)["data"]["payload"] == "x" * 10_000
                await client.patch(
                    CONFIGMAPS,
                    "big",
                    {"metadata": {"labels": {"a": "c"}}},
                    namespace=kube_namespace,
                )
                while (slim.get("big", kube_namespace) or {})["metadata"]["labels"] != {"a": "c"}:
                    await trio.sleep(0.05)
                manager.stop()


async def test_a_forbidden_watch_is_as_loud_as_a_forbidden_list(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await trio.to_thread.run_sync(
        lambda: kube_apiserver.grant_namespace_access(kube_namespace, verbs=("get", "list"))
    )
    async with client_for(kube_apiserver, "limited") as client:
        manager = Manager(client, probe_address=("127.0.0.1", 0))
        manager.controller("w", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
            noop
        )
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                with trio.fail_after(10):
                    while not any(
                        r.levelno >= logging.WARNING
                        and "configmaps: watch forbidden" in r.getMessage()
                        for r in caplog.records
                    ):
                        await trio.sleep(0.05)
                assert manager.probe_port is not None
                status, body = await http_get(manager.probe_port, "/readyz")
                assert status == 503
                assert "configmaps: watch forbidden" in body
                manager.stop()
