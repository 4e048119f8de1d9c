"""Kubeconfig reading as kubectl 1.37 reads it: issue 22's ten differences, kubectl's YAML,
and hostile files. Each case states what kubectl does (checked against kubectl v1.37.2 by
tests/differential/test_kubeconfig_vs_kubectl.py)."""

from __future__ import annotations

import base64
import textwrap
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kubemoon_core import KubeMoonError
from kubemoon_core._client_config import ClientConfig, ConfigError
from kubemoon_core._kubeconfig import merge_kubeconfigs
from kubemoon_core._kubeconfig_yaml import MAX_KUBECONFIG_BYTES
from kubemoon_io._credentials import CredentialProvider

V1BETA1 = "client.authentication.k8s.io/v1beta1"


def _text(user: str, cluster: str = "{server: 'https://h:6443'}", extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: c
          cluster: {cluster}
        users:
        - name: u
          user: {user}
        contexts:
        - name: x
          context: {{cluster: c, user: u}}
        current-context: x
        """
    ) + textwrap.dedent(extra)


def _select(
    user: str, cluster: str = "{server: 'https://h:6443'}", extra: str = ""
) -> ClientConfig:
    return merge_kubeconfigs([("/home/me/.kube/config", _text(user, cluster, extra))]).select()


def _refused(text: str, fragment: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        merge_kubeconfigs([("/k/config", text)]).select()
    assert fragment in str(info.value)
    assert isinstance(info.value, KubeMoonError)
    return info.value


# -- issue 22, items 1 to 10 -----------------------------------------------------------------


def test_1_a_username_alone_is_basic_auth_with_an_empty_password() -> None:
    config = _select("{username: me}")
    assert (config.username, config.password) == ("me", None)
    header, _ = CredentialProvider(config).header()
    assert header == "Basic " + base64.b64encode(b"me:").decode()


def test_1_a_password_alone_is_accepted_and_sends_nothing() -> None:
    config = _select("{password: pw}")
    assert CredentialProvider(config).header()[0] is None


def test_2_a_client_key_without_a_certificate_is_ignored() -> None:
    config = _select("{token: t, client-key: k}")
    assert config.token == "t"
    assert config.client_key_file is None and config.client_key_data is None
    assert _select("{token: t, client-key-data: QUJD}").client_key_data is None


def test_3_an_exec_env_entry_without_value_is_empty() -> None:
    config = _select(f"{{exec: {{apiVersion: {V1BETA1}, command: kl, env: [{{name: A}}]}}}}")
    assert config.exec is not None and config.exec.env == (("A", ""),)


@pytest.mark.parametrize("name", ["''", "null", "~"])
def test_4_an_exec_env_entry_without_a_name_is_refused(name: str) -> None:
    text = _text(
        f"{{exec: {{apiVersion: {V1BETA1}, command: kl, env: [{{name: {name}, value: x}}]}}}}"
    )
    error = _refused(text, "has no name")
    assert error.key == "users[0].user.exec.env[0]"


@pytest.mark.parametrize("word", ["n", "N", "y", "Y", "yes", "no", "on", "off", "On", "OFF"])
def test_5_yaml_1_1_booleans_are_booleans_as_in_kubectl(word: str) -> None:
    text = _text(
        f"{{exec: {{apiVersion: {V1BETA1}, command: kl, env: [{{name: A, value: {word}}}]}}}}"
    )
    error = _refused(text, "must be a string")
    assert error.key == "users[0].user.exec.env[0].value"
    # Quoted, it is the string.
    quoted = _select(
        f"{{exec: {{apiVersion: {V1BETA1}, command: kl, env: [{{name: A, value: '{word}'}}]}}}}"
    )
    assert quoted.exec is not None and quoted.exec.env == (("A", word),)


def test_6_a_backslash_is_no_path_separator_on_posix() -> None:
    config = _select(f"{{exec: {{apiVersion: {V1BETA1}, command: 'bin\\kl'}}}}")
    assert config.exec is not None and config.exec.command == "bin\\kl"
    relative = _select(f"{{exec: {{apiVersion: {V1BETA1}, command: bin/kl}}}}")
    assert relative.exec is not None and relative.exec.command == "/home/me/.kube/bin/kl"


@pytest.mark.parametrize("proxy", ["http://p:3128/x", "http://p:3128/?a=b", "socks5://p/#f"])
def test_7_a_proxy_url_may_carry_a_path_a_query_or_a_fragment(proxy: str) -> None:
    assert _select("{}", f"{{server: 'https://h', proxy-url: '{proxy}'}}").proxy_url == proxy


def test_8_wrapped_base64_is_accepted_as_go_decodes_it() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\n" + b"A" * 200 + b"\n-----END CERTIFICATE-----\n"
    encoded = base64.b64encode(pem).decode()
    wrapped = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76)) + "\n"
    document = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": wrapped}}
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
        "current-context": "x",
    }
    assert merge_kubeconfigs([("/k", document)]).select().ca_data == pem
    crlf = dict(document)
    crlf["clusters"] = [
        {"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": "QU\r\nJD"}}
    ]
    assert merge_kubeconfigs([("/k", crlf)]).select().ca_data == b"ABC"


@pytest.mark.parametrize(
    "value", ["QUJD IA==", "QUJ", "QUJD=", "QQ==QQ==", "QUJD\tRA==", "Q\u00e9JD"]
)
def test_8_base64_that_go_refuses_is_refused(value: str) -> None:
    document = {"users": [{"name": "u", "user": {"client-certificate-data": value}}]}
    with pytest.raises(ConfigError, match="not valid base64") as info:
        merge_kubeconfigs([("/k", document)])
    assert value not in str(info.value)


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        (
            "users:\n- name: other\n  user: {client-key-data: '!!notbase64'}\n",
            "users[0].user.client-key-data",
        ),
        ("users:\n- name: other\n  user: {token: 12345}\n", "users[0].user.token"),
        (
            "clusters:\n- name: o\n  cluster: {server: x, disable-compression: 'yes'}\n",
            "clusters[0].cluster.disable-compression",
        ),
        ("contexts:\n- name: o\n  context: {cluster: [a]}\n", "contexts[0].context.cluster"),
        ("users:\n- name: o\n  user: {exec: {args: [1]}}\n", "users[0].user.exec.args"),
        ("users:\n- name: o\n  user: {as-user-extra: {a: b}}\n", "users[0].user.as-user-extra.a"),
        ("preferences: {colors: 'true'}\n", "preferences.colors"),
        (
            "users:\n- name: o\n  user: {auth-provider: {config: [a]}}\n",
            "users[0].user.auth-provider.config",
        ),
    ],
)
def test_9_a_malformed_entry_in_any_file_fails_the_whole_load(entry: str, key: str) -> None:
    good = _text("{token: t}")
    with pytest.raises(ConfigError) as info:
        merge_kubeconfigs([("/a", good), ("/b", entry)])
    assert (info.value.file, info.value.key) == ("/b", key)


def test_9_a_shadowed_duplicate_is_still_decoded() -> None:
    # The second file's "u" is never used (the first file wins), yet kubectl refuses it.
    shadowed = "users:\n- name: u\n  user: {insecure: 1, token: [x]}\n"
    with pytest.raises(ConfigError, match="must be a string"):
        merge_kubeconfigs([("/a", _text("{token: t}")), ("/b", shadowed)])


def test_10_tls_settings_of_an_http_server_are_ignored() -> None:
    cluster = "{server: 'http://h:8080', insecure-skip-tls-verify: true, certificate-authority-data: QUJD}"
    config = _select("{}", cluster)
    assert config.scheme == "http"
    with pytest.raises(ConfigError, match="cannot be combined"):
        _select("{}", cluster.replace("http://", "https://"))


# -- the rest of kubectl's reading -------------------------------------------------------


@pytest.mark.parametrize(
    ("plain", "is_string"),
    [
        ("1:20", True),  # sexagesimal is a string in go-yaml v2 (PyYAML: 80)
        ("2001-12-14", True),  # timestamps stay strings (PyYAML: a date)
        ("=", True),  # PyYAML's "value" tag
        ("1e3", False),  # a float for Go (PyYAML: the string "1e3")
        ("0o17", False),
        ("0x1F", False),
        ("-0b101", False),
        ("1_000", False),
        ("0755", False),  # octal
        ("08", False),  # not octal, but a float for Go
        (".5", False),
        (".5e1", False),
        ("0x1FFFFFFFFFFFFFFFFF", True),  # beyond 64 bits and no float: a string
        ("+", True),
        ("v1.2", True),
    ],
)
def test_plain_scalars_resolve_as_go_yaml_v2(plain: str, is_string: bool) -> None:
    text = _text(f"{{token: {plain}}}")
    if is_string:
        assert merge_kubeconfigs([("/k", text)]).select().token == plain
    else:
        _refused(text, "must be a string")


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("apiVersion: v1\nkind: Config\n", True),
        ("kind: Config\n", True),
        ("apiVersion: v1\n", True),
        ("", True),
        ("apiVersion: v2\nkind: Config\n", False),
        ("apiVersion: v1\nkind: Pod\n", False),
    ],
)
def test_only_a_v1_config_is_a_kubeconfig(header: str, accepted: bool) -> None:
    text = header + "current-context: x\n"
    if accepted:
        assert merge_kubeconfigs([("/k", text)]).current_context == "x"
    else:
        with pytest.raises(ConfigError, match="not a kubeconfig"):
            merge_kubeconfigs([("/k", text)])


def test_nameless_entries_are_named_empty_and_reached_by_empty_references() -> None:
    document: dict[str, Any] = {
        "clusters": [{"cluster": {"server": "https://nameless"}}],
        "users": [{"name": None, "user": {"token": "t"}}],
        "contexts": [{"context": {"namespace": "ns"}}],
    }
    config = merge_kubeconfigs([("/k", document)]).select()
    assert (config.server, config.token, config.namespace) == ("https://nameless", "t", "ns")


# -- hostile files -------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [9, 6])  # 10**9 nodes; 10**6 (go-yaml's sliding ratio)
def test_a_yaml_bomb_is_refused_as_excessive_aliasing(levels: int) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append(f"preferences: {{extensions: [{{name: e, extension: *a{levels - 1}}}]}}")
    with pytest.raises(ConfigError, match="excessive aliasing"):
        merge_kubeconfigs([("/bomb", "\n".join(lines))])


def test_moderate_aliasing_is_accepted_as_go_yaml_accepts_it() -> None:
    text = _text("&u {token: t}", extra="extensions: [{name: a, extension: [*u, *u, *u]}]\n")
    assert merge_kubeconfigs([("/k", text)]).select().token == "t"


@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_deep_nesting_is_refused_not_a_recursion_error(opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    text = "preferences: " + opener * 5000 + closer * 5000
    with pytest.raises(ConfigError, match="nested more than"):
        merge_kubeconfigs([("/deep", text)])


def test_a_huge_document_is_refused_before_parsing() -> None:
    text = "a: " + "x" * MAX_KUBECONFIG_BYTES
    with pytest.raises(ConfigError, match="larger than"):
        merge_kubeconfigs([("/huge", text)])


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['true']\n",
        "a: !!bool maybe\n",
        "a: !!int abc\n",
        "a: !!float x\n",
        "? [a, b]\n: c\n",
        "a: b\n\tc: d\n",
        "- [a\n",
        "\x00",
        "a: *missing\n",
        "--- [a\n---\nc: 1\n",
    ],
)
def test_malformed_or_hostile_yaml_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        merge_kubeconfigs([("/bad", text)])
    assert info.value.file == "/bad"


def test_only_the_first_yaml_document_is_read_as_by_kubectl() -> None:
    text = _text("{token: t}") + "---\n- a list\n---\nbroken: [\n"
    assert merge_kubeconfigs([("/k", text)]).select().token == "t"
    assert merge_kubeconfigs([("/k", "---\n---\ncurrent-context: x\n")]).current_context == ""


def test_duplicate_keys_keep_the_last_value_as_go_yaml_does() -> None:
    text = _text("{token: first, token: second}")
    assert merge_kubeconfigs([("/k", text)]).select().token == "second"


def test_null_entries_and_null_arguments_decode_as_go_zero_values() -> None:
    text = _text(f"{{exec: {{apiVersion: {V1BETA1}, command: kl, args: [null, a]}}}}")
    text = text.replace("users:\n", "users:\n- null\n")
    config = merge_kubeconfigs([("/k", text)]).select()
    assert config.exec is not None and config.exec.args == ("", "a")
    with pytest.raises(ConfigError, match="duplicate name"):
        merge_kubeconfigs([("/k", "users: [null, {user: {}}]\n")])


def test_an_exec_plugin_without_api_version_is_refused() -> None:
    error = _refused(_text("{exec: {command: kl}}"), "no apiVersion")
    assert error.key == "users[0].user.exec.apiVersion"


@pytest.mark.parametrize("value", ["5", "true", "[QUJD]", "{a: b}"])
def test_data_fields_must_be_base64_strings(value: str) -> None:
    text = f"clusters: [{{name: o, cluster: {{certificate-authority-data: {value}}}}}]\n"
    with pytest.raises(ConfigError, match="must be a base64 string") as info:
        merge_kubeconfigs([("/k", text)])
    assert info.value.key == "clusters[0].cluster.certificate-authority-data"


@pytest.mark.parametrize(
    ("user", "cluster", "key"),
    [
        (
            "{}",
            "{server: 'https://h', certificate-authority: \"a\\0b\"}",
            "clusters[0].cluster.certificate-authority",
        ),
        (
            '{client-certificate: "a\\0b", client-key: k}',
            "{server: 'https://h'}",
            "users[0].user.client-certificate",
        ),
        ('{tokenFile: "t\\0"}', "{server: 'https://h'}", "users[0].user.tokenFile"),
        (
            f'{{exec: {{apiVersion: {V1BETA1}, command: "k\\0l"}}}}',
            "{server: 'https://h'}",
            "users[0].user.exec",
        ),
        (
            f'{{exec: {{apiVersion: {V1BETA1}, command: kl, args: ["\\0"]}}}}',
            "{server: 'https://h'}",
            "users[0].user.exec",
        ),
        (
            f'{{exec: {{apiVersion: {V1BETA1}, command: kl, env: [{{name: A, value: "\\0"}}]}}}}',
            "{server: 'https://h'}",
            "users[0].user.exec",
        ),
    ],
)
def test_a_nul_character_in_a_path_or_an_exec_plugin_is_refused(
    user: str, cluster: str, key: str
) -> None:
    error = _refused(_text(user, cluster), "NUL character")
    assert error.key == key


_ATOMS = [
    "", "n", "y", "on", "1e3", "0x10", "~", "'s'", '"\\0"', "[a]", "{a: b}", "*x", "&x v",
    "!!binary QUJD", "!!str 5", "!!int 3", "!!timestamp 2001-12-14", "!!set {a}",
    "!!omap [a: 1]", "2001-12-14", ".inf", "=", "https://h", "http://h", V1BETA1, "Never",
]  # fmt: skip
_KEYS = [
    "clusters", "users", "contexts", "current-context", "name", "cluster", "user", "context",
    "server", "certificate-authority-data", "certificate-authority", "token", "tokenFile",
    "exec", "command", "apiVersion", "args", "env", "value", "interactiveMode", "proxy-url",
    "insecure-skip-tls-verify", "namespace", "kind", "username", "password", "client-key",
    "client-certificate-data", "as-user-extra", "auth-provider", "config", "<<",
]  # fmt: skip


@st.composite
def _yamlish(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.integers(0, 2)) if depth < 4 else 0
    if kind == 0:
        return draw(st.sampled_from(_ATOMS))
    if kind == 1:
        items = draw(st.lists(st.tuples(st.sampled_from(_KEYS), _yamlish(depth + 1)), max_size=4))
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    return "[" + ", ".join(draw(st.lists(_yamlish(depth + 1), max_size=3))) + "]"


@given(
    st.lists(st.tuples(st.sampled_from(_KEYS), _yamlish()), min_size=1, max_size=5),
    st.text(max_size=8),
)
# PyYAML's own timestamp constructor failed with AttributeError on this one.
@example(fields=[("clusters", "!!timestamp 2001-12-14")], noise="0")
@example(fields=[("clusters", "!!timestamp [1]")], noise="")
def test_any_document_is_read_or_refused_with_a_config_error(
    fields: list[tuple[str, str]], noise: str
) -> None:
    text = "\n".join(f"{k}: {v}" for k, v in fields) + noise
    try:
        merged = merge_kubeconfigs([("/k", text)])
    except ConfigError:
        return
    for context in [None, *merged.contexts]:
        try:
            config = merged.select(context)
        except ConfigError:
            continue
        repr(config)
        try:
            CredentialProvider(config).header()
        except ConfigError:
            pass


# Found by feeding the same small documents to kubectl v1.37.2 and KubeMoon.
@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("a: &x 1\nb: &x 2\nusers: [{name: u, user: {token: t}}]\n", "t"),  # anchor redefined
        ("users: [{name: u, user: {token: !local t}}]\n", "t"),  # a local tag is ignored
        ("users: !local [{name: u, user: !local {token: t}}]\n", "t"),
        ("users: [{name: u, user: {token: !!binary QUJD}}]\n", "ABC"),  # binary: a string
        (
            "preferences: {extensions: !!omap [{name: e}]}\nusers: [{name: u, user: {token: t}}]\n",
            "t",
        ),
        ("%YAML 1.1\n---\nusers: [{name: u, user: {token: t}}]\n", "t"),
    ],
)
def test_yaml_that_go_yaml_reads_is_read(text: str, token: str) -> None:
    merged = merge_kubeconfigs([("/k", text)])
    assert merged.users["u"].body["token"] == token


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("%YAML 1.2\n---\na: 1\n", "only %YAML 1.1"),
        ("~: 1\n", "key is null"),
        ("unknown: {deep: [.nan]}\n", "NaN and infinities"),
        ("preferences: {extensions: [{name: e, extension: -.inf}]}\n", "NaN and infinities"),
        ("a: !!python/name:os.system x\n", "invalid YAML"),
        ("a: !!omap {b: 1}\n", "must be sequences"),
    ],
)
def test_yaml_that_kubectl_cannot_read_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        merge_kubeconfigs([("/k", text)])


def test_an_explicit_timestamp_is_kept_as_text_or_refused() -> None:
    for bad in ("!!timestamp 2001-12-140", "!!timestamp [1]", "!!timestamp {a: b}"):
        with pytest.raises(ConfigError, match="invalid YAML"):
            merge_kubeconfigs([("/k", f"apiVersion: v1\nkind: Config\nclusters: {bad}\n")])
