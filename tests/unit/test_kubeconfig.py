"""Kubeconfig merging (kubectl's rules), context selection, in-cluster and exec credentials."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubemoon_core import KubeMoonError
from kubemoon_core._client_config import ClientConfig, ConfigError, ExecConfig, in_cluster_config
from kubemoon_core._exec_credentials import exec_info, parse_exec_credential
from kubemoon_core._kubeconfig import merge_kubeconfigs
from kubemoon_core.errors import LocalProtocolError

B64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731


def doc(
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, dict[str, Any]] | None = None,
    current: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if clusters is not None:
        out["clusters"] = [{"name": n, "cluster": c} for n, c in clusters.items()]
    if users is not None:
        out["users"] = [{"name": n, "user": u} for n, u in users.items()]
    if contexts is not None:
        out["contexts"] = [{"name": n, "context": c} for n, c in contexts.items()]
    if current is not None:
        out["current-context"] = current
    return out


BASIC = doc(
    clusters={"c": {"server": "https://k8s.example:6443"}},
    users={"u": {"token": "tok"}},
    contexts={"ctx": {"cluster": "c", "user": "u", "namespace": "team"}},
    current="ctx",
)


def test_a_simple_kubeconfig_selects_the_current_context() -> None:
    config = merge_kubeconfigs([("/home/me/.kube/config", BASIC)]).select()
    assert config.server == "https://k8s.example:6443"
    assert config.token == "tok"
    assert config.namespace == "team"
    assert config.context == "ctx"
    assert (config.scheme, config.host, config.port, config.base_path) == (
        "https",
        "k8s.example",
        6443,
        "",
    )


def test_yaml_text_is_parsed() -> None:
    text = """
apiVersion: v1
clusters:
- name: c
  cluster:
    server: https://10.0.0.1
users:
- name: u
  user: {username: admin, password: pw}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""
    config = merge_kubeconfigs([("/k/config", text)]).select()
    assert config.port == 443
    assert config.namespace == "default"
    assert (config.username, config.password) == ("admin", "pw")
    assert config.host_header == "10.0.0.1"


def test_first_file_to_set_a_map_key_wins_and_entries_are_not_merged() -> None:
    first = doc(
        clusters={"c": {"server": "https://first"}},
        users={"u": {"token": "first-token"}},
        contexts={"a": {"cluster": "c", "user": "u"}},
    )
    second = doc(
        clusters={"c": {"server": "https://second", "tls-server-name": "ignored"}},
        users={"u": {"token": "second", "username": "x", "password": "y"}, "v": {"token": "v"}},
        contexts={"b": {"cluster": "c", "user": "v"}},
        current="b",
    )
    merged = merge_kubeconfigs([("/one/config", first), ("/two/config", second)])
    assert merged.context_names == ("a", "b")
    config = merged.select()  # current-context only set by the second file
    assert config.server == "https://first"
    assert config.tls_server_name is None  # the second "c" is discarded whole
    assert config.token == "v"
    assert merged.select("a").token == "first-token"
    assert merged.select("a").username is None


def test_first_non_empty_current_context_wins() -> None:
    base = doc(
        clusters={"c": {"server": "https://h"}},
        contexts={"a": {"cluster": "c"}, "b": {"cluster": "c"}},
    )
    merged = merge_kubeconfigs(
        [
            ("/0", {**base, "current-context": ""}),
            ("/1", {**base, "current-context": "b"}),
            ("/2", {**base, "current-context": "a"}),
        ]
    )
    assert merged.current_context == "b"
    assert merged.select().context == "b"


def test_empty_documents_are_empty_configs() -> None:
    merged = merge_kubeconfigs([("/empty", ""), ("/none", None), ("/real", BASIC)])
    assert merged.select().token == "tok"
    assert merged.files == ("/empty", "/none", "/real")


