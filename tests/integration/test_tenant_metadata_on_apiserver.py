"""A tenant's metadata on the real kube-apiserver, through typed objects: what the server
keeps (10,000 ownerReferences, thousands of labels, unknown fields in a template's
metadata under a generated CRD) decodes, survives an update of the spec unchanged, and
reads cheaply through the deprecated mapping view; unknown fields at the top of a custom
resource's metadata never arrive (the server prunes them). Attack 37.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from test_typed_crds import install

from kubemoon_core.json_backends import decode_json
from kubemoon_core.typed import MetadataField, custom_resource, resource_info
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration


@dataclass(slots=True, kw_only=True)
class RunnerTemplate:
    """What each run starts from."""

    metadata: MetadataField = MetadataField()
    image: str = "busybox"


@dataclass(slots=True, kw_only=True)
class RunnerSpec:
    """The desired runs."""

    replicas: int = 1
    template: RunnerTemplate = field(default_factory=RunnerTemplate)


@custom_resource(group="attack37.kubemoon.dev", version="v1")
@dataclass(slots=True, kw_only=True)
class Runner:
    """A tenant's runner: its spec embeds an ObjectMeta, as a pod template does."""

    spec: RunnerSpec = field(default_factory=RunnerSpec)
    metadata: MetadataField = MetadataField()


OWNERS = [
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": f"n{i}",
        "uid": f"00000000-0000-0000-0000-{i:012d}",
    }
    for i in range(10_000)
]
LABELS = {f"tenant.example.com/l{i}": "v" * 63 for i in range(3_000)}
TEMPLATE_META = {"labels": {"app": "r"}, "futureTemplateField": {"deep": [1, {"x": None}]}}


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    install(kube_apiserver, Runner)
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


@pytest.mark.filterwarnings("ignore:reading a typed object's metadata as a mapping")
async def test_a_tenants_metadata_round_trips_through_a_typed_update(
    kube_apiserver: ApiServer, kube_namespace: str, client: Client
) -> None:
    info = resource_info(Runner)
    url = f"{info.gvr.group_version.api_path}/namespaces/{kube_namespace}/{info.plural}"
    tenant_object = {
        "apiVersion": info.api_version,
        "kind": "Runner",
        "metadata": {
            "name": "r",
            "labels": LABELS,
            "ownerReferences": OWNERS,
            "futureField": {"a": 1},  # pruned by the server: never reaches a decoder
        },
        "spec": {"replicas": 1, "template": {"metadata": TEMPLATE_META}},
    }
    created = kube_apiserver.request("POST", url, body=tenant_object, timeout=60)
    assert created.status == 201, created.body[:300]
    stored = kube_apiserver.request("GET", f"{url}/r").json()
    assert "futureField" not in stored["metadata"]
    assert stored["spec"]["template"]["metadata"] == TEMPLATE_META  # kept: preserved there

    runner = await client.get(Runner, "r", namespace=kube_namespace)
    meta = runner.metadata
    assert meta.unknown_fields == {} and meta.labels == LABELS
    assert meta.owner_references is not None and len(meta.owner_references) == 10_000
    template = runner.spec.template.metadata
    assert template.unknown_fields == {"futureTemplateField": {"deep": [1, {"x": None}]}}
    # The bytes the informer's compact cache would hold decode alike (msgspec's path, then
    # the Python way for the template's unknown field).
    assert decode_json(Runner, kube_apiserver.request("GET", f"{url}/r").body) == runner

    # The deprecated mapping view reads one key without encoding 10,000 owner references.
    started = time.perf_counter()
    for _ in range(100):
        assert runner.metadata["name"] == "r"
    assert time.perf_counter() - started < 0.1  # was ~3.6 ms a read

    runner.spec.replicas = 2
    updated = await client.replace(runner)
    assert updated.spec.replicas == 2
    after = kube_apiserver.request("GET", f"{url}/r").json()
    assert after["spec"] == {
        "replicas": 2,
        "template": {"image": "busybox", "metadata": TEMPLATE_META},
    }
    assert after["metadata"]["labels"] == LABELS
    assert after["metadata"]["ownerReferences"] == OWNERS
    assert after["metadata"]["uid"] == stored["metadata"]["uid"]
