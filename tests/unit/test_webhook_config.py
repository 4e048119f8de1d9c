"""Webhook declarations -> configurations, and the certificate planner's single steps."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONVERSION_BODY_SIZE,
    AdmissionRequest,
    AdmissionResponse,
    CertificateAction,
    CertificateFacts,
    CertificatePlanner,
    CertificatePolicy,
    CertificateState,
    Converter,
    WebhookDeclaration,
    WebhookDeclarations,
    WebhookEndpoint,
    WebhookKind,
)

WIDGETS = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
CM = GroupVersionResource("", "v1", "configmaps")


def allow(request: AdmissionRequest) -> AdmissionResponse:
    return AdmissionResponse.allow()


def hooks() -> WebhookDeclarations:
    declared = WebhookDeclarations("widgets")
    declared.validating(
        "/validate-widget",
        WIDGETS,
        CM,
        failure_policy="Ignore",
        timeout_seconds=5,
        namespace_selector={"matchLabels": {"a": "b"}},
        object_selector={"matchLabels": {"c": "d"}},
        match_policy="Exact",
        scope="Namespaced",
    )(allow)
    declared.mutating("/default-widget", WIDGETS, operations=["CREATE"])(allow)
    declared.conversion("/convert", "widgets.examples.kubemoon.dev", Converter())
    return declared


def test_configurations_from_declarations_with_a_service() -> None:
    endpoint = WebhookEndpoint(service=("ops", "widgets-webhook"), port=8443)
    configs = hooks().configurations(endpoint, ca_bundle=b"PEM")
    assert configs.validating is not None and configs.mutating is not None
    assert configs.validating["metadata"] == {"name": "widgets-validating"}
    (entry,) = configs.validating["webhooks"]
    assert entry == {
        "name": "validate-widget.widgets.kubemoon.dev",
        "clientConfig": {
            "service": {
                "namespace": "ops",
                "name": "widgets-webhook",
                "path": "/validate-widget",
                "port": 8443,
            },
            "caBundle": base64.b64encode(b"PEM").decode(),
        },
        "rules": [
            {
                "apiGroups": ["examples.kubemoon.dev"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["widgets"],
                "scope": "Namespaced",
            },
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["configmaps"],
                "scope": "Namespaced",
            },
        ],
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "matchPolicy": "Exact",
        "timeoutSeconds": 5,
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": {"matchLabels": {"a": "b"}},
        "objectSelector": {"matchLabels": {"c": "d"}},
    }
    (mutating,) = configs.mutating["webhooks"]
    assert mutating["reinvocationPolicy"] == "Never"
    assert mutating["rules"][0]["operations"] == ["CREATE"]
    (crd,) = configs.conversions
    assert crd["metadata"] == {"name": "widgets.examples.kubemoon.dev"}
    webhook = crd["spec"]["conversion"]["webhook"]
    assert webhook["clientConfig"]["service"]["path"] == "/convert"
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert len(configs.documents()) == 3


def test_url_endpoint_and_cert_manager_variant() -> None:
    endpoint = WebhookEndpoint(url="https://127.0.0.1:9443")
    assert endpoint.hosts == ("127.0.0.1", "localhost")
    assert WebhookEndpoint(url="https://[::1]:9443").hosts == ("::1", "localhost")
    assert WebhookEndpoint(url="https://dev.example/hooks").hosts == ("dev.example", "localhost")
    assert WebhookEndpoint(url="https://localhost:1").hosts == ("localhost",)
    configs = hooks().configurations(endpoint, inject_ca_from="ops/widgets-cert")
    assert configs.validating is not None
    meta = configs.validating["metadata"]
    assert meta["annotations"] == {"cert-manager.io/inject-ca-from": "ops/widgets-cert"}
    client_config = configs.validating["webhooks"][0]["clientConfig"]
    assert client_config == {"url": "https://127.0.0.1:9443/validate-widget"}  # no caBundle
    service = WebhookEndpoint(service=("ops", "hook"))
    assert service.hosts == ("hook.ops.svc", "hook.ops.svc.cluster.local")


def test_no_declaration_of_a_kind_gives_no_configuration() -> None:
    declared = WebhookDeclarations("only")
    declared.validating("/v", CM)(allow)
    configs = declared.configurations(WebhookEndpoint(url="https://localhost:1"))
    assert configs.mutating is None and configs.conversions == ()
    app = declared.app()
    assert app.routes == {"/v": ("v.only.kubemoon.dev", WebhookKind.VALIDATING)}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"path": "nope"}, "path must start"),
        ({"path": "/a?b=1"}, "path must start"),
        ({"path": "/a b"}, "path must start"),
        ({"path": "/a/../b"}, "path must start"),
        ({"path": "/a/.."}, "path must start"),
        ({"path": "//evil.example"}, "path must start"),
        ({"path": "/" + "a" * 300}, "path must start"),
        ({"name": "short.name"}, "fully qualified"),
        ({"resources": ()}, "at least one resource"),
        ({"operations": ("PATCH",)}, "operations must be"),
        ({"failure_policy": "Sometimes"}, "failure_policy"),
        ({"side_effects": "Some"}, "side_effects"),
        ({"match_policy": "Loose"}, "match_policy"),
        ({"reinvocation_policy": "Always"}, "reinvocation_policy"),
        ({"scope": "Global"}, "scope"),
        ({"timeout_seconds": 31}, "timeout_seconds"),
        ({"timeout_seconds": True}, "timeout_seconds"),
        ({"namespace_selector": ["x"]}, "namespace_selector"),
        ({"kind": WebhookKind.CONVERSION}, "crd="),
        ({"max_body_size": 0}, "max_body_size"),
        ({"max_body_size": True}, "max_body_size"),
    ],
)
def test_bad_declarations_are_refused(changes: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "name": "v.widgets.kubemoon.dev",
        "path": "/v",
        "kind": WebhookKind.VALIDATING,
        "resources": (CM,),
    }
    with pytest.raises(LocalProtocolError, match=message):
        WebhookDeclaration(**{**base, **changes})


def test_paths_with_the_same_slug_get_distinct_names() -> None:
    declared = WebhookDeclarations("slug")
    for path in ("/a-b", "/a_b", "/a.b"):
        declared.validating(path, CM)(allow)
    names = [d.name for d in declared.declarations]
    assert names == ["a-b.slug.kubemoon.dev", "a-b-2.slug.kubemoon.dev", "a-b-3.slug.kubemoon.dev"]


def test_duplicates_and_bad_names_are_refused() -> None:
    declared = WebhookDeclarations("dup")
    declared.validating("/v", CM)(allow)
    with pytest.raises(LocalProtocolError, match="already declared"):
        declared.mutating("/v", CM)(allow)
    with pytest.raises(LocalProtocolError, match="already named"):
        declared.mutating("/w", CM, name="v.dup.kubemoon.dev")(allow)
    with pytest.raises(LocalProtocolError, match="DNS label"):
        WebhookDeclarations("Not A Label")
    for bad in (
        {"url": "http://x"},
        {"url": "https://user@x"},
        {"url": "https://x/#frag"},
        {"url": "https://x:1/p?q"},
        {"url": "https://x y"},
        {},
        {"service": ("", "x")},
        {"url": "https://x", "service": ("a", "b")},
    ):
        with pytest.raises(LocalProtocolError):
            WebhookEndpoint(**bad)
    with pytest.raises(LocalProtocolError, match="port"):
        WebhookEndpoint(service=("a", "b"), port=0)


@pytest.mark.parametrize(
    "changes",
    [
        {"renew_before": 0.0},
        {"renew_before": 100 * 86400.0},
        {"rotate_ca_before": 10 * 365 * 86400.0},
        {"rotate_ca_before": 30 * 86400.0},
        {"overlap": -1.0},
        {"propagation": True},
    ],
)
def test_inconsistent_policies_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError, match="certificate policy"):
        CertificatePolicy(**changes)


# -- the planner, one step at a time --------------------------------------------------------

POLICY = CertificatePolicy(
    ca_validity=100.0,
    rotate_ca_before=40.0,
    serving_validity=30.0,
    renew_before=10.0,
    propagation=5.0,
    overlap=20.0,
    backdate=0.0,
)
HOSTS = ("h",)
CA = CertificateFacts("ca", 0.0, 100.0)
NEXT = CertificateFacts("next", 60.0, 160.0)
SERVING = CertificateFacts("cert", 0.0, 30.0)


def state(**changes: Any) -> CertificateState:
    base: dict[str, Any] = {
        "ca": CA,
        "serving": SERVING,
        "serving_issuer": "ca",
        "serving_hosts": HOSTS,
        "bundle": ("ca",),
        "bundle_digest": "d1",
        "published": "d1",
        "published_at": 0.0,
    }
    return CertificateState(**{**base, **changes})


def plan(now: float, **changes: Any) -> Any:
    return CertificatePlanner(POLICY).plan(state(**changes), HOSTS, now)


def test_planner_steps() -> None:
    assert (
        CertificatePlanner().plan(CertificateState(), HOSTS, 0).action is CertificateAction.CREATE
    )
    assert plan(100.0).action is CertificateAction.CREATE  # the CA expired
    settled = plan(5.0)
    assert settled.action is CertificateAction.NONE and settled.next_check == 20.0
    assert plan(20.0).action is CertificateAction.RENEW_SERVING  # due
    assert plan(5.0, serving_hosts=("other",)).action is CertificateAction.RENEW_SERVING
    assert plan(5.0, serving_issuer="someone").action is CertificateAction.RENEW_SERVING
    assert plan(5.0, serving=None).action is CertificateAction.RENEW_SERVING
    assert plan(5.0, bundle=()).action is CertificateAction.SET_BUNDLE
    fresh = CertificateFacts("cert", 50.0, 80.0)
    assert plan(60.0, serving=fresh).action is CertificateAction.ADD_NEXT_CA
    # With the next CA in the bundle: wait for its publication, then propagation.
    rotating = {"serving": fresh, "next_ca": NEXT, "bundle": ("ca", "next"), "bundle_digest": "d2"}
    waiting = plan(61.0, **rotating)
    assert waiting.action is CertificateAction.NONE
    assert plan(62.0, **rotating, published="d2", published_at=61.0).next_check == 66.0
    switch = plan(66.0, **rotating, published="d2", published_at=61.0)
    assert switch.action is CertificateAction.SWITCH_CA
    # After the switch the old CA stays for the overlap, then leaves.
    after = {
        "ca": NEXT,
        "serving": CertificateFacts("c2", 66.0, 96.0),
        "serving_issuer": "next",
        "bundle": ("next", "ca"),
        "switched_at": 66.0,
    }
    assert plan(70.0, **after).next_check == 86.0
    drop = plan(86.0, **after)
    assert (drop.action, drop.bundle) == (CertificateAction.SET_BUNDLE, ("next",))
    assert plan(70.0, next_ca=CertificateFacts("x", 80.0, 90.0)).action is CertificateAction.CREATE


def test_an_expired_ca_hands_over_to_its_successor() -> None:
    # The bundle with the next CA was never published in time and the CA expired: the
    # next CA (which the API server may already trust) takes over, not a new one.
    capped = CertificateFacts("cert", 75.0, 100.0)
    rotating = {
        "serving": capped,
        "next_ca": NEXT,
        "bundle": ("ca", "next"),
        "bundle_digest": "d2",
    }
    assert plan(99.9, **rotating).action is CertificateAction.NONE  # still waiting
    for published in ({}, {"published": "d2", "published_at": 99.0}):
        late = plan(100.0, **rotating, **published)
        assert late.action is CertificateAction.SWITCH_CA, late
    # A next CA that is not valid either: a new CA.
    expired_next = CertificateFacts("next", 0.0, 100.0)
    assert plan(100.0, **{**rotating, "next_ca": expired_next}).action is CertificateAction.CREATE
    # A CA not valid yet (a clock behind the one that made it) is not handed over.
    early = CertificateFacts("ca", 50.0, 150.0)
    assert plan(40.0, ca=early, **rotating).action is CertificateAction.CREATE


def test_renewal_never_loops_at_the_ca_cap() -> None:
    # The serving certificate ends with its CA and renewing would not extend it: wait.
    capped = CertificateFacts("cert", 75.0, 100.0)
    rotating = {"serving": capped, "next_ca": NEXT, "bundle": ("ca", "next"), "bundle_digest": "d2"}
    assert plan(95.0, **rotating).action is CertificateAction.NONE


def test_a_declared_body_limit_reaches_the_served_route() -> None:
    """Per-route body limits are reachable through declarations (as through WebhookApp),
    so the server Manager.serve_webhooks starts refuses an oversized review unread."""
    declared = WebhookDeclarations("limits")
    declared.validating("/small", CM, max_body_size=4096)(allow)
    declared.mutating("/default", CM)(allow)
    declared.conversion("/convert", "widgets.examples.kubemoon.dev", Converter())
    declared.conversion(
        "/convert-small", "gadgets.examples.kubemoon.dev", Converter(), max_body_size=8192
    )
    app = declared.app()
    assert app.body_limit("/small?timeout=10s") == 4096
    assert app.body_limit("/default") == DEFAULT_MAX_BODY_SIZE
    assert app.body_limit("/convert") == DEFAULT_MAX_CONVERSION_BODY_SIZE
    assert app.body_limit("/convert-small") == 8192
    reply = app.precheck(
        "POST", "/small", [("Content-Type", "application/json"), ("Content-Length", "4097")]
    )
    assert reply is not None and reply.status == 413
    # Not part of what is registered.
    config = declared.configurations(WebhookEndpoint(url="https://127.0.0.1:9443"))
    assert config.validating is not None
    assert "maxBodySize" not in str(config.validating)


# -- drift: the live configuration compared with the declaration, field for field ----------


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the apiserver stores it: defaults filled in, metadata added."""
    import copy

    live = copy.deepcopy(body)
    live["metadata"] = {**live["metadata"], "resourceVersion": "7", "uid": "u"}
    for entry in live["webhooks"]:
        entry.setdefault("namespaceSelector", {})
        entry.setdefault("objectSelector", {})
        entry.setdefault("matchConditions", [])
    return live


