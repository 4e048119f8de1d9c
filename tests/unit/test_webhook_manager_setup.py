"""Manager.serve_webhooks: what is checked when it is called, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    CertificatePolicy,
    WebhookDeclarations,
)
from kubemoon_testing import WebhookCertificates
from kubemoon_trio import DEFAULT_INLINE_BODY_SIZE, Client, Manager

CM = GroupVersionResource("", "v1", "configmaps")


def hooks() -> WebhookDeclarations:
    declared = WebhookDeclarations("setup")

    @declared.validating("/v", CM)
    def allow(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    return declared


async def test_defaults_readiness_and_endpoints(tmp_path: Path) -> None:
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        manager = Manager(client, name="kubemoon.dev/setup")
        webhooks = manager.serve_webhooks(hooks(), service=("ops", "setup-webhook"))
        assert webhooks.secret == ("ops", "setup-webhook-certs")
        assert manager.readiness_problems() == ["webhooks: no serving certificate yet"]
        endpoint = webhooks.endpoint()
        assert endpoint.service == ("ops", "setup-webhook") and endpoint.port == 443
        with pytest.raises(LocalProtocolError, match="already serves webhooks"):
            manager.serve_webhooks(hooks())
        # Without a Service: the Secret is in "default", the URL needs the bound port.
        laptop = Manager(client).serve_webhooks(hooks(), host="0.0.0.0")
        assert laptop.secret == ("default", "setup-webhook-certs")
        assert laptop.advertise_host == "127.0.0.1"
        with pytest.raises(LocalProtocolError, match="not serving"):
            laptop.endpoint()
        # With files: nothing in a Secret, served once started.
        files = Manager(client).serve_webhooks(hooks(), cert_dir=_pair(tmp_path))
        assert files.secret is None
        assert files.problems() == ["webhooks: not serving yet"]


async def test_an_overlap_shorter_than_the_refresh_is_refused() -> None:
    policy = CertificatePolicy(overlap=5.0)
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        with pytest.raises(LocalProtocolError, match="overlap must be longer"):
            Manager(client).serve_webhooks(hooks(), policy=policy, refresh=10.0)


def _pair(tmp_path: Path) -> Path:
    return WebhookCertificates.create(tmp_path / "certs").directory


async def test_the_servers_limits_and_mutual_tls_are_reachable(tmp_path: Path) -> None:
    """serve_webhooks hands the wall's options to the server it starts."""
    async with Client(ClientConfig(server="https://127.0.0.1:6443")) as client:
        webhooks = Manager(client).serve_webhooks(
            hooks(),
            max_connections=7,
            max_handshakes=3,
            first_request_timeout=2.5,
            request_timeout=4.0,
            handler_threads=2,
            inline_body_size=4096,
        )
        server = webhooks.server
        assert server.max_connections == 7 and server.max_handshakes == 3
        assert (server.first_request_timeout, server.request_timeout) == (2.5, 4.0)
        assert server.inline_body_size == 4096
        default = Manager(client).serve_webhooks(hooks()).server
        assert default.inline_body_size == DEFAULT_INLINE_BODY_SIZE == 64 * 1024
        with pytest.raises(LocalProtocolError, match="max_connections must be a positive"):
            Manager(client).serve_webhooks(hooks(), max_connections=0)
        for bad in (-1, True, 1.5):
            with pytest.raises(LocalProtocolError, match="inline_body_size must be an integer"):
                Manager(client).serve_webhooks(hooks(), inline_body_size=bad)
        with pytest.raises(LocalProtocolError, match="cannot read the client CA"):
            Manager(client).serve_webhooks(hooks(), client_ca_file=tmp_path / "none.crt")
        with pytest.raises(LocalProtocolError, match="client CA"):
            Manager(client).serve_webhooks(
                hooks(), cert_dir=_pair(tmp_path), client_ca_file=tmp_path / "none.crt"
            )
