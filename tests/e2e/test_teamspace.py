"""The TeamSpace example (examples/teamspace) run by ``kubemoon run``, on the real apiserver.

One process, started as a user starts it (``kubemoon run examples/teamspace/operator.py:manager``)
with the webhook's certificate from a directory (:class:`WebhookCertificates`, as
cert-manager mounts one): the Manager registers its validating webhook, which the apiserver
calls over TLS and which refuses a ``system:`` owner; a TeamSpace gets its Namespace,
ResourceQuota and RoleBinding and a Ready status for its generation; deleted, the garbage
collector takes its Namespace (the CRD is installed before the controller manager:
``kube_apiserver_crds`` in tests/conftest.py); SIGTERM stops the process with status 0. And a trio Manager from a file run with
``--leader-elect`` and ``--probe-address``: it holds the Lease under ``--identity``, answers
``/readyz``, and SIGTERM releases the Lease.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubemoon_testing import ApiServer, WebhookCertificates

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
TEAMSPACES = "/apis/examples.kubemoon.dev/v1/teamspaces"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
WEBHOOK_CONFIG = "teamspaces-validating"  # WebhookDeclarations("teamspaces"), validating


def eventually(check: Callable[[], Any], *, timeout: float = 30.0, what: str = "it") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Operator:
    """``kubemoon run`` of the TeamSpace example, as a process."""

    def __init__(self, server: ApiServer, tmp_path: Path) -> None:
        self.certs = WebhookCertificates.create(tmp_path / "certs")
        self.log = tmp_path / "operator.log"
        env = {**os.environ, "KUBECONFIG": str(server.kubeconfig_path)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        command = [
            *(sys.executable, "-m", "kubemoon_cli", "run"),
            "examples/teamspace/operator.py:manager",
            *("--probe-address", f"127.0.0.1:{free_port()}", "--log-format", "json"),
            *("--webhook-host", "127.0.0.1", "--webhook-port", str(free_port())),
            *("--webhook-cert-dir", str(self.certs.directory)),
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def operator(kube_apiserver: ApiServer, tmp_path: Path) -> Iterator[Operator]:
    assert "teamspaces.examples.kubemoon.dev" in kube_apiserver.crds
    started = Operator(kube_apiserver, tmp_path)
    try:
        yield started
    finally:
        if started.process.poll() is None:
            started.process.kill()
        started.process.wait(10)
        # The webhook (failurePolicy Fail) would refuse every TeamSpace without its server.
        kube_apiserver.request("DELETE", f"{VALIDATING}/{WEBHOOK_CONFIG}")


def team(name: str, *owners: str) -> dict[str, Any]:
    return {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "TeamSpace",
        "metadata": {"name": name},
        "spec": {"owners": list(owners), "cpu": "2", "memory": "4Gi"},
    }


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences", []))


def test_kubemoon_run_serves_the_teamspace_operator_and_its_webhook(
    kube_apiserver: ApiServer, operator: Operator
) -> None:
    server, name = kube_apiserver, f"t{secrets.token_hex(4)}"
    namespace = f"team-{name}"

    # The leader registers the webhook with the directory's CA; once it is served the
    # apiserver's call over TLS refuses a system: owner (a dry run: nothing is stored).
    def registered() -> bool:
        assert operator.process.poll() is None, operator.output()
        return server.request("GET", f"{VALIDATING}/{WEBHOOK_CONFIG}").status == 200

    eventually(registered, timeout=60, what="the webhook configuration")

    def refused() -> str:
        assert operator.process.poll() is None, operator.output()
        bad = team(f"{name}-bad", "alice", "system:admin")
        answer = server.request("POST", f"{TEAMSPACES}?dryRun=All", body=bad)
        assert answer.status != 201, "a system: owner was admitted"
        text = answer.body.decode(errors="replace")
        return text if "cannot be owned by system:admin" in text else ""

    message = eventually(refused, timeout=60, what="the webhook to refuse a system: owner")
    denial = json.loads(message)
    assert (denial["code"], denial["reason"]) == (403, "Forbidden"), denial
    assert "validate-teamspace.teamspaces.kubemoon.dev" in denial["message"]
    config = server.request("GET", f"{VALIDATING}/{WEBHOOK_CONFIG}").json()
    client_config = config["webhooks"][0]["clientConfig"]
    assert base64.b64decode(client_config["caBundle"]) == operator.certs.ca_file.read_bytes()
    assert client_config["url"].startswith("https://127.0.0.1:"), client_config

    created = server.request("POST", TEAMSPACES, body=team(name, "alice", "bob"))
    assert created.status == 201, created.body[:500]
    uid = created.json()["metadata"]["uid"]

    def provisioned() -> bool:
        ns = server.request("GET", f"/api/v1/namespaces/{namespace}")
        quota = server.request("GET", f"/api/v1/namespaces/{namespace}/resourcequotas/team")
        binding = server.request(
            "GET",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/team-admins",
        )
        if not all(r.status == 200 for r in (ns, quota, binding)):
            return False
        assert all(owned_by(r.json(), uid) for r in (ns, quota, binding))
        assert quota.json()["spec"]["hard"] == {"requests.cpu": "2", "requests.memory": "4Gi"}
        assert [s["name"] for s in binding.json()["subjects"]] == ["alice", "bob"]
        assert binding.json()["roleRef"]["name"] == "admin"
        return True

    eventually(provisioned, what="the Namespace, ResourceQuota and RoleBinding")

    def ready() -> bool:
        obj = server.request("GET", f"{TEAMSPACES}/{name}").json()
        status = obj.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return (
            status.get("namespace") == namespace
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and conditions.get("Ready", {}).get("status") == "True"
            and conditions["Ready"]["reason"] == "Provisioned"
        )

    eventually(ready, what="a Ready status for the TeamSpace's generation")

    # Deleted: the garbage collector deletes the Namespace it owned (and with it the rest).
    assert server.request("DELETE", f"{TEAMSPACES}/{name}").status == 200

    def namespace_going() -> bool:
        ns = server.request("GET", f"/api/v1/namespaces/{namespace}")
        return ns.status == 404 or bool(ns.json()["metadata"].get("deletionTimestamp"))

    eventually(namespace_going, timeout=60, what="the TeamSpace's Namespace to be deleted")

    operator.process.send_signal(signal.SIGTERM)
    assert operator.process.wait(30) == 0, operator.output()
    # --log-format json: every line is one object; the last says the graceful stop ended.
    lines = [json.loads(line) for line in operator.log.read_text().splitlines()]
    assert lines[0]["msg"] == (
        "running examples/teamspace/operator.py:manager: 1 controller(s) on asyncio"
    )
    assert lines[-1]["msg"] == "stopped"


TRIO_MODULE = """\
import kubemoon_trio
from kubemoon_core import Reconciled
from kubemoon_core.builtin import ConfigMap