def _declared() -> tuple[dict[str, Any], dict[str, Any]]:
    from kubemoon_core.webhooks import webhook_drift  # noqa: F401 (the public name exists)

    configs = hooks().configurations(WebhookEndpoint(url="https://h:9443"), ca_bundle=b"PEM")
    assert configs.validating is not None and configs.mutating is not None
    return configs.validating, configs.mutating


def test_a_stored_copy_with_apiserver_defaults_has_no_drift() -> None:
    from kubemoon_core.webhooks import webhook_drift

    for body in _declared():
        assert webhook_drift(body, _stored(body)) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("matchConditions", [{"name": "off", "expression": "false"}]),
        ("objectSelector", {"matchLabels": {"x": "y"}}),
        ("namespaceSelector", {"matchExpressions": [{"key": "k", "operator": "Exists"}]}),
        ("failurePolicy", "Fail"),
        ("matchPolicy", "Equivalent"),
        ("sideEffects", "NoneOnDryRun"),
        ("timeoutSeconds", 30),
        ("admissionReviewVersions", ["v1", "v1beta1"]),
        ("clientConfig", {"url": "https://elsewhere/validate-widget"}),
        ("rules", []),
    ],
)
def test_every_field_that_changes_what_reaches_the_webhook_is_drift(field: str, value: Any) -> None:
    from kubemoon_core.webhooks import webhook_drift

    validating, _ = _declared()
    live = _stored(validating)
    live["webhooks"][0][field] = value
    name = validating["webhooks"][0]["name"]
    assert webhook_drift(validating, live) == [f"{name}.{field}"]


