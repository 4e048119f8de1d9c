"""``ApiServer(crds=...)`` and ``install_crds``: files, manifests and declared classes are
installed and established; anything else is refused with ``CrdInstallError`` naming it.
The session server got the Widget CRD before its controller manager started
(``kube_apiserver_crds`` in tests/conftest.py); the pytest header says which mode it runs in.
"""

from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubemoon_core.typed import MetadataField, custom_resource
from kubemoon_testing import ApiServer, CrdInstallError
from kubemoon_testing._versions import selected_version
from kubemoon_testing.pytest_plugin import pytest_report_header

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WIDGET_CRD = ROOT / "examples" / "widgets" / "crd.yaml"


def renamed_widget_crd(group: str) -> dict[str, Any]:
    crd: dict[str, Any] = copy.deepcopy(yaml.safe_load(WIDGET_CRD.read_text()))
    crd["metadata"]["name"] = f"widgets.{group}"
    crd["spec"]["group"] = group
    return crd


def test_the_session_server_installed_its_crds_before_the_controller_manager(
    kube_apiserver: ApiServer,
) -> None:
    assert kube_apiserver.crds == (
        "widgets.examples.kubemoon.dev",
        "teamspaces.examples.kubemoon.dev",
    )
    served = kube_apiserver.request("GET", "/apis/examples.kubemoon.dev/v1/widgets")
    assert served.status == 200


def test_files_manifests_and_declared_classes_are_installed(
    kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    suffix = secrets.token_hex(3)
    two_docs = tmp_path / "crds.yaml"
    first, second = (renamed_widget_crd(f"f{i}{suffix}.kubemoon.dev") for i in (1, 2))
    two_docs.write_text(yaml.safe_dump_all([first, None, second]))
    manifest = renamed_widget_crd(f"m{suffix}.kubemoon.dev")

    @custom_resource(group=f"c{suffix}.kubemoon.dev", version="v1", kind="Gadget")
    @dataclass
    class Gadget:
        spec: dict[str, str]
        metadata: MetadataField = MetadataField()

    names = kube_apiserver.install_crds([two_docs, manifest, Gadget])
    assert names == [
        f"widgets.f1{suffix}.kubemoon.dev",
        f"widgets.f2{suffix}.kubemoon.dev",
        f"widgets.m{suffix}.kubemoon.dev",
        f"gadgets.c{suffix}.kubemoon.dev",
    ]
    gadgets = kube_apiserver.request("GET", f"/apis/c{suffix}.kubemoon.dev/v1/gadgets")
    assert gadgets.status == 200
    for name in names:
        kube_apiserver.request(
            "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )


def test_what_is_not_a_crd_is_refused_naming_it(kube_apiserver: ApiServer, tmp_path: Path) -> None:
    configmap = tmp_path / "cm.yaml"
    configmap.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")

    class NotDeclared:
        pass

    invalid = renamed_widget_crd(f"bad{secrets.token_hex(3)}.kubemoon.dev")
    invalid["spec"]["names"]["plural"] = "Not A Plural"
    cases: list[tuple[Any, str]] = [
        (configmap, "not a CustomResourceDefinition"),
        (empty, "no CustomResourceDefinition"),
        (broken, "cannot read CRDs from"),
        (binary, "cannot read CRDs from"),
        (tmp_path / "missing.yaml", "cannot read CRDs from"),
        (NotDeclared, "cannot make a CRD of"),
        ({"kind": "CustomResourceDefinition"}, "not a CustomResourceDefinition"),
        (invalid, f"CRD {invalid['metadata']['name']}: 422"),
    ]
    for source, message in cases:
        with pytest.raises(CrdInstallError, match=message):
            kube_apiserver.install_crds([source])


def test_a_crd_refused_at_startup_stops_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    server = ApiServer(crds=[bad], controller_manager=False)
    with pytest.raises(CrdInstallError, match="bad.yaml"):
        server.start()
    assert server.pids() == {}


def test_the_pytest_header_says_whether_the_controller_manager_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config: Any = None
    monkeypatch.setenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER", "0")
    header = pytest_report_header(config)
    assert selected_version() in header and "WITHOUT kube-controller-manager" in header
    monkeypatch.setenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER", "1")
    assert "with kube-controller-manager (garbage collection" in pytest_report_header(config)
    monkeypatch.delenv("KUBEMOON_TESTENV_CONTROLLER_MANAGER")
    monkeypatch.setenv("KUBEMOON_TESTENV_DIR", str(Path("/nonexistent")))
    assert "WITHOUT" in pytest_report_header(config)
