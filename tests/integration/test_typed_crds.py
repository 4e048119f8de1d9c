"""Generated CRDs on the real apiserver: accepted, and enforcing what the types declare."""

from __future__ import annotations

import base64
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from configmirror._api import ConfigMirror
from kubemoon_core.typed import (
    MetadataField,
    crd_manifest,
    custom_resource,
    decode,
    encode,
    resource_info,
)
from kubemoon_core.webhooks import ConversionWebhook
from kubemoon_testing import ApiServer

sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "widgets"))
from widget_api import Tier, Widget, WidgetSpec

pytestmark = pytest.mark.integration

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install(
    server: ApiServer, cls: type, *more: type, conversion: ConversionWebhook | None = None
) -> dict[str, Any]:
    """Create (or replace) the generated CRD of ``cls`` and wait until it is served."""
    manifest = crd_manifest(cls, *more, conversion=conversion)
    info = resource_info(cls)
    response = server.request("POST", CRDS, body=manifest)
    if response.status == 409:  # installed earlier in this session: replace it
        current = server.request("GET", f"{CRDS}/{info.crd_name}").json()
        manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        response = server.request("PUT", f"{CRDS}/{info.crd_name}", body=manifest)
    assert response.status in (200, 201), response.body[:800]
    deadline = time.monotonic() + 30
    while server.request("GET", f"{info.gvr.group_version.api_path}/{info.plural}").status != 200:
        assert time.monotonic() < deadline, f"{info.crd_name} never became served"
        time.sleep(0.1)
    stored: dict[str, Any] = server.request("GET", f"{CRDS}/{info.crd_name}").json()
    return stored


@pytest.fixture(scope="module")
def typed_api(kube_apiserver: ApiServer) -> ApiServer:
    for cls in (ConfigMirror, Widget):
        stored = install(kube_apiserver, cls)
        generated = crd_manifest(cls)["spec"]["versions"][0]["schema"]
        assert stored["spec"]["versions"][0]["schema"] == generated
        established = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert established.get("NonStructuralSchema") is None
    return kube_apiserver


def path(cls: type, namespace: str, name: str = "") -> str:
    info = resource_info(cls)
    base = f"{info.gvr.group_version.api_path}/namespaces/{namespace}/{info.plural}"
    return f"{base}/{name}" if name else base


