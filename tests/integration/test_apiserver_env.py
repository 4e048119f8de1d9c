"""The real-apiserver test environment, checked against the real kube-apiserver and etcd.

Every test talks to the servers built by ``kubemoon-testenv build`` with plain
``http.client`` (the fixture's own :meth:`ApiServer.request`), so a failure here points at
the environment, never at the KubeMoon adapters. The builder itself is checked with a fake
``go`` command (the real build is far too slow for a test).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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
    SUPPORTED_RELEASES,
    ApiServer,
    ApiServerError,
    KubernetesRelease,
    MissingBinariesError,
    RawResponse,
    UnsupportedVersionError,
    _go_runs,
    _testenv,
    _testenv_module,
    default_binary_dir,
)
from kubemoon_testing._processes import _remove_orphaned_work_dirs
from kubemoon_testing._versions import VERSION_ENV, release_for, selected_version

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


def test_version_reports_the_stamped_release(
    kube_apiserver: ApiServer, kubernetes_version: str
) -> None:
    # The run's version: --kubernetes-version, else $KUBEMOON_KUBERNETES_VERSION, else the
    # newest supported release.
    expected = selected_version()
    assert expected == (
        release_for(os.environ[VERSION_ENV]).version
        if os.environ.get(VERSION_ENV)
        else KUBERNETES_VERSION
    )
    assert kube_apiserver.version == kubernetes_version == expected
    info = kube_apiserver.request("GET", "/version").json()
    assert info["gitVersion"] == expected
    assert (info["major"], info["minor"]) == ("1", expected.split(".")[1])
    assert kube_apiserver.minor == int(expected.split(".")[1])


@pytest.mark.parametrize("release", SUPPORTED_RELEASES, ids=lambda r: r.version)
def test_each_supported_release_whose_binaries_are_built_starts_with_its_gates(
    release: KubernetesRelease,
) -> None:
    if not os.access(default_binary_dir(release.version) / "kube-apiserver", os.X_OK):
        pytest.skip(f"kube-apiserver {release.version} is not built (make testenv builds it)")
    gates = {"ShardedListAndWatch": True}
    with ApiServer(
        version=release.minor_version, feature_gates=gates, controller_manager=False
    ) as server:
        info = server.request("GET", "/version").json()
        assert (server.version, info["gitVersion"]) == (release.version, release.version)
        assert info["minor"] == str(release.minor)
        # Passed only where the gate exists (else kube-apiserver would have exited).
        assert server.has_feature("ShardedListAndWatch") is (release.minor >= 36)
        argv = Path(f"/proc/{server.pids()['kube-apiserver']}/cmdline").read_bytes()
        passed = b"--feature-gates=ShardedListAndWatch=true" in argv.split(b"\0")
        assert passed is (release.minor >= 36)


def test_an_unsupported_version_is_a_typed_error_listing_the_supported_ones() -> None:
    for wrong in ("1.34", "v1.36.9", "2.0", "latest"):
        with pytest.raises(UnsupportedVersionError) as caught:
            ApiServer(version=wrong)
        assert "v1.35.4, v1.36.3, v1.37.2" in str(caught.value)


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


def test_missing_binaries_name_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(MissingBinariesError) as caught:
        ApiServer(binary_dir=tmp_path).start()  # no controller manager built: not asked for
    assert f"kube-apiserver, etcd {selected_version()} not found" in str(caught.value)
    monkeypatch.setenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER", "1")
    with pytest.raises(MissingBinariesError) as caught:
        ApiServer(binary_dir=tmp_path).start()
    message = str(caught.value)
    assert (
        f"kube-apiserver, etcd, kube-controller-manager {selected_version()} not found" in message
    )
    assert f"run `kubemoon-testenv build --version {selected_version()}`" in message
    assert "Go >= 1.26" in message


def test_a_missing_controller_manager_is_named_with_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("kube-apiserver", "etcd"):
        (tmp_path / name).symlink_to(default_binary_dir() / name)
    # Not built: the server runs without it unless it is asked for.
    assert not ApiServer(binary_dir=tmp_path).controller_manager
    monkeypatch.setenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER", "1")
    with pytest.raises(MissingBinariesError) as caught:
        ApiServer(binary_dir=tmp_path).start()
    message = str(caught.value)
    assert message.startswith(f"kube-controller-manager {selected_version()} not found")
    assert "controller_manager=False" in message


def test_the_environment_variable_turns_the_controller_manager_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ApiServer().controller_manager
    monkeypatch.setenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER", "0")
    assert not ApiServer().controller_manager
    assert ApiServer(controller_manager=True).controller_manager


def _owned_configmaps(server: ApiServer, namespace: str) -> str:
    """An owner and its dependent; returns the configmaps path."""
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    owner = _create_configmap(server, namespace, "owner")
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}
    ref["uid"] = owner["metadata"]["uid"]
    dependent = _configmap("dependent")
    dependent["metadata"]["ownerReferences"] = [ref]
    assert server.request("POST", base, body=dependent).status == 201
    return base


def test_without_the_controller_manager_nothing_is_collected(
    kube_apiserver_no_controllers: ApiServer,
) -> None:
    server = kube_apiserver_no_controllers
    assert not server.controller_manager
    assert set(server.pids()) == {"etcd", "kube-apiserver"}
    namespace = server.create_namespace()
    base = _owned_configmaps(server, namespace)
    assert server.request("DELETE", f"{base}/owner").status == 200
    server.delete_namespace(namespace)
    time.sleep(3.0)  # ample for a running collector (it takes well under a second)
    assert server.request("GET", f"{base}/dependent").status == 200
    phase = server.request("GET", f"/api/v1/namespaces/{namespace}").json()["status"]["phase"]
    assert phase == "Terminating"
    with pytest.raises(ApiServerError, match="controller_manager=False"):
        server.delete_namespace(namespace, wait=True)


def test_stop_ends_every_process_and_removes_the_work_dir() -> None:
    with ApiServer() as server:
        pids = server.pids()
        work_dir = server.work_dir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert (work_dir / "kube-controller-manager.log").exists()
    assert not any(_alive(pid) for pid in pids.values())
    assert not work_dir.exists()


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
        from kubemoon_testing._processes import _Child
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_killed_test_process_leaves_no_server_behind() -> None:
    # A test process with a whole environment (controller manager included) is SIGKILLed:
    # every server dies with it, and the next start removes its work directory.
    parent = textwrap.dedent(
        """
        import json, time
        from kubemoon_testing import ApiServer
        server = ApiServer().start()
        print(json.dumps({"pids": server.pids(), "dir": str(server.work_dir)}), flush=True)
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
        started = json.loads(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    pids = started["pids"]
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    for _ in range(50):
        if not any(_alive(pid) for pid in pids.values()):
            break
        time.sleep(0.1)
    else:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"servers outlived their SIGKILLed parent: {pids}")
    work_dir = Path(started["dir"])
    assert work_dir.exists()
    _remove_orphaned_work_dirs()
    assert not work_dir.exists()


