"""Two sharded replicas started with one identity on the real kube-apiserver (issue 31,
defect 12, shard membership): one of them finds the other writing the membership Lease
under its identity, stops working in the group with an ERROR naming both instances, and
never fights over the Lease; the other works alone and no object is written by both."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import LeadershipLost
from kubemoon_core.sharding import MemberState
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager, ReconcileContext, ShardedControl, ShardingConfig

pytestmark = pytest.mark.integration

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
SECRETS = GroupVersionResource("", "v1", "secrets")
OBJECTS = 20
TIMINGS: dict[str, Any] = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


@pytest.mark.parametrize("start", ["one after the other", "together"])
async def test_a_second_replica_with_one_identity_stops_with_an_error(
    start: str,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubemoon")
    config = ShardingConfig(identity="same", namespace=kube_namespace, group="twins", **TIMINGS)
    written: dict[str, set[int]] = defaultdict(set)  # object name -> replicas that wrote
    for n in range(OBJECTS):
        body = {"metadata": {"name": f"cm-{n:02d}"}, "data": {"n": str(n)}}
        answer = kube_apiserver.request(
            "POST", f"/api/v1/namespaces/{kube_namespace}/configmaps", body=body
        )
        assert answer.status == 201

    def reconcile_for(index: int):  # type: ignore[no-untyped-def]
        async def reconcile(ctx: ReconcileContext) -> Reconciled:  # type: ignore[type-arg]
            if ctx.raw is None:
                return Reconciled()
            # Each replica writes its own index: a second writer shows as a change.
            if await ctx.ensure(
                SECRETS, {"metadata": {"name": ctx.name}, "stringData": {"by": str(index)}}
            ):
                written[ctx.name].add(index)
            return Reconciled()

        return reconcile

    async with (
        Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as first,
        Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as second,
    ):
        managers = [Manager(c, name=f"test/twin-{i}") for i, c in enumerate((first, second))]
        shards: list[ShardedControl] = []
        for i, manager in enumerate(managers):
            manager.controller(
                "twins", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
            ).sharded(config).owns(SECRETS).complete(reconcile_for(i))
            sharding = manager.controllers[0].sharding
            assert sharding is not None
            shards.append(sharding)
        members = [s.membership.member for s in shards]
        assert members[0].instance != members[1].instance

        async def run(manager: Manager) -> None:
            with contextlib.suppress(LeadershipLost):
                await manager.run()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, managers[0])
            if start == "one after the other":
                with trio.fail_after(30):
                    while not shards[0].membership.active():
                        await trio.sleep(0.05)
            nursery.start_soon(run, managers[1])
            with trio.fail_after(30):
                while not any(m.duplicate for m in members):
                    await trio.sleep(0.05)
            (loser,) = [i for i, m in enumerate(members) if m.duplicate]
            winner = 1 - loser
            if start == "one after the other":
                assert loser == 1, "the replica already working keeps working"
            with trio.fail_after(30):
                while len(written) < OBJECTS:
                    await trio.sleep(0.05)
            # The survivor goes on alone, renewing its Lease; the other stays stopped.
            await trio.sleep(8 * TIMINGS["retry_period"])
            assert members[winner].state is MemberState.MEMBER and shards[winner].status().ranges
            assert not members[winner].duplicate
            assert members[loser].state is MemberState.DUPLICATE
            assert shards[loser].membership.active() == () and not shards[loser].status().ranges
            assert members[loser].twin == members[winner].instance
            assert members[winner].twin is None
            problems = managers[loser].readiness_problems()
            assert any("another process runs with the identity same" in p for p in problems)
            for manager in managers:
                manager.stop()
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
        and "another process runs with the identity same" in r.getMessage()
    ]
    assert len(errors) == 1, errors
    assert members[winner].instance in errors[0] and members[loser].instance in errors[0]
    # Nobody fought: no membership Lease was changed under a replica's feet, none lost
    # its ranges to a conflict; the only warnings are the gate's (one per replica).
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "ShardedListAndWatch" not in r.getMessage()
    ]
    assert warnings == [], warnings
    # Every object was written, each by one replica only: the survivor.
    assert set(written) == {f"cm-{n:02d}" for n in range(OBJECTS)}
    assert all(by == {winner} for by in written.values()), dict(written)


@pytest.mark.parametrize("stop", ["graceful", "crash"])
async def test_a_restart_with_the_identity_is_no_duplicate(
    stop: str,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process started again with the identity of one that stopped takes its Lease over:
    at once after a graceful stop (the Lease was left with no claims), after waiting the
    Lease out after a crash (the predecessor's claims lapse first), never as a duplicate."""
    caplog.set_level(logging.INFO, logger="kubemoon")
    config = ShardingConfig(identity="same", namespace=kube_namespace, group="again", **TIMINGS)

    async def reconcile(ctx: ReconcileContext) -> Reconciled:  # type: ignore[type-arg]
        return Reconciled()

    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        shards: list[ShardedControl] = []
        for generation in range(2):
            manager = Manager(client, name=f"test/again-{generation}")
            manager.controller(
                "again", CONFIGMAPS, kind="ConfigMap", namespace=kube_namespace
            ).sharded(config).complete(reconcile)
            sharding = manager.controllers[0].sharding
            assert sharding is not None
            shards.append(sharding)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(manager.run)
                    with trio.fail_after(30):
                        while not sharding.membership.active():
                            await trio.sleep(0.05)
                    if stop == "graceful" or generation:
                        manager.stop()
                    else:
                        scope.cancel()  # dies: its Lease is not left
        assert all(not s.membership.member.duplicate for s in shards)
        assert shards[0].membership.member.instance != shards[1].membership.member.instance
    waited = [
        r.getMessage() for r in caplog.records if "waiting for it to expire" in r.getMessage()
    ]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors
    if stop == "graceful":
        assert waited == [], waited
    else:
        assert waited and shards[0].membership.member.instance in waited[0], waited
