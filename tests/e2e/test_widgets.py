"""The Widget example (examples/widgets) end to end, as processes on the real apiserver.

Two replicas under leader election: create, scale up and down, a deleted child re-created,
``status.readyReplicas`` with ``observedGeneration``, an Event, a leader killed with
SIGKILL and replaced, SIGTERM releasing the Lease; and the same operator on asyncio, whose deleted Widget's
ConfigMaps the garbage collector removes at once (the CRD is installed before the
controller manager starts: ``kube_apiserver_crds`` in tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CONTROLLER = ROOT / "examples" / "widgets" / "controller.py"
WIDGETS = "/apis/examples.kubemoon.dev/v1"


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


@pytest.fixture(scope="module")
def widgets_api(kube_apiserver: ApiServer) -> ApiServer:
    # tests/conftest.py's kube_apiserver_crds: installed before the controller manager.
    assert "widgets.examples.kubemoon.dev" in kube_apiserver.crds
    return kube_apiserver


class Replica:
    """One operator process."""

    def __init__(self, server: ApiServer, log: Path, *args: str) -> None:
        self.probe_port = free_port()
        env = {**os.environ, "KUBECONFIG": str(server.kubeconfig_path)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(CONTROLLER), "--probe-port", str(self.probe_port), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_replica(widgets_api: ApiServer, tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(*args: str) -> Replica:
        replica = Replica(widgets_api, tmp_path / f"replica-{len(started)}.log", *args)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        if replica.process.poll() is None:
            replica.process.kill()
        replica.process.wait(10)


def widget_path(namespace: str, name: str = "") -> str:
    base = f"{WIDGETS}/namespaces/{namespace}/widgets"
    return f"{base}/{name}" if name else base


def children(server: ApiServer, namespace: str, owner_uid: str) -> dict[str, dict[str, Any]]:
    listed = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps").json()
    return {
        cm["metadata"]["name"]: cm
        for cm in listed["items"]
        if any(r.get("uid") == owner_uid for r in cm["metadata"].get("ownerReferences", []))
    }


def converged(server: ApiServer, namespace: str, name: str, replicas: int) -> bool:
    widget = server.request("GET", widget_path(namespace, name)).json()
    owned = children(server, namespace, widget["metadata"]["uid"])
    wanted = {f"{name}-{i}" for i in range(replicas)}
    status = widget.get("status") or {}
    data = widget["spec"].get("data") or {}
    return (
        set(owned) == wanted
        and all(cm.get("data") == data for cm in owned.values())
        and status.get("readyReplicas") == replicas
        and status.get("observedGeneration") == widget["metadata"]["generation"]
    )


def scale(server: ApiServer, namespace: str, name: str, replicas: int) -> None:
    response = server.request(
        "PATCH",
        widget_path(namespace, name),
        body=json.dumps({"spec": {"replicas": replicas}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, response.body[:300]


def lease_holder(server: ApiServer, namespace: str) -> str:
    lease = server.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/widgets"
    )
    if lease.status != 200:
        return ""
    return str(lease.json()["spec"].get("holderIdentity") or "")


def test_two_replicas_reconcile_hand_over_and_release(
    widgets_api: ApiServer, kube_namespace: str, start_replica: Callable[..., Replica]
) -> None:
    server, ns = widgets_api, kube_namespace
    replicas = [start_replica("--leader-elect", ns) for _ in range(2)]
    widget = {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": 3, "data": {"colour": "blue"}},
    }
    assert server.request("POST", widget_path(ns), body=widget).status == 201
    eventually(lambda: converged(server, ns, "w", 3), what="3 children and a ready status")

    scale(server, ns, "w", 5)
    eventually(lambda: converged(server, ns, "w", 5), what="scaling up to 5")
    scale(server, ns, "w", 2)
    eventually(lambda: converged(server, ns, "w", 2), what="scaling down to 2")

    deleted = server.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/w-1")
    assert deleted.status == 200
    eventually(
        lambda: server.request("GET", f"/api/v1/namespaces/{ns}/configmaps/w-1").status == 200,
        what="the deleted child to be re-created",
    )

    def scaled_event() -> bool:
        listed = server.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events").json()
        return any(
            e["regarding"]["name"] == "w" and e["reason"] == "Scaled" for e in listed["items"]
        )

    eventually(scaled_event, what="a Scaled Event")

    # The leader is killed without any cleanup; the other replica takes over.
    holder = eventually(lambda: lease_holder(server, ns), what="a leader")
    leader = next(r for r in replicas if f"-{r.pid}-" in holder)
    follower = next(r for r in replicas if r is not leader)
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(10)
    eventually(
        lambda: f"-{follower.pid}-" in lease_holder(server, ns),
        timeout=40,
        what="the follower to take the lease over",
    )
    scale(server, ns, "w", 4)
    eventually(lambda: converged(server, ns, "w", 4), what="the new leader to reconcile")

    # SIGTERM: drain, release the Lease, exit 0.
    follower.process.send_signal(signal.SIGTERM)
    assert follower.process.wait(30) == 0, follower.output()[-2000:]
    assert lease_holder(server, ns) == ""


def test_the_widget_operator_runs_on_asyncio(
    widgets_api: ApiServer, kube_namespace: str, start_replica: Callable[..., Replica]
) -> None:
    server, ns = widgets_api, kube_namespace
    replica = start_replica("--loop", "asyncio")
    widget = {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "a"},
        "spec": {"replicas": 2, "data": {"loop": "asyncio"}},
    }
    assert server.request("POST", widget_path(ns), body=widget).status == 201
    eventually(lambda: converged(server, ns, "a", 2), what="2 children on asyncio")
    assert server.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/a-0").status == 200
    eventually(
        lambda: server.request("GET", f"/api/v1/namespaces/{ns}/configmaps/a-0").status == 200,
        what="the deleted child to be re-created on asyncio",
    )

    # The Widget's ConfigMaps go with it: the garbage collector knew the kind from the
    # start (the CRD was installed before the controller manager), so no discovery
    # resync (~30 s) is waited for.
    uid = server.request("GET", widget_path(ns, "a")).json()["metadata"]["uid"]
    start = time.monotonic()
    assert server.request("DELETE", widget_path(ns, "a")).status == 200
    eventually(lambda: not children(server, ns, uid), timeout=60, what="the children to go")
    print(f"GC of a deleted Widget's ConfigMaps took {time.monotonic() - start:.2f} s")

    replica.process.send_signal(signal.SIGTERM)
    assert replica.process.wait(30) == 0, replica.output()[-2000:]