# --- the builder (kubemoon-testenv) ---------------------------------------------------------

FAKE_GO = """#!/bin/sh
# Stands in for the go command: answers what kubemoon-testenv asks, slowly for builds.
case "$1" in
    version) echo "go version go1.26.8 fake/amd64" ;;
    mod) echo "$@" >> "$FAKE_GO_LOG" ;;
    list) echo "${FAKE_ETCD:-v3.7.0}" ;;
    env) echo "$FAKE_GOCACHE" ;;
    build)
        echo "$@" >> "$FAKE_GO_LOG"
        out=""; prev=""
        for arg in "$@"; do [ "$prev" = "-o" ] && out=$arg; prev=$arg; done
        for i in 1 2 3 4 5 6 7 8; do echo "example.com/fake/pkg$i" >&2; sleep 0.1; done
        printf 'binary' > "$out" ;;
    *) echo "fake go: unexpected $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `go` first on PATH and an empty binary cache; returns the go log file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    gocache = tmp_path / "gocache"
    gocache.mkdir()
    (gocache / "entry").write_bytes(b"x" * 2000)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    monkeypatch.setenv("FAKE_GOCACHE", str(gocache))
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KUBEMOON_TESTENV_INDEX", "none")  # no envtest archive: build all
    monkeypatch.delenv(VERSION_ENV, raising=False)  # the newest, whatever this run's version
    monkeypatch.setattr(_go_runs, "_PROGRESS_EVERY", 0.3)
    return log


@pytest.mark.parametrize("release", SUPPORTED_RELEASES, ids=lambda r: r.version)
def test_build_reports_progress_and_a_summary(
    release: KubernetesRelease,
    fake_go: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_ETCD", release.etcd)
    # The environment chooses the version when --version does not.
    monkeypatch.setenv(VERSION_ENV, release.minor_version)
    assert _testenv.main(["build", "--only", "apiserver,etcd"]) == 0
    out = capsys.readouterr().out
    directory = default_binary_dir()
    assert directory.name == release.version
    assert directory.parent == Path(os.environ["KUBEMOON_TESTENV_DIR"])
    for name in ("kube-apiserver", "etcd"):
        assert os.access(directory / name, os.X_OK)
    assert not (directory / "kube-controller-manager").exists()
    # No temporary file is left next to the binaries.
    assert sorted(p.name for p in directory.iterdir()) == [".build.lock", "etcd", "kube-apiserver"]
    assert "building kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver) ..." in out
    assert re.search(r"building kube-apiserver: \d+s elapsed, ", out)
    assert "packages compiled, now example.com/fake/pkg" in out
    assert re.search(r"built etcd in \d+s, 8 packages compiled", out)
    assert f"binaries in {directory}: kube-apiserver 6 B, etcd 6 B, " in out
    assert "kube-controller-manager not built, kubectl not built; total 12 B" in out
    assert "Go build cache " in out
    assert "2 KB (makes rebuilds fast" in out
    builds = [line.split() for line in fake_go.read_text().splitlines() if line.startswith("build")]
    assert [b[-1] for b in builds] == [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        _testenv_module._ETCD_MODULE,
    ]
    assert all({"-mod=readonly", "-trimpath", "-v"} <= set(b) for b in builds)
    assert f"gitVersion={release.version} " in " ".join(builds[0])
    assert f"gitMinor={release.minor} " in " ".join(builds[0])
    assert f"GitSHA=module-{release.etcd}" in " ".join(builds[1])

    # A second run builds only what is missing, and nothing once everything is there.
    assert _testenv.main(["build"]) == 0
    assert "building kube-controller-manager " in capsys.readouterr().out
    assert _testenv.main(["build"]) == 0
    assert "already built" in capsys.readouterr().out
    assert len(fake_go.read_text().splitlines()) == 6  # 2 downloads, 4 builds


def test_build_version_chooses_the_directory_and_the_module(
    fake_go: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VERSION_ENV, raising=False)
    monkeypatch.setenv("FAKE_ETCD", "v3.6.8")
    assert _testenv.main(["build", "--version", "v1.36.3", "--only", "apiserver"]) == 0
    cache = Path(os.environ["KUBEMOON_TESTENV_DIR"])
    assert os.access(cache / "v1.36.3" / "kube-apiserver", os.X_OK)
    assert not (cache / KUBERNETES_VERSION).exists()
    assert "kube-apiserver v1.36.3 into" in capsys.readouterr().out
    assert _testenv.main(["path", "--version", "1.36", "apiserver"]) == 0
    assert capsys.readouterr().out.strip() == str(cache / "v1.36.3" / "kube-apiserver")
    assert _testenv.main(["build", "--version", "1.34"]) == 1
    assert "Kubernetes 1.34 is not supported" in capsys.readouterr().err


@pytest.mark.parametrize("release", SUPPORTED_RELEASES, ids=lambda r: r.version)
def test_the_shipped_go_module_of_each_release_pins_it(release: KubernetesRelease) -> None:
    # What `kubemoon-testenv module --check` compares in full (it needs the module proxy):
    # here, offline, that each shipped go.mod pins the release, its etcd and its staging.
    gomod = (_testenv_module.module_dir(release.version) / "go.mod").read_text(encoding="utf-8")
    assert f"\tk8s.io/kubernetes {release.version}\n" in gomod
    assert f"\t{_testenv_module._ETCD_MODULE} {release.etcd}\n" in gomod
    staging = "v0" + release.version[2:]
    replaces = re.findall(r"^\t(k8s\.io/\S+) => (k8s\.io/\S+) (\S+)$", gomod, re.MULTILINE)
    assert len(replaces) > 30
    assert all(a == b and v == staging for a, b, v in replaces), replaces
    assert (_testenv_module.module_dir(release.version) / "go.sum").stat().st_size > 10_000


def test_path_prints_the_cache_dir_and_checks_a_binary(
    fake_go: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _testenv.main(["path"]) == 0
    assert capsys.readouterr().out.strip() == str(default_binary_dir())
    assert _testenv.main(["path", "kcm"]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == str(default_binary_dir() / "kube-controller-manager")
    assert (
        f"not built yet: run `kubemoon-testenv build --version {KUBERNETES_VERSION}`"
        in captured.err
    )


def test_build_without_go_says_go_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KUBEMOON_TESTENV_INDEX", "none")
    monkeypatch.delenv(VERSION_ENV, raising=False)
    assert _testenv.main(["build", "--only", "etcd"]) == 1
    err = capsys.readouterr().err
    assert f"cannot build etcd {KUBERNETES_VERSION}: Go >= 1.26 is required" in err
    assert _testenv.main(["build", "--only", "kubelet"]) == 1
    assert "unknown program 'kubelet'" in capsys.readouterr().err


def test_build_with_the_binaries_cached_needs_no_go(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The real cache (as `make testenv` left it): nothing to do, so Go is not even looked up.
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _testenv.main(["build"]) == 0
    assert "already built in" in capsys.readouterr().out
