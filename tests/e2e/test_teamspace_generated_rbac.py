"""Regression (attacker's pass, round five): the TeamSpace example run with exactly its
generated ``rbac.yaml``, as its ServiceAccount, on the real kube-apiserver.

``examples/teamspace/rbac.yaml`` is "generated from this file" and ``make lint`` keeps it
so; the start-up permission check asks for exactly those rules and passes. But the
reconcile binds the built-in ClusterRole ``admin`` in every team's namespace, and the
apiserver lets an identity create a RoleBinding only to a role whose permissions it holds
(or with ``bind`` on it): with the generated RBAC every RoleBinding is answered 403
("attempting to grant RBAC permissions not currently held"), so no TeamSpace is ever
Ready, although the replica reported itself ready and checked. The example's docstring
says the account "also needs that role (or bind)", but neither the derivation (the
Manager's ``rbac_extra``) nor the checked-in file carries it, so the check cannot catch it.

Expected: the example's generated RBAC is what it needs (``bind`` on ``clusterroles``
named ``admin``, declared with ``rbac_extra``), so with exactly ``rbac.yaml`` a
TeamSpace becomes Ready.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_teamspace import TEAMSPACES, VALIDATING, WEBHOOK_CONFIG, free_port, team

from kubemoon_testing import ApiServer, WebhookCertificates

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def _install(server: ApiServer, account_ns: str, suffix: str) -> list[str]:
    """``rbac.yaml`` as generated, in ``account_ns`` and with unique cluster-wide names."""
    text = (ROOT / "examples" / "teamspace" / "rbac.yaml").read_text()
    text = text.replace("teamspaces-system", account_ns)
    created = []
    for doc in yaml.safe_load_all(text):
        meta = doc["metadata"]
        if doc["kind"] != "ServiceAccount":
            meta["name"] = f"{meta['name']}-{suffix}"
        if "roleRef" in doc:
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        path = PATHS[doc["kind"]].format(ns=meta.get("namespace", ""))
        answer = server.request("POST", path, body=doc)
        assert answer.status == 201, answer.body
        created.append(f"{path}/{meta['name']}")
    return created


def _kubeconfig(server: ApiServer, account_ns: str, directory: Path) -> Path:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{account_ns}/serviceaccounts/teamspaces/token"
    answer = server.request("POST", path, body=request)
    assert answer.status == 201, answer.body
    token = answer.json()["status"]["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": server.url, "certificate-authority": str(server.ca_file)},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    }
    file = directory / "sa.kubeconfig"
    file.write_text(json.dumps(config))
    return file


CLUSTERROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"


def _aggregate_admin(server: ApiServer) -> list[Any]:
    """Fill the built-in ClusterRole ``admin`` as every real cluster's controller manager
    does (its clusterrole-aggregation controller, which the test environment does not
    run, so ``admin`` is empty there and binding it needs no rights); the rules it had."""
    admin = server.request("GET", f"{CLUSTERROLES}/admin").json()
    selectors = admin["aggregationRule"]["clusterRoleSelectors"]
    rules: list[Any] = []
    for selector in selectors:
        query = ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())
        found = server.request("GET", f"{CLUSTERROLES}?labelSelector={query}").json()
        for role in found["items"]:
            rules += role.get("rules") or []
    assert rules, "no aggregated rules found"
    merge = {"Content-Type": "application/merge-patch+json"}
    answer = server.request("PATCH", f"{CLUSTERROLES}/admin", body={"rules": rules}, headers=merge)
    assert answer.status == 200, answer.body
    return list(admin.get("rules") or [])


def test_teamspace_with_exactly_its_generated_rbac_provisions_a_team(
    kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    server = kube_apiserver
    assert "teamspaces.examples.kubemoon.dev" in server.crds
    account_ns = server.create_namespace(prefix="teamspaces-system")
    before = _aggregate_admin(server)
    created = _install(server, account_ns, secrets.token_hex(3))
    kubeconfig = _kubeconfig(server, account_ns, tmp_path)
    certs = WebhookCertificates.create(tmp_path / "certs")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "operator.log"
    command = [
        *(sys.executable, "-m", "kubemoon_cli", "run", "examples/teamspace/operator.py:manager"),
        *("--probe-address", f"127.0.0.1:{free_port()}", "--log-format", "json"),
        *("--webhook-host", "127.0.0.1", "--webhook-port", str(free_port())),
        *("--webhook-cert-dir", str(certs.directory)),
    ]
    name = f"t{secrets.token_hex(4)}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while server.request("GET", f"{VALIDATING}/{WEBHOOK_CONFIG}").status != 200:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no webhook configuration"
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while True:  # the webhook may still be starting: a failurePolicy Fail refusal
            created_team = server.request("POST", TEAMSPACES, body=team(name, "alice"))
            if created_team.status == 201:
                break
            assert time.monotonic() < deadline, created_team.body
            time.sleep(0.5)

        def status() -> dict[str, Any]:
            obj = server.request("GET", f"{TEAMSPACES}/{name}").json()
            conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            return conditions.get("Ready", {})

        deadline = time.monotonic() + 45
        while status().get("status") != "True":
            assert process.poll() is None, log.read_text()[-3000:]
            if time.monotonic() > deadline:
                denied = [
                    json.loads(line).get("msg", "")[:300]
                    for line in log.read_text().splitlines()
                    if "forbidden" in line.lower()
                ]
                raise AssertionError(
                    f"TeamSpace {name} not Ready after 45 s with exactly rbac.yaml; "
                    f"Ready={status()}; first denial: {denied[:1]}"
                )
            time.sleep(0.5)
    finally:
        process.kill()
        process.wait(10)
        server.request("DELETE", f"{VALIDATING}/{WEBHOOK_CONFIG}")
        server.request("DELETE", f"{TEAMSPACES}/{name}")
        for path in created:
            server.request("DELETE", path)
        merge = {"Content-Type": "application/merge-patch+json"}
        server.request("PATCH", f"{CLUSTERROLES}/admin", body={"rules": before}, headers=merge)
