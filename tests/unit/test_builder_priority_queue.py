"""The builder's switch for the priority queue reaches the controller it builds."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.lowlevel import LOW_PRIORITY
from kubemoon_trio import Client, Manager, ReconcileContext

CM = GroupVersionResource("", "v1", "configmaps")


async def _noop(ctx: ReconcileContext[Any]) -> Reconciled:
    return Reconciled()


def _order(manager: Manager, enabled: bool | None) -> list[str]:
    """Queue a cached key at low priority, then an event's key; the order handed out."""
    builder = manager.controller(f"c-{enabled}", CM, kind="ConfigMap").with_workers(2)
    if enabled is not None:
        builder = builder.with_priority_queue(enabled)
    controller = builder.complete(_noop).controller
    controller.enqueue(ObjectKey("ns", "cached"), priority=LOW_PRIORITY)
    controller.enqueue(ObjectKey("ns", "event"))
    handed = []
    while (item := controller.next_work(0.0)) is not None:
        handed.append(item.key.name)
    return handed


async def test_with_priority_queue_false_serves_keys_in_arrival_order() -> None:
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        manager = Manager(client)
        assert _order(manager, None) == ["event", "cached"]  # the default
        assert _order(manager, True) == ["event", "cached"]
        assert _order(manager, False) == ["cached", "event"]


@pytest.mark.parametrize("bad", [0, "off", None])
async def test_with_priority_queue_refuses_what_is_no_bool(bad: Any) -> None:
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        builder = Manager(client).controller("c", CM, kind="ConfigMap")
        with pytest.raises(LocalProtocolError, match="with_priority_queue takes a bool"):
            builder.with_priority_queue(bad)
