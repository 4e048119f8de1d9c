"""The manager's lifecycle on every adapter against the real kube-apiserver: a reconcile that
forgets its ``return``, a reconcile stuck past the grace period, and the client the manager
owns (closed when ``run`` ends). Log lines name the controller and the key."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from adapter_driver import ADAPTERS, Adapter, call_soon, start_background

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


def reconcile_for(adapter: Adapter, body: Callable[[Any], Any]) -> Any:
    """``body(ctx)`` as the adapter's reconcile: a coroutine function unless blocking."""
    if adapter.name == "sync":
        return body

    async def reconcile(ctx: Any) -> Any:
        return body(ctx)

    return reconcile


def create_configmap(server: ApiServer, namespace: str, name: str) -> None:
    response = server.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {"name": name}}
    )
    assert response.status == 201, response.body[:200]


def lease_holder(server: ApiServer, namespace: str, name: str) -> str | None:
    response = server.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    )
    assert response.status == 200, response.body[:200]
    holder: str | None = response.json()["spec"].get("holderIdentity")
    return holder


async def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


async def test_a_reconcile_returning_none_is_that_keys_error_not_the_end_of_run(
    adapter: Adapter,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    km = adapter.module
    calls: list[tuple[str, int]] = []

    def forgetful(ctx: Any) -> Any:
        calls.append((ctx.name, ctx.requeues))
        return None if ctx.name == "forgetful" and len(calls) <= 3 else Reconciled()

    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    manager = km.Manager(client)
    manager.controller("widgets", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
        reconcile_for(adapter, forgetful)
    )
    run = await start_background(adapter, nursery, manager.run)
    create_configmap(kube_apiserver, kube_namespace, "forgetful")
    # Three failures, each retried with backoff (requeues 0, 1, 2), then a success.
    await wait_for(lambda: len(calls) >= 4)
    assert calls[:4] == [("forgetful", n) for n in range(4)]
    create_configmap(kube_apiserver, kube_namespace, "after")  # the manager still works
    await wait_for(lambda: ("after", 0) in calls)
    metrics = manager.controllers[0].controller.metrics(0.0)
    assert metrics.reconcile_errors_total == 3
    assert metrics.reconcile_total["success"] >= 2
    call_soon(adapter, manager.stop)
    await run.wait()  # returns: no LocalProtocolError ends run()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3
    for record in errors:
        text = record.getMessage()
        assert text.startswith(f"controller widgets: reconcile of {kube_namespace}/forgetful ")
        assert "returned None, not an outcome" in text
        assert "a forgotten return?" in text


async def test_a_failing_reconcile_is_logged_with_its_controller_and_object(
    adapter: Adapter,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    km = adapter.module
    failed = threading.Event()

    def typo(ctx: Any) -> Any:
        ctx.log.info("looking")
        failed.set()
        return {"message": 1}["mesage"]

    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    manager = km.Manager(client)
    manager.controller("widgets", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
        reconcile_for(adapter, typo)
    )
    run = await start_background(adapter, nursery, manager.run)
    create_configmap(kube_apiserver, kube_namespace, "typo")
    await wait_for(failed.is_set)
    await wait_for(lambda: manager.controllers[0].controller.metrics(0.0).errors >= 1)
    call_soon(adapter, manager.stop)
    await run.wait()
    lines = [r.getMessage() for r in caplog.records if r.name == "kubemoon.controller"]
    expected = f"controller widgets: reconcile of {kube_namespace}/typo failed: KeyError('mesage')"
    assert expected in lines
    own = [r.getMessage() for r in caplog.records if r.name == "kubemoon.controller.widgets"]
    assert f"controller widgets: {kube_namespace}/typo: looking" in own


async def test_a_reconcile_stuck_past_the_grace_period_is_left_behind_loudly(
    adapter: Adapter,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    km = adapter.module
    entered = threading.Event()
    unblock = threading.Event()

    def stuck_blocking(ctx: Any) -> Any:
        entered.set()
        unblock.wait(60)  # plain blocking code: no cancellation reaches it
        return Reconciled()

    async def stuck_trio(ctx: Any) -> Any:
        entered.set()
        await trio.sleep_forever()

    async def stuck_asyncio(ctx: Any) -> Any:
        entered.set()
        await asyncio.Event().wait()

    reconcile = {"sync": stuck_blocking, "trio": stuck_trio, "asyncio": stuck_asyncio}
    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    election = km.LeaderElectionConfig(
        "stuck", kube_namespace, identity="stuck-leader", retry_period=0.5
    )
    manager = km.Manager(client, leader_election=election, grace_period=0.5)
    manager.controller("widgets", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
        reconcile[adapter.name]
    )
    run = await start_background(adapter, nursery, manager.run)
    try:
        create_configmap(kube_apiserver, kube_namespace, "slow")
        await wait_for(entered.is_set)
        call_soon(adapter, manager.stop)
        await run.wait()  # returns although the reconcile never ends
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert errors[0].startswith(
            f"controller widgets: reconcile of {kube_namespace}/slow still running"
        )
        assert "still running after the 0.5 s grace period" in errors[0]
        assert f"the Lease {kube_namespace}/stuck is not released" in errors[0]
        # The stuck reconcile may still write: the Lease is left to expire, not released.
        assert lease_holder(kube_apiserver, kube_namespace, "stuck") == "stuck-leader"
        # A cancelled task has ended: its client is closed. A thread left behind may still
        # use it: it stays open.
        assert (client.connection_count == 0) == (adapter.name != "sync")
    finally:
        unblock.set()
        await adapter.close(client)


async def test_the_manager_closes_the_client_it_owns(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str, nursery: trio.Nursery
) -> None:
    km = adapter.module
    seen = threading.Event()

    def note(ctx: Any) -> Any:
        seen.set()
        return Reconciled()

    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    election = km.LeaderElectionConfig("owned-client", kube_namespace, retry_period=0.5)
    manager = km.Manager(client, leader_election=election)
    manager.controller("owner", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
        reconcile_for(adapter, note)
    )
    run = await start_background(adapter, nursery, manager.run)
    create_configmap(kube_apiserver, kube_namespace, "seen")
    await wait_for(seen.is_set)
    assert client.connection_count > 0
    call_soon(adapter, manager.stop)
    await run.wait()
    # Never closed by the test: the manager did it, so nothing is left to warn about.
    assert client.connection_count == 0
    gc.collect()


async def test_close_client_false_leaves_the_client_open(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str, nursery: trio.Nursery
) -> None:
    km = adapter.module
    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        manager = km.Manager(client, close_client=False)
        manager.controller("kept", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace).complete(
            reconcile_for(adapter, lambda ctx: Reconciled())
        )
        run = await start_background(adapter, nursery, manager.run)
        await wait_for(lambda: manager.reconciling)
        call_soon(adapter, manager.stop)
        await run.wait()
        assert client.connection_count > 0  # the LIST's connection, kept alive for reuse
    finally:
        await adapter.close(client)
    assert client.connection_count == 0


async def test_a_client_open_in_its_creators_block_outlives_the_manager(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str, nursery: trio.Nursery
) -> None:
    km = adapter.module
    client = km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    # The creator's `with`/`async with` block: it closes the client, the manager does not.
    entered = await adapter.call(client.__enter__ if adapter.name == "sync" else client.__aenter__)
    assert entered is client and client.in_context
    try:
        manager = km.Manager(client)
        manager.controller(
            "shared", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
        ).complete(reconcile_for(adapter, lambda ctx: Reconciled()))
        run = await start_background(adapter, nursery, manager.run)
        await wait_for(lambda: manager.reconciling)
        call_soon(adapter, manager.stop)
        await run.wait()
        # Still usable after the manager: the block's owner goes on with it.
        listed = await adapter.collect(client.list(CONFIGMAPS, namespace=kube_namespace))
        assert isinstance(listed, list)
    finally:
        await adapter.close(client)
    assert client.connection_count == 0


async def test_a_released_lease_is_logged_as_free_not_as_an_empty_leader(
    adapter: Adapter,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubemoon.leader")
    km = adapter.module
    config = {"name": "handover", "namespace": kube_namespace, "retry_period": 0.2}
    clients = [km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) for _ in range(2)]
    managers = [
        km.Manager(c, leader_election=km.LeaderElectionConfig(identity=f"cand-{i}", **config))
        for i, c in enumerate(clients)
    ]
    first = await start_background(adapter, nursery, managers[0].run)
    await wait_for(lambda: managers[0].is_leader)
    second = await start_background(adapter, nursery, managers[1].run)
    lease = f"lease {kube_namespace}/handover"
    await wait_for(
        lambda: f"{lease}: leader is now cand-0" in [r.getMessage() for r in caplog.records]
    )
    call_soon(adapter, managers[0].stop)  # releases the Lease: the follower sees it free
    await first.wait()
    await wait_for(lambda: managers[1].is_leader)
    call_soon(adapter, managers[1].stop)
    await second.wait()
    lines = [r.getMessage() for r in caplog.records]
    assert f"{lease}: free (no holder)" in lines
    assert f"{lease}: started leading as cand-1" in lines
    assert not [line for line in lines if line.rstrip().endswith("leader is now")]
