"""The generated built-in kinds on the real apiserver: what it serves decodes, and what they
encode is accepted (server-side dry-run) and equal to what was read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubemoon_core.builtin import (
    ClusterRole,
    ConfigMap,
    CronJob,
    CustomResourceDefinition,
    Deployment,
    Ingress,
    Job,
    Lease,
    Namespace,
    NetworkPolicy,
    Role,
    RoleBinding,
    Secret,
    Service,
    ServiceAccount,
    StatefulSet,
    ValidatingWebhookConfiguration,
)
from kubemoon_core.typed import decode, encode, resource_info
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

POD_SPEC: dict[str, Any] = {
    "containers": [
        {
            "name": "app",
            "image": "registry.example/app:1",
            "ports": [{"containerPort": 8080, "name": "http"}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
            "livenessProbe": {"httpGet": {"path": "/", "port": "http"}},
            "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        }
    ]
}
TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": POD_SPEC}

NAMESPACED: list[tuple[type, dict[str, Any]]] = [
    (ConfigMap, {"data": {"a": "1"}, "binaryData": {"b": "AAE="}}),
    (Secret, {"stringData": {"password": "s3cret"}, "type": "Opaque"}),
    (ServiceAccount, {}),
    (
        Service,
        {"spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "x"}}},
    ),
    (
        Deployment,
        {
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "x"}},
                "template": TEMPLATE,
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            }
        },
    ),
    (
        StatefulSet,
        {
            "spec": {
                "serviceName": "x",
                "selector": {"matchLabels": {"app": "x"}},
                "template": TEMPLATE,
            }
        },
    ),
    (
        Job,
        {"spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}}},
    ),
    (
        CronJob,
        {
            "spec": {
                "schedule": "*/5 * * * *",
                "jobTemplate": {
                    "spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "OnFailure"}}}
                },
            }
        },
    ),
    (
        Lease,
        {
            "spec": {
                "holderIdentity": "me",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-12-01T10:00:00.123456Z",
            }
        },
    ),
    (
        Role,
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
    ),
    (
        RoleBinding,
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}],
        },
    ),
    (
        NetworkPolicy,
        {
            "spec": {
                "podSelector": {"matchLabels": {"app": "x"}},
                "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 8080}]}],
            }
        },
    ),
    (
        Ingress,
        {
            "spec": {
                "rules": [
                    {
                        "host": "x.example",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "x", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ]
            }
        },
    ),
]


def without_nulls(value: Any) -> Any:
    """JSON with every ``null`` member left out (null and absent both decode to None)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def collection(cls: type, namespace: str | None) -> str:
    info = resource_info(cls)
    base = info.gvr.group_version.api_path
    if namespace is None:
        return f"{base}/{info.plural}"
    return f"{base}/namespaces/{namespace}/{info.plural}"


def copy_for_dry_run(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """The object under another name, without what only the server may set."""
    fresh = copy.deepcopy(obj)
    metadata = fresh["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        metadata.pop(key, None)
    metadata["name"] = name
    fresh.pop("status", None)
    if fresh.get("kind") == "Job":  # the server generated the selector and its labels
        fresh["spec"].pop("selector")
        fresh["spec"]["template"]["metadata"].pop("labels")
    if fresh.get("kind") == "CustomResourceDefinition":  # its name is plural.group
        names = fresh["spec"]["names"]
        names["plural"] += "typed"
        for key in ("singular", "shortNames"):
            names.pop(key, None)
        metadata["name"] = f"{names['plural']}.{fresh['spec']['group']}"
    if fresh.get("kind") == "Service":
        fresh["spec"].pop("clusterIP", None)
        fresh["spec"].pop("clusterIPs", None)
    return fresh


def round_trips(server: ApiServer, cls: type, obj: dict[str, Any], namespace: str | None) -> None:
    """``obj`` as read from the server decodes, encodes back to the same JSON, and a copy
    built from the typed object is accepted by a server-side dry-run create."""
    typed = decode(cls, obj)
    assert encode(typed) == without_nulls(obj)
    body = copy_for_dry_run(encode(typed), obj["metadata"]["name"] + "-typed")
    response = server.request("POST", collection(cls, namespace) + "?dryRun=All", body=body)
    assert response.status == 201, (cls.__name__, response.body[:600])
    assert decode(cls, response.json()).metadata.name == body["metadata"]["name"]


@pytest.mark.parametrize(("cls", "fields"), NAMESPACED, ids=[c.__name__ for c, _ in NAMESPACED])
def test_created_objects_decode_and_round_trip(
    kube_apiserver: ApiServer, kube_namespace: str, cls: type, fields: dict[str, Any]
) -> None:
    info = resource_info(cls)
    body = {"apiVersion": info.api_version, "kind": info.kind, "metadata": {"name": "x"}}
    body.update(fields)
    response = kube_apiserver.request("POST", collection(cls, kube_namespace), body=body)
    assert response.status == 201, response.body[:600]
    listed = kube_apiserver.request("GET", collection(cls, kube_namespace)).json()
    (item,) = listed["items"]
    # A list's items carry no apiVersion/kind: the typed decoder fills them in on encode.
    item = {"apiVersion": info.api_version, "kind": info.kind, **item}
    round_trips(kube_apiserver, cls, item, kube_namespace)


def test_a_typed_object_built_in_python_is_accepted(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    from kubemoon_core.builtin import apps_v1, core_v1, meta_v1

    deployment = Deployment(
        metadata={"name": "built"},
        spec=apps_v1.DeploymentSpec(
            selector=meta_v1.LabelSelector(match_labels={"app": "built"}),
            template=core_v1.PodTemplateSpec(
                metadata=meta_v1.ObjectMeta(labels={"app": "built"}),
                spec=core_v1.PodSpec(
                    containers=[core_v1.Container(name="app", image="registry.example/app:1")]
                ),
            ),
        ),
    )
    response = kube_apiserver.request(
        "POST", collection(Deployment, kube_namespace), body=encode(deployment)
    )
    assert response.status == 201, response.body[:600]
    stored = decode(Deployment, response.json())
    assert stored.spec is not None
    assert stored.spec.replicas == 1  # defaulted by the server, read back typed
    assert stored.spec.template.spec is not None
    assert stored.spec.template.spec.containers[0].image_pull_policy == "IfNotPresent"


@pytest.mark.parametrize(
    "cls", [ClusterRole, Namespace, CustomResourceDefinition], ids=lambda c: c.__name__
)
def test_every_object_the_server_holds_decodes_and_round_trips(
    kube_apiserver: ApiServer, cls: type
) -> None:
    info = resource_info(cls)
    listed = kube_apiserver.request("GET", collection(cls, None)).json()
    assert listed["items"], f"no {info.plural} to read"
    items = [{"apiVersion": info.api_version, "kind": info.kind, **i} for i in listed["items"]]
    for item in items:
        assert encode(decode(cls, item)) == without_nulls(item)
    round_trips(kube_apiserver, cls, items[0], None)


def test_a_webhook_configuration_round_trips(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"{kube_namespace}-typed"},
        "webhooks": [
            {
                "name": "check.kubemoon.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"url": "https://127.0.0.1:1/check"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nowhere"}},
            }
        ],
    }
    url = collection(ValidatingWebhookConfiguration, None)
    response = kube_apiserver.request("POST", url + "?dryRun=All", body=body)
    assert response.status == 201, response.body[:600]
    created = response.json()
    assert encode(decode(ValidatingWebhookConfiguration, created)) == created
