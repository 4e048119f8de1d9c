"""ConfigMirror runs with exactly the RBAC of ``deploy/overlays/cert-manager/rbac.yaml`` on the real apiserver.

The operator authenticates as a ServiceAccount bound to the manifest's ClusterRole and
leader-election Role (and nothing else), and goes through everything it does: caches,
an Event, the finalizer, copies created, updated and deleted, a refused target, status,
the Lease taken and released. A missing verb shows up as a forbidden LIST (not ready),
a write that fails, or an Event that never appears.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from conftest import accept_mirrors, eventually
from overlays import RBAC_KINDS, rendered
from test_configmirror import Scenario, configmap, mirror

from configmirror import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    ConfigMirrorOperator,
    ConfigMirrorWebhooks,
    OperatorOptions,
)
from configmirror._webhooks import mutate
from kubemoon_core import EVENTS, LEASES, GroupVersionKind, GroupVersionResource
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import AdmissionRequest, Operation, UserInfo
from kubemoon_io import load_in_cluster_config
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, LeaderElectionConfig

pytestmark = pytest.mark.integration

BASE_RBAC = Path(__file__).parents[2] / "deploy" / "overlays" / "cert-manager" / "rbac.yaml"
# A file to install instead of the overlay's rendered RBAC (a test that removes a rule).
RBAC_FILE: Path | None = None
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


def checked(server: ApiServer, method: str, path: str, body: Any) -> dict[str, Any]:
    response = server.request(method, path, body=body)
    assert response.status in (200, 201), f"{method} {path}: {response.body[:300]!r}"
    result: dict[str, Any] = response.json()
    return result


def install_rbac(
    server: ApiServer, namespace: str, suffix: str, overlay: str = "cert-manager"
) -> str:
    """Create the RBAC objects of the rendered ``overlay`` (or of :data:`RBAC_FILE`) for
    a ServiceAccount in ``namespace``; its username."""
    documents = (
        list(yaml.safe_load_all(RBAC_FILE.read_text()))
        if RBAC_FILE is not None
        else rendered(overlay, RBAC_KINDS)
    )
    for doc in documents:
        kind, meta = doc["kind"], doc["metadata"]
        if "namespace" in meta:
            meta["namespace"] = namespace  # kubemoon-system, here a test namespace
        if kind.startswith("Cluster"):
            meta["name"] = f"{meta['name']}-{suffix}"  # cluster-wide: one per test run
            if kind == "ClusterRoleBinding":
                doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        for subject in doc.get("subjects", ()):
            subject["namespace"] = namespace
        path = {
            "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
            "ClusterRole": f"{RBAC_API}/clusterroles",
            "ClusterRoleBinding": f"{RBAC_API}/clusterrolebindings",
            "Role": f"{RBAC_API}/namespaces/{namespace}/roles",
            "RoleBinding": f"{RBAC_API}/namespaces/{namespace}/rolebindings",
        }[kind]
        checked(server, "POST", path, doc)
    return f"system:serviceaccount:{namespace}:configmirror"


def wait_until_allowed(server: ApiServer, user: str, namespace: str) -> None:
    """The RBAC authorizer reads roles from an informer: ask until it has caught up."""
    attributes = [
        {"verb": "list", "group": "", "resource": "namespaces"},
        {"verb": "get", "group": "coordination.k8s.io", "resource": "leases"},
    ]
    deadline = time.monotonic() + 10
    for attrs in attributes:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": {**attrs, "namespace": namespace}},
        }
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        while not checked(server, "POST", path, review).get("status", {}).get("allowed"):
            assert time.monotonic() < deadline, f"RBAC never allowed {user} {attrs}"
            time.sleep(0.05)


def service_account_client(server: ApiServer, namespace: str, directory: Path) -> Client:
    """A client that authenticates with a fresh token of the ``configmirror`` account."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/configmirror/token"
    token = checked(server, "POST", path, request)["status"]["token"]
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_text(server.ca_pem)
    (directory / "namespace").write_text(namespace)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
    return Client(load_in_cluster_config(base_dir=str(directory), env=env))


