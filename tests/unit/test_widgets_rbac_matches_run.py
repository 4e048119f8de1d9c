"""Regression (attacker's pass, round five): the Widgets example's checked-in RBAC
(``examples/widgets/rbac.yaml``, generated from ``rbac_manager``) must cover the Manager
its ``main`` runs.

``rbac_manager`` builds the operator without leader election, but ``main --leader-elect
NAMESPACE`` (the example's documented way to run replicas) adds a Lease: with exactly the
generated RBAC the start-up check finds ``get``/``create``/``update`` on
``coordination.k8s.io/leases`` missing and the replica never starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_trio import Client, Manager
from kubemoon_trio._permissions import derived_rules

ROOT = Path(__file__).resolve().parents[2]
WIDGETS = ROOT / "examples" / "widgets"


def test_the_generated_widgets_rbac_covers_main_with_leader_election(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(WIDGETS))
    import controller  # examples/widgets/controller.py

    ran: list[Manager] = []
    monkeypatch.setattr(
        Client,
        "from_environment",
        classmethod(lambda cls, **kw: cls(ClientConfig(server="https://127.0.0.1:6443"))),
    )
    monkeypatch.setattr(Manager, "run_forever", lambda self: ran.append(self))
    monkeypatch.setattr("logging.basicConfig", lambda **kw: None)
    controller.main(["--leader-elect", "widgets-system"])
    (running,) = ran

    def permissions(manager: Any) -> set[tuple[Any, ...]]:
        return {
            (r.namespace, r.group, r.resource, verb, tuple(sorted(r.resource_names)))
            for r in derived_rules(manager)
            for verb in r.verbs
        }

    generated = permissions(controller.rbac_manager())
    needed = permissions(running)
    # rbac.yaml puts every rule in one ClusterRole: a namespaced need is met cluster-wide.
    cluster_wide = {(None, *p[1:]) for p in generated}
    missing = sorted(p for p in needed if p not in generated and (None, *p[1:]) not in cluster_wide)
    assert not missing, f"main --leader-elect needs what rbac.yaml lacks: {missing}"
