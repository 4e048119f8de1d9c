"""examples/widgets/webhooks.py: its handlers decide as the tutorial says, and its
declarations give the configurations ``kubemoon webhooks generate`` prints."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from kubemoon_core.webhooks import WebhookEndpoint, WebhookKind

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "widgets" / "webhooks.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("widget_webhooks", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def review(spec: dict[str, Any]) -> bytes:
    obj = {"apiVersion": "examples.kubemoon.dev/v1", "kind": "Widget", "spec": spec}
    request = {
        "uid": "u1",
        "kind": {"group": "examples.kubemoon.dev", "version": "v1", "kind": "Widget"},
        "resource": {"group": "examples.kubemoon.dev", "version": "v1", "resource": "widgets"},
        "name": "w",
        "namespace": "ns",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "object": obj,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


def answer(path: str, spec: dict[str, Any]) -> dict[str, Any]:
    app = load().hooks.app()
    headers = [("Content-Type", "application/json")]
    reply = app.handle("POST", path, headers, review(spec))
    assert reply.status == 200
    response: dict[str, Any] = json.loads(reply.body)["response"]
    return response


def test_small_widgets_have_at_most_ten_replicas() -> None:
    assert answer("/validate-widget", {"tier": "small", "replicas": 10})["allowed"] is True
    denied = answer("/validate-widget", {"tier": "small", "replicas": 11})
    assert denied["allowed"] is False
    assert denied["status"]["message"] == "a small widget has at most 10 replicas"
    assert answer("/validate-widget", {"tier": "large", "replicas": 40})["allowed"] is True


def test_empty_data_gets_a_default_and_set_data_is_kept() -> None:
    patched = answer("/default-widget", {"tier": "small", "replicas": 1})
    assert patched["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(patched["patch"])) == [
        {"op": "add", "path": "/spec/data", "value": {"greeting": "hello"}}
    ]
    kept = answer("/default-widget", {"tier": "small", "data": {"a": "b"}})
    assert json.loads(base64.b64decode(kept.get("patch", "W10="))) == []


def test_declarations_and_size() -> None:
    module = load()
    kinds = [d.kind for d in module.hooks.declarations]
    assert kinds == [WebhookKind.VALIDATING, WebhookKind.MUTATING]
    configs = module.hooks.configurations(WebhookEndpoint(service=("ops", "widgets-webhook")))
    assert configs.validating is not None and configs.mutating is not None
    text = EXAMPLE.read_text()
    # Handlers and registration in at most 25 lines, without certificate code.
    assert len([line for line in text.splitlines() if line.strip()]) <= 25
    for word in ("caBundle", "base64", "cert", "ssl"):
        assert word not in text.replace("certificate and registers", "")
