"""ConfigMirror end to end, against the real kube-apiserver: every behaviour of issue 6,
opt-in target namespaces (issue 15) and its Events (issue 11)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import trio
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import (
    ACCEPT_MIRRORS_SELECTOR,
    CONFIGMAPS,
    CONFIGMIRRORS,
    DATA_DIGEST_ANNOTATION,
    FINALIZER,
    NAMESPACES,
    OWNER_UID_ANNOTATION,
    data_digest,
)
from kubemoon_core import EVENTS
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import CacheReader, Client

pytestmark = pytest.mark.integration

BINARY = base64.b64encode(b"\x00\x01binary").decode()


def configmap(
    name: str, data: dict[str, str], binary: dict[str, str] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data,
    }
    if binary:
        obj["binaryData"] = binary
    return obj


def mirror(name: str, source: str, targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": name},
        "spec": {"source": source, "targetNamespaces": targets},
    }


async def get_or_none(
    client: Client, resource: Any, name: str, namespace: str
) -> dict[str, Any] | None:
    try:
        return await client.get(resource, name, namespace=namespace)
    except NotFound:
        return None


def ready(obj: dict[str, Any] | None) -> tuple[str, str, str] | None:
    if obj is None:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return cond["status"], cond["reason"], cond["message"]
    return None


class Scenario:
    """Namespaces for one test: the mirror's own and some targets (accepting copies)."""

    def __init__(
        self, server: ApiServer, client: Client, targets: int = 2, *, accept: bool = True
    ) -> None:
        self.client = client
        self.home = server.create_namespace(prefix="cm-home")
        self.targets = [server.create_namespace(prefix="cm-target") for _ in range(targets)]
        for target in self.targets if accept else ():
            accept_mirrors(server, target)

    async def copy(self, namespace: str, name: str = "settings") -> dict[str, Any] | None:
        return await get_or_none(self.client, CONFIGMAPS, name, namespace)

    async def mirror(self, name: str = "m") -> dict[str, Any] | None:
        return await get_or_none(self.client, CONFIGMIRRORS, name, self.home)

    async def ready(self, name: str = "m") -> tuple[str, str, str] | None:
        return ready(await self.mirror(name))

    async def copies_are(self, data: dict[str, str]) -> bool:
        """True when every target holds a copy with exactly ``data``."""
        copies = [await self.copy(t) for t in self.targets]
        return all(c is not None and c.get("data") == data for c in copies)


@pytest.fixture
def scenario(configmirror_api: ApiServer, client: Client) -> Scenario:
    return Scenario(configmirror_api, client)


