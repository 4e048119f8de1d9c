"""The webhook server on every adapter (generated from the trio source), served by a
Manager: concurrent reviews, a malformed review, and the server still serving."""

from __future__ import annotations

import json
import ssl
import uuid
from pathlib import Path
from typing import Any

import httpcore
import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import Adapter

from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookApp
from kubemoon_testing import ScriptedServer, WebhookCertificates

pytestmark = pytest.mark.fault


def review(data: dict[str, str]) -> bytes:
    document = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "CREATE",
            "namespace": "team-a",
            "name": "c",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": data},
        },
    }
    return json.dumps(document).encode()


def validate(request: AdmissionRequest) -> AdmissionResponse:
    assert request.object is not None
    if not request.object.get("data"):
        return AdmissionResponse.deny("data must not be empty")
    return AdmissionResponse.allow()


async def test_the_manager_serves_webhooks_on_every_adapter(
    adapter: Adapter, tmp_path: Path
) -> None:
    certs = WebhookCertificates.create(tmp_path / "certs")
    app = WebhookApp()
    app.validating("/validate", validate, name="configmaps")
    async with ScriptedServer() as api:
        client = adapter.client(api.client_config())
        # The scripted server answers no SelfSubjectAccessReview: no start-up RBAC check.
        manager = adapter.module.Manager(client, check_permissions=False)
        server = adapter.module.WebhookServer(
            app,
            cert_file=certs.cert_file,
            key_file=certs.key_file,
            reload_interval=0.0,
            registry=manager.registry,  # served on the manager's /metrics
        )
        manager.add_webhook_server(server)
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            try:
                with trio.fail_after(10):
                    while not server.serving:
                        await trio.sleep(0.01)
                context = ssl.create_default_context(cadata=certs.ca_bundle.decode("ascii"))
                results: list[Any] = []
                async with httpcore.AsyncConnectionPool(
                    ssl_context=context, max_connections=20
                ) as pool:

                    async def post(body: bytes) -> tuple[int, Any]:
                        response = await pool.request(
                            "POST",
                            f"{server.url}/validate",
                            headers={"Content-Type": "application/json"},
                            content=body,
                        )
                        return response.status, json.loads(response.content)

                    async def one(index: int) -> None:
                        data = {"k": "v"} if index % 2 else {}
                        status, document = await post(review(data))
                        assert status == 200
                        results.append((index, document["response"]["allowed"]))

                    with trio.fail_after(30):
                        async with trio.open_nursery() as requests:
                            for index in range(50):
                                requests.start_soon(one, index)
                        status, _ = await post(b"{not json")
                        assert status == 400
                        status, document = await post(review({"still": "serving"}))
                        assert status == 200
                        assert document["response"]["allowed"] is True
                assert sorted(results) == [(i, i % 2 == 1) for i in range(50)]
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)
