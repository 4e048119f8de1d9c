"""The permission check names exactly the derived rule a restricted identity lacks."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import trio
from test_configmirror_rbac import (
    BASE_RBAC,
    install_rbac,
    service_account_client,
    wait_until_allowed,
)

from configmirror import ConfigMirrorOperator, OperatorOptions
from configmirror._operator import rbac_manager
from kubemoon_core._rbac import Permission, PolicyRule
from kubemoon_testing import ApiServer
from kubemoon_trio import LeaderElectionConfig
from kubemoon_trio._permissions import derived_rules, describe_missing, missing_permissions

pytestmark = pytest.mark.integration


def _in(namespace: str, rules: list[PolicyRule]) -> list[PolicyRule]:
    # The derived rules name kubemoon-system; the test installs them in a test namespace.
    return [
        PolicyRule(
            r.group, r.resource, r.verbs, namespace if r.namespace else None, r.resource_names
        )
        for r in rules
    ]


@pytest.mark.parametrize("drop", [None, "delete"])
async def test_missing_permissions_names_the_one_rule_removed(
    configmirror_api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: str | None
) -> None:
    server = configmirror_api
    namespace = server.create_namespace(prefix="cm-perm")
    text = BASE_RBAC.read_text()
    if drop is not None:  # configmaps' delete verb, the first "- delete" of the ClusterRole
        text = text.replace("  - delete\n", "", 1)
    path = tmp_path / "rbac.yaml"
    path.write_text(text)
    monkeypatch.setattr("test_configmirror_rbac.RBAC_FILE", path)
    user = install_rbac(server, namespace, secrets.token_hex(4))
    wait_until_allowed(server, user, namespace)
    rules = _in(namespace, derived_rules(rbac_manager()))
    (tmp_path / "sa").mkdir()
    async with service_account_client(server, namespace, tmp_path / "sa") as client:
        missing = await missing_permissions(client, rules)
    if drop is None:
        assert missing == []
    else:
        assert missing == [Permission("delete", "", "configmaps", None)]
        assert describe_missing(missing) == (
            "missing RBAC permissions: delete configmaps (cluster-wide)"
        )


@pytest.mark.parametrize("drop", [None, "delete"])
async def test_the_manager_does_not_start_controllers_without_a_permission(
    configmirror_api: ApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    drop: str | None,
) -> None:
    server = configmirror_api
    namespace = server.create_namespace(prefix="cm-start")
    text = BASE_RBAC.read_text()
    if drop is not None:
        text = text.replace("  - delete\n", "", 1)
    path = tmp_path / "rbac.yaml"
    path.write_text(text)
    monkeypatch.setattr("test_configmirror_rbac.RBAC_FILE", path)
    user = install_rbac(server, namespace, secrets.token_hex(4))
    wait_until_allowed(server, user, namespace)
    (tmp_path / "sa").mkdir()
    election = LeaderElectionConfig("kubemoon-configmirror", namespace, identity="sa")
    async with service_account_client(server, namespace, tmp_path / "sa") as sa_client:
        operator = ConfigMirrorOperator(
            sa_client, OperatorOptions(namespaces=(namespace,), leader_election=election)
        )
        manager = operator.manager
        manager.check_permissions = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            with trio.fail_after(30):
                await manager.wait_leading()
                await manager.wait_synced()
                while not manager.reconciling and manager.permission_problem is None:
                    await trio.sleep(0.05)
            reconciling, problem = manager.reconciling, manager.permission_problem
            ready = manager.readiness_problems()
            manager.stop()
    if drop is None:
        assert reconciling and problem is None
    else:
        expected = "missing RBAC permissions: delete configmaps (cluster-wide)"
        assert not reconciling
        assert problem == expected
        assert expected in ready
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == [f"not starting controllers: {expected}"]