async def test_mirrors_updates_and_heals(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(
        CONFIGMAPS, configmap("settings", {"a": "1"}, {"b": BINARY}), namespace=s.home
    )
    created = await client.create(
        CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home
    )
    await start_operator(namespaces=(s.home,))

    await eventually(lambda: s.copies_are({"a": "1"}), what="copies created")
    copy = await s.copy(s.targets[0])
    assert copy is not None
    assert copy["binaryData"] == {"b": BINARY}
    assert copy["metadata"]["annotations"][OWNER_UID_ANNOTATION] == created["metadata"]["uid"]
    assert copy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubemoon-configmirror"
    assert await eventually(s.ready, what="Ready") == (
        "True",
        "Synced",
        "mirrored to 2 namespace(s)",
    )
    observed = await s.mirror()
    assert observed is not None
    assert FINALIZER in observed["metadata"]["finalizers"]
    assert observed["status"]["observedGeneration"] == observed["metadata"]["generation"]

    source = await client.get(CONFIGMAPS, "settings", namespace=s.home)
    source["data"] = {"a": "2"}
    await client.replace(CONFIGMAPS, source, namespace=s.home)
    await eventually(lambda: s.copies_are({"a": "2"}), what="source update propagated")

    await client.delete(CONFIGMAPS, "settings", namespace=s.targets[1])
    await eventually(lambda: s.copies_are({"a": "2"}), what="deleted copy re-created")


async def test_a_copy_edited_behind_its_digest_is_repaired(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    """Copies are cached as metadata only and carry the digest of the data the operator
    wrote: a tenant that edits a copy's data (or binaryData) and leaves the annotation as it
    was is still repaired, whether the operator runs or was stopped meanwhile."""
    s = scenario
    await client.create(
        CONFIGMAPS, configmap("settings", {"a": "1"}, {"b": BINARY}), namespace=s.home
    )
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    running = await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.copies_are({"a": "1"}), what="copies created")
    written = await s.copy(s.targets[0])
    assert written is not None
    digest = written["metadata"]["annotations"][DATA_DIGEST_ANNOTATION]
    assert digest == data_digest(written)

    async def repaired(namespace: str) -> bool:
        found = await s.copy(namespace)
        return (
            found is not None
            and found.get("data") == {"a": "1"}
            and found.get("binaryData") == {"b": BINARY}
            and found["metadata"]["annotations"][DATA_DIGEST_ANNOTATION] == digest
        )

    written["data"] = {"a": "edited"}
    await client.replace(CONFIGMAPS, written, namespace=s.targets[0])
    await eventually(lambda: repaired(s.targets[0]), what="the edited data repaired")
    other = await s.copy(s.targets[1])
    assert other is not None
    other["binaryData"] = {"b": base64.b64encode(b"other").decode()}
    await client.replace(CONFIGMAPS, other, namespace=s.targets[1])
    await eventually(lambda: repaired(s.targets[1]), what="the edited binaryData repaired")
    # Edited while no operator runs: the next one reads the copy (its version is not one
    # it knows) and repairs it.
    await running.stop()
    behind = await s.copy(s.targets[0])
    assert behind is not None
    behind["data"] = {"a": "edited while stopped"}
    await client.replace(CONFIGMAPS, behind, namespace=s.targets[0])
    await start_operator(namespaces=(s.home,))
    await eventually(lambda: repaired(s.targets[0]), what="repaired by the next operator")
    assert await repaired(s.targets[1])


async def test_an_unmanaged_configmap_is_never_touched(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    theirs = await client.create(
        CONFIGMAPS, configmap("settings", {"mine": "yes"}), namespace=s.targets[1]
    )
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await start_operator(namespaces=(s.home,))

    async def conflict() -> tuple[str, str, str] | None:
        state = await s.ready()
        return state if state and state[1] == "TargetConflict" else None

    status, _, message = await eventually(conflict, what="TargetConflict")
    assert status == "False"
    assert f"{s.targets[1]}/settings" in message
    assert (await s.copy(s.targets[0]) or {}).get("data") == {"a": "1"}
    await trio.sleep(1.0)  # give a wrong write time to happen
    assert await s.copy(s.targets[1]) == theirs


async def test_a_removed_namespace_loses_its_copy(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.copy(s.targets[1]), what="copy in the second namespace")
    await client.patch(
        CONFIGMIRRORS, "m", {"spec": {"targetNamespaces": s.targets[:1]}}, namespace=s.home
    )

    async def gone() -> bool:
        return await s.copy(s.targets[1]) is None

    await eventually(gone, what="copy deleted from the removed namespace")
    assert await s.copy(s.targets[0]) is not None


async def test_deletion_cleans_up_before_the_finalizer_goes(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.ready(), what="Ready")
    await client.delete(CONFIGMIRRORS, "m", namespace=s.home)

    async def mirror_gone() -> bool:
        current = await s.mirror()
        if current is not None:
            # While the mirror still exists the finalizer holds it.
            assert FINALIZER in current["metadata"]["finalizers"]
            return False
        return True

    await eventually(mirror_gone, what="the ConfigMirror to be gone")
    for target in s.targets:
        assert await s.copy(target) is None
    # The source itself is not a copy and stays.
    assert await get_or_none(client, CONFIGMAPS, "settings", s.home) is not None


async def test_a_look_alike_outside_the_targets_survives_the_mirror(
    configmirror_api: ApiServer, scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    """Issue 31: a ConfigMap of the source's name in a namespace the mirror does not target,
    given the managed-by label and the mirror's UID by someone who may update it (not
    necessarily delete it), was deleted by the operator, while the mirror lived (as a copy
    in a namespace no longer wanted) and on cleanup. Only copies whose UID the mirror's
    status recorded are deleted outside its targets."""
    s = scenario
    elsewhere = configmirror_api.create_namespace(prefix="cm-elsewhere")
    accept_mirrors(configmirror_api, elsewhere)  # accepts copies, but is no target of m
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    created = await client.create(
        CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home
    )
    await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.copies_are({"a": "1"}), what="copies created")

    theirs = configmap("settings", {"theirs": "yes"})
    theirs["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kubemoon-configmirror"}
    theirs["metadata"]["annotations"] = {OWNER_UID_ANNOTATION: created["metadata"]["uid"]}
    await client.create(CONFIGMAPS, theirs, namespace=elsewhere)
    # A source change reconciles the mirror: it must leave the look-alike alone.
    source = await client.get(CONFIGMAPS, "settings", namespace=s.home)
    source["data"] = {"a": "2"}
    await client.replace(CONFIGMAPS, source, namespace=s.home)
    await eventually(lambda: s.copies_are({"a": "2"}), what="the change mirrored")
    await trio.sleep(1.0)  # give a wrong delete time to happen
    assert await s.copy(elsewhere) is not None, "deleted while the mirror lived"

    async def recorded() -> bool:
        status = (await s.mirror() or {}).get("status") or {}
        uids = {t["namespace"]: t.get("uid") for t in status.get("targets") or []}
        copies = [await s.copy(t) for t in s.targets]
        return all(
            c is not None and uids.get(t) == c["metadata"]["uid"]
            for t, c in zip(s.targets, copies, strict=True)
        )

    await eventually(recorded, what="the copies' UIDs recorded in the status")
    await client.delete(CONFIGMIRRORS, "m", namespace=s.home)

    async def mirror_gone() -> bool:
        return await s.mirror() is None

    await eventually(mirror_gone, what="the ConfigMirror gone")
    for target in s.targets:
        assert await s.copy(target) is None
    left = await s.copy(elsewhere)
    assert left is not None and left.get("data") == {"theirs": "yes"}, "deleted on cleanup"


async def test_a_missing_source_is_reported_and_recovers(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await start_operator(namespaces=(s.home,))
    status, reason, message = await eventually(s.ready, what="SourceNotFound")
    assert (status, reason) == ("False", "SourceNotFound")
    assert f"{s.home}/settings" in message
    await client.create(CONFIGMAPS, configmap("settings", {"late": "1"}), namespace=s.home)

    async def recovered() -> bool:
        return (await s.ready() or ("",))[0] == "True"

    await eventually(recovered, what="recovery once the source appears")
    assert (await s.copy(s.targets[0]) or {}).get("data") == {"late": "1"}


async def test_steady_state_and_restart_make_no_writes(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    first = await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.ready(), what="Ready")
    await trio.sleep(1.0)
    settled = first.operator.writes
    assert settled >= 4  # finalizer, two copies, status
    await trio.sleep(2.0)
    assert first.operator.writes == settled, "writes in steady state"
    await first.stop()
    second = await start_operator(namespaces=(s.home,))
    await eventually(lambda: trio.to_thread.run_sync(lambda: second.reconciling), what="sync")
    await trio.sleep(2.0)
    ((_, metrics),) = second.operator.manager.controller_metrics()
    assert metrics.reconcile_total.get("success", 0) >= 1
    assert second.operator.writes == 0, "a restarted operator rewrote converged objects"
    # Its caches hold no data: it read each copy once to know what it holds.
    assert second.operator.copy_reads == len(s.targets)


async def test_a_stale_write_gets_409_and_requeues(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    from kubemoon_core import ObjectKey, Requeue
    from kubemoon_core.lowlevel import WorkItem
    from kubemoon_trio import ReconcileContext

    s = scenario
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    running = await start_operator(namespaces=(s.home,))
    await eventually(lambda: s.ready(), what="Ready")
    running.crash()
    await running.exited.wait()
    operator = running.operator  # its caches are now frozen in the past
    # Someone edits a copy behind the stopped operator's back, and the source changes.
    copy = await s.copy(s.targets[0])
    assert copy is not None
    copy["data"] = {"a": "edited by someone"}
    edited = await client.replace(CONFIGMAPS, copy, namespace=s.targets[0])
    source = await client.get(CONFIGMAPS, "settings", namespace=s.home)
    source["data"] = {"a": "2"}
    operator.configmaps.store.upsert(await client.replace(CONFIGMAPS, source, namespace=s.home))
    # The cached copy still has its old resourceVersion: the update must be refused.
    (controller,) = operator.manager.controllers
    caches = {
        CONFIGMIRRORS: controller.primary,
        CONFIGMAPS: CacheReader(operator.configmaps),
        NAMESPACES: CacheReader(operator.namespaces),
    }
    ctx = ReconcileContext(
        controller=controller.name,
        item=WorkItem(ObjectKey(s.home, "m"), reconcile_id=1, started=0.0, requeues=0),
        client=operator.manager.client,
        primary=controller.primary,
        primary_resource=CONFIGMIRRORS,
        primary_kind=None,
        caches=caches,
        events=operator.manager.events,
    )
    assert await operator.reconcile(ctx) == Requeue()
    assert await s.copy(s.targets[0]) == edited
    # A fresh replica, with fresh caches, converges.
    await start_operator(namespaces=(s.home,))

    await eventually(lambda: s.copies_are({"a": "2"}), what="convergence after the conflict")


async def test_targets_are_opt_in_and_a_label_change_converges(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator
) -> None:
    s = Scenario(configmirror_api, client, accept=False)
    refusing, accepting = s.targets
    accept_mirrors(configmirror_api, accepting)
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    await start_operator(namespaces=(s.home,))

    async def reason(expected: str) -> tuple[str, str, str] | None:
        state = await s.ready()
        return state if state and state[1] == expected else None

    status, _, message = await eventually(lambda: reason("TargetNotAllowed"), what="refusal")
    assert status == "False"
    assert refusing in message and accepting not in message
    assert ACCEPT_MIRRORS_SELECTOR in message
    assert (await s.copy(accepting) or {}).get("data") == {"a": "1"}
    observed = await s.mirror()
    assert observed is not None
    states = {t["namespace"]: t["state"] for t in observed["status"]["targets"]}
    assert states == {refusing: "NotAllowed", accepting: "Synced"}
    await trio.sleep(1.0)  # give a wrong write time to happen
    assert await s.copy(refusing) is None
    names = {c["metadata"]["name"] async for c in client.list(CONFIGMAPS, namespace=refusing)}
    assert "settings" not in names

    # Opting in converges without touching the mirror.
    accept_mirrors(configmirror_api, refusing)
    await eventually(lambda: s.copies_are({"a": "1"}), what="the copy in the labelled namespace")
    await eventually(lambda: reason("Synced"), what="Ready=True after the label")

    # Opting out deletes the managed copy there, and only there.
    accept_mirrors(configmirror_api, refusing, accept=False)

    async def copy_gone() -> bool:
        return await s.copy(refusing) is None

    await eventually(copy_gone, what="the copy deleted after the label was removed")
    _, _, message = await eventually(lambda: reason("TargetNotAllowed"), what="refusal again")
    assert refusing in message
    assert (await s.copy(accepting) or {}).get("data") == {"a": "1"}


async def test_a_missing_source_is_an_event_in_the_events_api(
    scenario: Scenario, client: Client, start_operator: StartOperator
) -> None:
    s = scenario
    created = await client.create(
        CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home
    )
    await start_operator(namespaces=(s.home,))

    async def source_not_found() -> list[dict[str, Any]]:
        events = [e async for e in client.list(EVENTS, namespace=s.home)]
        return [e for e in events if e.get("reason") == "SourceNotFound"]

    (event,) = await eventually(source_not_found, what="a SourceNotFound Event")
    # Listed from events.k8s.io/v1: its shape (regarding, note), not core/v1's.
    assert EVENTS.group == "events.k8s.io"
    assert event["type"] == "Warning"
    assert event["regarding"]["kind"] == "ConfigMirror"
    assert event["regarding"]["name"] == "m"
    assert event["regarding"]["uid"] == created["metadata"]["uid"]
    assert f"{s.home}/settings" in event["note"]
    assert event["reportingController"] == "kubemoon.dev/configmirror"