def test_relative_paths_resolve_against_their_own_file() -> None:
    first = doc(
        clusters={"c": {"server": "https://h", "certificate-authority": "certs/ca.pem"}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    second = doc(
        users={
            "u": {
                "client-certificate": "me.crt",
                "client-key": "/abs/me.key",
                "tokenFile": "../tok",
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "./bin/plugin",
                },
            }
        }
    )
    config = merge_kubeconfigs([("/a/config", first), ("/b/sub/config", second)]).select()
    assert config.ca_file == "/a/certs/ca.pem"
    assert config.client_cert_file == "/b/sub/me.crt"
    assert config.client_key_file == "/abs/me.key"
    assert config.token_file == "/b/tok"  # joined and cleaned, as filepath.Join does
    assert config.exec is not None
    assert config.exec.command == "/b/sub/bin/plugin"


def test_a_bare_exec_command_is_left_for_path_lookup() -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws"}}
    config = merge_kubeconfigs([("/a/config", {**BASIC, "users": [{"name": "u", "user": user}]})])
    exec_config = config.select().exec
    assert exec_config is not None
    assert exec_config.command == "aws"
    assert exec_config.interactive_mode == "IfAvailable"


def test_data_fields_are_base64_decoded() -> None:
    config = merge_kubeconfigs(
        [
            (
                "/k",
                doc(
                    clusters={
                        "c": {
                            "server": "https://h",
                            "certificate-authority-data": B64("CA PEM"),
                            "tls-server-name": "kubernetes",
                        }
                    },
                    users={
                        "u": {
                            "client-certificate-data": B64("CERT"),
                            "client-key-data": B64("KEY"),
                        }
                    },
                    contexts={"x": {"cluster": "c", "user": "u"}},
                    current="x",
                ),
            )
        ]
    ).select()
    assert config.ca_data == b"CA PEM"
    assert config.client_cert_data == b"CERT"
    assert config.client_key_data == b"KEY"
    assert config.tls_server_name == "kubernetes"


def test_secrets_never_appear_in_repr() -> None:
    config = ClientConfig(
        server="https://h",
        token="SECRET-TOKEN",
        client_cert_data=b"CERT",
        client_key_data=b"SECRET-KEY",
        exec=ExecConfig(
            "client.authentication.k8s.io/v1", "plugin", env=(("API_KEY", "SECRET-ENV"),)
        ),
    )
    basic = ClientConfig(server="https://h", username="admin", password="SECRET-PASSWORD")
    text = repr(config) + repr(basic)
    for secret in ("SECRET-TOKEN", "SECRET-KEY", "SECRET-PASSWORD", "SECRET-ENV"):
        assert secret not in text
    assert "https://h" in text


@pytest.mark.parametrize(
    ("document", "key", "fragment"),
    [
        ({"clusters": "nope"}, "clusters", "must be a list"),
        ({"clusters": ["nope"]}, "clusters[0]", "must be a mapping"),
        ({"clusters": [{"cluster": {}}, {"name": None}]}, "clusters[1].name", "duplicate name"),
        ({"clusters": [{"name": 7}]}, "clusters[0].name", "must be a string"),
        ({"users": [{"name": "u", "user": "x"}]}, "users[0].user", "must be a mapping"),
        ({"current-context": 3}, "current-context", "must be a string"),
    ],
)
def test_structural_errors_name_the_file_and_the_key(
    document: dict[str, Any], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        merge_kubeconfigs([("/etc/kube.yaml", document)])
    assert info.value.file == "/etc/kube.yaml"
    assert info.value.key == key
    assert fragment in str(info.value)
    assert "/etc/kube.yaml" in str(info.value)
    assert isinstance(info.value, KubeMoonError)


def test_invalid_yaml_and_non_mapping_documents() -> None:
    with pytest.raises(ConfigError, match=r"/k: invalid YAML at line 2"):
        merge_kubeconfigs([("/k", "a: b\n  - c: [\n")])
    with pytest.raises(ConfigError, match="must be a mapping"):
        merge_kubeconfigs([("/k", "- a\n- b\n")])


def _select(
    cluster: dict[str, Any], user: dict[str, Any] | None = None, context: str | None = None
) -> ClientConfig:
    document = doc(
        clusters={"c": cluster},
        users={"u": user or {}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    return merge_kubeconfigs([("/cfg", document)]).select(context)


@pytest.mark.parametrize(
    ("cluster", "user", "key", "fragment"),
    [
        ({}, None, "clusters[0].cluster.server", "no server"),
        ({"server": "ftp://h"}, None, "clusters[0].cluster.server", "https:// or http://"),
        ({"server": "https://"}, None, "clusters[0].cluster.server", "no host"),
        ({"server": "https://h:99999"}, None, "clusters[0].cluster.server", "invalid server"),
        ({"server": "https://u:p@h"}, None, "clusters[0].cluster.server", "credentials"),
        ({"server": 5}, None, "clusters[0].cluster.server", "must be a string"),
        (
            {"server": "https://h", "proxy-url": "ftp://p"},
            None,
            "clusters[0].cluster.proxy-url",
            "must be http, https or socks5",
        ),
        (
            {"server": "https://h", "certificate-authority-data": "***"},
            None,
            "clusters[0].cluster.certificate-authority-data",
            "base64",
        ),
        (
            {"server": "https://h", "insecure-skip-tls-verify": "yes"},
            None,
            "clusters[0].cluster.insecure-skip-tls-verify",
            "true or false",
        ),
        (
            {"server": "https://h", "insecure-skip-tls-verify": True, "certificate-authority": "x"},
            None,
            "clusters[0].cluster",
            "cannot be combined",
        ),
        (
            {"server": "https://h"},
            {"client-key-data": "!!"},
            "users[0].user.client-key-data",
            "base64",
        ),
        (
            {"server": "https://h"},
            {"client-certificate": "c"},
            "users[0].user",
            "needs a client key",
        ),
        (
            {"server": "https://h"},
            {"token": "t", "password": "p"},
            "users[0].user",
            "more than one",
        ),
        (
            {"server": "https://h"},
            {"auth-provider": {"name": "gcp"}},
            "users[0].user.auth-provider",
            "not supported",
        ),
        ({"server": "https://h"}, {"exec": "x"}, "users[0].user.exec", "must be a mapping"),
        (
            {"server": "https://h"},
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
            "users[0].user.exec.apiVersion",
            "unsupported exec apiVersion",
        ),
        (
            {"server": "https://h"},
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1"}},
            "users[0].user.exec.command",
            "no command",
        ),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "x",
                    "args": [1],
                }
            },
            "users[0].user.exec.args",
            "list of strings",
        ),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "x",
                    "env": {"A": "1"},
                }
            },
            "users[0].user.exec.env",
            "must be a list",
        ),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "x",
                    "env": [{"name": "", "value": "x"}],
                }
            },
            "users[0].user.exec.env[0]",
            "has no name",
        ),
        (
            {"server": "https://h"},
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}},
            "users[0].user.exec.interactiveMode",
            "required",
        ),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "x",
                    "interactiveMode": "Sometimes",
                }
            },
            "users[0].user.exec.interactiveMode",
            "must be one of",
        ),
    ],
)
def test_field_errors_name_the_file_and_the_key(
    cluster: dict[str, Any], user: dict[str, Any] | None, key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _select(cluster, user)
    assert info.value.file == "/cfg"
    assert info.value.key == key
    assert fragment in str(info.value)


def test_base64_errors_never_echo_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        _select({"server": "https://h"}, {"client-key-data": "PRIVATE KEY MATERIAL!"})
    assert "PRIVATE" not in str(info.value)


def test_an_entry_without_a_body_is_empty() -> None:
    merged = merge_kubeconfigs(
        [
            (
                "/k",
                {
                    "clusters": [{"name": "c"}],
                    "contexts": [{"name": "x", "context": {"cluster": "c"}}],
                },
            )
        ]
    )
    with pytest.raises(ConfigError, match="no server") as info:
        merged.select("x")
    assert info.value.key == "clusters[0].cluster.server"


def test_context_selection_errors() -> None:
    merged = merge_kubeconfigs(
        [
            (
                "/k",
                doc(
                    clusters={"c": {"server": "https://h"}},
                    contexts={
                        "no-cluster": {"user": "u"},
                        "bad-cluster": {"cluster": "zz"},
                        "bad-user": {"cluster": "c", "user": "ghost"},
                        "no-user": {"cluster": "c"},
                    },
                ),
            )
        ]
    )
    with pytest.raises(ConfigError, match="no current-context"):
        merged.select()
    with pytest.raises(ConfigError, match="'missing' is not defined") as info:
        merged.select("missing")
    assert info.value.key == "context"
    with pytest.raises(ConfigError, match="names no cluster"):
        merged.select("no-cluster")
    with pytest.raises(ConfigError, match="cluster 'zz' is not defined"):
        merged.select("bad-cluster")
    with pytest.raises(ConfigError, match="user 'ghost' is not defined") as info:
        merged.select("bad-user")
    assert info.value.key == "contexts[2].context.user"
    anonymous = merged.select("no-user")
    assert anonymous.token is None and anonymous.username is None


def test_current_context_pointing_nowhere() -> None:
    merged = merge_kubeconfigs([("/k", doc(current="gone"))])
    with pytest.raises(ConfigError, match="'gone' is not defined") as info:
        merged.select()
    assert info.value.key == "current-context"


def test_exec_config_is_read_in_full() -> None:
    config = _select(
        {"server": "https://h"},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "/usr/bin/plugin",
                "args": ["get-token", "--x"],
                "env": [{"name": "A", "value": "1"}],
                "interactiveMode": "Never",
                "provideClusterInfo": True,
                "installHint": "install it",
            }
        },
    )
    assert config.exec == ExecConfig(
        api_version="client.authentication.k8s.io/v1",
        command="/usr/bin/plugin",
        args=("get-token", "--x"),
        env=(("A", "1"),),
        interactive_mode="Never",
        provide_cluster_info=True,
        install_hint="install it",
        source="/cfg",
    )


