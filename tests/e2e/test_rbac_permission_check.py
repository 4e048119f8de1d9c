"""The permission check names exactly the derived rule a restricted identity lacks."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from test_configmirror_rbac import (
    RBAC_FILE,
    install_rbac,
    service_account_client,
    wait_until_allowed,
)

from configmirror._operator import rbac_manager
from kubemoon_core._rbac import PolicyRule
from kubemoon_testing import ApiServer
from kubemoon_trio._permissions import derived_rules, describe_missing, missing_permissions

pytestmark = pytest.mark.integration


def _in(namespace: str, rules: list[PolicyRule]) -> list[PolicyRule]:
    # The derived rules name kubemoon-system; the test installs them in a test namespace.
    return [
        PolicyRule(r.group, r.resource, r.verbs, namespace if r.namespace else None) for r in rules
    ]


@pytest.mark.parametrize("drop", [None, "delete"])
async def test_missing_permissions_names_the_one_rule_removed(
    configmirror_api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: str | None
) -> None:
    server = configmirror_api
    namespace = server.create_namespace(prefix="cm-perm")
    text = RBAC_FILE.read_text()
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
        assert missing == [("delete", "", "configmaps", None)]
        assert describe_missing(missing) == (
            "missing RBAC permissions: delete configmaps (cluster-wide)"
        )
