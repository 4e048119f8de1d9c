"""The permission check names exactly the derived rule a restricted identity lacks."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from overlays import DEPLOY
from test_configmirror_rbac import (
    BASE_RBAC,
    install_rbac,
    service_account_client,
    wait_until_allowed,
)

from configmirror import ConfigMirrorOperator, OperatorOptions
from configmirror._operator import rbac_manager, rbac_manager_self_managed
from kubemoon_core._rbac import Permission, PolicyRule, permissions_to_check
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


def _readyz_verbose(port: int) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}/readyz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


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
            sa_client,
            OperatorOptions(
                namespaces=(namespace,),
                leader_election=election,
                probe_address=("127.0.0.1", 0),
            ),
        )
        manager = operator.manager
        assert manager.check_permissions  # on by default
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            with trio.fail_after(30):
                # The check comes first: a replica missing a rule never campaigns.
                while not manager.reconciling and manager.permission_problem is None:
                    await trio.sleep(0.05)
            reconciling, problem = manager.reconciling, manager.permission_problem
            leading = manager.election is not None and manager.election.is_leader
            ready = manager.readiness_problems()
            port = manager.probe_port
            assert port is not None
            probe = await trio.to_thread.run_sync(lambda: _readyz_verbose(port))
            manager.stop()
    if drop is None:
        assert reconciling and problem is None
    else:
        expected = "missing RBAC permissions: delete configmaps (cluster-wide)"
        assert not reconciling and not leading
        assert problem == expected
        assert expected in ready
        assert probe[0] == 503 and expected in probe[1], probe  # /readyz?verbose names it
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == [f"not starting controllers: {expected}"]


def _without(documents: list[dict[str, Any]], permission: Permission) -> list[dict[str, Any]]:
    """``documents`` (a generated RBAC file) with ``permission``'s verb taken out of the
    one rule that grants it."""
    found = 0
    for doc in documents:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        if (doc["kind"] == "Role") != (permission.namespace is not None):
            continue
        for rule in list(doc["rules"]):
            names = rule.get("resourceNames", [])
            if (
                rule["apiGroups"] == [permission.group]
                and rule["resources"] == [permission.resource]
                and names == ([permission.name] if permission.name else [])
                and permission.verb in rule["verbs"]
            ):
                found += 1
                rule["verbs"].remove(permission.verb)
                if not rule["verbs"]:
                    doc["rules"].remove(rule)
    assert found == 1, f"{permission} is granted by {found} rules"
    return documents


OVERLAY_MANAGERS = {"cert-manager": rbac_manager, "self-managed": rbac_manager_self_managed}


def _every_permission() -> list[tuple[str, Permission]]:
    return [
        (overlay, permission)
        for overlay, build in OVERLAY_MANAGERS.items()
        for permission in permissions_to_check(derived_rules(build()))
    ]


@pytest.mark.parametrize(
    ("overlay", "permission"),
    _every_permission(),
    ids=lambda v: v if isinstance(v, str) else v.describe().replace(" ", "-"),
)
async def test_each_generated_rule_removed_is_named_by_the_check(
    configmirror_api: ApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    overlay: str,
    permission: Permission,
) -> None:
    """Every verb (and name) of each overlay's generated RBAC is needed by a request the
    Manager declares: taken out, the start-up check names exactly it, and nothing else."""
    server = configmirror_api
    namespace = server.create_namespace(prefix="cm-each")
    generated = DEPLOY / "overlays" / overlay / "rbac.yaml"
    documents = _without(list(yaml.safe_load_all(generated.read_text())), permission)
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    monkeypatch.setattr("test_configmirror_rbac.RBAC_FILE", path)
    install_rbac(server, namespace, secrets.token_hex(4))
    rules = _in(namespace, derived_rules(OVERLAY_MANAGERS[overlay]()))
    expected = Permission(
        permission.verb,
        permission.group,
        permission.resource,
        namespace if permission.namespace else None,
        permission.name,
    )
    (tmp_path / "sa").mkdir()
    async with service_account_client(server, namespace, tmp_path / "sa") as client:
        # The RBAC authorizer reads the new roles from an informer: ask until it caught up.
        with trio.fail_after(20):
            while (missing := await missing_permissions(client, rules)) != [expected]:
                assert expected in missing, f"{expected} allowed without its rule"
                await trio.sleep(0.1)
    assert describe_missing(missing) == f"missing RBAC permissions: {expected.describe()}"


async def test_waiting_for_a_replica_missing_a_rule_ends_with_the_missing_rule(
    configmirror_api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # running_manager waits for leadership; a replica that will never campaign must end
    # that wait with the missing rule, not sit out a leader-election timeout.
    from kubemoon_core.errors import MissingPermissions
    from kubemoon_testing import running_manager

    server = configmirror_api
    namespace = server.create_namespace(prefix="cm-wait")
    path = tmp_path / "rbac.yaml"
    path.write_text(BASE_RBAC.read_text().replace("  - delete\n", "", 1))
    monkeypatch.setattr("test_configmirror_rbac.RBAC_FILE", path)
    user = install_rbac(server, namespace, secrets.token_hex(4))
    wait_until_allowed(server, user, namespace)
    (tmp_path / "sa").mkdir()
    election = LeaderElectionConfig("kubemoon-configmirror", namespace, identity="sa")
    async with service_account_client(server, namespace, tmp_path / "sa") as sa_client:
        operator = ConfigMirrorOperator(
            sa_client, OperatorOptions(namespaces=(namespace,), leader_election=election)
        )
        # A leader-election timeout far beyond the guard: only the check can end the wait.
        with trio.fail_after(120), pytest.raises(MissingPermissions) as raised:
            async with running_manager(operator.manager, timeout=3600):
                pass
    assert "delete configmaps (cluster-wide)" in str(raised.value)
