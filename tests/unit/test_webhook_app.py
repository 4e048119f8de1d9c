"""WebhookApp: every HTTP-level decision of the webhook server, without a socket."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from test_admission import CONFIGMAP, review

from kubemoon_core import PatchType
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONVERSION_BODY_SIZE,
    AdmissionRequest,
    AdmissionResponse,
    Converter,
    WebhookApp,
    WebhookKind,
    ca_bundle_patch,
)

JSON_HEADERS = [("Content-Type", "application/json; charset=utf-8")]


def validate(request: AdmissionRequest) -> AdmissionResponse:
    assert request.object is not None
    if not request.object.get("data"):
        return AdmissionResponse.deny("data must not be empty")
    return AdmissionResponse.allow(warnings=("looks fine",))


def add_label(request: AdmissionRequest) -> AdmissionResponse:
    assert request.object is not None
    mutated = json.loads(json.dumps(request.object))
    mutated["metadata"].setdefault("labels", {})["mutated"] = "yes"
    return AdmissionResponse.patched(request.object, mutated)


def boom(request: AdmissionRequest) -> AdmissionResponse:
    raise RuntimeError("handler bug")


def app() -> WebhookApp:
    a = WebhookApp(max_body_size=10_000)
    a.validating("/validate", validate, name="configmaps")
    a.mutating("/mutate", add_label)
    a.validating("/boom", boom)
    a.validating("/wrong-type", lambda request: "yes")  # type: ignore[arg-type,return-value]
    a.validating("/sneaky-patch", add_label)
    converter = Converter()
    converter.register("example.com/v1", "example.com/v2", lambda obj: obj)
    a.conversion("/convert", converter)
    return a


def post(path: str, doc: Any, headers: list[tuple[str, str]] | None = None) -> Any:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return app().handle("POST", path, JSON_HEADERS if headers is None else headers, body)


def response_of(reply: Any) -> dict[str, Any]:
    assert reply.status == 200
    assert ("Content-Type", "application/json") in reply.headers
    assert ("Content-Length", str(len(reply.body))) in reply.headers
    answer: dict[str, Any] = json.loads(reply.body)["response"]
    return answer


def test_routes() -> None:
    assert app().routes["/validate"] == ("configmaps", WebhookKind.VALIDATING)
    assert app().routes["/convert"] == ("/convert", WebhookKind.CONVERSION)
    assert DEFAULT_MAX_BODY_SIZE == 1024 * 1024
    assert DEFAULT_MAX_CONVERSION_BODY_SIZE == 7 * 1024 * 1024
    assert WebhookApp().max_body_size == DEFAULT_MAX_BODY_SIZE


def test_route_registration_rules() -> None:
    a = WebhookApp()
    a.validating("/v", validate)
    with pytest.raises(LocalProtocolError, match="already registered"):
        a.mutating("/v", add_label)
    with pytest.raises(LocalProtocolError, match="must start with '/'"):
        a.validating("v", validate)
    with pytest.raises(LocalProtocolError, match="no query"):
        a.validating("/v?x=1", validate)
    with pytest.raises(LocalProtocolError, match="positive"):
        WebhookApp(max_body_size=0)
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(LocalProtocolError, match="positive"):
            a.validating("/w", validate, max_body_size=bad)  # type: ignore[arg-type]


def test_validating_allows_and_denies() -> None:
    reply = post("/validate?timeout=10s", review(object={**CONFIGMAP, "data": {"a": "b"}}))
    answer = response_of(reply)
    assert answer == {
        "uid": review()["request"]["uid"],
        "allowed": True,
        "warnings": ["looks fine"],
    }
    assert (reply.webhook, reply.outcome, reply.uid) == ("configmaps", "allowed", answer["uid"])
    reply = post("/validate", review())
    assert response_of(reply)["status"] == {
        "code": 403,
        "message": "data must not be empty",
        "reason": "Forbidden",
    }
    assert (reply.outcome, reply.message) == ("denied", "data must not be empty")


def test_mutating_answers_a_patch() -> None:
    reply = post("/mutate", review())
    answer = response_of(reply)
    assert reply.outcome == "patched"
    assert answer["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert apply_json_patch(CONFIGMAP, patch)["metadata"]["labels"] == {"mutated": "yes"}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/boom", "webhook /boom failed: RuntimeError: handler bug"),
        ("/wrong-type", "webhook /wrong-type failed: TypeError: the handler returned str"),
        ("/sneaky-patch", "webhook /sneaky-patch failed: TypeError: a validating webhook cannot"),
    ],
)
def test_a_failing_handler_is_an_http_500_not_a_review(path: str, message: str) -> None:
    # Not "allowed: false" (a denial under any failurePolicy): a failed call, so the
    # apiserver applies the webhook's failurePolicy.
    reply = post(path, review())
    assert reply.status == 500
    status = _status(reply)
    assert "response" not in status
    assert status["reason"] == "InternalError"
    assert status["message"].startswith(message)
    assert (reply.outcome, reply.uid) == ("InternalError", review()["request"]["uid"])
    assert isinstance(reply.error, Exception)
    assert reply.message == status["message"]


def test_a_verdict_that_cannot_be_encoded_is_an_http_500() -> None:
    import datetime

    def stamp(request: AdmissionRequest) -> AdmissionResponse:
        assert request.object is not None
        mutated = json.loads(json.dumps(request.object))
        mutated["metadata"]["when"] = datetime.datetime(2026, 1, 1)  # not JSON
        return AdmissionResponse.patched(request.object, mutated)

    a = WebhookApp()
    a.mutating("/stamp", stamp)
    reply = a.handle("POST", "/stamp", JSON_HEADERS, json.dumps(review()).encode())
    assert reply.status == 500
    assert "cannot be encoded" in _status(reply)["message"]
    assert reply.error is not None


def test_a_conversion_that_cannot_be_encoded_is_an_http_500() -> None:
    import datetime

    converter = Converter()
    converter.register(
        "example.com/v1", "example.com/v2", lambda obj: {**obj, "at": datetime.date(2026, 1, 1)}
    )
    a = WebhookApp()
    a.conversion("/c", converter)
    doc = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c-9",
            "desiredAPIVersion": "example.com/v2",
            "objects": [{"apiVersion": "example.com/v1", "kind": "W"}],
        },
    }
    reply = a.handle("POST", "/c", JSON_HEADERS, json.dumps(doc).encode())
    assert (reply.status, reply.uid) == (500, "c-9")
    assert _status(reply)["reason"] == "InternalError"


def test_body_limits_per_route() -> None:
    a = WebhookApp(max_body_size=100)
    a.validating("/small", validate)
    a.validating("/big", validate, max_body_size=5000)
    a.conversion("/convert", Converter())
    a.conversion("/tiny-convert", Converter(), max_body_size=10)
    assert a.body_limit("/small?timeout=10s") == 100
    assert a.body_limit("/big") == 5000
    assert a.body_limit("/convert") == DEFAULT_MAX_CONVERSION_BODY_SIZE
    assert a.body_limit("/tiny-convert") == 10
    assert a.body_limit("/unknown") == 100
    body = json.dumps(review(object={**CONFIGMAP, "data": {"a": "b" * 300}})).encode()
    assert a.handle("POST", "/small", JSON_HEADERS, body).status == 413
    assert "100 bytes" in a.handle("POST", "/small", JSON_HEADERS, body).message
    assert a.handle("POST", "/big", JSON_HEADERS, body).status == 200
    for length, status in (("101", 413), ("100", None), ("9" * 5000, 413), ("\xb2", None)):
        reply = a.precheck("POST", "/small", [*JSON_HEADERS, ("Content-Length", length)])
        assert (reply.status if reply else None) == status


def test_conversion_route() -> None:
    doc = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c-1",
            "desiredAPIVersion": "example.com/v2",
            "objects": [{"apiVersion": "example.com/v1", "kind": "W"}],
        },
    }
    reply = post("/convert", doc)
    assert response_of(reply)["convertedObjects"] == [{"apiVersion": "example.com/v2", "kind": "W"}]
    assert (reply.outcome, reply.uid) == ("converted", "c-1")
    doc["request"]["desiredAPIVersion"] = "example.com/v3"
    reply = post("/convert", doc)
    assert response_of(reply)["result"]["status"] == "Failure"
    assert reply.outcome == "failed"
    assert "no conversion" in reply.message


def _status(reply: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(reply.body)
    assert doc["kind"] == "Status"
    assert doc["code"] == reply.status
    return doc


@pytest.mark.parametrize(
    ("path", "doc", "message"),
    [
        ("/validate", b"{not json", "invalid JSON"),
        ("/validate", {**review(), "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion"),
        ("/validate", {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}, ""),
        ("/convert", review(), "apiVersion"),
        ("/validate", review(uid=None), "request.uid"),
    ],
)
def test_malformed_reviews_get_400(path: str, doc: Any, message: str) -> None:
    reply = post(path, doc)
    assert reply.status == 400
    assert _status(reply)["reason"] == "BadRequest"
    assert message in reply.message
    assert reply.outcome == "BadRequest"


def test_head_decisions() -> None:
    a = app()
    assert a.precheck("POST", "/validate", JSON_HEADERS) is None
    reply = a.precheck("POST", "/nowhere?x", JSON_HEADERS)
    assert reply is not None
    assert (reply.status, reply.webhook) == (404, "")
    assert "'/nowhere'" in _status(reply)["message"]
    reply = a.precheck("GET", "/validate", JSON_HEADERS)
    assert reply is not None
    assert reply.status == 405
    assert ("Allow", "POST") in reply.headers
    assert reply.webhook == "configmaps"
    for headers in ([("Content-Type", "text/plain")], []):
        reply = a.precheck("POST", "/validate", headers)
        assert reply is not None
        assert reply.status == 415
    big = [*JSON_HEADERS, ("content-length", "10001")]
    reply = a.precheck("POST", "/validate", big)
    assert reply is not None
    assert (reply.status, reply.webhook) == (413, "configmaps")
    assert a.precheck("POST", "/validate", [*JSON_HEADERS, ("Content-Length", "10000")]) is None
    assert a.precheck("POST", "/validate", [*JSON_HEADERS, ("Content-Length", "x")]) is None
    assert a.too_large("/unknown").webhook == ""
    assert a.webhook_name("/validate?timeout=10s") == "configmaps"
    assert a.webhook_name("/mutate") == "/mutate"


def test_handle_after_a_precheck() -> None:
    a = app()
    body = json.dumps(review()).encode()
    # The caller vouches for the head: a wrong content type is no longer looked at...
    reply = a.handle("POST", "/validate", [], body, prechecked=True)
    assert reply.status == 200
    # ...but an unknown path is still a 404, and the body size is still checked.
    assert a.handle("POST", "/nowhere", [], body, prechecked=True).status == 404
    assert a.handle("POST", "/validate", [], b" " * 10_001, prechecked=True).status == 413


def test_handle_checks_the_head_and_the_real_body_size() -> None:
    assert post("/nowhere", review()).status == 404
    assert post("/validate", review(), headers=[("Content-Type", "text/json")]).status == 415
    reply = post("/validate", b" " * 10_001)
    assert reply.status == 413
    assert reply.outcome == "RequestEntityTooLarge"


# --- CA bundle injection ---------------------------------------------------------------------


def _configuration(kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "hooks", "resourceVersion": "42"},
        "webhooks": [
            {"name": "a.example.com", "clientConfig": {"url": "https://127.0.0.1:1/a"}},
            {"name": "b.example.com", "clientConfig": {"url": "https://127.0.0.1:1/b"}},
            "junk",
            {"name": "c.example.com"},
        ],
        **extra,
    }


def test_ca_bundle_patch_for_webhook_configurations() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\n"
    encoded = base64.b64encode(pem).decode()
    request = ca_bundle_patch(_configuration("ValidatingWebhookConfiguration"), pem)
    assert request.method == "PATCH"
    assert request.path == (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hooks"
    )
    assert request.header("Content-Type") == PatchType.JSON.value
    assert json.loads(request.body) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": encoded},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": encoded},
    ]
    request = ca_bundle_patch(
        _configuration("MutatingWebhookConfiguration"), pem, webhooks=["b.example.com"]
    )
    assert request.path.endswith("/mutatingwebhookconfigurations/hooks")
    assert [op["path"] for op in json.loads(request.body)][1:] == [
        "/webhooks/1/clientConfig/caBundle"
    ]
    patched = apply_json_patch(
        _configuration("MutatingWebhookConfiguration"), json.loads(request.body)
    )
    assert patched["webhooks"][1]["clientConfig"]["caBundle"] == encoded


def test_ca_bundle_patch_for_a_crd() -> None:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "resourceVersion": "7"},
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": "https://127.0.0.1:1/convert"}},
            }
        },
    }
    request = ca_bundle_patch(crd, b"PEM")
    assert request.path == (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    )
    patched = apply_json_patch(crd, json.loads(request.body))
    assert patched["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == "UEVN"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"kind": "ValidatingWebhookConfiguration"}, "no metadata.name"),
        ({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "x"}}, "resourceVersion"),
        ({"kind": "Pod", "metadata": {"name": "x", "resourceVersion": "1"}}, "'Pod'"),
        (
            {
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "x", "resourceVersion": "1"},
            },
            "no webhook",
        ),
        (
            {"kind": "CustomResourceDefinition", "metadata": {"name": "x", "resourceVersion": "1"}},
            "no Webhook conversion",
        ),
        (
            {
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "x", "resourceVersion": "1"},
                "spec": {"conversion": {"strategy": "None"}},
            },
            "no Webhook conversion",
        ),
        (
            {
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "x", "resourceVersion": "1"},
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {}}},
            },
            "no Webhook conversion",
        ),
    ],
)
def test_ca_bundle_patch_refuses_what_it_cannot_patch(obj: Any, message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        ca_bundle_patch(obj, b"PEM")
    if obj.get("kind") == "ValidatingWebhookConfiguration" and "resourceVersion" in obj.get(
        "metadata", {}
    ):
        with pytest.raises(LocalProtocolError, match="no webhook"):
            ca_bundle_patch(_configuration(obj["kind"]), b"PEM", webhooks=["zzz"])


def test_the_network_policy_covers_exactly_the_operators_ports() -> None:
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "deploy"
    (policy,) = yaml.safe_load_all(
        (root / "components" / "networkpolicy" / "networkpolicy.yaml").read_text()
    )
    (deployment,) = yaml.safe_load_all((root / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == pod["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (container,) = pod["spec"]["containers"]
    served = {p["containerPort"] for p in container["ports"]}
    allowed = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert sorted(allowed) == sorted(served)  # each port once, none left open to all
    assert all(rule["from"] for rule in policy["spec"]["ingress"])


def test_raise_open_file_limit_in_a_child_process() -> None:
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from kubemoon_io import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
        "first = raise_open_file_limit()\n"
        "print(first, raise_open_file_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE), hard)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second, soft, hard_now, hard = (int(x) for x in out.stdout.split())
    assert first == second == soft  # raised once, then left alone
    assert hard_now == hard  # the hard limit is never touched
    assert soft > 64


def test_admission_routes_need_a_verified_client_when_the_server_asks_for_one() -> None:
    a = app()
    for path in ("/validate", "/mutate"):
        reply = a.precheck("POST", path, JSON_HEADERS, client_certified=False)
        assert reply is not None and reply.status == 403, path
        assert _status(reply)["reason"] == "Forbidden"
        assert a.precheck("POST", path, JSON_HEADERS, client_certified=True) is None
        assert a.precheck("POST", path, JSON_HEADERS) is None  # no mutual TLS asked
    # The API server sends no client certificate to a conversion webhook.
    assert a.precheck("POST", "/convert", JSON_HEADERS, client_certified=False) is None
    reply = a.precheck("POST", "/nowhere", JSON_HEADERS, client_certified=False)
    assert reply is not None and reply.status == 404


def test_only_async_handlers_are_handled_without_blocking() -> None:
    from kubemoon_core.webhooks import (
        AdmissionResponse,
        Converter,
        WebhookApp,
    )

    def plain(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    async def coroutine(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    class AsyncCallable:
        async def __call__(self, request: AdmissionRequest) -> AdmissionResponse:
            return AdmissionResponse.allow()

    app = WebhookApp()
    app.validating("/plain", plain)
    app.validating("/coroutine", coroutine)
    app.mutating("/object", AsyncCallable())
    assert not app.handled_without_blocking("/plain")
    assert app.handled_without_blocking("/coroutine?timeout=10s")
    assert app.handled_without_blocking("/object")
    assert app.handled_without_blocking("/nowhere")  # answered 404 at once
    app.conversion("/convert", Converter())
    assert not app.handled_without_blocking("/convert")  # the user's converter is sync