async def reconcile(ctx: kubemoon_trio.ReconcileContext[ConfigMap]) -> Reconciled:
    return Reconciled()


def manager(client: kubemoon_trio.Client) -> kubemoon_trio.Manager:
    built = kubemoon_trio.Manager(client, name="kubemoon-run-e2e")
    built.controller("configmaps", ConfigMap, namespace="{namespace}").complete(reconcile)
    return built
"""


def test_kubemoon_run_elects_a_leader_serves_probes_and_releases_the_lease_on_sigterm(
    kube_apiserver: ApiServer, kube_namespace: str, tmp_path: Path
) -> None:
    server, ns = kube_apiserver, kube_namespace
    module = tmp_path / "run_trio.py"
    module.write_text(TRIO_MODULE.replace("{namespace}", ns))
    probe = free_port()
    env = {**os.environ, "KUBECONFIG": str(server.kubeconfig_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "kubemoon_cli", "run", f"{module}:manager"),
                *("--leader-elect", "--lease-namespace", ns, "--identity", "replica-a"),
                *("--probe-address", f"127.0.0.1:{probe}"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/kubemoon-run-e2e"
    try:

        def holder() -> str:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            answer = server.request("GET", lease)
            return (
                str(answer.json()["spec"].get("holderIdentity") or "")
                if answer.status == 200
                else ""
            )

        assert eventually(holder, what="the Lease") == "replica-a"

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=5) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        eventually(ready, what="/readyz on --probe-address")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log.read_text(errors="replace")[-3000:]
        released = server.request("GET", lease).json()["spec"]
        assert released.get("holderIdentity") in (None, ""), released
        assert "kubemoon.run: stopped" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
