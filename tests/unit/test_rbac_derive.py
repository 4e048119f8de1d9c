"""The pure RBAC derivation: least-privilege rules from what an operator declares."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubemoon_core._rbac import (
    Declared,
    DeclaredController,
    GroupResource,
    PolicyRule,
    derive_rules,
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
)


def _rules(docs: list[dict[str, object]], kind: str) -> list[object]:
    return [d["rules"] for d in docs if d["kind"] == kind]


def test_configmirror_declarations_give_the_rules_its_e2e_run_proved_exact() -> None:
    # deploy/base/rbac.yaml is kept exact by tests/e2e/test_configmirror_rbac.py: the derived
    # rules must grant exactly the same (group, resource, verb, namespace) tuples.
    derived = {
        (r.namespace, r.group, r.resource, v) for r in derive_rules(CONFIGMIRROR) for v in r.verbs
    }
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()))
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

    from kubemoon_core import ClientConfig
    from kubemoon_core.builtin import ConfigMap
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
