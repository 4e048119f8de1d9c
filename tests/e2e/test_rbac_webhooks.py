"""Self-managed webhooks and the RBAC derived for them, on the real kube-apiserver.

A replica whose start-up permission check found a rule missing writes nothing, not even
the webhooks' leader work (the certificate Secret, the webhook configurations) of a
Manager that does not elect a leader; and the derived rules are all the leader needs,
also when only one kind of webhook is declared (the leader still looks for a
configuration of the other kind to empty)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource
from kubemoon_core._rbac import rules_manifest
from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookDeclarations
from kubemoon_testing import ApiServer
from kubemoon_trio import Client, Manager
from kubemoon_trio._permissions import derived_rules

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")


@pytest.fixture
async def limited(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(
        str(kube_apiserver.kubeconfig_path), context="limited"
    ) as client:
        yield client


async def test_no_webhook_write_before_a_failed_check_without_election(
    kube_apiserver: ApiServer, kube_namespace: str, limited: Client
) -> None:
    namespace = kube_namespace
    # The Secret may be written, the webhook configurations may not: the check fails.
    kube_apiserver.grant_namespace_access(
        namespace, verbs=("get", "create", "update"), resources=("secrets",)
    )
    sent: list[tuple[str, str]] = []
    send = limited.send

    async def recording(request: Any, *, timeout: float | None = None) -> Any:
        sent.append((request.method, request.path))
        return await send(request, timeout=timeout)

    limited.send = recording  # type: ignore[method-assign]
    hooks = WebhookDeclarations(f"g{namespace[-8:]}")

    @hooks.validating("/validate-cm", CM, namespace_selector={"matchLabels": {"no": "one"}})
    def validate(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    manager = Manager(limited, name="kubemoon.dev/gate-test")
    assert manager.election is None and manager.check_permissions
    secret = f"/api/v1/namespaces/{namespace}/secrets/{hooks.name}-certs"
    manager.serve_webhooks(
        hooks, host="127.0.0.1", port=0, secret=(namespace, f"{hooks.name}-certs"), refresh=0.2
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        with trio.fail_after(30):
            while manager.permission_problem is None:
                await trio.sleep(0.05)
            # Every replica keeps re-reading the Secret: once it has done so three times
            # after the check answered, an ungated leader pass would long have written.
            seen = len(sent)
            while sum(1 for m, p in sent[seen:] if (m, p) == ("GET", secret)) < 3:
                await trio.sleep(0.05)
        manager.stop()
    assert "validatingwebhookconfigurations" in manager.permission_problem
    writes = [(m, p) for m, p in sent if m != "GET" and "selfsubjectaccessreviews" not in p]
    assert writes == []
    answer = kube_apiserver.request("GET", secret)
    assert answer.status == 404, answer.body[:200]


RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


def _grant_limited(server: ApiServer, rules: Any, suffix: str) -> list[str]:
    """Install ``rules`` for the user ``limited``; the cluster-wide objects' paths."""
    created: list[str] = []
    documents = rules_manifest(
        rules, name=f"gate-{suffix}", service_account="unused", service_account_namespace="x"
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
        if not where:
            created.append(f"{path}/{meta['name']}")
    return created


async def test_the_derived_rules_suffice_with_only_a_validating_webhook(
    kube_apiserver: ApiServer, kube_namespace: str, limited: Client
) -> None:
    namespace = kube_namespace
    hooks = WebhookDeclarations(f"v{namespace[-8:]}")

    @hooks.validating("/validate-cm", CM, namespace_selector={"matchLabels": {"no": "one"}})
    def validate(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    manager = Manager(limited, name="kubemoon.dev/gate-test")
    webhooks = manager.serve_webhooks(
        hooks, host="127.0.0.1", port=0, secret=(namespace, f"{hooks.name}-certs"), resync=0.2
    )
    created = _grant_limited(kube_apiserver, derived_rules(manager), namespace[-8:])
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            with trio.fail_after(30):
                # A pass that applied everything, or a refused request: whichever first.
                while webhooks.applied == 0 and not [
                    p for p in manager.readiness_problems() if "forbidden" in p
                ]:
                    await trio.sleep(0.05)
            problems = manager.readiness_problems()
            manager.stop()
        assert manager.permission_problem is None
        assert webhooks.applied >= 1, problems
    finally:
        for path in created:
            kube_apiserver.request("DELETE", path)
        kube_apiserver.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{hooks.name}-validating",
        )
