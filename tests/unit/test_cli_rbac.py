"""``kubemoon rbac generate|check``: the RBAC derived from a Manager, and stale files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubemoon_cli._main import main

ROOT = Path(__file__).resolve().parents[2]
RBAC_FILE = ROOT / "deploy" / "overlays" / "cert-manager" / "rbac.yaml"
ARGS = [
    "configmirror._operator:rbac_manager",
    "--service-account",
    "kubemoon-system/configmirror",
    "--name",
    "kubemoon-configmirror",
]


def test_deploy_rbac_yaml_is_what_generate_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rbac", "generate", *ARGS]) == 0
    assert capsys.readouterr().out == RBAC_FILE.read_text()
    assert main(["rbac", "check", str(RBAC_FILE), *ARGS]) == 0


def test_check_fails_with_a_diff_on_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "rbac.yaml"
    text = RBAC_FILE.read_text()
    stale.write_text(text.replace("  - delete\n", "", 1))
    assert main(["rbac", "check", str(stale), *ARGS]) == 1
    err = capsys.readouterr().err
    assert "+  - delete" in err
    assert "is stale: run kubemoon rbac generate" in err


def test_a_name_that_is_no_manager_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rbac", "generate", "configmirror._operator:RBAC_EXTRA"]) == 2
    assert "is not a Manager" in capsys.readouterr().err


def test_a_service_account_without_namespace_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["rbac", "generate", ARGS[0], "--service-account", "configmirror"]
    assert main(args) == 2
    assert "expected namespace/name" in capsys.readouterr().err
