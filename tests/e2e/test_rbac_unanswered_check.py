"""A start-up permission check that goes unanswered fails closed, on the real kube-apiserver.

An attacker's pass found that an apiserver paused (SIGSTOP) during the check made the
check end with one WARNING and the replica start unchecked: it campaigned and took the
Lease although nothing had shown that it could work. Now an unanswered check is a
:class:`PermissionCheckFailed`: the replica neither campaigns nor reconciles, ``/readyz``
says why, and the check is made again until it is answered; then the replica leads.
The reviews are held back in the client (the apiserver answers everything else as usual).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from kubemoon_core.errors import PermissionCheckFailed
from kubemoon_io import TransportTimeout
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, LeaderElectionConfig, Manager
from kubemoon_trio import _permissions as permissions

pytestmark = pytest.mark.integration


@pytest.fixture
async def admin(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        yield client


async def test_an_unanswered_check_takes_no_lease_until_it_is_answered(
    kube_apiserver: ApiServer,
    kube_namespace: str,
    admin: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(permissions, "RECHECK_INTERVAL", 0.5)
    held = trio.Event()  # set: the reviews are answered again
    send = admin.send

    async def holding_reviews(request: Any, *, timeout: float | None = None) -> Any:
        if "selfsubjectaccessreviews" in request.path and not held.is_set():
            await trio.sleep(timeout if timeout is not None else 60)
            raise TransportTimeout("the review was not answered (held back by the test)")
        return await send(request, timeout=timeout)

    admin.send = holding_reviews  # type: ignore[method-assign]
    election = LeaderElectionConfig(
        "unanswered-check", kube_namespace, identity="only", lease_duration=4, renew_deadline=3
    )
    manager = Manager(admin, name="kubemoon.dev/unanswered", leader_election=election)
    manager.permission_check_timeout = 1.0
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{kube_namespace}/leases/unanswered-check"
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        with trio.fail_after(30), pytest.raises(PermissionCheckFailed, match="not answered"):
            await manager.wait_leading(timeout=20)
        assert manager.permission_problem is not None
        assert manager.permission_problem in manager.readiness_problems()
        # A few rechecks later the replica still has not campaigned.
        await trio.sleep(1.5)
        assert kube_apiserver.request("GET", lease).status == 404
        assert not manager.reconciling
        held.set()
        with trio.fail_after(30):
            while manager.permission_problem is not None:  # the next recheck is answered
                await trio.sleep(0.05)
            await manager.wait_leading(timeout=20)
        assert kube_apiserver.request("GET", lease).status == 200
        manager.stop()
