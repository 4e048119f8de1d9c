"""``kubemoon manifests`` and ``kubemoon rbac`` on hostile or odd input: a clear usage
error naming what was wrong, a non-zero exit, and nothing of the user's lost (no half
written directory, no file written through a symbolic link, no stale generated file
passing ``--check``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubemoon_cli._main import main

ROOT = Path(__file__).resolve().parents[2]
CERT_MANAGER = ROOT / "deploy" / "overlays" / "cert-manager"
RBAC = [
    "configmirror._operator:rbac_manager",
    "--service-account",
    "kubemoon-system/configmirror",
    "--name",
    "kubemoon-configmirror",
]
CRD = ["--crd", "configmirror._api:ConfigMirror"]


def test_a_target_that_is_a_directory_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "crd.yaml").write_text("# mine\n")
    (tmp_path / "rbac.yaml").mkdir()
    assert main(["manifests", *RBAC, *CRD, "--out", str(tmp_path)]) == 2
    assert "rbac.yaml is not a regular file" in capsys.readouterr().err
    assert (tmp_path / "crd.yaml").read_text() == "# mine\n"  # not half written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crd.yaml", "rbac.yaml"]


def test_a_target_that_is_a_symbolic_link_is_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "rbac.yaml").symlink_to(precious)
    assert main(["manifests", *RBAC, "--out", str(out)]) == 2
    assert "rbac.yaml is a symbolic link" in capsys.readouterr().err
    assert precious.read_text() == "precious\n"


def test_out_that_is_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.write_text("keep\n")
    assert main(["manifests", *RBAC, "--out", str(out)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert out.read_text() == "keep\n"


def test_a_generated_file_no_longer_generated_is_stale_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The overlay's files, but the webhooks are no longer given: their two files were
    # generated before and would still be applied by the kustomization.
    for name in ("rbac.yaml", "webhook-configurations.yaml", "crd-conversion.yaml"):
        (tmp_path / name).write_text((CERT_MANAGER / name).read_text())
    (tmp_path / "crd.yaml").write_text("# the user's own, not generated\n")
    assert main(["manifests", *RBAC, "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "webhook-configurations.yaml: no longer generated" in err
    assert "crd-conversion.yaml: no longer generated" in err
    assert main(["manifests", *RBAC, "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crd.yaml", "rbac.yaml"]
    assert (tmp_path / "crd.yaml").read_text() == "# the user's own, not generated\n"
    assert main(["manifests", *RBAC, "--out", str(tmp_path), "--check"]) == 0


def test_an_undecodable_checked_in_file_is_stale_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "rbac.yaml"
    bad.write_bytes(b"\xff\xfe")
    assert main(["rbac", "check", str(bad), *RBAC]) == 1
    assert main(["manifests", *RBAC, "--out", str(tmp_path), "--check"]) == 1
    assert "stale" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [
        ("--name", "x\nkind: Secret", "--name"),
        ("--name", "a/../b", "--name"),
        ("--service-account", "a b/c", "--service-account namespace"),
        ("--service-account", "ops/Bad_Name", "--service-account name"),
    ],
)
def test_a_name_kubernetes_refuses_is_a_usage_error(
    flag: str, value: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = list(RBAC)
    index = args.index(flag)
    args[index + 1] = value
    assert main(["rbac", "generate", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{named}: " in captured.err and "not a valid Kubernetes name" in captured.err
    assert "\nkind:" not in captured.err  # escaped, one line


def test_a_module_whose_getattr_raises_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "hostile.py"
    module.write_text("def __getattr__(name):\n    raise RuntimeError('boom')\n")
    assert main(["rbac", "generate", f"{module}:manager"]) == 2
    assert "RuntimeError('boom')" in capsys.readouterr().err


def test_a_function_that_exits_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "exiting.py"
    module.write_text("import sys\ndef manager():\n    sys.exit(3)\n")
    assert main(["rbac", "generate", f"{module}:manager"]) == 2
    assert "called sys.exit(3)" in capsys.readouterr().err
