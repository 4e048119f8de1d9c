"""The kubectl parity cases, used for real: KubeMoon and kubectl v1.37.2 read the same
kubeconfig files and reach the real kube-apiserver (or both refuse) in the same way."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import ConfigError
from kubemoon_io import load_kubeconfig
from kubemoon_sync import Client
from kubemoon_testing import ApiServer, default_binary_dir
from kubemoon_testing._certs import _generate

pytestmark = [pytest.mark.differential, pytest.mark.integration]

NAMESPACES = GroupVersionResource("", "v1", "namespaces")


def _kubectl(paths: list[Path], home: Path) -> subprocess.CompletedProcess[str]:
    binary = default_binary_dir() / "kubectl"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built: run `make testenv` (kubemoon-testenv build)")
    env = {"KUBECONFIG": os.pathsep.join(map(str, paths)), "HOME": str(home)}
    return subprocess.run(
        [str(binary), "get", "namespace", "default", "-o", "name"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _kubemoon(paths: list[Path]) -> str:
    env = {"KUBECONFIG": os.pathsep.join(map(str, paths))}
    with Client(load_kubeconfig(env=env)) as client:
        return f"namespace/{client.get(NAMESPACES, 'default')['metadata']['name']}"


def _wrapped(pem: str) -> str:
    encoded = base64.b64encode(pem.encode()).decode()
    return "".join(f"{encoded[i : i + 76]}\\n" for i in range(0, len(encoded), 76))


@pytest.mark.parametrize(
    "case", ["wrapped-ca", "shadowed", "token-with-key", "token-with-key-data", "broken-later"]
)
def test_kubemoon_and_kubectl_reach_the_apiserver_alike(
    kube_apiserver: ApiServer, tmp_path: Path, case: str
) -> None:
    token = kube_apiserver.admin_token
    cluster = f'{{server: "{kube_apiserver.url}", certificate-authority-data: "{_wrapped(kube_apiserver.ca_pem)}"}}'
    user = f"{{token: '{token}'}}"
    if case == "token-with-key":  # item 2: a key without a certificate is ignored
        user = f"{{token: '{token}', client-key: no-such-key}}"
    if case == "token-with-key-data":  # a real key, no certificate: unused, the token works
        key = base64.b64encode(_generate(["h"], "no-cert").key_pem).decode()
        user = f"{{token: '{token}', client-key-data: {key}}}"
    main = tmp_path / "main"
    main.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {cluster}}}]\n"
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    paths = [main]
    if case == "shadowed":  # a later file's same-named entries never win
        later = tmp_path / "later"
        later.write_text(
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
            "users: [{name: u, user: {token: wrong}}]\ncurrent-context: other\n"
        )
        paths.append(later)
    if case == "broken-later":  # item 9: an unused malformed entry fails the whole load
        later = tmp_path / "later"
        later.write_text("users: [{name: unused, user: {token: 12345}}]\n")
        paths.append(later)
    home = tmp_path / "home"
    home.mkdir()
    reference = _kubectl(paths, home)
    if case == "broken-later":
        assert reference.returncode != 0
        assert "error loading config file" in reference.stderr
        with pytest.raises(ConfigError, match="must be a string"):
            _kubemoon(paths)
        return
    assert reference.returncode == 0, reference.stderr
    assert _kubemoon(paths) == reference.stdout.strip() == "namespace/default"
