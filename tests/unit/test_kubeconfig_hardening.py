"""Issue 15: kubeconfig secrets, hostile values and client-go's validation rules."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubemoon_core._client_config import ClientConfig, ConfigError, ExecConfig
from kubemoon_core._exec_credentials import parse_exec_credential
from kubemoon_core._kubeconfig import merge_kubeconfigs

B64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731

SECRETS = (
    "TOKEN-SECRET",
    "PASSWORD-SECRET",
    "KEY-SECRET",
    "ARG-SECRET",
    "ENV-SECRET",
    "PROVIDER-SECRET",
    "PROXY-SECRET",
)


def _doc(
    cluster: dict[str, Any],
    user: dict[str, Any] | None = None,
    *,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    out.update(extra or {})
    return out


def _select(cluster: dict[str, Any], user: dict[str, Any] | None = None) -> ClientConfig:
    return merge_kubeconfigs([("/home/me/.kube/config", _doc(cluster, user))]).select()


HOSTILE_USERS = {
    "token": {"token": "TOKEN-SECRET"},
    "basic": {"username": "admin", "password": "PASSWORD-SECRET"},
    "key": {"client-certificate-data": B64("CERT"), "client-key-data": B64("KEY-SECRET")},
    "exec": {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "plugin",
            "args": ["--password=ARG-SECRET"],
            "env": [{"name": "API_KEY", "value": "ENV-SECRET"}],
            "interactiveMode": "Never",
        }
    },
    "provider": {"auth-provider": {"name": "oidc", "config": {"id-token": "PROVIDER-SECRET"}}},
}


def _hostile_kubeconfig() -> Any:
    return merge_kubeconfigs(
        [
            (
                "/k",
                {
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": "https://h",
                                "proxy-url": "http://me:PROXY-SECRET@proxy:3128",
                            },
                        }
                    ],
                    "users": [{"name": n, "user": u} for n, u in HOSTILE_USERS.items()],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "token"}}],
                },
            )
        ]
    )


def test_kubeconfig_repr_hides_every_secret() -> None:
    kubeconfig = _hostile_kubeconfig()
    texts = [repr(kubeconfig), str(kubeconfig)]
    texts += [repr(entry) for entry in kubeconfig.users.values()]
    texts += [repr(entry) for entry in kubeconfig.clusters.values()]
    texts += [repr(entry) for entry in kubeconfig.contexts.values()]
    texts += [repr(dict(kubeconfig.users)), repr(kubeconfig.users["exec"].body)]
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (secret, text)
    # What is safe to show still is.
    assert "https://h" in repr(kubeconfig.clusters["c"])
    assert "plugin" in repr(kubeconfig.users["exec"])
    assert "admin" in repr(kubeconfig.users["basic"])
    assert "'token'" in repr(kubeconfig)  # user names are listed


def test_client_config_repr_hides_exec_args_env_and_credentials() -> None:
    config = ClientConfig(
        server="https://h",
        token="TOKEN-SECRET",
        client_cert_data=b"CERT",
        client_key_data=b"KEY-SECRET",
        proxy_url="http://me:PROXY-SECRET@proxy:3128",
        exec=ExecConfig(
            "client.authentication.k8s.io/v1",
            "plugin",
            args=("--password=ARG-SECRET",),
            env=(("API_KEY", "ENV-SECRET"),),
        ),
    )
    basic = ClientConfig(server="https://h", username="admin", password="PASSWORD-SECRET")
    for obj in (config, config.exec, basic):
        for secret in SECRETS:
            assert secret not in repr(obj)
            assert secret not in str(obj)
    assert "plugin" in repr(config)
    assert "proxy:3128" in repr(config)
    assert "admin" in repr(basic)


@pytest.mark.parametrize(
    "server",
    [
        "https://user:PASSWORD-SECRET@h:99999",  # invalid port
        "ftp://user:PASSWORD-SECRET@h",  # wrong scheme
        "https://user:PASSWORD-SECRET@",  # no host
        "https://user:PASSWORD-SECRET@h",  # credentials
        "https://user:PASSWORD-SECRET@[::1",  # unbalanced bracket
    ],
)
def test_a_password_in_the_server_url_is_never_echoed(server: str) -> None:
    with pytest.raises(ConfigError) as direct:
        ClientConfig(server=server)
    with pytest.raises(ConfigError) as loaded:
        _select({"server": server})
    for error in (direct.value, loaded.value):
        assert "PASSWORD-SECRET" not in str(error)
        assert "PASSWORD-SECRET" not in repr(error.args)


def test_a_non_ascii_host_is_encoded_with_idna() -> None:
    config = ClientConfig(server="https://bücher.example:6443/prefix")
    assert config.host == "xn--bcher-kva.example"
    assert config.host_header == "xn--bcher-kva.example:6443"
    assert config.origin == "https://xn--bcher-kva.example:6443"
    assert config.url("/api").isascii()
    config.host_header.encode("ascii")
    assert ClientConfig(server="https://MiXeD.Example").host == "mixed.example"


@pytest.mark.parametrize(
    "server",
    ["https://a..b", "https://bad host", "https://" + "x" * 64 + ".example", "https://\u2028"],
)
def test_a_host_that_cannot_be_encoded_is_a_config_error(server: str) -> None:
    with pytest.raises(ConfigError, match="host"):
        ClientConfig(server=server)
    with pytest.raises(ConfigError, match="host") as info:
        _select({"server": server})
    assert info.value.key == "clusters[0].cluster.server"


@pytest.mark.parametrize(
    ("section", "inner"), [("clusters", "cluster"), ("users", "user"), ("contexts", "context")]
)
def test_duplicate_names_in_one_file_are_refused(section: str, inner: str) -> None:
    document = _doc({"server": "https://h"})
    entries = document[section]
    entries.append({"name": entries[0]["name"], inner: dict(entries[0][inner])})
    with pytest.raises(ConfigError, match="duplicate") as info:
        merge_kubeconfigs([("/k", document)])
    assert info.value.file == "/k"
    assert info.value.key == f"{section}[1].name"
    assert repr(entries[0]["name"]) in str(info.value)


def test_the_same_name_in_two_files_is_not_a_duplicate() -> None:
    first = _doc({"server": "https://first"})
    second = _doc({"server": "https://second"})
    assert merge_kubeconfigs([("/a", first), ("/b", second)]).select().server == "https://first"


def test_a_token_and_basic_auth_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="more than one authentication method") as info:
        _select({"server": "https://h"}, {"token": "t", "username": "a", "password": "p"})
    assert info.value.key == "users[0].user"
    with pytest.raises(ConfigError, match="more than one authentication method"):
        _select({"server": "https://h"}, {"tokenFile": "/t", "username": "a", "password": "p"})
    with pytest.raises(ConfigError, match="more than one authentication method"):
        ClientConfig(server="https://h", token="t", username="a", password="p")
    with pytest.raises(ConfigError, match="more than one authentication method"):
        ClientConfig(server="https://h", token_file="/t", username="a", password="p")


@pytest.mark.parametrize(
    ("cluster", "user", "fragment"),
    [
        (
            {"certificate-authority": "ca", "certificate-authority-data": B64("CA")},
            {},
            "certificate-authority",
        ),
        (
            {},
            {"client-certificate": "c", "client-certificate-data": B64("C"), "client-key": "k"},
            "client-certificate",
        ),
        (
            {},
            {"client-certificate": "c", "client-key": "k", "client-key-data": B64("K")},
            "client-key",
        ),
    ],
)
def test_a_file_and_data_for_the_same_thing_are_refused_in_a_kubeconfig(
    cluster: dict[str, Any], user: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=f"{fragment}-data and {fragment} are both set"):
        _select({"server": "https://h", **cluster}, user)


def test_a_directly_built_config_lets_the_data_win() -> None:
    # As client-go's rest.Config: both may be set and the data is used.
    config = ClientConfig(server="https://h", ca_file="/ca", ca_data=b"PEM")
    assert config.ca_data == b"PEM"


def test_the_install_hint_is_sanitised() -> None:
    hint = "run \x1b[31mbrew install x\x1b[0m\nthen\tretry\u202e\x07 ok é漢"
    exec_config = ExecConfig("client.authentication.k8s.io/v1", "plugin", install_hint=hint)
    assert exec_config.install_hint == (
        "run U+001B[31mbrew install xU+001B[0m\nthen\tretryU+202EU+0007 ok é漢"
    )
    loaded = _select(
        {"server": "https://h"},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "plugin",
                "installHint": hint,
            }
        },
    )
    assert loaded.exec is not None
    assert "\x1b" not in loaded.exec.install_hint


CERT_PEM = "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
KEY_PEM = "-----BEGIN EC PRIVATE KEY-----\nS0VZLVNFQ1JFVA==\n-----END EC PRIVATE KEY-----\n"
V1 = ExecConfig("client.authentication.k8s.io/v1", "/bin/plugin", interactive_mode="Never")


def _credential(status: dict[str, Any]) -> bytes:
    return json.dumps(
        {"apiVersion": V1.api_version, "kind": "ExecCredential", "status": status}
    ).encode()


def test_exec_credentials_with_a_client_certificate_are_accepted() -> None:
    parsed = parse_exec_credential(
        _credential({"clientCertificateData": CERT_PEM, "clientKeyData": KEY_PEM}), V1
    )
    assert parsed.client_certificate_data == CERT_PEM.encode()
    assert parsed.client_key_data == KEY_PEM.encode()
    assert parsed.token is None
    both = parse_exec_credential(
        _credential({"token": "t", "clientCertificateData": CERT_PEM, "clientKeyData": KEY_PEM}),
        V1,
    )
    assert both.token == "t"
    assert both.client_certificate_data == CERT_PEM.encode()
    assert "KEY-SECRET" not in repr(both)


@pytest.mark.parametrize(
    ("cert", "key", "fragment"),
    [
        ("CERT", KEY_PEM, "clientCertificateData is not a PEM certificate"),
        (CERT_PEM, "KEY-SECRET", "clientKeyData is not a PEM private key"),
        (KEY_PEM, KEY_PEM, "clientCertificateData is not a PEM certificate"),
        (CERT_PEM, CERT_PEM, "clientKeyData is not a PEM private key"),
        (CERT_PEM, KEY_PEM.replace("S0VZ", "!!!"), "clientKeyData is not a PEM private key"),
        (CERT_PEM, KEY_PEM.replace("-----END EC", "-----END RSA"), "clientKeyData is not a PEM"),
        (
            CERT_PEM,
            KEY_PEM.replace("S0VZLVNFQ1JFVA==", "S0VZLVNFQ1JFVA"),
            "clientKeyData is not a PEM",
        ),
    ],
)
def test_exec_certificates_must_be_pem(cert: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_exec_credential(
            _credential({"clientCertificateData": cert, "clientKeyData": key}), V1
        )
    assert "KEY-SECRET" not in str(info.value)
    assert "S0VZ" not in str(info.value)


@pytest.mark.parametrize(
    "proxy",
    ["http://proxy:3128", "https://proxy", "socks5://127.0.0.1:1080", "http://u:p@proxy:8080"],
)
def test_proxy_url_is_parsed_and_carried(proxy: str) -> None:
    config = _select({"server": "https://h", "proxy-url": proxy})
    assert config.proxy_url == proxy


@pytest.mark.parametrize(
    ("proxy", "fragment"),
    [
        ("ftp://proxy", "must be http, https or socks5"),
        ("proxy:3128", "must be http, https or socks5"),
        ("http://", "has no host"),
        ("http://me:PROXY-SECRET@proxy:99999", "invalid proxy-url"),
        ("socks5://me:PROXY-SECRET@/path?q", "has no host"),
    ],
)
def test_a_bad_proxy_url_is_refused(proxy: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        _select({"server": "https://h", "proxy-url": proxy})
    assert info.value.key == "clusters[0].cluster.proxy-url"
    assert "PROXY-SECRET" not in str(info.value)
    with pytest.raises(ConfigError, match=fragment):
        ClientConfig(server="https://h", proxy_url=proxy)


def test_an_empty_proxy_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="non-empty"):
        ClientConfig(server="https://h", proxy_url="")


def test_relative_paths_are_cleaned_as_go_filepath_join_does() -> None:
    config = _select(
        {"server": "https://h", "certificate-authority": "dir/../relative/ca"},
        {
            "client-certificate": "./certs//me.crt",
            "client-key": "../../keys/./me.key",
            "tokenFile": "a/b/../../../token",
        },
    )
    assert config.ca_file == "/home/me/.kube/relative/ca"
    assert config.client_cert_file == "/home/me/.kube/certs/me.crt"
    assert config.client_key_file == "/home/keys/me.key"
    assert config.token_file == "/home/me/token"
    plugin = _select(
        {"server": "https://h"},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "./bin/../plugins/auth",
            }
        },
    )
    assert plugin.exec is not None
    assert plugin.exec.command == "/home/me/.kube/plugins/auth"
    # An absolute path is used as written, as client-go does.
    absolute = _select({"server": "https://h", "certificate-authority": "/etc/../ca"})
    assert absolute.ca_file == "/etc/../ca"
    # A relative kubeconfig path gives a relative, cleaned result.
    relative = merge_kubeconfigs(
        [("conf/./kubeconfig", _doc({"server": "https://h", "certificate-authority": "../ca"}))]
    ).select()
    assert relative.ca_file == "ca"
    # Go's Clean turns a leading "//" into "/"; POSIX normpath alone would keep it.
    network = merge_kubeconfigs(
        [("//srv/kubeconfig", _doc({"server": "https://h", "certificate-authority": "./ca"}))]
    ).select()
    assert network.ca_file == "/srv/ca"
    assert ClientConfig(server="https://[fd00::1]:6443").host == "fd00::1"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"server": "http://h", "token": "TOKEN-SECRET"}, True),
        ({"server": "http://h", "token_file": "/t"}, True),
        ({"server": "http://h", "username": "a", "password": "PASSWORD-SECRET"}, True),
        (
            {"server": "http://h", "exec": ExecConfig("client.authentication.k8s.io/v1", "p")},
            True,
        ),
        ({"server": "http://h"}, False),
        ({"server": "https://h", "token": "t"}, False),
        ({"server": "https://h", "username": "a", "password": "p"}, False),
    ],
)
def test_credentials_over_plain_http_are_flagged(settings: dict[str, Any], expected: bool) -> None:
    config = ClientConfig(**settings)
    assert config.credentials_over_plain_http is expected
    warning = config.plain_http_warning()
    if expected:
        assert warning is not None
        assert "http://h:80" in warning
        assert "TOKEN-SECRET" not in warning and "PASSWORD-SECRET" not in warning
    else:
        assert warning is None


def test_an_unexpected_exec_api_version_is_shown_sanitised() -> None:
    output = json.dumps(
        {"apiVersion": "\x1b]0;pwned\x07v9" + "x" * 500, "kind": "ExecCredential"}
    ).encode()
    with pytest.raises(ConfigError, match="answered apiVersion") as info:
        parse_exec_credential(output, V1)
    assert "\x1b" not in str(info.value)
    assert "\x07" not in str(info.value)
    assert "U+001B]0;pwned" in str(info.value)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("server", [["https://h"], {"url": "https://h"}, None, 5])
def test_a_server_that_is_not_a_string_is_a_config_error(server: Any) -> None:
    with pytest.raises(ConfigError, match="no server URL"):
        ClientConfig(server=server)
