"""A typed mutating webhook on the real kube-apiserver, for a hand-written CRD whose
schema lacks a default the class declares: the apiserver applies the patch to the object
it sent, where that field is absent, so the patch must add it, not replace it."""

# No ``from __future__ import annotations``: the kind is declared inside the test (its
# group is random, so a rerun on the same apiserver needs no clean-up first).

import dataclasses
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from test_webhooks import (  # the fixtures, by name
    CRDS,
    MUTATING,
    TEST_LABEL,
    Webhook,
    client,
    configurations,
    eventually,
    inject,
    labelled_namespace,
)

from kubemoon_core import GroupVersionResource, WriteOptions, delete_request
from kubemoon_core.errors import NotFound
from kubemoon_core.typed import MetadataField, custom_resource
from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookDeclarations
from kubemoon_testing import WebhookCertificates
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

__all__ = ["client", "configurations", "labelled_namespace"]  # fixtures used by name


def box_kind(group: str) -> type:
    @dataclass(slots=True)
    class BoxSpec:
        cpu: str = "100m"  # the CRD's schema declares no default for it
        replicas: int = 1

    @custom_resource(group=group, version="v1")
    @dataclass(slots=True)
    class Box:
        spec: BoxSpec = field(default_factory=BoxSpec)
        metadata: MetadataField = MetadataField()

    return Box


async def test_a_typed_mutation_adds_a_default_the_request_lacked(
    client: Client,
    nursery: trio.Nursery,
    tmp_path: Path,
    labelled_namespace: str,
    configurations: list[Any],
) -> None:
    ns = labelled_namespace
    group = f"typed{secrets.token_hex(3)}.kubemoon.dev"
    box = box_kind(group)
    hooks = WebhookDeclarations("typed-patch")

    @hooks.mutating("/box", box)
    def more_cpu(request: AdmissionRequest[Any]) -> AdmissionResponse:
        obj = request.object
        assert obj is not None
        mutated = dataclasses.replace(obj, spec=dataclasses.replace(obj.spec, cpu="250m"))
        return AdmissionResponse.patched(obj, mutated)

    hook = Webhook(nursery, WebhookCertificates.create(tmp_path / "certs"), hooks.app())
    await hook.start()
    spec_schema = {
        "type": "object",
        "properties": {"cpu": {"type": "string"}, "replicas": {"type": "integer"}},
    }
    crd_name = f"boxes.{group}"
    await client.create(
        CRDS,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name},
            "spec": {
                "group": group,
                "names": {"kind": "Box", "plural": "boxes", "singular": "box"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {"spec": spec_schema},
                            }
                        },
                    }
                ],
            },
        },
    )
    name = f"kubemoon-typed-{ns}"
    configurations.append((MUTATING, name))
    try:
        created = await client.create(
            MUTATING,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": "box.kubemoon.dev",
                        "clientConfig": {"url": hook.url("/box")},
                        "rules": [
                            {
                                "apiGroups": [group],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["boxes"],
                                "scope": "Namespaced",
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {TEST_LABEL: ns}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 5,
                    }
                ],
            },
        )
        await inject(client, created, hook.certs.ca_bundle)
        boxes = GroupVersionResource(group, "v1", "boxes")
        # No spec at all: the schema has no default to fill it (or its cpu) in.
        bare = {"apiVersion": f"{group}/v1", "kind": "Box", "metadata": {"name": "bare"}}

        async def mutated() -> bool:
            try:
                probe = await client.create(
                    boxes, bare, namespace=ns, options=WriteOptions(dry_run=True)
                )
            except NotFound:  # the CRD is not served yet
                return False
            # A patch that does not apply is an ApiError raised here, failing the test.
            return bool(probe.get("spec", {}).get("cpu") == "250m")

        await eventually(mutated, "the typed mutating webhook to be called")
        stored = await client.create(boxes, bare, namespace=ns)
        assert stored["spec"] == {"cpu": "250m", "replicas": 1}
        # A spec without cpu: cpu added, replicas kept.
        partial = {**bare, "metadata": {"name": "partial"}, "spec": {"replicas": 2}}
        stored = await client.create(boxes, partial, namespace=ns)
        assert stored["spec"] == {"cpu": "250m", "replicas": 2}
    finally:
        await client.send(delete_request(CRDS, crd_name))
