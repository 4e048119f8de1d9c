"""Two Managers started with one leader-election identity on the real kube-apiserver
(issue 31, defect 12): the second one finds the first holding the Lease under its
identity, stops campaigning with an ERROR, and never reconciles; the first leads alone."""

from __future__ import annotations

import contextlib
import logging

import pytest
import trio

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import LeadershipLost
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, LeaderElectionConfig, Manager, ReconcileContext

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


async def test_a_second_process_with_one_identity_stops_with_an_error(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubemoon")
    config = LeaderElectionConfig(
        "twins", kube_namespace, identity="same", lease_duration=3.0, renew_deadline=2.0,
        retry_period=0.5,
    )  # fmt: skip
    reconciled: list[int] = []

    def reconcile_for(index: int):  # type: ignore[no-untyped-def]
        async def reconcile(ctx: ReconcileContext) -> Reconciled:  # type: ignore[type-arg]
            reconciled.append(index)
            return Reconciled()

        return reconcile

    async with (
        Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as first,
        Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as second,
    ):
        managers = [Manager(c, leader_election=config) for c in (first, second)]
        for i, manager in enumerate(managers):
            manager.controller(
                "twins", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
            ).complete(reconcile_for(i))

        async def run(manager: Manager) -> None:
            with contextlib.suppress(LeadershipLost):
                await manager.run()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, managers[0])
            with trio.fail_after(30):
                while not managers[0].is_leader:
                    await trio.sleep(0.05)
            nursery.start_soon(run, managers[1])
            electors = [m.election.elector for m in managers if m.election is not None]
            with trio.fail_after(30):
                while not electors[1].duplicate:
                    await trio.sleep(0.05)
            body = {"metadata": {"name": "seen"}, "data": {"k": "v"}}
            answer = kube_apiserver.request(
                "POST", f"/api/v1/namespaces/{kube_namespace}/configmaps", body=body
            )
            assert answer.status == 201
            with trio.fail_after(30):
                while 0 not in reconciled:
                    await trio.sleep(0.05)
            await trio.sleep(3 * config.retry_period)  # the first keeps leading alone
            assert managers[0].is_leader and not electors[0].duplicate
            assert not managers[1].is_leader
            for manager in managers:
                manager.stop()
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
        and "another process runs with the identity same" in r.getMessage()
    ]
    assert len(errors) == 1, errors
    assert set(reconciled) == {0}, reconciled