async def test_the_operator_needs_nothing_beyond_deploy_rbac(
    configmirror_api: ApiServer, client: Client, tmp_path: Path, nursery: trio.Nursery
) -> None:
    server = configmirror_api
    operator_namespace = server.create_namespace(prefix="cm-system")
    user = install_rbac(server, operator_namespace, secrets.token_hex(4))
    wait_until_allowed(server, user, operator_namespace)
    s = Scenario(server, client, targets=3)
    refusing = s.targets[2]
    accept_mirrors(server, refusing, accept=False)

    # Created before its source: a SourceNotFound Event must be written.
    await client.create(CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home)
    election = LeaderElectionConfig("kubemoon-configmirror", operator_namespace, identity="sa")
    async with service_account_client(server, operator_namespace, tmp_path) as sa_client:
        operator = ConfigMirrorOperator(
            sa_client, OperatorOptions(namespaces=(s.home,), leader_election=election)
        )
        manager = operator.manager
        done = trio.Event()

        async def run() -> None:
            await manager.run()
            done.set()

        nursery.start_soon(run)
        with trio.fail_after(20):
            await manager.wait_synced()
            await manager.wait_leading()

        async def event_written() -> bool:
            events = [e async for e in client.list(EVENTS, namespace=s.home)]
            return any(e.get("reason") == "SourceNotFound" for e in events)

        await eventually(event_written, what="the SourceNotFound Event")
        await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=s.home)
        accepting = s.targets[:2]

        async def copies(data: dict[str, str]) -> bool:
            found = [await s.copy(t) for t in accepting]
            return all(c is not None and c.get("data") == data for c in found)

        await eventually(lambda: copies({"a": "1"}), what="copies created")
        source = await client.get(CONFIGMAPS, "settings", namespace=s.home)
        source["data"] = {"a": "2"}
        await client.replace(CONFIGMAPS, source, namespace=s.home)
        await eventually(lambda: copies({"a": "2"}), what="copies updated")
        state = await eventually(s.ready, what="a Ready condition")
        assert state[1] == "TargetNotAllowed"
        assert await s.copy(refusing) is None
        # The Namespace watch sees the label arrive.
        accept_mirrors(server, refusing)
        accepting = s.targets
        await eventually(lambda: copies({"a": "2"}), what="the copy in the labelled namespace")

        await client.delete(CONFIGMIRRORS, "m", namespace=s.home)

        async def mirror_gone() -> bool:
            return await s.mirror() is None

        await eventually(mirror_gone, what="the finalizer removed after the cleanup")
        assert [await s.copy(t) for t in accepting] == [None, None, None]
        # Nothing was refused: no LIST or WATCH failure, no failed reconcile. (The 404 of
        # the first GET of the Lease, before creating it, is not a refusal; the runtime
        # keeps reporting it: see test_readyz_is_ok_when_the_lease_did_not_exist.)
        problems = manager.readiness_problems()
        assert [p for p in problems if not p.startswith("leases: get not found")] == []
        ((_, metrics),) = manager.controller_metrics()
        assert metrics.reconcile_errors_total == 0
        assert operator.writes >= 9  # finalizer, 3 creates, 2 updates, 3 deletes, status...
        manager.stop()
        with trio.fail_after(20):
            await done.wait()
    lease = await client.get(LEASES, "kubemoon-configmirror", namespace=operator_namespace)
    assert not lease["spec"].get("holderIdentity")  # released: the PUT was allowed


async def test_the_webhooks_access_reviews_need_nothing_beyond_deploy_rbac(
    configmirror_api: ApiServer, tmp_path: Path
) -> None:
    """The validating webhook, as the operator's ServiceAccount, asks the real apiserver
    about a tenant: ``get`` on the source, ``create`` in each target, on a pool of its own."""
    server = configmirror_api
    operator_namespace = server.create_namespace(prefix="cm-system")
    user = install_rbac(server, operator_namespace, secrets.token_hex(4))
    wait_until_allowed(server, user, operator_namespace)
    home = server.create_namespace(prefix="cm-home")
    target = server.create_namespace(prefix="cm-target")
    server.grant_namespace_access(home, verbs=("get",))  # the tenant may read the source
    alpha = mirror("m", "settings", [target])

    def request(obj: dict[str, Any]) -> AdmissionRequest:
        raw = AdmissionRequest(
            uid="1",
            kind=GroupVersionKind("kubemoon.dev", "v1alpha1", "ConfigMirror"),
            resource=GroupVersionResource("kubemoon.dev", "v1alpha1", "configmirrors"),
            operation=Operation.CREATE,
            user_info=UserInfo("limited", groups=("system:authenticated",)),
            name="m",
            namespace=home,
            object=obj,
        )
        # As the apiserver sends it: with the mutating webhook's patch (the author) applied.
        patch = [dict(op) for op in mutate(raw).patch]
        return dataclasses.replace(raw, object=apply_json_patch(obj, patch))

    try:
        async with (
            service_account_client(server, operator_namespace, tmp_path) as sa_client,
            ConfigMirrorWebhooks(sa_client, decision_ttl=0) as hooks,
        ):
            verdict = await hooks.validate(request(alpha))
            assert not verdict.allowed
            assert f"user 'limited' may not create ConfigMaps in namespace {target!r}" in (
                verdict.message
            )
            assert "may not get" not in verdict.message  # the source is readable
            server.grant_namespace_access(target, verbs=("create",))
            assert (await hooks.validate(request(alpha))).allowed
            # A selector needs the right in every namespace, which the tenant lacks.
            selecting = {**alpha, "metadata": {**alpha["metadata"]}}
            selecting["metadata"]["annotations"] = {
                "kubemoon.dev/v1beta1-namespace-selector": '{"matchLabels":{"team":"b"}}'
            }
            verdict = await hooks.validate(request(selecting))
            assert "may not create ConfigMaps in all namespaces" in verdict.message
            # More targets than the cap: two reviews (the source, and the right in every
            # namespace that would cover them all), then a denial naming the cap.
            many = mirror("m", "settings", [f"t-{i:02d}" for i in range(25)])
            verdict = await hooks.validate(request(many))
            assert "needs 26 access reviews, more than the 20 one admission request" in (
                verdict.message
            )
            # Every review went out on the webhooks' own pool, none on the operator's.
            assert hooks.reviews_sent == 9
            assert isinstance(hooks.review_client, Client)
            assert sum(hooks.review_client.request_counts.values()) == 9
            assert sum(sa_client.request_counts.values()) == 0
    finally:
        for namespace in (operator_namespace, home, target):
            server.delete_namespace(namespace)