# -- ClientConfig ---------------------------------------------------------------------------


def test_client_config_validates_itself() -> None:
    with pytest.raises(ConfigError, match="needs a client key"):
        ClientConfig(server="https://h", client_cert_data=b"c")
    with pytest.raises(ConfigError, match="needs a client certificate"):
        ClientConfig(server="https://h", client_key_file="/k")
    with pytest.raises(ConfigError, match="more than one authentication method"):
        ClientConfig(server="https://h", token="t", username="u")
    with pytest.raises(ConfigError, match="cannot be combined"):
        ClientConfig(server="https://h", insecure_skip_tls_verify=True, ca_data=b"x")
    with pytest.raises(ConfigError, match="no server URL"):
        ClientConfig(server="")
    with pytest.raises(ConfigError, match="a query or a fragment"):
        ClientConfig(server="https://h/?x=1")


def test_origin_ports_and_base_path() -> None:
    plain = ClientConfig(server="http://h")
    assert (plain.port, plain.origin, plain.host_header) == (80, "http://h:80", "h")
    prefixed = ClientConfig(server="https://h:8443/k8s/clusters/c-1/")
    assert prefixed.base_path == "/k8s/clusters/c-1"
    assert prefixed.host_header == "h:8443"
    assert (
        prefixed.url("/api/v1/pods?limit=1")
        == "https://h:8443/k8s/clusters/c-1/api/v1/pods?limit=1"
    )
    v6 = ClientConfig(server="https://[fd00::1]:6443")
    assert v6.host == "fd00::1"
    assert v6.origin == "https://[fd00::1]:6443"
    assert v6.url("/api") == "https://[fd00::1]:6443/api"


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/api",
        "//evil.example/api",
        "api/v1",
        "/api/../../secret",
        "/api/./v1",
        "/api\\evil",
        "/api#frag",
        "/api v1",
        "/api\r\nHost: evil",
        "/api\x7f",
        "/api\x00",
        "/api/v1/..",
        "..",
        "@evil.example/x",
        "",
    ],
)
def test_urls_outside_the_origin_are_refused(target: str) -> None:
    config = ClientConfig(server="https://k8s.example:6443")
    with pytest.raises(LocalProtocolError):
        config.url(target)


