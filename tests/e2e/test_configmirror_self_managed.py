"""ConfigMirror with self-managed webhooks (``--webhook-self-managed``) on the real
apiserver: no certificate files and no configuration written by hand; the operator makes
its certificate, registers its validating and mutating webhooks and points the CRD's
conversion at itself, and the three answer the API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import StartOperator, accept_mirrors, eventually

from configmirror import (
    CONFIGMIRRORS,
    CONFIGMIRRORS_V1BETA1,
    CONVERT_PATH,
)
from kubemoon_core import ApiError, GroupVersionResource, NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

ADMISSION = "admissionregistration.k8s.io"
VALIDATING = GroupVersionResource(ADMISSION, "v1", "validatingwebhookconfigurations")
MUTATING = GroupVersionResource(ADMISSION, "v1", "mutatingwebhookconfigurations")
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
SECRETS = GroupVersionResource("", "v1", "secrets")


def mirror(name: str, targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": name},
        "spec": {"source": "settings", "targetNamespaces": targets},
    }


@pytest.fixture
async def registered(client: Client) -> AsyncIterator[None]:
    """The configurations select every namespace: remove them whatever happens."""
    yield
    for resource, name in ((VALIDATING, "validating"), (MUTATING, "mutating")):
        try:
            await client.delete(resource, f"configmirror-{name}")
        except NotFound:
            pass


async def test_self_managed_webhooks_register_and_answer(
    configmirror_api: ApiServer,
    client: Client,
    start_operator: StartOperator,
    kube_namespace: str,
    registered: None,
) -> None:
    home = kube_namespace
    targets = [configmirror_api.create_namespace(prefix="cm-self") for _ in range(2)]
    for target in targets:
        accept_mirrors(configmirror_api, target)
    replica = await start_operator(
        namespaces=(home,),
        webhook_address=("127.0.0.1", 0),
        webhook_self_managed=True,
        webhook_secret=(home, "configmirror-webhook-certs"),
    )
    webhooks = replica.operator.webhooks
    assert webhooks is not None

    async def refused() -> str | None:
        try:  # v1alpha1: converted by the operator, then validated by it
            await client.create(CONFIGMIRRORS, mirror("bad", [home]), namespace=home)
        except ApiError as exc:
            return str(exc) if "denied the request" in str(exc) else None
        return None

    message = await eventually(refused, what="the validating webhook")
    assert "validate.configmirror.kubemoon.dev" in message
    # The mutating webhook sorts the targets; the stored v1beta1 reads back in v1alpha1.
    created = await client.create(CONFIGMIRRORS, mirror("good", targets[::-1]), namespace=home)
    assert created["spec"]["targetNamespaces"] == sorted(targets)
    beta = await client.get(CONFIGMIRRORS_V1BETA1, "good", namespace=home)
    assert beta["spec"]["targets"]["namespaces"] == sorted(targets)
    # What the operator registered: its own URL, the Secret's bundle, in all three places.
    crd = await client.get(CRDS, "configmirrors.kubemoon.dev")
    conversion = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert conversion["url"] == f"{webhooks.server.url}{CONVERT_PATH}"
    assert "service" not in conversion
    secret = await client.get(SECRETS, "configmirror-webhook-certs", namespace=home)
    for resource, suffix in ((VALIDATING, "validating"), (MUTATING, "mutating")):
        config = await client.get(resource, f"configmirror-{suffix}")
        (hook,) = config["webhooks"]
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca-bundle.crt"]
    assert conversion["caBundle"] == secret["data"]["ca-bundle.crt"]
    await replica.stop()
