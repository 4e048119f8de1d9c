"""Every overlay of deploy/ renders with ``kubectl kustomize``, is complete, and the real
apiserver accepts what it renders.

The generated files are the truth: each overlay's RBAC is its generated rbac.yaml, and the
cert-manager overlay's webhook configurations and CRD conversion are, together, exactly
what ``kubemoon webhooks generate`` prints for the declarations.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from overlays import DEPLOY, OVERLAYS, RBAC_KINDS, rendered, rendered_one

from kubemoon_cli import main as kubemoon
from kubemoon_testing import ApiServer, default_binary_dir

pytestmark = pytest.mark.integration

WEBHOOKS = [
    "webhooks",
    "generate",
    "configmirror:webhook_declarations",
    "--service",
    "kubemoon-system/configmirror-webhook",
    "--inject-ca-from",
    "kubemoon-system/configmirror-webhook",
]
CERT_MANAGER_KINDS = frozenset({"Issuer", "Certificate"})


def _args(deployment: dict[str, Any]) -> list[str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def _flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlay_renders_each_object_once_and_complete(overlay: str) -> None:
    documents = rendered(overlay)
    ids = Counter(
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in documents
    )
    assert [key for key, count in ids.items() if count > 1] == []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        by_kind.setdefault(doc["kind"], []).append(doc)
    (deployment,) = by_kind["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    args = _args(deployment)
    # The pods' ServiceAccount, namespace and the CRD are in the overlay.
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind["ServiceAccount"]
    }
    assert (deployment["metadata"]["namespace"], pod["serviceAccountName"]) in accounts
    assert [d["metadata"]["name"] for d in by_kind["Namespace"]] == ["kubemoon-system"]
    (crd,) = by_kind["CustomResourceDefinition"]
    conversion = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    services = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind["Service"]}
    assert (conversion["namespace"], conversion["name"]) in services
    # Every replica serves the webhooks, with a certificate from somewhere in the overlay.
    assert _flag(args, "--webhook-port") == "9443"
    (container,) = pod["containers"]
    mounted = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    if "--webhook-self-managed" in args:
        assert _flag(args, "--webhook-service") == "/".join(sorted(services)[0])
        assert "Certificate" not in by_kind and "ValidatingWebhookConfiguration" not in by_kind
        assert mounted == {"tmp": "/tmp"}  # a read-only root: the certificate's temp files
    else:
        secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        issued = {c["spec"]["secretName"] for c in by_kind["Certificate"]}
        assert secrets == issued == {"configmirror-webhook-tls"}
        assert mounted["webhook-tls"] == _flag(args, "--webhook-cert-dir")
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            (config,) = by_kind[kind]
            for hook in config["webhooks"]:
                ref = hook["clientConfig"]["service"]
                assert (ref["namespace"], ref["name"]) in services
    # Leader election in two replicas, or three shards: never both, never neither.
    if overlay == "sharded":
        assert deployment["spec"]["replicas"] == 3
        assert "--sharded" in args and "--leader-elect" not in args
    else:
        assert deployment["spec"]["replicas"] == 2
        assert "--leader-elect" in args and "--sharded" not in args


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlays_rbac_is_the_generated_rbac(overlay: str) -> None:
    """Nothing but the derived rules: the sharded overlay runs what the cert-manager one
    does (its Manager is derived leader-elected and sharded), the self-managed one adds
    the webhooks' Secret and registrations."""
    source = "self-managed" if overlay == "self-managed" else "cert-manager"
    path = DEPLOY / "overlays" / source / "rbac.yaml"
    generated = list(yaml.safe_load_all(path.read_text()))
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(rendered(overlay, RBAC_KINDS), key=key) == sorted(generated, key=key)


def test_the_cert_manager_overlay_holds_what_the_declarations_generate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert kubemoon(WEBHOOKS) == 0
    generated = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    crd = rendered_one("cert-manager", "CustomResourceDefinition")
    for doc in generated:
        if doc["kind"] == "CustomResourceDefinition":
            # The partial CRD patched onto the full one: each of its fields is there.
            assert doc["metadata"]["annotations"].items() <= crd["metadata"]["annotations"].items()
            assert crd["spec"]["conversion"] == doc["spec"]["conversion"]
        else:
            assert rendered_one("cert-manager", doc["kind"]) == doc


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_apiserver_accepts_every_object_an_overlay_renders(
    overlay: str, kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    """A server-side dry run of the whole overlay (cert-manager's own kinds aside: its
    CRDs are not installed here), moved to a fresh namespace."""
    namespace = kube_apiserver.create_namespace(prefix="deploy")
    text = "---\n".join(
        yaml.safe_dump(doc)
        for doc in rendered(overlay)
        if doc["kind"] not in CERT_MANAGER_KINDS and doc["kind"] != "Namespace"
    )
    text = re.sub(r"\bkubemoon-system\b", namespace, text)
    (tmp_path / "overlay.yaml").write_text(text)
    done = subprocess.run(
        [
            str(default_binary_dir() / "kubectl"),
            "--kubeconfig",
            str(kube_apiserver.kubeconfig_path),
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--field-manager=kubemoon-deploy-test",
            "-f",
            str(tmp_path / "overlay.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if "serverside-applied" in line]
    assert len(applied) == len([d for d in yaml.safe_load_all(text) if d]), done.stdout
