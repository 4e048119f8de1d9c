"""``watches(sharded_by_owner_bucket=True)``: an informer whose bucket selector follows
the sharded controller's ranges (ShardedControl.follow_owner_buckets)."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_trio import Client, Manager, ReconcileContext, ShardingConfig

CM = GroupVersionResource("", "v1", "configmaps")
SECRETS = GroupVersionResource("", "v1", "secrets")


async def _noop(ctx: ReconcileContext[Any]) -> Reconciled:
    return Reconciled()


def _none(change: object) -> list[ObjectKey]:
    return []


async def test_an_owner_bucket_informer_needs_a_sharded_controller() -> None:
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        builder = Manager(client).controller("c", CM, kind="ConfigMap")
        with pytest.raises(LocalProtocolError, match="needs sharded"):
            builder.watches(SECRETS, _none, sharded_by_owner_bucket=True)


async def test_an_owner_bucket_informer_is_the_controller_s_own() -> None:
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        manager = Manager(client)
        builder = manager.controller("c", CM, kind="ConfigMap").sharded(
            ShardingConfig(identity="a", namespace="ns")
        )
        builder.watches(SECRETS, _none, label_selector="x=y", sharded_by_owner_bucket=True)
        builder.watches(SECRETS, _none, label_selector="x=y")
        cache = builder.watched_cache(SECRETS, label_selector="x=y", sharded_by_owner_bucket=True)
        controller = builder.complete(_noop)
        owned = manager.informers.get(SECRETS, label_selector="x=y", sharded_for="c")
        shared = manager.informers.get(SECRETS, label_selector="x=y")
        assert owned is not shared
        assert len([i for i in manager.informers if i.resource == SECRETS]) == 2
        assert cache.synced is False
        assert owned.label_selector == "x=y"
        sharding = controller.sharding
        assert sharding is not None
        with pytest.raises(LocalProtocolError, match="takes an Informer"):
            sharding.follow_owner_buckets("not an informer")  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError, match="label selector is a string"):
            sharding.follow_owner_buckets(owned, 3)  # type: ignore[arg-type]
