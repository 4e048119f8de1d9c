"""The files a test control plane reads: kubeconfigs, the token file, the tracing and
admission configurations, written to the server's work directory.

Pure text rendering over the standard library: strings are quoted as JSON strings, which
are valid YAML double-quoted scalars, so no YAML library is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ._pki import _Pki
from ._users import (
    _ADMIN_GROUP,
    _MONITORING_GROUP,
    ADMIN_USER,
    LIMITED_USER,
    MONITORING_USER,
    NOBODY_USER,
)

__all__: list[str] = []


def _yaml_str(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar.
    return json.dumps(value)


def write_tokens(work_dir: Path, tokens: Mapping[str, str]) -> None:
    """``tokens.csv``: the static token file of kube-apiserver (``--token-auth-file``)."""
    # token,user,uid,"groups"; only the admin has a group besides system:authenticated.
    rows = [
        f'{tokens[ADMIN_USER]},{ADMIN_USER},uid-{ADMIN_USER},"{_ADMIN_GROUP}"',
        f"{tokens[NOBODY_USER]},{NOBODY_USER},uid-{NOBODY_USER}",
        f"{tokens[LIMITED_USER]},{LIMITED_USER},uid-{LIMITED_USER}",
        f'{tokens[MONITORING_USER]},{MONITORING_USER},uid-{MONITORING_USER},"{_MONITORING_GROUP}"',
    ]
    tokens_csv = work_dir / "tokens.csv"
    tokens_csv.write_text("\n".join(rows) + "\n", encoding="ascii")
    tokens_csv.chmod(0o600)


def write_kubeconfig(work_dir: Path, url: str, pki: _Pki, tokens: Mapping[str, str]) -> None:
    """``kubeconfig``: contexts for the admin (token, current; and certificate), ``nobody``
    and ``limited``."""
    q = _yaml_str
    lines = [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: kubemoon",
        "  cluster:",
        f"    server: {q(url)}",
        f"    certificate-authority: {q(str(pki.ca_file))}",
        "users:",
        f"- name: {q(ADMIN_USER)}",
        "  user:",
        f"    token: {q(tokens[ADMIN_USER])}",
        f"- name: {q(ADMIN_USER + '-cert')}",
        "  user:",
        f"    client-certificate: {q(str(pki.client_cert))}",
        f"    client-key: {q(str(pki.client_key))}",
    ]
    for user in (NOBODY_USER, LIMITED_USER):
        lines += [f"- name: {q(user)}", "  user:", f"    token: {q(tokens[user])}"]
    lines.append("contexts:")
    for user in (ADMIN_USER, ADMIN_USER + "-cert", NOBODY_USER, LIMITED_USER):
        lines += [
            f"- name: {q(user)}",
            "  context:",
            "    cluster: kubemoon",
            f"    user: {q(user)}",
            "    namespace: default",
        ]
    lines.append(f"current-context: {q(ADMIN_USER)}")
    path = work_dir / "kubeconfig"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)


def write_controller_manager_kubeconfig(work_dir: Path, url: str, pki: _Pki) -> Path:
    """The kubeconfig of kube-controller-manager (its own client certificate)."""
    kubeconfig = work_dir / "controller-manager.kubeconfig"
    q = _yaml_str
    kubeconfig.write_text(
        "\n".join(
            [
                "apiVersion: v1",
                "kind: Config",
                "clusters:",
                "- name: kubemoon",
                "  cluster:",
                f"    server: {q(url)}",
                f"    certificate-authority: {q(str(pki.ca_file))}",
                "users:",
                "- name: controller-manager",
                "  user:",
                f"    client-certificate: {q(str(pki.kcm_cert))}",
                f"    client-key: {q(str(pki.kcm_key))}",
                "contexts:",
                "- name: controller-manager",
                "  context: {cluster: kubemoon, user: controller-manager}",
                "current-context: controller-manager",
                "",
            ]
        ),
        encoding="utf-8",
    )
    kubeconfig.chmod(0o600)
    return kubeconfig


def write_tracing_config(work_dir: Path, endpoint: str, rate: int | None) -> Path:
    """The ``TracingConfiguration`` exporting kube-apiserver's spans to ``endpoint``."""
    lines = [
        "apiVersion: apiserver.config.k8s.io/v1",
        "kind: TracingConfiguration",
        f"endpoint: {_yaml_str(str(endpoint))}",
    ]
    if rate is not None:
        lines.append(f"samplingRatePerMillion: {int(rate)}")
    path = work_dir / "tracing.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_admission_config(work_dir: Path, pki: _Pki) -> Path:
    """The AdmissionConfiguration giving admission webhooks a client certificate."""
    kubeconfig = work_dir / "webhook-client.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "users:\n"
        '- name: "*"\n'
        "  user:\n"
        f"    client-certificate: {_yaml_str(str(pki.webhook_client_cert))}\n"
        f"    client-key: {_yaml_str(str(pki.webhook_client_key))}\n",
        encoding="utf-8",
    )
    plugin = (
        "  configuration:\n"
        "    apiVersion: apiserver.config.k8s.io/v1\n"
        "    kind: WebhookAdmissionConfiguration\n"
        f"    kubeConfigFile: {_yaml_str(str(kubeconfig))}\n"
    )
    config = work_dir / "admission-config.yaml"
    config.write_text(
        "apiVersion: apiserver.config.k8s.io/v1\n"
        "kind: AdmissionConfiguration\n"
        "plugins:\n"
        f"- name: ValidatingAdmissionWebhook\n{plugin}"
        f"- name: MutatingAdmissionWebhook\n{plugin}",
        encoding="utf-8",
    )
    return config
