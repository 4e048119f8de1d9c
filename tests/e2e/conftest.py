"""End-to-end fixtures: the ConfigMirror CRD on the real apiserver, clients, operators.

The CRD is deploy/base/crd.yaml, as the overlays render it: two versions, v1beta1 stored, converted by a webhook. The
session runs that conversion webhook (:class:`ConversionServer`, ConfigMirror's own
converter on a :class:`kubemoon_trio.WebhookServer` in a thread of its own) and each test
module installs the CRD pointing at it, then removes the CRD and its objects, so that
other tiers sharing the apiserver may install their own version of it.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from overlays import rendered_one
from prometheus_client import CollectorRegistry

from configmirror import (
    ACCEPT_MIRRORS_LABEL,
    CONFIGMIRRORS_V1BETA1,
    CONVERT_PATH,
    ConfigMirrorOperator,
    OperatorOptions,
    converter,
)
from kubemoon_core.webhooks import WebhookApp
from kubemoon_testing import ApiServer, WebhookCertificates
from kubemoon_trio import Client, WebhookServer

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_NAME = "configmirrors.kubemoon.dev"


def _path(resource: Any, namespace: str | None = None) -> str:
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{resource.group}/{resource.version}{where}/{resource.resource}"


class ConversionServer:
    """ConfigMirror's conversion webhook, served from a thread for the whole session."""

    def __init__(self, certs: WebhookCertificates) -> None:
        self.certs = certs
        self.port = 0
        self._ready = threading.Event()
        self._scope: trio.CancelScope | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        app = WebhookApp()
        app.conversion(CONVERT_PATH, converter())
        server = WebhookServer(
            app,
            cert_file=self.certs.cert_file,
            key_file=self.certs.key_file,
            registry=CollectorRegistry(),
        )
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                self.port = await nursery.start(server.serve)
                self._ready.set()

    def start(self) -> ConversionServer:
        self._thread.start()
        assert self._ready.wait(30), "the conversion webhook did not start"
        return self

    def stop(self) -> None:
        assert self._scope is not None and self._token is not None
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(10)

    def client_config(self) -> dict[str, Any]:
        """The CRD's ``spec.conversion.webhook.clientConfig`` that reaches this server."""
        return {
            "url": f"https://127.0.0.1:{self.port}{CONVERT_PATH}",
            "caBundle": base64.b64encode(self.certs.ca_bundle).decode(),
        }


def crd_manifest(conversion: ConversionServer) -> dict[str, Any]:
    """The CRD of the rendered self-managed overlay (deploy/base/crd.yaml) with the
    conversion webhook at ``conversion`` (not a Service)."""
    crd = rendered_one("self-managed", "CustomResourceDefinition")
    crd["spec"]["conversion"]["webhook"]["clientConfig"] = conversion.client_config()
    return crd


def put_crd(server: ApiServer, crd: dict[str, Any]) -> None:
    """Create ``crd``, or replace the CRD of that name, and wait until every version serves.

    Served means more than discovery: a dry-run create in each version is answered, so
    the conversion webhook (when there is one) is reachable too.
    """
    response = server.request("POST", CRDS, body=json.dumps(crd).encode())
    if response.status == 409:  # installed by another tier: take it over
        current = server.request("GET", f"{CRDS}/{crd['metadata']['name']}").json()
        crd = {**crd, "metadata": {**crd["metadata"], **current["metadata"]}}
        response = server.request("PUT", f"{CRDS}/{crd['metadata']['name']}", body=crd)
    assert response.status in (200, 201), response.body[:500]
    group = crd["spec"]["group"]
    deadline = time.monotonic() + 30
    for version in crd["spec"]["versions"]:
        probe = {
            "apiVersion": f"{group}/{version['name']}",
            "kind": "ConfigMirror",
            "metadata": {"name": "probe"},
            "spec": {"source": "probe", "targetNamespaces": [], "targets": {"namespaces": []}},
        }
        path = f"/apis/{group}/{version['name']}/namespaces/default/configmirrors?dryRun=All"
        while (answer := server.request("POST", path, body=probe)).status != 201:
            assert time.monotonic() < deadline, f"{version['name']} not served: {answer.body!r}"
            time.sleep(0.1)


def uninstall_crd(server: ApiServer) -> None:
    """Delete the CRD and every ConfigMirror (finalizers dropped: no operator is left)."""
    listed = server.request("GET", _path(CONFIGMIRRORS_V1BETA1))
    for item in listed.json().get("items", []) if listed.status == 200 else []:
        meta = item["metadata"]
        if meta.get("finalizers"):
            server.request(
                "PATCH",
                f"{_path(CONFIGMIRRORS_V1BETA1, meta['namespace'])}/{meta['name']}",
                body={"metadata": {"finalizers": None}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
    server.request("DELETE", f"{CRDS}/{CRD_NAME}")
    deadline = time.monotonic() + 60
    while server.request("GET", f"{CRDS}/{CRD_NAME}").status != 404:
        assert time.monotonic() < deadline, "the ConfigMirror CRD was never removed"
        time.sleep(0.1)


def install_crd(server: ApiServer, conversion: ConversionServer) -> None:
    """Install the ConfigMirror CRD of deploy/base/crd.yaml, converting through ``conversion``."""
    put_crd(server, crd_manifest(conversion))


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
def conversion_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversionServer]:
    """ConfigMirror's conversion webhook, running for the whole session."""
    server = ConversionServer(WebhookCertificates.create(tmp_path_factory.mktemp("conversion")))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def configmirror_api(
    kube_apiserver: ApiServer, conversion_webhook: ConversionServer
) -> Iterator[ApiServer]:
    """The session's apiserver with the ConfigMirror CRD installed for one test module."""
    install_crd(kube_apiserver, conversion_webhook)
    yield kube_apiserver
    uninstall_crd(kube_apiserver)


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
        await replica.operator.aclose()  # the access reviews' own pool (self-managed)
    for c in clients:
        await c.aclose()
