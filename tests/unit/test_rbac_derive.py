"""The pure RBAC derivation: least-privilege rules from what an operator declares."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubemoon_core._rbac import (
    Declared,
    DeclaredController,
    DeclaredWebhooks,
    GroupResource,
    Permission,
    PolicyRule,
    access_review_allowed,
    derive_rules,
    describe_missing,
    permissions_to_check,
    review_plan,
    rules_manifest,
)

ROOT = Path(__file__).resolve().parents[2]

CONFIGMIRROR = Declared(
    controllers=[
        DeclaredController(
            primary=GroupResource("kubemoon.dev", "configmirrors"),
            status_verbs=("update",),
            owned=[GroupResource("", "configmaps")],
            owned_verbs=("create", "update", "delete"),
            watched=[GroupResource("", "namespaces")],
        )
    ],
    lease_namespace="kubemoon-system",
    sharded=True,
    access_reviews=True,
    # Other ConfigMaps are cached as metadata only: a source's data is read with a GET.
    extra=[PolicyRule("", "configmaps", frozenset({"get"}))],
)


def _rules(docs: list[dict[str, object]], kind: str) -> list[object]:
    return [d["rules"] for d in docs if d["kind"] == kind]


def test_configmirror_declarations_give_the_rules_its_e2e_run_proved_exact() -> None:
    # deploy/overlays/cert-manager/rbac.yaml is kept exact by tests/e2e/test_configmirror_rbac.py: the derived
    # rules must grant exactly the same (group, resource, verb, namespace) tuples.
    derived = {
        (r.namespace, r.group, r.resource, v) for r in derive_rules(CONFIGMIRROR) for v in r.verbs
    }
    docs = list(
        yaml.safe_load_all(
            (ROOT / "deploy" / "overlays" / "cert-manager" / "rbac.yaml").read_text()
        )
    )
    written = set()
    for d in docs:
        if d["kind"] not in ("ClusterRole", "Role"):
            continue
        ns = d["metadata"].get("namespace")
        for rule in d["rules"]:
            for g in rule["apiGroups"]:
                for res in rule["resources"]:
                    for v in rule["verbs"]:
                        written.add((ns, g, res, v))
    assert derived == written


def test_rules_are_merged_per_resource_and_sorted_deterministically() -> None:
    a = DeclaredController(
        primary=GroupResource("example.com", "widgets"),
        finalizers=False,
        status=False,
        watched=[GroupResource("", "configmaps")],
    )
    b = DeclaredController(
        primary=GroupResource("example.com", "gadgets"), owned=[GroupResource("", "configmaps")]
    )
    extra = PolicyRule("", "secrets", frozenset({"get"}), "ns1")
    one = derive_rules(Declared(controllers=[a, b], events=False, extra=[extra]))
    two = derive_rules(Declared(controllers=[b, a], events=False, extra=[extra]))
    assert one == two
    assert [(r.namespace, r.group, r.resource, r.sorted_verbs()) for r in one] == [
        (None, "", "configmaps", ["list", "watch", "create", "patch", "delete"]),
        (None, "example.com", "gadgets", ["list", "watch", "patch"]),
        (None, "example.com", "gadgets/status", ["patch"]),
        (None, "example.com", "widgets", ["list", "watch"]),
        ("ns1", "", "secrets", ["get"]),
    ]


def test_namespaced_declarations_give_a_role_in_that_namespace() -> None:
    c = DeclaredController(primary=GroupResource("example.com", "widgets"), namespace="team-a")
    docs = rules_manifest(
        derive_rules(Declared(controllers=[c], events=False)),
        name="widgets",
        service_account="op",
        service_account_namespace="ops",
    )
    kinds = [(d["kind"], d["metadata"].get("namespace")) for d in docs]
    assert kinds == [
        ("ServiceAccount", "ops"),
        ("Role", "team-a"),
        ("RoleBinding", "team-a"),
    ]
    assert docs[1]["rules"] == [
        {
            "apiGroups": ["example.com"],
            "resources": ["widgets"],
            "verbs": ["list", "watch", "patch"],
        },
        {"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]},
    ]


def test_an_unknown_verb_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="frobnicate"):
        PolicyRule("", "pods", frozenset({"frobnicate"}))


def test_configmirror_manager_derives_the_rules_of_its_e2e_proven_file() -> None:
    from configmirror._operator import rbac_manager
    from kubemoon_trio._permissions import derived_rules

    manager = rbac_manager()
    assert derived_rules(manager) == derive_rules(CONFIGMIRROR)


def test_the_widgets_example_gets_what_ctx_ensure_delete_and_update_status_send() -> None:
    import sys

    from kubemoon_core.builtin import ConfigMap
    from kubemoon_core.kubeconfig import ClientConfig
    from kubemoon_trio import Client, LeaderElectionConfig, Manager
    from kubemoon_trio._permissions import derived_rules

    sys.path.insert(0, str(ROOT / "examples" / "widgets"))
    try:
        from widget_api import Widget
    finally:
        sys.path.remove(str(ROOT / "examples" / "widgets"))

    async def reconcile(ctx: object) -> object:
        raise AssertionError("never run")

    manager = Manager(
        Client(ClientConfig(server="https://127.0.0.1:6443")),
        leader_election=LeaderElectionConfig("widgets", "ops"),
    )
    manager.controller("widgets", Widget).owns(ConfigMap).complete(reconcile)  # type: ignore[arg-type]
    got = [(r.namespace, r.group, r.resource, r.sorted_verbs()) for r in derived_rules(manager)]
    widgets = [g for g in got if g[2].startswith("widgets")]
    assert [w[2:] for w in widgets] == [
        ("widgets", ["list", "watch", "patch"]),
        ("widgets/status", ["patch"]),
    ]
    assert (None, "", "configmaps", ["list", "watch", "create", "patch", "delete"]) in got
    assert (None, "events.k8s.io", "events", ["create", "patch"]) in got
    assert ("ops", "coordination.k8s.io", "leases", ["get", "create", "update"]) in got
    assert len(got) == 5


SELF_MANAGED = DeclaredWebhooks(
    secret=("ops", "hooks-certs"),
    configurations=[
        ("validatingwebhookconfigurations", "hooks-validating"),
        ("mutatingwebhookconfigurations", "hooks-mutating"),
    ],
    crds=["widgets.example.com"],
)


def test_self_managed_webhooks_get_their_secret_and_registrations_by_name() -> None:
    rules = derive_rules(Declared(events=False, webhooks=SELF_MANAGED))
    got = {(r.namespace, r.group, r.resource, tuple(sorted(r.resource_names))): r for r in rules}
    assert {k: set(r.verbs) for k, r in got.items()} == {
        ("ops", "", "secrets", ()): {"create"},
        ("ops", "", "secrets", ("hooks-certs",)): {"get", "update"},
        (None, "admissionregistration.k8s.io", "validatingwebhookconfigurations", ()): {"create"},
        (
            None,
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            ("hooks-validating",),
        ): {"get", "patch"},
        (None, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ()): {"create"},
        (
            None,
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            ("hooks-mutating",),
        ): {"get", "patch"},
        (None, "apiextensions.k8s.io", "customresourcedefinitions", ("widgets.example.com",)): {
            "get",
            "patch",
        },
    }
    named = got[("ops", "", "secrets", ("hooks-certs",))].as_dict()
    assert named == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["hooks-certs"],
        "verbs": ["get", "update"],
    }
    # Certificate files instead of a Secret: the registrations only.
    files = derive_rules(Declared(events=False, webhooks=DeclaredWebhooks(crds=["a.b"])))
    assert [(r.resource, set(r.verbs)) for r in files] == [
        ("customresourcedefinitions", {"get", "patch"})
    ]


@pytest.mark.parametrize("verb", ["list", "watch", "create", "deletecollection"])
def test_a_verb_rbac_cannot_limit_by_name_is_refused_with_names(verb: str) -> None:
    with pytest.raises(ValueError, match="cannot be limited to resource names"):
        PolicyRule("", "secrets", frozenset({verb}), "ops", frozenset({"x"}))


def test_permissions_to_check_ask_each_verb_and_name_as_an_access_review() -> None:
    rules = [
        PolicyRule("", "secrets", frozenset({"get", "update"}), "ops", frozenset({"b", "a"})),
        PolicyRule("kubemoon.dev", "configmirrors/status", frozenset({"update"})),
    ]
    asks = permissions_to_check(rules)
    assert [(p.verb, p.name) for p in asks] == [
        ("get", "a"),
        ("update", "a"),
        ("get", "b"),
        ("update", "b"),
        ("update", None),
    ]
    assert asks[0].review()["spec"]["resourceAttributes"] == {
        "verb": "get",
        "group": "",
        "resource": "secrets",
        "namespace": "ops",
        "name": "a",
    }
    assert asks[-1].review()["spec"]["resourceAttributes"] == {
        "verb": "update",
        "group": "kubemoon.dev",
        "resource": "configmirrors",
        "subresource": "status",
    }
    with pytest.raises(ValueError, match="5 permissions to check, more than limit=4"):
        permissions_to_check(rules, limit=4)
    assert describe_missing([asks[-1], asks[1]]) == (
        "missing RBAC permissions: update kubemoon.dev/configmirrors/status (cluster-wide); "
        "update secrets a in namespace ops"
    )


@pytest.mark.parametrize(
    ("answer", "allowed"),
    [
        ({"status": {"allowed": True}}, True),
        ({"status": {"allowed": False, "denied": True}}, False),
        ({"status": {"allowed": "true"}}, False),  # not a boolean: never allowed
        ({"status": None}, False),
        ({}, False),
    ],
)
def test_only_an_explicit_allowed_true_allows(answer: dict[str, object], allowed: bool) -> None:
    assert access_review_allowed(answer) is allowed


def test_configmirror_self_managed_manager_derives_its_overlays_file() -> None:
    from configmirror._operator import rbac_manager_self_managed
    from kubemoon_trio._permissions import derived_rules

    rules = derived_rules(rbac_manager_self_managed())
    path = ROOT / "deploy" / "overlays" / "self-managed" / "rbac.yaml"
    written = [
        rule
        for doc in yaml.safe_load_all(path.read_text())
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]
    assert sorted(map(str, written)) == sorted(str(r.as_dict()) for r in rules)
    names = {n for r in rules for n in r.resource_names}
    assert names == {
        "configmirror-webhook-certs",
        "configmirror-validating",
        "configmirror-mutating",
        "configmirrors.kubemoon.dev",
    }


def test_a_controller_writing_no_status_gets_no_status_rule() -> None:
    # status_verbs=() says the reconcile never writes the status: no rule, and no
    # "PolicyRule ... no verbs" ValueError out of the derivation.
    c = DeclaredController(primary=GroupResource("example.com", "widgets"), status_verbs=())
    rules = derive_rules(Declared(controllers=[c], events=False))
    assert [(r.resource, r.sorted_verbs()) for r in rules] == [
        ("widgets", ["list", "watch", "patch"])
    ]


def test_a_builtin_kind_without_status_gets_no_status_rule() -> None:
    from kubemoon_core.builtin import ConfigMap, Deployment
    from kubemoon_core.kubeconfig import ClientConfig
    from kubemoon_trio import Client, Manager
    from kubemoon_trio._permissions import derived_rules

    async def reconcile(ctx: object) -> object:
        raise AssertionError("never run")

    manager = Manager(Client(ClientConfig(server="https://127.0.0.1:6443")))
    manager.controller("cms", ConfigMap).complete(reconcile)  # type: ignore[arg-type]
    manager.controller("deploys", Deployment).complete(reconcile)  # type: ignore[arg-type]
    resources = [r.resource for r in derived_rules(manager)]
    assert "configmaps/status" not in resources  # ConfigMaps have no status subresource
    assert "deployments/status" in resources


def test_a_permission_in_several_namespaces_is_asked_once_cluster_wide_first() -> None:
    rules = [
        PolicyRule("", "configmaps", frozenset({"list", "get"})),
        PolicyRule("", "configmaps", frozenset({"get", "patch"}), "a"),
        PolicyRule("", "configmaps", frozenset({"get"}), "b"),
        PolicyRule("", "configmaps", frozenset({"get"}), "b"),  # the same: asked once
    ]
    asks = permissions_to_check(rules, limit=None)
    assert len(asks) == 5
    plan = review_plan(asks)
    wide_get = Permission("get", "", "configmaps")
    assert plan == [
        (
            wide_get,
            (Permission("get", "", "configmaps", "a"), Permission("get", "", "configmaps", "b")),
        ),
        (Permission("list", "", "configmaps"), ()),
        (Permission("patch", "", "configmaps", "a"), ()),
    ]
