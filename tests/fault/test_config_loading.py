"""Configuration from files and the environment, used for real against the scripted server."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fault_support import PODS, Adapter

from kubemoon_core._client_config import ConfigError, ExecConfig
from kubemoon_core.kubeconfig import MAX_KUBECONFIG_BYTES
from kubemoon_io import (
    TOKEN_FILE_LIMIT,
    FileToken,
    kubeconfig_paths,
    load_config,
    load_in_cluster_config,
    load_kubeconfig,
)
from kubemoon_testing._scripted import Reply, ScriptedServer

pytestmark = pytest.mark.fault


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document) if not isinstance(document, str) else document)
    return path


async def test_kubeconfig_files_merge_and_relative_ca_paths_work(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with ScriptedServer() as server:
        first_dir = tmp_path / "first"
        write(first_dir / "certs" / "ca.pem", server.ca_pem.decode())
        first = write(
            first_dir / "config",
            {
                "clusters": [
                    {
                        "name": "scripted",
                        "cluster": {"server": server.url, "certificate-authority": "certs/ca.pem"},
                    }
                ],
                "contexts": [{"name": "main", "context": {"cluster": "scripted", "user": "me"}}],
                "current-context": "main",
            },
        )
        second = write(
            tmp_path / "second" / "config",
            {
                "clusters": [{"name": "scripted", "cluster": {"server": "https://wrong"}}],
                "users": [{"name": "me", "user": {"tokenFile": "token"}}],
                "current-context": "other",
            },
        )
        write(tmp_path / "second" / "token", "file-token\n")
        env = {"KUBECONFIG": os.pathsep.join([str(first), str(tmp_path / "missing"), str(second)])}
        config = load_kubeconfig(env=env)
        assert config.ca_file == str(first_dir / "certs" / "ca.pem")
        assert config.token_file == str(tmp_path / "second" / "token")
        server.add(Reply.json({"kind": "Pod"}))
        client = adapter.client(config)
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert server.requests[0].header("authorization") == "Bearer file-token"


async def test_in_cluster_config_with_token_rotation(adapter: Adapter, tmp_path: Path) -> None:
    async with ScriptedServer() as server:
        sa = tmp_path / "serviceaccount"
        write(sa / "token", "pod-token-1")
        write(sa / "ca.crt", server.ca_pem.decode())
        write(sa / "namespace", "operators\n")
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
        config = load_config(env=env, base_dir=str(sa))
        assert config.namespace == "operators"
        server.add(Reply.json({"kind": "Pod"}), Reply.json({"kind": "Pod"}))
        client = adapter.client(config)
        try:
            await adapter.call(client.get, PODS, "a", namespace="ns")
            write(sa / "token", "pod-token-2-rotated")
            await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert [r.header("authorization") for r in server.requests] == [
            "Bearer pod-token-1",
            "Bearer pod-token-2-rotated",
        ]


def test_load_config_prefers_kubeconfig_then_in_cluster_then_home(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    write(sa / "token", "t")
    cluster_env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    home_config = {
        "clusters": [{"name": "c", "cluster": {"server": "https://home"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
        "current-context": "x",
    }
    write(tmp_path / "home" / ".kube" / "config", home_config)
    explicit = write(
        tmp_path / "explicit",
        {**home_config, "clusters": [{"name": "c", "cluster": {"server": "https://explicit"}}]},
    )
    in_cluster = load_config(env=cluster_env, base_dir=str(sa))
    assert in_cluster.server == "https://10.0.0.1:443"
    assert in_cluster.namespace == "default"
    both = {**cluster_env, "KUBECONFIG": str(explicit)}
    assert load_config(env=both, base_dir=str(sa)).server == "https://explicit"
    home = {"HOME": str(tmp_path / "home")}
    assert load_config(env=home).server == "https://home"
    assert load_config(env={**home, **cluster_env}, context="x").server == "https://home"
    assert kubeconfig_paths({"KUBECONFIG": f"a{os.pathsep}{os.pathsep}b{os.pathsep}a"}) == [
        "a",
        "b",
    ]


def test_loading_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_kubeconfig(tmp_path / "nope")
    assert info.value.file == str(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no kubeconfig file found"):
        load_kubeconfig(env={"KUBECONFIG": str(tmp_path / "a")})
    with pytest.raises(ConfigError, match="cannot read the kubeconfig"):
        load_kubeconfig(tmp_path)  # a directory
    with pytest.raises(ConfigError, match="cannot read the kubeconfig"):
        load_kubeconfig(str(tmp_path / "a\x00b"))
    with pytest.raises(ConfigError, match="cannot read the token file"):
        FileToken(str(tmp_path / "t\x00")).read()
    bad = write(tmp_path / "bad", "clusters: [\n")
    with pytest.raises(ConfigError, match=f"{bad}: invalid YAML"):
        load_kubeconfig(bad)
    with pytest.raises(ConfigError, match="not running in a cluster"):
        load_in_cluster_config(env={}, base_dir=str(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="cannot read the token file") as token_info:
        load_in_cluster_config(env=env, base_dir=str(tmp_path))
    assert token_info.value.file == str(tmp_path / "token")


def test_file_token_rules(tmp_path: Path) -> None:
    path = write(tmp_path / "token", "  abc \n")
    token = FileToken(str(path))
    assert token.read() == "abc"
    assert "abc" not in repr(token)
    write(path, "")
    with pytest.raises(ConfigError, match="empty"):
        token.read()
    path.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        token.read(force=True)


def test_a_bad_ca_or_client_key_is_a_config_error(tmp_path: Path) -> None:
    import kubemoon_sync
    from kubemoon_core._client_config import ClientConfig

    with pytest.raises(ConfigError, match="certificate-authority-data"):
        kubemoon_sync.Client(ClientConfig(server="https://h", ca_data=b"not a certificate"))
    with pytest.raises(ConfigError, match="certificate-authority"):
        kubemoon_sync.Client(ClientConfig(server="https://h", ca_file=str(tmp_path / "none")))
    key = "-----BEGIN PRIVATE KEY-----\nU0VDUkVU\n-----END PRIVATE KEY-----\n"
    with pytest.raises(ConfigError, match="client certificate") as info:
        kubemoon_sync.Client(
            ClientConfig(server="https://h", client_cert_data=b"junk", client_key_data=key.encode())
        )
    assert "U0VDUkVU" not in str(info.value)
    with pytest.raises(ConfigError, match="cannot load the client certificate"):
        kubemoon_sync.Client(
            ClientConfig(
                server="https://h",
                client_cert_file=str(tmp_path / "c"),
                client_key_file=str(tmp_path / "k"),
            )
        )


# -- hostile and broken files on disk (kubectl's load rules) ---------------------------------

_MINIMAL = (
    "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
    "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    "current-context: x\n"
)


def test_a_huge_kubeconfig_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_KUBECONFIG_BYTES + 10)  # sparse: nothing is really written
    with pytest.raises(ConfigError, match="larger than") as info:
        load_kubeconfig(huge)
    assert info.value.file == str(huge)


def test_a_kubeconfig_that_is_not_utf8_or_not_a_file_is_a_config_error(tmp_path: Path) -> None:
    latin = write(tmp_path / "latin", "")
    latin.write_bytes(b"current-context: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_kubeconfig(latin)
    with pytest.raises(ConfigError, match="cannot read the kubeconfig"):
        load_kubeconfig(tmp_path)  # a directory
    with pytest.raises(ConfigError, match="cannot read the kubeconfig"):
        load_kubeconfig(str(tmp_path / "a\x00b"))
    with pytest.raises(ConfigError, match="cannot read the token file"):
        FileToken(str(tmp_path / "t\x00")).read()


@pytest.mark.parametrize(
    ("user", "key"),
    [
        ("{client-certificate: missing.crt, client-key: k}", "client-certificate"),
        ("{tokenFile: missing-token}", "tokenFile"),
    ],
)
def test_files_the_selected_entries_name_must_open(tmp_path: Path, user: str, key: str) -> None:
    (tmp_path / "k").write_text("key")
    config = write(tmp_path / "config", _MINIMAL + f"users: [{{name: u, user: {user}}}]\n")
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_kubeconfig(config)
    assert info.value.key == key
    # A token next to a missing token file is kubectl's "token wins": accepted.
    if key == "tokenFile":
        write(config, _MINIMAL + "users: [{name: u, user: {token: t, tokenFile: missing}}]\n")
        assert load_kubeconfig(config).token == "t"


def test_a_missing_ca_file_is_refused_even_for_http(tmp_path: Path) -> None:
    config = write(
        tmp_path / "config",
        "clusters: [{name: c, cluster: {server: 'http://h', certificate-authority: ca.pem}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
    )
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_kubeconfig(config)
    assert info.value.key == "certificate-authority"


def test_a_broken_file_later_in_kubeconfig_fails_the_load(tmp_path: Path) -> None:
    good = write(tmp_path / "good", _MINIMAL)
    broken = write(tmp_path / "broken", "users: [{name: z, user: {token: 5}}]\n")
    with pytest.raises(ConfigError, match="must be a string") as info:
        load_kubeconfig(env={"KUBECONFIG": os.pathsep.join([str(good), str(broken)])})
    assert info.value.file == str(broken)


def test_a_token_file_that_never_ends_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="larger than") as info:
        FileToken("/dev/zero").read()
    assert str(TOKEN_FILE_LIMIT) in str(info.value)
    garbage = tmp_path / "token"
    garbage.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read the token file"):
        FileToken(str(garbage)).read()


def test_a_fifo_named_by_a_kubeconfig_does_not_hang_the_load(tmp_path: Path) -> None:
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    config = write(
        tmp_path / "config",
        "clusters: [{name: c, cluster: {server: 'http://h', certificate-authority: ca.pem}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
    )
    # http: the CA is only opened (as kubectl opens it), never read, so this returns.
    assert load_kubeconfig(config).ca_file == str(fifo)


_GARBAGE_PLUGINS = {
    "binary": "import sys\nsys.stdout.buffer.write(bytes(range(256)))\n",
    "not a credential": 'print(\'{"kind": "Pod"}\')\n',
    "deep": "print('[' * 100000 + ']' * 100000)\n",
    "header injection": (
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',"
        " 'kind': 'ExecCredential', 'status': {'token': 'a\\r\\nX-Evil: 1'}}))\n"
    ),
}


@pytest.mark.parametrize("name", sorted(_GARBAGE_PLUGINS))
async def test_an_exec_plugin_printing_garbage_is_a_config_error(
    adapter: Adapter, tmp_path: Path, name: str
) -> None:
    script = tmp_path / "plugin.py"
    script.write_text(_GARBAGE_PLUGINS[name])
    exec_config = ExecConfig(
        api_version="client.authentication.k8s.io/v1",
        command=sys.executable,
        args=(str(script),),
        interactive_mode="Never",
        source=str(tmp_path / "kubeconfig"),
    )
    async with ScriptedServer() as server:
        client = adapter.client(server.client_config(exec=exec_config))
        try:
            with pytest.raises(ConfigError) as info:
                await adapter.call(client.get, PODS, "a", namespace="ns")
        finally:
            await adapter.close(client)
        assert "X-Evil" not in str(info.value)
        assert server.requests == []


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_a_kubeconfig_with_a_byte_order_mark_is_read(tmp_path: Path, encoding: str) -> None:
    text = _MINIMAL + "users: [{name: u, user: {token: t\u00e9}}]\n"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    config = tmp_path / "config"
    config.write_bytes(data)
    assert load_kubeconfig(config).token == "t\u00e9"
