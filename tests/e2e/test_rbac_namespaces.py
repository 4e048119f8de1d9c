"""The derived RBAC of a namespaced controller, on the real kube-apiserver: each informer
is granted where it lists and watches (a ``watches`` source is cluster-wide unless given a
namespace, whatever the primary's namespace), so the start-up check and the runtime agree;
and a namespaced operator's Events are granted in its namespace, not cluster-wide."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, ObjectKey, Reconciled
from kubemoon_core._rbac import rules_manifest
from kubemoon_core.builtin import ConfigMap, Secret
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager
from kubemoon_trio._permissions import derived_rules

pytestmark = pytest.mark.integration

NAMESPACES = GroupVersionResource("", "v1", "namespaces")
SECRETS = GroupVersionResource("", "v1", "secrets")
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
async def limited(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(
        str(kube_apiserver.kubeconfig_path), context="limited"
    ) as client:
        yield client


def grant_limited(server: ApiServer, rules: Any, suffix: str) -> list[str]:
    """Install ``rules`` for the user ``limited``; the paths of what was created."""
    created: list[str] = []
    documents = rules_manifest(
        rules, name=f"ns-{suffix}", service_account="unused", service_account_namespace="x"
    )
    for doc in documents:
        kind, meta = doc["kind"], doc["metadata"]
        if kind == "ServiceAccount":
            continue
        body = dict(doc)
        if "subjects" in body:
            body["subjects"] = [
                {"kind": "User", "name": "limited", "apiGroup": "rbac.authorization.k8s.io"}
            ]
        where = f"/namespaces/{meta['namespace']}" if "namespace" in meta else ""
        path = f"{RBAC_API}{where}/{kind.lower()}s"
        answer = server.request("POST", path, body=body)
        assert answer.status == 201, answer.body[:300]
        created.append(f"{path}/{meta['name']}")
    return created


def nothing(change: Any) -> Iterable[ObjectKey]:
    return ()


async def test_a_namespaced_controller_watching_a_cluster_wide_kind(
    kube_apiserver: ApiServer, kube_namespace: str, limited: Client
) -> None:
    namespace = kube_namespace
    other = kube_apiserver.create_namespace(prefix="rbac-other")

    async def reconcile(ctx: Any) -> Any:
        return Reconciled()

    manager = Manager(limited, name="kubemoon.dev/ns-test")
    (
        manager.controller("cms", ConfigMap, namespace=namespace)
        .watches(NAMESPACES, nothing)  # no namespace: every namespace, cluster-wide
        .watches(SECRETS, nothing, namespace=other)  # only the other namespace
        .complete(reconcile)
    )
    rules = derived_rules(manager)
    where = {(r.namespace, r.resource) for r in rules}
    assert (None, "namespaces") in where
    assert (other, "secrets") in where and (None, "secrets") not in where
    created = grant_limited(kube_apiserver, rules, namespace[-8:])
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            with trio.fail_after(30):
                # Synced, or a refused LIST: whichever comes first.
                while not manager.informers.synced and not [
                    p for p in manager.readiness_problems() if "forbidden" in p
                ]:
                    await trio.sleep(0.05)
            problems = manager.readiness_problems()
            synced = manager.informers.synced
            manager.stop()
        assert manager.permission_problem is None
        assert synced, problems
    finally:
        for path in reversed(created):
            kube_apiserver.request("DELETE", path)


async def test_a_namespaced_operator_gets_only_roles_and_they_suffice(
    kube_apiserver: ApiServer, kube_namespace: str, limited: Client
) -> None:
    """Every informer in one namespace: Events are granted there, ConfigMaps (no status
    subresource) get no ``configmaps/status`` rule, and no ClusterRole is needed; the
    operator runs with that, writes its owned Secret and records its Event."""
    namespace = kube_namespace
    done = trio.Event()

    async def reconcile(ctx: Any) -> Any:
        if ctx.obj is not None and ctx.name == "source":
            await ctx.ensure(Secret(metadata={"name": "derived"}, string_data={"k": "v"}))
            ctx.events.record(ctx.obj, "Normal", "Derived", "the Secret is written")
            done.set()
        return Reconciled()

    manager = Manager(limited, name="kubemoon.dev/ns-test")
    manager.controller("cms", ConfigMap, namespace=namespace).owns(Secret).complete(reconcile)
    rules = derived_rules(manager)
    assert {r.namespace for r in rules} == {namespace}, rules
    assert [r.resource for r in rules] == ["configmaps", "secrets", "events"], rules
    created = grant_limited(kube_apiserver, rules, namespace[-8:])
    source = {"metadata": {"name": "source", "namespace": namespace}, "data": {"a": "b"}}
    answer = kube_apiserver.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=source
    )
    assert answer.status == 201, answer.body[:300]
    events = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            with trio.fail_after(30):
                await done.wait()
                # The recorder writes the Event in the background.
                while not kube_apiserver.request("GET", events).json()["items"]:
                    await trio.sleep(0.05)
            problems = manager.readiness_problems()
            manager.stop()
        assert manager.permission_problem is None
        assert problems == []
        answer = kube_apiserver.request("GET", f"/api/v1/namespaces/{namespace}/secrets/derived")
        assert answer.status == 200, answer.body[:300]
    finally:
        for path in reversed(created):
            kube_apiserver.request("DELETE", path)
