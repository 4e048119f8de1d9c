"""Discovery documents shaped like a real API server's answers, shared by the test tiers."""

from typing import Any

API_VERSIONS: dict[str, Any] = {
    "kind": "APIVersions",
    "versions": ["v1"],
    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}],
}

API_GROUP_LIST: dict[str, Any] = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [
        {
            "name": "apps",
            "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
        },
        {
            "name": "coordination.k8s.io",
            "versions": [
                {"groupVersion": "coordination.k8s.io/v1", "version": "v1"},
                {"groupVersion": "coordination.k8s.io/v1beta1", "version": "v1beta1"},
            ],
            "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"},
        },
    ],
}

CORE_V1: dict[str, Any] = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "configmaps",
            "singularName": "configmap",
            "namespaced": True,
            "kind": "ConfigMap",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": ["cm"],
            "storageVersionHash": "qFsyl6wFWjQ=",
        },
        {
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": ["ns"],
        },
        {
            "name": "namespaces/finalize",
            "singularName": "",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": ["update"],
        },
        {
            "name": "namespaces/status",
            "singularName": "",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": ["get", "patch", "update"],
        },
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["create", "delete", "deletecollection", "get", "list", "watch"],
            "shortNames": ["po"],
            "categories": ["all"],
        },
    ],
}

APPS_V1: dict[str, Any] = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "apps/v1",
    "resources": [
        {
            "name": "deployments",
            "singularName": "deployment",
            "namespaced": True,
            "kind": "Deployment",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": ["deploy"],
            "categories": ["all"],
        },
        {
            "name": "deployments/scale",
            "singularName": "",
            "namespaced": True,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        },
        {
            "name": "deployments/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Deployment",
            "verbs": ["get", "patch", "update"],
        },
    ],
}

COORDINATION_V1: dict[str, Any] = {
    "kind": "APIResourceList",
    "groupVersion": "coordination.k8s.io/v1",
    "resources": [
        {
            "name": "leases",
            "singularName": "lease",
            "namespaced": True,
            "kind": "Lease",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }
    ],
}

COORDINATION_V1BETA1: dict[str, Any] = {
    "kind": "APIResourceList",
    "groupVersion": "coordination.k8s.io/v1beta1",
    "resources": [
        {
            "name": "leases",
            "singularName": "lease",
            "namespaced": True,
            "kind": "Lease",
            "verbs": ["get", "list"],
        }
    ],
}


def _aggregated_resource(
    plural: str, kind: str, scope: str, subresources: list[str], short: list[str]
) -> dict[str, Any]:
    return {
        "resource": plural,
        "responseKind": {"group": "", "version": "", "kind": kind},
        "scope": scope,
        "singularResource": plural[:-1],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        "shortNames": short,
        "categories": ["all"],
        "subresources": [
            {
                "subresource": sub,
                "responseKind": {"group": "", "version": "", "kind": kind},
                "verbs": ["get", "patch", "update"],
            }
            for sub in subresources
        ],
    }


AGGREGATED_APIS: dict[str, Any] = {
    "kind": "APIGroupDiscoveryList",
    "apiVersion": "apidiscovery.k8s.io/v2",
    "metadata": {},
    "items": [
        {
            "metadata": {"name": "apps", "creationTimestamp": None},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        _aggregated_resource(
                            "deployments",
                            "Deployment",
                            "Namespaced",
                            ["scale", "status"],
                            ["deploy"],
                        )
                    ],
                    "freshness": "Current",
                }
            ],
        },
        {
            "metadata": {"name": "kubemoon.dev"},
            "versions": [
                {
                    "version": "v1alpha1",
                    "resources": [
                        _aggregated_resource(
                            "configmirrors", "ConfigMirror", "Namespaced", ["status"], ["cmir"]
                        )
                    ],
                    "freshness": "Stale",
                }
            ],
        },
    ],
}

AGGREGATED_API: dict[str, Any] = {
    "kind": "APIGroupDiscoveryList",
    "apiVersion": "apidiscovery.k8s.io/v2",
    "metadata": {},
    "items": [
        {
            "metadata": {"creationTimestamp": None},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        _aggregated_resource("configmaps", "ConfigMap", "Namespaced", [], ["cm"]),
                        _aggregated_resource("namespaces", "Namespace", "Cluster", ["status"], []),
                    ],
                }
            ],
        }
    ],
}
