"""The real-apiserver test environment, checked against the real kube-apiserver and etcd.

Every test talks to the servers built by ``make testenv`` with plain ``http.client`` (the
fixture's own :meth:`ApiServer.request`), so a failure here points at the environment, never
at the KubeMoon adapters.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubemoon_testing import (
    ADMIN_USER,
    KUBERNETES_VERSION,
    LIMITED_USER,
    NOBODY_USER,
    ApiServer,
    ApiServerError,
    MissingBinariesError,
    RawResponse,
)

pytestmark = pytest.mark.integration


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _create_configmap(server: ApiServer, namespace: str, name: str) -> dict[str, Any]:
    resp = server.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=_configmap(name, n="0")
    )
    assert resp.status == 201, resp.body
    created: dict[str, Any] = resp.json()
    return created


def _watch(server: ApiServer, path: str, resource_version: str) -> RawResponse:
    """A short watch; the 410 cases end at once, timeoutSeconds bounds the others."""
    query = f"?watch=1&resourceVersion={resource_version}&timeoutSeconds=5"
    for _ in range(50):
        resp = server.request("GET", path + query, timeout=15)
        # 429: the watch cache of this resource is still initializing after startup.
        if resp.status != 429:
            return resp
        time.sleep(0.1)
    return resp


def _assert_expired(resp: RawResponse) -> None:
    assert resp.status == 200, resp.body
    events = resp.events()
    assert len(events) == 1, events
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status"
    assert status["code"] == 410
    assert status["reason"] == "Expired"


def test_version_reports_the_stamped_release(kube_apiserver: ApiServer) -> None:
    info = kube_apiserver.request("GET", "/version").json()
    assert info["gitVersion"] == KUBERNETES_VERSION
    assert (info["major"], info["minor"]) == ("1", "37")


def test_readyz_answers_anonymously(kube_apiserver: ApiServer) -> None:
    resp = kube_apiserver.request("GET", "/readyz", user=None)
    assert (resp.status, resp.body) == (200, b"ok")


def test_admin_creates_and_reads_a_configmap(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    created = _create_configmap(kube_apiserver, kube_namespace, "settings")
    assert created["metadata"]["namespace"] == kube_namespace
    path = f"/api/v1/namespaces/{kube_namespace}/configmaps/settings"
    by_token = kube_apiserver.request("GET", path)
    # The admin client certificate (O=system:masters) is an admin too.
    by_cert = kube_apiserver.request("GET", path, client_cert=True)
    assert by_token.status == by_cert.status == 200
    assert by_token.json()["data"] == by_cert.json()["data"] == {"n": "0"}
    assert by_token.json()["metadata"]["uid"] == created["metadata"]["uid"]


def test_unknown_token_is_unauthorized(kube_apiserver: ApiServer) -> None:
    resp = kube_apiserver.request("GET", "/api/v1/namespaces", token="not-a-known-token")
    assert resp.status == 401
    status = resp.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)


def test_user_without_rbac_is_forbidden(kube_apiserver: ApiServer, kube_namespace: str) -> None:
    resp = kube_apiserver.request(
        "GET", f"/api/v1/namespaces/{kube_namespace}/configmaps", user=NOBODY_USER
    )
    assert resp.status == 403
    status = resp.json()
    assert (status["reason"], status["code"]) == ("Forbidden", 403)
    assert status["details"]["kind"] == "configmaps"
    assert f'User "{NOBODY_USER}"' in status["message"]


def test_limited_user_is_allowed_only_where_granted(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    kube_apiserver.grant_namespace_access(kube_namespace)
    inside = kube_apiserver.request(
        "GET", f"/api/v1/namespaces/{kube_namespace}/configmaps", user=LIMITED_USER
    )
    outside = kube_apiserver.request(
        "GET", "/api/v1/namespaces/default/configmaps", user=LIMITED_USER
    )
    write = kube_apiserver.request(
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/configmaps",
        body=_configmap("nope"),
        user=LIMITED_USER,
    )
    assert inside.status == 200
    assert inside.json()["kind"] == "ConfigMapList"
    assert (outside.status, write.status) == (403, 403)


def test_kubeconfig_describes_the_server(kube_apiserver: ApiServer) -> None:
    config = yaml.safe_load(kube_apiserver.kubeconfig_path.read_text())
    assert config["current-context"] == ADMIN_USER
    (cluster,) = config["clusters"]
    assert cluster["cluster"]["server"] == kube_apiserver.url
    assert Path(cluster["cluster"]["certificate-authority"]).read_text() == kube_apiserver.ca_pem
    users = {u["name"]: u["user"] for u in config["users"]}
    assert users[ADMIN_USER] == {"token": kube_apiserver.admin_token}
    assert users[NOBODY_USER] == {"token": kube_apiserver.tokens[NOBODY_USER]}
    assert users[f"{ADMIN_USER}-cert"]["client-certificate"] == str(kube_apiserver.client_cert_file)


def test_watch_from_an_ancient_resource_version_is_expired(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    # With the watch cache on, RV 1 predates the cache's window at once, no compaction
    # needed (the fixture moves etcd past revision 1 before the caches start).
    _create_configmap(kube_apiserver, kube_namespace, "a")
    _create_configmap(kube_apiserver, kube_namespace, "b")
    resp = _watch(kube_apiserver, f"/api/v1/namespaces/{kube_namespace}/configmaps", "1")
    _assert_expired(resp)


def test_compaction_expires_old_resource_versions_without_watch_cache(
    kube_apiserver_nocache: ApiServer,
) -> None:
    server = kube_apiserver_nocache
    namespace = server.create_namespace()
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    saved_rv = _create_configmap(server, namespace, "counter")["metadata"]["resourceVersion"]
    for n in range(1, 4):
        patch = server.request(
            "PATCH",
            f"{path}/counter",
            body=json.dumps({"data": {"n": str(n)}}).encode(),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert patch.status == 200, patch.body
    latest_rv = patch.json()["metadata"]["resourceVersion"]
    # resourceVersions are etcd revisions (the apiserver's own leases may have moved on).
    assert server.etcd_revision() >= int(latest_rv)

    assert server.compact(int(latest_rv)) == int(latest_rv)

    _assert_expired(_watch(server, path, saved_rv))
    exact = server.request("GET", f"{path}?resourceVersion={saved_rv}&resourceVersionMatch=Exact")
    assert (exact.status, exact.json()["reason"]) == (410, "Expired")
    # The newest revision survives compaction.
    current = server.request(
        "GET", f"{path}?resourceVersion={latest_rv}&resourceVersionMatch=Exact"
    )
    assert current.status == 200
    with pytest.raises(ApiServerError, match="compacted"):
        server.compact(int(saved_rv))


def test_restart_keeps_url_certificates_and_data(kube_apiserver_nocache: ApiServer) -> None:
    server = kube_apiserver_nocache
    namespace = server.create_namespace()
    _create_configmap(server, namespace, "survivor")
    url = server.url
    server.restart_apiserver()
    assert server.url == url
    resp = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/survivor")
    assert resp.status == 200
    assert resp.json()["data"] == {"n": "0"}


def test_missing_binaries_name_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(MissingBinariesError, match="make testenv"):
        ApiServer(binary_dir=tmp_path).start()


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie awaiting its reaper counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    # A parent that forks a child from a short-lived thread, then gets SIGKILLed: the
    # child must outlive the thread but not the process. `sleep` stands in for the
    # servers, which are started through the same code.
    parent = textwrap.dedent(
        f"""
        import threading, time
        from pathlib import Path
        from kubemoon_testing._apiserver import _Child
        box = []
        t = threading.Thread(target=lambda: box.append(
            _Child("sleep", ["sleep", "120"], Path({str(tmp_path / "log")!r}))))
        t.start(); t.join()
        time.sleep(0.3)
        assert box[0].exited() is None, "child died with the thread that started it"
        print(box[0].proc.pid, flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    with proc.stdout:
        child_pid = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for _ in range(50):
        if not _alive(child_pid):
            return
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail("the child outlived its SIGKILLed parent")
