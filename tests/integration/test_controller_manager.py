"""The test kube-controller-manager: cascading deletion and namespace deletion really happen.

These are the behaviours an operator's tests lean on (owned objects vanish with their
owner; a deleted namespace empties and goes away), checked on the real servers with the
fixture's plain ``http.client`` requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

HOLD = "kubemoon.dev/test-hold"
CRD_GROUP = "gc.kubemoon.dev"


def _eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _create(server: ApiServer, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    resp = server.request("POST", path, body=obj)
    assert resp.status == 201, resp.body
    created: dict[str, Any] = resp.json()
    return created


def _configmap(
    server: ApiServer,
    namespace: str,
    name: str,
    *,
    owner: dict[str, Any] | None = None,
    block: bool = False,
    finalizers: tuple[str, ...] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": block,
            }
        ]
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return _create(
        server,
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta},
    )


def _status(server: ApiServer, path: str) -> int:
    return server.request("GET", path).status


def _delete(server: ApiServer, path: str, policy: str) -> dict[str, Any]:
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy}
    resp = server.request("DELETE", path, body=options)
    assert resp.status in (200, 202), resp.body
    answer: dict[str, Any] = resp.json()
    return answer


def test_the_fixture_runs_the_controller_manager(kube_apiserver: ApiServer) -> None:
    assert kube_apiserver.controller_manager
    assert set(kube_apiserver.pids()) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    log = kube_apiserver.controller_manager_log.read_text(errors="replace")
    assert "garbage-collector-controller" in log


def test_background_deletion_collects_the_dependents(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    server, ns = kube_apiserver, kube_namespace
    base = f"/api/v1/namespaces/{ns}/configmaps"
    owner = _configmap(server, ns, "owner")
    for i in range(3):
        _configmap(server, ns, f"dependent-{i}", owner=owner)
    _configmap(server, ns, "bystander")

    _delete(server, f"{base}/owner", "Background")

    # Background: the owner goes at once, the collector removes the dependents afterwards.
    assert _status(server, f"{base}/owner") == 404
    _eventually(
        lambda: all(_status(server, f"{base}/dependent-{i}") == 404 for i in range(3)),
        "the dependents to be collected",
    )
    assert _status(server, f"{base}/bystander") == 200


def test_foreground_deletion_removes_the_owner_after_its_blocking_dependents(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    server, ns = kube_apiserver, kube_namespace
    base = f"/api/v1/namespaces/{ns}/configmaps"
    owner = _configmap(server, ns, "owner")
    # A finalizer of our own holds the dependent, so the order can be observed.
    _configmap(server, ns, "dependent", owner=owner, block=True, finalizers=(HOLD,))

    answer = _delete(server, f"{base}/owner", "Foreground")
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]

    def dependent_deleting() -> bool:
        current = server.request("GET", f"{base}/dependent").json()
        return "deletionTimestamp" in current["metadata"]

    _eventually(dependent_deleting, "the collector to delete the dependent")
    # The owner waits for its blocking dependent.
    waiting = server.request("GET", f"{base}/owner")
    assert waiting.status == 200
    assert "deletionTimestamp" in waiting.json()["metadata"]

    release = server.request(
        "PATCH",
        f"{base}/dependent",
        body=json.dumps({"metadata": {"finalizers": None}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert release.status == 200, release.body
    _eventually(lambda: _status(server, f"{base}/dependent") == 404, "the dependent to go")
    _eventually(lambda: _status(server, f"{base}/owner") == 404, "the owner to go")


def test_orphan_deletion_keeps_the_dependents_and_drops_the_reference(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    server, ns = kube_apiserver, kube_namespace
    base = f"/api/v1/namespaces/{ns}/configmaps"
    owner = _configmap(server, ns, "owner")
    _configmap(server, ns, "dependent", owner=owner)

    _delete(server, f"{base}/owner", "Orphan")

    _eventually(lambda: _status(server, f"{base}/owner") == 404, "the owner to go")
    orphan = server.request("GET", f"{base}/dependent")
    assert orphan.status == 200
    assert not orphan.json()["metadata"].get("ownerReferences")


def _install_crd(server: ApiServer) -> str:
    """A namespaced custom resource (idempotent across the session); returns its path."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{CRD_GROUP}"},
        "spec": {
            "group": CRD_GROUP,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    resp = server.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd
    )
    assert resp.status in (201, 409), resp.body
    path = f"/apis/{CRD_GROUP}/v1/gadgets"
    _eventually(lambda: _status(server, path) == 200, "the CRD to be served")
    return path


def test_a_deleted_namespace_disappears_with_its_objects(kube_apiserver: ApiServer) -> None:
    server = kube_apiserver
    gadgets = _install_crd(server)
    ns = server.create_namespace(prefix="doomed")
    _configmap(server, ns, "settings")
    _create(
        server,
        f"/api/v1/namespaces/{ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"}},
    )
    _create(
        server,
        f"/apis/{CRD_GROUP}/v1/namespaces/{ns}/gadgets",
        {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g"}},
    )

    answer = server.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert answer.status == 200, answer.body
    assert answer.json()["status"]["phase"] == "Terminating"
    _eventually(lambda: _status(server, f"/api/v1/namespaces/{ns}") == 404, "the namespace to go")

    # Nothing of it is left anywhere, custom resources included.
    selector = f"?fieldSelector=metadata.namespace%3D{ns}"
    for path in ("/api/v1/configmaps", "/api/v1/secrets", gadgets):
        listed = server.request("GET", path + selector).json()
        assert listed["items"] == [], path
    # And the name can be used again.
    assert server.create_namespace(ns) == ns
    server.delete_namespace(ns, wait=True)
    assert _status(server, f"/api/v1/namespaces/{ns}") == 404