def test_url_keeps_queries_with_odd_but_safe_characters() -> None:
    config = ClientConfig(server="https://k8s.example")
    assert (
        config.url("/api?labelSelector=a%3Db") == "https://k8s.example:443/api?labelSelector=a%3Db"
    )
    assert config.url("/api?x=..") == "https://k8s.example:443/api?x=.."
    # Dots inside a segment, or three of them, are names, not dot segments.
    assert config.url("/api/.../.b/c.") == "https://k8s.example:443/api/.../.b/c."


# -- in-cluster ------------------------------------------------------------------------------


def test_in_cluster_config() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = in_cluster_config(env, base_dir="/sa", namespace="prod\n")
    assert config.server == "https://10.96.0.1:443"
    assert config.token_file == "/sa/token"
    assert config.ca_file == "/sa/ca.crt"
    assert config.namespace == "prod"
    v6 = in_cluster_config(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    )
    assert v6.origin == "https://[fd00::1]:6443"
    assert v6.namespace == "default"
    assert v6.token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({}, "KUBERNETES_SERVICE_HOST"),
        ({"KUBERNETES_SERVICE_HOST": "h"}, "KUBERNETES_SERVICE_PORT"),
        (
            {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "http"},
            "KUBERNETES_SERVICE_PORT",
        ),
        (
            {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "0"},
            "KUBERNETES_SERVICE_PORT",
        ),
    ],
)
def test_in_cluster_errors(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        in_cluster_config(env)
    assert info.value.key == key
    assert info.value.file == "environment"


# -- exec credentials ---------------------------------------------------------------------------

V1 = ExecConfig("client.authentication.k8s.io/v1", "/bin/plugin", interactive_mode="Never")


def credential(status: Any, api_version: str = V1.api_version) -> bytes:
    return json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "status": status}
    ).encode()


