"""The behaviour checks of bench/README.md, run against the controller-runtime ConfigMirror.

Run by hand (``python bench/check_controller_runtime.py``): builds ``bench/controller_runtime``,
starts a real kube-apiserver (``kubemoon_testing.ApiServer``), runs the Go operator on 3
mirrors x 3 targets and checks, in order: every copy carries the source's data and the
owner's UID, the finalizer and Ready=True with observedGeneration, a source update
propagating, a deleted copy healing, TargetConflict leaving the unmanaged ConfigMap
untouched and clearing once it is gone, SourceNotFound until the source appears,
TargetNotAllowed writing nothing, a target namespace that stops accepting copies losing its
copy (and getting it back), no write while converged, and deletion removing every copy
before the finalizer. Prints one line per check; exits 1 at the first that fails.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_operator as b

MERGE = "application/merge-patch+json"
ACCEPT = "kubemoon.dev/accept-mirrors"
FINALIZER = "kubemoon.dev/cleanup"
OWNER = "kubemoon.dev/owner-uid"


def wait(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                print(f"ok: {what}")
                return
        except b.ApiServerError:
            pass  # not there yet
        time.sleep(0.2)
    print(f"FAILED: {what}")
    raise SystemExit(1)


class Checks:
    def __init__(self, admin: b.Admin, work: b.Workload) -> None:
        self.admin, self.work = admin, work
        self.mirrors = f"{b.MIRRORS_API}/namespaces/{work.source}/configmirrors"

    def mirror(self, name: str) -> Any:
        return self.admin.request("GET", f"{self.mirrors}/{name}")

    def ready(self, name: str) -> tuple[str, str] | None:
        for c in (self.mirror(name).get("status") or {}).get("conditions", []):
            if c["type"] == "Ready":
                return c["status"], c["reason"]
        return None

    def configmap(self, namespace: str, name: str) -> Any:
        return self.admin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def gone(self, path: str) -> bool:
        return self.admin.request("GET", path, ok=(200, 404)).get("kind") == "Status"

    def create(self, path: str, body: dict[str, Any]) -> None:
        self.admin.request("POST", path, body)

    def new_mirror(self, name: str, source: str, targets: list[str]) -> None:
        spec = {"source": source, "targets": {"namespaces": targets}}
        body = {"apiVersion": "kubemoon.dev/v1beta1", "kind": "ConfigMirror"}
        self.create(self.mirrors, {**body, "metadata": {"name": name}, "spec": spec})

    def run(self) -> None:
        a, work, src, t = self.admin, self.work, self.work.source, self.work.targets
        wait("converged", lambda: b.ready_count(a, work) == work.mirrors)
        uids = b.mirror_uids(a, work)
        wait("every copy verified", lambda: b.verify_copies(a, work, uids) == 3 * work.mirrors)
        m = self.mirror("mirror-000")
        conditions = m["status"]["conditions"]
        assert FINALIZER in m["metadata"]["finalizers"], m["metadata"]
        assert conditions[0]["observedGeneration"] == m["metadata"]["generation"], conditions
        wait("finalizer and Ready=True", lambda: self.ready("mirror-000") == ("True", "Synced"))
        cms = f"/api/v1/namespaces/{src}/configmaps"
        a.request("PATCH", f"{cms}/settings-000", {"data": {"key-0": "new"}}, content_type=MERGE)
        wait(
            "a source update propagates",
            lambda: all(self.configmap(n, "settings-000")["data"]["key-0"] == "new" for n in t),
        )
        a.request("DELETE", f"/api/v1/namespaces/{t[0]}/configmaps/settings-001")
        wait(
            "a deleted copy heals",
            lambda: (
                self.configmap(t[0], "settings-001")["metadata"]["annotations"][OWNER]
                == uids["mirror-001"]
            ),
        )
        self.create(cms, {"metadata": {"name": "other"}, "data": {"a": "b"}})
        mine = {"metadata": {"name": "other"}, "data": {"mine": "yes"}}
        self.create(f"/api/v1/namespaces/{t[1]}/configmaps", mine)
        self.new_mirror("conflict", "other", t)
        wait("TargetConflict", lambda: self.ready("conflict") == ("False", "TargetConflict"))
        assert self.configmap(t[1], "other")["data"] == {"mine": "yes"}
        print("ok: the unmanaged ConfigMap is untouched")
        a.request("DELETE", f"/api/v1/namespaces/{t[1]}/configmaps/other")
        wait("the conflict clears", lambda: self.ready("conflict") == ("True", "Synced"))
        self.new_mirror("late", "late-source", t)
        wait("SourceNotFound", lambda: self.ready("late") == ("False", "SourceNotFound"))
        self.create(cms, {"metadata": {"name": "late-source"}, "data": {"x": "y"}})
        wait("the source appears", lambda: self.ready("late") == ("True", "Synced"))
        self.new_mirror("closed", "late-source", [f"{work.prefix}-closed"])
        wait("TargetNotAllowed", lambda: self.ready("closed") == ("False", "TargetNotAllowed"))
        assert self.gone(f"/api/v1/namespaces/{work.prefix}-closed/configmaps/late-source")
        print("ok: nothing written there")
        ns = f"/api/v1/namespaces/{t[2]}"
        a.request("PATCH", ns, {"metadata": {"labels": {ACCEPT: None}}}, content_type=MERGE)
        wait("a target that stops accepting loses its copy",
             lambda: self.gone(f"{ns}/configmaps/settings-002"))  # fmt: skip
        a.request("PATCH", ns, {"metadata": {"labels": {ACCEPT: "true"}}}, content_type=MERGE)
        wait("accepting again brings it back",
             lambda: self.configmap(t[2], "settings-002")["data"] is not None)  # fmt: skip
        time.sleep(2)
        version = self.mirror("mirror-002")["metadata"]["resourceVersion"]
        time.sleep(3)
        assert self.mirror("mirror-002")["metadata"]["resourceVersion"] == version
        print("ok: no write while converged")
        a.request("DELETE", f"{self.mirrors}/mirror-000")
        wait("deletion removes the copies, then the finalizer",
             lambda: self.gone(f"{self.mirrors}/mirror-000"))  # fmt: skip
        assert all(self.gone(f"/api/v1/namespaces/{n}/configmaps/settings-000") for n in t)
        print("ok: no copy left")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="check-cr-") as tmp_name:
        tmp = Path(tmp_name)
        build = b.build_controller_runtime(tmp)
        if build.binary is None:
            print(f"not run: {build.label}")
            return 1
        with b.ApiServer(controller_manager=False) as server:
            admin = b.Admin(server)
            b.install_crd(admin)
            admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": b.SYSTEM_NAMESPACE}})
            config = tmp / "cr.kubeconfig"
            b.service_account_kubeconfig(server, admin, "cr", config)
            work = b.Workload("check", 3)
            b.create_workload(admin, work)
            admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": "check-closed"}})
            log = tmp / "cr.log"
            with log.open("wb") as out:
                argv = b._cr_argv(build.binary, config, work)
                proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
            try:
                Checks(admin, work).run()
            except (AssertionError, SystemExit):
                print(b.log_tail(log, 10), file=sys.stderr)
                return 1
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(b.STOP_TIMEOUT)
                admin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
