"""End-to-end fixtures: the ConfigMirror CRD on the real apiserver, clients, operators."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from configmirror import ACCEPT_MIRRORS_LABEL, CONFIGMIRRORS, ConfigMirrorOperator, OperatorOptions
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

CRD_FILE = Path(__file__).parents[2] / "deploy" / "crd.yaml"


def install_crd(server: ApiServer) -> None:
    """Create the ConfigMirror CRD (if missing) and wait until it is served."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    response = server.request("POST", path, body=json.dumps(crd).encode())
    assert response.status in (201, 409), response.body[:300]
    deadline = time.monotonic() + 30
    served = f"/apis/{CONFIGMIRRORS.group}/{CONFIGMIRRORS.version}/{CONFIGMIRRORS.resource}"
    while server.request("GET", served).status != 200:
        assert time.monotonic() < deadline, "the ConfigMirror CRD never became served"
        time.sleep(0.1)


def label_namespace(server: ApiServer, namespace: str, labels: dict[str, str | None]) -> None:
    """Set (or, with None, remove) labels on a Namespace."""
    response = server.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        body={"metadata": {"labels": labels}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, response.body[:300]


def accept_mirrors(server: ApiServer, namespace: str, accept: bool = True) -> None:
    """Opt ``namespace`` in to (or out of) receiving ConfigMirror copies."""
    label_namespace(server, namespace, {ACCEPT_MIRRORS_LABEL: "true" if accept else None})


@pytest.fixture(scope="session")
def configmirror_api(kube_apiserver: ApiServer) -> ApiServer:
    """The session's apiserver with the ConfigMirror CRD installed."""
    install_crd(kube_apiserver)
    return kube_apiserver


@pytest.fixture
async def client(configmirror_api: ApiServer) -> AsyncIterator[Client]:
    """An admin client of the real apiserver."""
    async with Client.from_kubeconfig(str(configmirror_api.kubeconfig_path)) as c:
        yield c


async def eventually(
    check: Callable[[], Awaitable[Any]], *, timeout: float = 20.0, what: str = "condition"
) -> Any:
    """Poll ``check`` until it returns a truthy value; fail after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while True:
            result = await check()
            if result:
                return result
            await trio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class RunningOperator:
    """An operator replica running in a nursery, with a way to stop or crash it."""

    def __init__(self, operator: ConfigMirrorOperator, scope: trio.CancelScope) -> None:
        self.operator = operator
        self.scope = scope
        self.exited = trio.Event()

    @property
    def reconciling(self) -> bool:
        """True once this replica leads (when electing) and its caches have synced."""
        return self.operator.manager.reconciling and not self.exited.is_set()

    async def stop(self) -> None:
        """Clean shutdown: drain, release the lease, and wait until ``run`` returned."""
        self.operator.manager.stop()
        await self.exited.wait()

    def crash(self) -> None:
        """Vanish without cleanup, as a killed process does."""
        self.scope.cancel()


StartOperator = Callable[..., Awaitable[RunningOperator]]


@pytest.fixture
async def start_operator(
    configmirror_api: ApiServer, nursery: trio.Nursery
) -> AsyncIterator[StartOperator]:
    """Start operator replicas in the test's nursery; all are stopped at teardown."""
    running: list[RunningOperator] = []
    clients: list[Client] = []

    async def start(**options: Any) -> RunningOperator:
        c = Client.from_kubeconfig(str(configmirror_api.kubeconfig_path))
        clients.append(c)
        operator = ConfigMirrorOperator(c, OperatorOptions(**options))
        scope = trio.CancelScope()

        replica = RunningOperator(operator, scope)

        async def run(task_status: trio.TaskStatus[None]) -> None:
            try:
                with scope:
                    await operator.manager.run(task_status=task_status)
            finally:
                replica.exited.set()

        await nursery.start(run)
        running.append(replica)
        return replica

    yield start
    for replica in running:
        replica.scope.cancel()
    for replica in running:
        await replica.exited.wait()
    for c in clients:
        await c.aclose()