def test_parse_exec_credential_with_expiry() -> None:
    parsed = parse_exec_credential(
        credential({"token": "T0KEN", "expirationTimestamp": "2030-01-02T03:04:05Z"}), V1
    )
    assert parsed.token == "T0KEN"
    assert parsed.expiration == 1893553445.0
    assert not parsed.expired(1893553444.0)
    assert parsed.expired(1893553445.0)
    assert "T0KEN" not in repr(parsed)
    offset = parse_exec_credential(
        credential({"token": "t", "expirationTimestamp": "2030-01-02T04:04:05+01:00"}), V1
    )
    assert offset.expiration == 1893553445.0


def test_parse_exec_credential_without_expiry_and_with_certificates() -> None:
    cert = "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
    key = "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n"
    parsed = parse_exec_credential(
        credential({"clientCertificateData": cert, "clientKeyData": key}), V1
    )
    assert parsed.token is None
    assert (parsed.client_certificate_data, parsed.client_key_data) == (
        cert.encode(),
        key.encode(),
    )
    assert parsed.expiration is None
    assert not parsed.expired(1e12)


@pytest.mark.parametrize(
    ("output", "fragment"),
    [
        (b"SECRET not json", "valid JSON"),
        (b'{"kind": "Other"}', "not print an ExecCredential"),
        (credential({"token": "SECRET"}, "client.authentication.k8s.io/v1beta1"), "expected"),
        (
            json.dumps({"apiVersion": V1.api_version, "kind": "ExecCredential"}).encode(),
            "no status",
        ),
        (credential({"token": 5}), "token must be a string"),
        (credential({"clientCertificateData": 1, "clientKeyData": "k"}), "must be strings"),
        (credential({"clientCertificateData": "SECRET"}), "needs both"),
        (credential({}), "neither a token"),
        (credential({"token": "SECRET", "expirationTimestamp": "tomorrow"}), "RFC 3339"),
        (credential({"token": "SECRET", "expirationTimestamp": "2030-01-02T03:04:05"}), "RFC 3339"),
        (credential({"token": "SECRET", "expirationTimestamp": 5}), "RFC 3339"),
    ],
)
def test_bad_exec_output_is_a_config_error_without_the_secret(output: bytes, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_exec_credential(output, V1)
    assert fragment in str(info.value)
    assert "SECRET" not in str(info.value)
    assert "/bin/plugin" in str(info.value)


def test_exec_info() -> None:
    info = json.loads(exec_info(V1))
    assert info == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    with_cluster = ExecConfig(
        "client.authentication.k8s.io/v1beta1", "p", provide_cluster_info=True
    )
    cluster = ClientConfig(server="https://h", ca_data=b"PEM", tls_server_name="k8s")
    spec = json.loads(exec_info(with_cluster, cluster))["spec"]
    assert spec["cluster"] == {
        "server": "https://h",
        "tls-server-name": "k8s",
        "certificate-authority-data": B64("PEM"),
    }
    insecure = ClientConfig(server="https://h", insecure_skip_tls_verify=True)
    spec = json.loads(exec_info(with_cluster, insecure))["spec"]
    assert spec["cluster"] == {"server": "https://h", "insecure-skip-tls-verify": True}