def test_a_changed_ca_bundle_a_narrowed_rule_and_a_reinvocation_policy_are_drift() -> None:
    from kubemoon_core.webhooks import webhook_drift

    validating, mutating = _declared()
    live = _stored(validating)
    live["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"OTHER").decode()
    live["webhooks"][0]["rules"][0]["operations"] = ["DELETE"]
    name = validating["webhooks"][0]["name"]
    assert webhook_drift(validating, live) == [f"{name}.clientConfig", f"{name}.rules"]
    live = _stored(mutating)
    live["webhooks"][0]["reinvocationPolicy"] = "IfNeeded"
    assert webhook_drift(mutating, live) == [
        f"{mutating['webhooks'][0]['name']}.reinvocationPolicy"
    ]


def test_missing_extra_and_reordered_webhooks_are_drift() -> None:
    from kubemoon_core.webhooks import webhook_drift

    validating, _ = _declared()
    name = validating["webhooks"][0]["name"]
    live = _stored(validating)
    extra = {**live["webhooks"][0], "name": "extra.example.com"}
    live["webhooks"].append(extra)
    assert webhook_drift(validating, live) == ["extra.example.com"]
    live["webhooks"] = []
    assert webhook_drift(validating, live) == [name]
    two = {**validating, "webhooks": [validating["webhooks"][0], extra]}
    live = _stored(two)
    live["webhooks"].reverse()
    assert webhook_drift(two, live) == ["webhooks"]
