"""ConfigMirror status changes on the real kube-apiserver: one Event per change of the
Ready condition however fast it flips, and a deleted source reported as SourceNotFound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core import EVENTS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

FLIPS = 6


def _mirror(targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {"source": "settings", "targetNamespaces": targets},
    }


def _source() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"a": "1"},
    }


async def _ready(client: Client, home: str) -> tuple[str, str] | None:
    try:
        obj = await client.get(CONFIGMIRRORS, "m", namespace=home)
    except NotFound:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return cond["status"], cond["reason"]
    return None


def _until(client: Client, home: str, want: tuple[str, str]) -> Callable[[], Any]:
    async def check() -> bool:
        return await _ready(client, home) == want

    return check


async def test_every_ready_change_is_exactly_one_event(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    """The Ready condition flips True/False/True... as fast as the operator reports it
    (each flip is made as soon as the previous one is in the stored status): every change
    is recorded as exactly one Event, none dropped, none repeated.

    Counted where the operator records them (its ``EventRecorder.record``, one call per
    occurrence, before the events.k8s.io series aggregation): the list must equal one entry
    per transition seen in the stored status, in order, after the operator stopped."""
    server = configmirror_api
    home = server.create_namespace(prefix="cm-home")
    steady = server.create_namespace(prefix="cm-target")
    flipping = server.create_namespace(prefix="cm-target")
    accept_mirrors(server, steady)
    accept_mirrors(server, flipping)
    await client.create(CONFIGMAPS, _source(), namespace=home)
    await client.create(CONFIGMIRRORS, _mirror([steady, flipping]), namespace=home)
    replica = await start_operator(namespaces=(home,))
    # Count what the operator records, occurrence by occurrence (an Event object on the
    # API server aggregates repeats into a series whose count is written later).
    recorded: list[tuple[str, str]] = []
    events = replica.operator.manager.events
    original = events.record

    def counting(regarding: Any, type: str, reason: str, note: str, **kw: Any) -> None:
        if (regarding.get("metadata") or {}).get("name") == "m":
            recorded.append((type, reason))
        original(regarding, type, reason, note, **kw)

    events.record = counting  # type: ignore[method-assign]
    await eventually(_until(client, home, ("True", "Synced")), what="first Synced")
    expected = [("Normal", "Synced")]
    for _ in range(FLIPS):
        accept_mirrors(server, flipping, accept=False)
        await eventually(_until(client, home, ("False", "TargetNotAllowed")), what="refused")
        expected.append(("Warning", "TargetNotAllowed"))
        accept_mirrors(server, flipping, accept=True)
        await eventually(_until(client, home, ("True", "Synced")), what="Synced again")
        expected.append(("Normal", "Synced"))

    async def all_recorded() -> bool:
        return len(recorded) >= len(expected)

    # Every transition happened (each was seen in the stored status): each must be
    # recorded; a dropped one leaves this waiting forever.
    await eventually(all_recorded, what=f"{len(expected)} Events, got {recorded}")
    await replica.stop()  # nothing is reconciled any more: no late duplicate either
    assert recorded == expected
    listed = [e async for e in client.list(EVENTS, namespace=home)]
    ours = [e for e in listed if e["regarding"]["name"] == "m"]
    # On the API server a repeated reason is one Event whose ``series.count`` is written at
    # the recorder's next flush (60 s), not one Event per occurrence: only the first
    # occurrence of each reason is asserted here, without waiting for the flush.
    assert {e["reason"] for e in ours} == {"Synced", "TargetNotAllowed"}


async def test_a_deleted_source_is_reported_and_its_copies_kept(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    server = configmirror_api
    home = server.create_namespace(prefix="cm-home")
    target = server.create_namespace(prefix="cm-target")
    accept_mirrors(server, target)
    await client.create(CONFIGMAPS, _source(), namespace=home)
    await client.create(CONFIGMIRRORS, _mirror([target]), namespace=home)
    await start_operator(namespaces=(home,))
    await eventually(_until(client, home, ("True", "Synced")), what="Synced")
    assert (await client.get(CONFIGMAPS, "settings", namespace=target))["data"] == {"a": "1"}
    await client.delete(CONFIGMAPS, "settings", namespace=home)
    await eventually(_until(client, home, ("False", "SourceNotFound")), what="SourceNotFound")
    # The copies stay as they were (the source may come back).
    assert (await client.get(CONFIGMAPS, "settings", namespace=target))["data"] == {"a": "1"}
