"""ConfigMirror's webhook handlers, as the server calls them (no apiserver needed here:
the access reviews are covered end to end in tests/e2e/test_configmirror_webhooks.py)."""

from __future__ import annotations

from typing import Any

from configmirror import (
    CONVERT_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
    ConfigMirrorWebhooks,
)
from configmirror._webhooks import mutate
from kubemoon_core import (
    AdmissionRequest,
    ClientConfig,
    GroupVersionKind,
    GroupVersionResource,
    Operation,
    UserInfo,
    WebhookKind,
    apply_json_patch,
)
from kubemoon_trio import Client

# Nothing listens on port 1: every access review fails to connect at once.
UNREACHABLE = ClientConfig(server="https://127.0.0.1:1")


def request(obj: Any, operation: Operation = Operation.CREATE, old: Any = None) -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        kind=GroupVersionKind("kubemoon.dev", "v1alpha1", "ConfigMirror"),
        resource=GroupVersionResource("kubemoon.dev", "v1alpha1", "configmirrors"),
        operation=operation,
        user_info=UserInfo("alice"),
        name="m",
        namespace="home",
        object=obj,
        old_object=old,
    )


def mirror(*targets: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "namespace": "home"},
        "spec": {"source": "settings", "targetNamespaces": list(targets)},
    }


def test_the_app_serves_three_webhooks() -> None:
    app = ConfigMirrorWebhooks(Client(UNREACHABLE)).app()
    assert {path: kind for path, (_, kind) in app.routes.items()} == {
        VALIDATE_PATH: WebhookKind.VALIDATING,
        MUTATE_PATH: WebhookKind.MUTATING,
        CONVERT_PATH: WebhookKind.CONVERSION,
    }


async def test_an_invalid_mirror_is_denied_before_any_access_review() -> None:
    async with Client(UNREACHABLE) as client:
        verdict = await ConfigMirrorWebhooks(client).validate(request(mirror("home")))
    assert not verdict.allowed
    assert verdict.code == 422
    assert "invalid ConfigMirror m: target namespace 'home'" in verdict.message


async def test_an_access_review_that_cannot_be_made_denies() -> None:
    async with Client(UNREACHABLE) as client:
        verdict = await ConfigMirrorWebhooks(client).validate(request(mirror("a", "b")))
    assert not verdict.allowed
    assert verdict.message.startswith("cannot check access to namespace 'a': ")
    assert "cannot check access to namespace 'b': " in verdict.message


async def test_what_needs_no_review_is_allowed() -> None:
    async with Client(UNREACHABLE) as client:
        hooks = ConfigMirrorWebhooks(client)
        # Only metadata changed: nobody's access is in question, nothing is sent.
        same = await hooks.validate(request(mirror("a"), Operation.UPDATE, mirror("a")))
        assert same.allowed
        deleted = await hooks.validate(request(None, Operation.DELETE, mirror("a")))
        assert deleted.allowed


def test_mutate_patches_in_the_defaults() -> None:
    original = mirror("b", "a")
    verdict = mutate(request(original))
    assert verdict.allowed
    patched = apply_json_patch(original, [dict(op) for op in verdict.patch])
    assert patched["spec"]["targetNamespaces"] == ["a", "b"]
    assert patched["metadata"]["labels"] == {"kubemoon.dev/mirror-source": "settings"}
    assert mutate(request(None, Operation.DELETE)).patch == ()
