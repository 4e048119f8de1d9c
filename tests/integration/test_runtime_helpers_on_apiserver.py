"""The pure runtime helpers against the real kube-apiserver: the server accepts what they
build, and their guards and steady-state promises hold there (issue 11)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubemoon_core import EVENTS, GroupVersionResource, create_request
from kubemoon_core.errors import Conflict
from kubemoon_core.lowlevel import EventOutcome, EventRecorder
from kubemoon_core.objects import (
    WriteAction,
    add_finalizer_request,
    plan_write,
    remove_finalizer_request,
    with_owner_reference,
)
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
WALL = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


def _cm(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "w"}},
        "data": data,
    }


async def test_create_takes_the_namespace_from_the_object(
    client: Client, kube_namespace: str
) -> None:
    created = await client.request(create_request(CM, _cm("from-metadata", kube_namespace)))
    assert created["metadata"]["namespace"] == kube_namespace


async def test_planned_writes_converge_and_are_guarded(client: Client, kube_namespace: str) -> None:
    owner = await client.request(create_request(CM, _cm("owner", kube_namespace)))
    desired = with_owner_reference(_cm("child", kube_namespace, k="1"), owner)
    plan = plan_write(CM, desired, None)
    assert plan.request is not None
    await client.request(plan.request)
    existing = await client.get(CM, "child", namespace=kube_namespace)
    # The server added uid, resourceVersion, managedFields...: still nothing to write.
    assert plan_write(CM, desired, existing).action is WriteAction.NONE
    changed = {**desired, "data": {"k": "2"}}
    plan = plan_write(CM, changed, existing)
    assert plan.request is not None
    patched = await client.request(plan.request)
    assert patched["data"] == {"k": "2"}
    assert plan_write(CM, changed, patched).action is WriteAction.NONE
    # The same patch planned from the stale object is refused: the guard works.
    with pytest.raises(Conflict):
        await client.request(plan.request)


async def test_finalizer_patches_are_guarded(client: Client, kube_namespace: str) -> None:
    obj = await client.request(create_request(CM, _cm("fin", kube_namespace)))
    request = add_finalizer_request(CM, obj, "example.com/cleanup")
    assert request is not None
    with_finalizer = await client.request(request)
    assert with_finalizer["metadata"]["finalizers"] == ["example.com/cleanup"]
    assert add_finalizer_request(CM, with_finalizer, "example.com/cleanup") is None
    with pytest.raises(Conflict):  # planned from the object before the finalizer was added
        await client.request(add_finalizer_request(CM, obj, "example.com/other"))  # type: ignore[arg-type]
    request = remove_finalizer_request(CM, with_finalizer, "example.com/cleanup")
    assert request is not None
    cleared = await client.request(request)
    assert "finalizers" not in cleared["metadata"]


async def test_events_and_their_series_are_accepted(client: Client, kube_namespace: str) -> None:
    regarding = await client.request(create_request(CM, _cm("noisy", kube_namespace)))
    recorder = EventRecorder("example.com/widgets", "widgets-0", flush_interval=1.0)
    plan = recorder.record(
        regarding, "Warning", "SyncFailed", "it broke", action="Sync", now=0.0, wall=WALL
    )
    assert plan.outcome is EventOutcome.CREATED
    (create,) = plan.writes
    response = await client.send(create.request)
    assert response.status_code == 201, response.body
    recorder.receive_response(create, response, 0.0)
    created = json.loads(response.body)
    for i in range(1, 5):
        wall = WALL + timedelta(seconds=i / 10)
        plan = recorder.record(
            regarding, "Warning", "SyncFailed", "again", action="Sync", now=i / 10, wall=wall
        )
        assert plan.outcome is EventOutcome.COUNTED
        assert plan.writes == ()
    (update,) = recorder.flush(1.0)
    response = await client.send(update.request)
    recorder.receive_response(update, response, 1.0)
    assert response.status_code == 200, response.body
    updated = json.loads(response.body)
    assert updated["series"]["count"] == 5
    assert updated["series"]["lastObservedTime"] == "2026-11-30T12:00:00.523456Z"
    stored = await client.get(EVENTS, created["metadata"]["name"], namespace=kube_namespace)
    assert stored["regarding"]["uid"] == regarding["metadata"]["uid"]
    assert stored["eventTime"] == "2026-11-30T12:00:00.123456Z"
    assert stored["reportingController"] == "example.com/widgets"