def widget(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def rejected(server: ApiServer, url: str, obj: dict[str, Any]) -> str:
    response = server.request("POST", url, body=obj)
    assert response.status == 422, (response.status, response.body[:500])
    message: str = response.json()["message"]
    return message


def test_the_server_defaults_a_widget_and_it_decodes(
    typed_api: ApiServer, kube_namespace: str
) -> None:
    response = typed_api.request("POST", path(Widget, kube_namespace), body=widget("plain"))
    assert response.status == 201, response.body[:500]
    typed = decode(Widget, response.json())
    # Every default came from the server, from the dataclass defaults in the schema.
    assert typed.spec == WidgetSpec(replicas=1, tier=Tier.SMALL, data={})
    assert typed.metadata.name == "plain"


def test_an_encoded_widget_round_trips_through_the_server(
    typed_api: ApiServer, kube_namespace: str
) -> None:
    sent = Widget(
        spec=WidgetSpec(replicas=30, tier=Tier.LARGE, data={"colour": "blue"}),
        metadata={"name": "big"},
    )
    response = typed_api.request("POST", path(Widget, kube_namespace), body=encode(sent))
    assert response.status == 201, response.body[:500]
    assert decode(Widget, response.json()).spec == sent.spec


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"replicas": 51, "tier": "large"}, "spec.replicas", "less than or equal to 50"),
        ({"tier": "huge"}, "spec.tier", "Unsupported value"),
        ({"replicas": 20, "tier": "small"}, "spec.replicas", "a small widget has at most 10"),
        ({"data": {"k": 1}}, "spec.data.k", "must be of type string"),
    ],
)
def test_the_server_rejects_an_invalid_widget(
    typed_api: ApiServer, kube_namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    message = rejected(typed_api, path(Widget, kube_namespace), widget("bad", spec))
    assert f"{field}:" in message
    assert words in message


def test_the_cel_rule_allows_a_large_widget_many_replicas(
    typed_api: ApiServer, kube_namespace: str
) -> None:
    body = widget("many", {"replicas": 20, "tier": "medium"})
    response = typed_api.request("POST", path(Widget, kube_namespace), body=body)
    assert response.status == 201, response.body[:500]


def test_the_scale_subresource_reads_and_writes_spec_replicas(
    typed_api: ApiServer, kube_namespace: str
) -> None:
    url = path(Widget, kube_namespace)
    assert typed_api.request("POST", url, body=widget("scaled", {"replicas": 2})).status == 201
    scale = typed_api.request("GET", f"{url}/scaled/scale").json()
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2
    response = typed_api.request(
        "PATCH",
        f"{url}/scaled/scale",
        body={"spec": {"replicas": 5}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, response.body[:500]
    assert decode(Widget, typed_api.request("GET", f"{url}/scaled").json()).spec.replicas == 5
    # The scale subresource goes through the same validation as the object.
    response = typed_api.request(
        "PATCH",
        f"{url}/scaled/scale",
        body={"spec": {"replicas": 11}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 422
    assert "a small widget has at most 10" in response.json()["message"]


def mirror(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"source": "", "targetNamespaces": []}, "spec.source", "at least 1 chars long"),
        ({"source": "Bad_Name", "targetNamespaces": []}, "spec.source", "should match"),
        ({"source": "a", "targetNamespaces": ["x", "x"]}, "spec.targetNamespaces[1]", "Duplicate"),
        ({"source": "a"}, "spec.targetNamespaces", "Required value"),
    ],
)
def test_the_server_rejects_an_invalid_configmirror(
    typed_api: ApiServer, kube_namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    message = rejected(typed_api, path(ConfigMirror, kube_namespace), mirror("bad", spec))
    assert f"{field}:" in message
    assert words in message


def test_a_configmirror_with_status_decodes(typed_api: ApiServer, kube_namespace: str) -> None:
    url = path(ConfigMirror, kube_namespace)
    created = typed_api.request(
        "POST", url, body=mirror("m", {"source": "cfg", "targetNamespaces": ["a", "b"]})
    ).json()
    created["status"] = {
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": "ok",
                "lastTransitionTime": "2026-11-30T10:00:00Z",
            }
        ],
        "targets": [{"namespace": "a", "state": "Synced"}, {"namespace": "b", "state": "Pending"}],
    }
    response = typed_api.request("PUT", f"{url}/m/status", body=created)
    assert response.status == 200, response.body[:500]
    typed = decode(ConfigMirror, typed_api.request("GET", f"{url}/m").json())
    assert typed.status is not None
    assert typed.status.conditions is not None
    assert typed.status.conditions[0].last_transition_time.year == 2026
    assert [t.state for t in typed.status.targets or []] == ["Synced", "Pending"]
    # A wrong enum value in the status is refused by the server too.
    created = typed_api.request("GET", f"{url}/m").json()
    created["status"]["targets"][0]["state"] = "Lost"
    response = typed_api.request("PUT", f"{url}/m/status", body=created)
    assert response.status == 422
    assert "status.targets[0].state: Unsupported value" in response.json()["message"]


@dataclass
class GizmoSpec:
    size: int = 1


@custom_resource(group="typed.kubemoon.dev", version="v1", kind="Gizmo", storage=True)
@dataclass
class GizmoV1:
    spec: GizmoSpec = field(default_factory=GizmoSpec)
    metadata: MetadataField = MetadataField()


@custom_resource(group="typed.kubemoon.dev", version="v1beta1", kind="Gizmo", served=False)
@dataclass
class GizmoV1beta1:
    spec: GizmoSpec = field(default_factory=GizmoSpec)
    metadata: MetadataField = MetadataField()


def test_a_multi_version_crd_with_a_conversion_webhook_is_accepted(
    kube_apiserver: ApiServer,
) -> None:
    webhook = ConversionWebhook(
        url="https://127.0.0.1:9443/convert",
        ca_bundle=base64.b64encode(kube_apiserver.ca_pem.encode()).decode(),
    )
    stored = install(kube_apiserver, GizmoV1, GizmoV1beta1, conversion=webhook)
    assert [(v["name"], v["served"], v["storage"]) for v in stored["spec"]["versions"]] == [
        ("v1", True, True),
        ("v1beta1", False, False),
    ]
    conversion = stored["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"
    assert stored["status"]["storedVersions"] == ["v1"]
