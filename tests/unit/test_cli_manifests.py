"""``kubemoon manifests``: CRDs, webhook configurations and RBAC written together, and
``--check`` failing on any stale one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubemoon_cli._main import main

ROOT = Path(__file__).resolve().parents[2]
CERT_MANAGER = ROOT / "deploy" / "overlays" / "cert-manager"
ACCOUNT = ["--service-account", "kubemoon-system/configmirror", "--name", "kubemoon-configmirror"]
CONFIGMIRROR = [
    "manifests",
    "configmirror._operator:rbac_manager",
    *ACCOUNT,
    "--webhooks",
    "configmirror:webhook_declarations",
    "--service",
    "kubemoon-system/configmirror-webhook",
    "--inject-ca-from",
    "kubemoon-system/configmirror-webhook",
]
CRD = [
    "--crd",
    "configmirror._api:ConfigMirror",
    "--crd",
    "configmirror._api:ConfigMirrorV1beta1",
    "--crd-webhook-service",
    "kubemoon-system/configmirror-webhook:443/convert-configmirror",
]


def test_the_files_are_what_the_single_commands_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*CONFIGMIRROR, *CRD, "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "crd-conversion.yaml",
        "crd.yaml",
        "rbac.yaml",
        "webhook-configurations.yaml",
    ]
    # The checked-in files, each generated and linted by its own command until now.
    assert (out / "crd.yaml").read_text() == (ROOT / "deploy" / "base" / "crd.yaml").read_text()
    for name in ("crd-conversion.yaml", "rbac.yaml", "webhook-configurations.yaml"):
        assert (out / name).read_text() == (CERT_MANAGER / name).read_text(), name
    assert capsys.readouterr().err == ""


def test_check_passes_on_the_overlay_and_names_each_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*CONFIGMIRROR, "--out", str(CERT_MANAGER), "--check"]) == 0
    for name in ("crd-conversion.yaml", "rbac.yaml", "webhook-configurations.yaml"):
        (tmp_path / name).write_text((CERT_MANAGER / name).read_text())
    rbac = tmp_path / "rbac.yaml"
    rbac.write_text(rbac.read_text().replace("  - delete\n", "", 1))
    (tmp_path / "crd-conversion.yaml").unlink()
    assert main([*CONFIGMIRROR, "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "+  - delete" in err
    assert f"stale: {tmp_path / 'crd-conversion.yaml'}, {rbac}: run kubemoon manifests" in err
    assert err.rstrip().endswith(f"--out {tmp_path}")
    # The command it names writes what the check expects.
    assert main([*CONFIGMIRROR, "--out", str(tmp_path)]) == 0
    assert main([*CONFIGMIRROR, "--out", str(tmp_path), "--check"]) == 0


def test_without_webhooks_or_crds_only_the_rbac_is_written(tmp_path: Path) -> None:
    args = ["manifests", "configmirror._operator:rbac_manager", *ACCOUNT]
    assert main([*args, "--out", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["rbac.yaml"]


def test_webhook_flags_without_webhooks_and_bad_names_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["manifests", "configmirror._operator:rbac_manager", "--out", str(tmp_path)]
    assert main([*base, "--service", "ns/hooks"]) == 2
    assert "--service, --url and --inject-ca-from describe --webhooks" in capsys.readouterr().err
    assert main([*base, "--crd", "configmirror._api:Nothing"]) == 2
    assert "has no class Nothing" in capsys.readouterr().err
    assert main(["manifests", "configmirror._operator:RBAC_EXTRA", "--out", str(tmp_path)]) == 2
    assert "is not a Manager" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written on a usage error
