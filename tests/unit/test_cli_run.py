"""``kubemoon run``: its command line, its usage errors (exit 2, one line naming the
problem), and how it loads ``module:manager`` and hands its flags to the Manager built.

Nothing here connects: the kubeconfig points at a port nobody serves, and the Manager is
built but not run (tests/e2e/test_teamspace.py runs one on the real apiserver).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

import kubemoon_asyncio
import kubemoon_sync
import kubemoon_trio
from kubemoon_cli import main
from kubemoon_cli._main import _parser
from kubemoon_cli._run import close_client, load_manager, settings_from
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_io import RunSettings, current_run_settings
from kubemoon_testing import WebhookCertificates

ROOT = Path(__file__).resolve().parents[2]
TEAMSPACE = str(ROOT / "examples" / "teamspace" / "operator.py")

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
- name: other
  cluster: {server: "https://127.0.0.2:2"}
users:
- name: u
  user: {token: secret-token}
contexts:
- name: c
  context: {cluster: c, user: u}
- name: other
  context: {cluster: other, user: u}
current-context: c
"""

# One module, several ways of naming a Manager (loaded as a file: no sys.path needed).
MODULE = """\
import importlib
import kubemoon_sync
import kubemoon_trio
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.webhooks import WebhookDeclarations
from kubemoon_core.builtin import ConfigMap

async def reconcile(ctx):
    raise AssertionError("never run")

def sync_manager(client: kubemoon_sync.Client) -> kubemoon_sync.Manager:
    manager = kubemoon_sync.Manager(client, name="examples.kubemoon.dev/things")
    manager.controller("things", ConfigMap).complete(reconcile)
    return manager

def with_webhooks(client) -> kubemoon_trio.Manager:
    manager = kubemoon_trio.Manager(client)
    manager.controller("things", ConfigMap).complete(reconcile)
    manager.serve_webhooks(WebhookDeclarations("things"), port=1234)
    return manager

def with_cert_dir(client: kubemoon_trio.Client) -> kubemoon_trio.Manager:
    manager = kubemoon_trio.Manager(client)
    manager.serve_webhooks(WebhookDeclarations("things"), cert_dir="/nonexistent")
    return manager

def sharded_in_code(client: kubemoon_trio.Client) -> kubemoon_trio.Manager:
    manager = kubemoon_trio.Manager(client)
    manager.controller("things", ConfigMap).sharded().complete(reconcile)
    return manager

def unannotated(client):  # a Manager of the client's loop
    return importlib.import_module(type(client).__module__.split(".")[0]).Manager(client)

def mismatched(client: kubemoon_sync.Client):
    return kubemoon_trio.Manager(client)

def own_client():
    return kubemoon_trio.Manager(kubemoon_trio.Client(ClientConfig(server="https://127.0.0.1:1")))

def fails(client):
    raise RuntimeError("boom")

def not_a_manager():
    return 42

import_time = kubemoon_trio.Manager(kubemoon_trio.Client(ClientConfig(server="https://127.0.0.1:1")))
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    """(the module's path, a kubeconfig's path)."""
    module = tmp_path / "things.py"
    module.write_text(MODULE)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    return str(module), str(kubeconfig)


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["run", *argv])


def load(*argv: str) -> Any:
    args = parse(*argv)
    return load_manager(args, settings_from(args))


def test_the_flags_become_run_settings() -> None:
    args = parse(
        *("m:manager", "--leader-elect", "--lease-name", "lease", "--lease-namespace", "ops"),
        *("--identity", "me", "--probe-address", ":8081", "--webhook-port", "9444"),
        *("--webhook-host", "127.0.0.1", "--webhook-cert-dir", "/certs"),
        *("--webhook-service", "ops/hooks", "--webhook-advertise-host", "10.0.0.1"),
        *("--webhook-client-ca-file", "/ca.pem", "--log-format", "json"),
    )
    assert args.log_format == "json"
    assert settings_from(args) == RunSettings(
        leader_elect=True,
        lease_name="lease",
        lease_namespace="ops",
        identity="me",
        probe_address=("0.0.0.0", 8081),
        webhook_host="127.0.0.1",
        webhook_port=9444,
        webhook_cert_dir="/certs",
        webhook_service=("ops", "hooks", 443),
        webhook_advertise_host="10.0.0.1",
        webhook_client_ca_file="/ca.pem",
    )
    assert settings_from(parse("m:f", "--sharded", "--webhook-secret", "ops/certs")) == (
        RunSettings(sharded=True, webhook_secret=("ops", "certs"))
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--probe-address", "8080"], "argument --probe-address: expected HOST:PORT, got '8080'"),
        (["--webhook-port", "http"], "argument --webhook-port: expected a port number"),
        (["--webhook-service", "hooks"], "argument --webhook-service: expected NAMESPACE/NAME"),
        (["--webhook-secret", "a/b/c"], "argument --webhook-secret: expected NAMESPACE/NAME"),
        (["--loop", "gevent"], "argument --loop: invalid choice: 'gevent'"),
        (["--in-cluster", "--kubeconfig", "k"], "not allowed with argument --in-cluster"),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    ],
)
def test_malformed_flags_exit_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", f"{TEAMSPACE}:manager", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "argv", "message"),
    [
        ("kubemoon_no_such_module:manager", [], "cannot import kubemoon_no_such_module"),
        ("{module}", [], "expected module:manager or file.py:manager"),
        ("{module}:nothing", [], "has no nothing"),
        ("{module}:not_a_manager", [], "is not a Manager (nor a function returning one)"),
        ("{module}:ConfigMap", [], "is not a Manager"),
        ("{module}:fails", ["--kubeconfig", "{kubeconfig}"], "fails() failed: RuntimeError: boom"),
        ("{module}:sync_manager", ["--loop", "trio"], "--loop trio: "),
        ("{module}:import_time", ["--loop", "asyncio"], "is a trio Manager"),
        (
            "{module}:mismatched",
            ["--kubeconfig", "{kubeconfig}"],
            "mismatched returned a trio Manager for a sync Client",
        ),
        ("{module}:own_client", ["--context", "other"], "builds its own client"),
        ("{module}:unannotated", ["--kubeconfig", "/nonexistent"], "cannot build the client"),
        (
            "{module}:unannotated",
            ["--kubeconfig", "{kubeconfig}", "--context", "missing"],
            "cannot build the client",
        ),
        (
            "{module}:unannotated",
            ["--kubeconfig", "{kubeconfig}", "--webhook-port", "9443"],
            "--webhook-*: ",
        ),
        ("{module}:unannotated", ["--kubeconfig", "{kubeconfig}", "--sharded"], "no controllers"),
        ("{module}:own_client", ["--sharded", "--leader-elect"], "do not add --leader-elect"),
        (
            "{module}:sharded_in_code",
            ["--kubeconfig", "{kubeconfig}", "--sharded"],
            "sharded_in_code() failed: LocalProtocolError: things: sharded() was already called",
        ),
        ("{module}:own_client", ["--lease-name", "x"], "--lease-name needs --leader-elect"),
        ("{module}:own_client", ["--identity", "x"], "--identity needs --leader-elect"),
        ("{module}:own_client", ["--in-cluster", "--context", "c"], "not with --in-cluster"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(
    files: tuple[str, str],
    target: str,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, kubeconfig = files
    target = target.format(module=module)
    argv = [a.format(kubeconfig=kubeconfig) for a in argv]
    assert main(["run", target, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubemoon: error: "), err
    assert message in err
    assert "Traceback" not in err
    assert current_run_settings() is None


def test_a_function_is_handed_the_commands_client_and_the_flags_reach_its_manager(
    files: tuple[str, str],
) -> None:
    module, kubeconfig = files
    manager = load(
        f"{module}:sync_manager",
        *("--kubeconfig", kubeconfig, "--context", "other", "--leader-elect"),
        *("--lease-namespace", "ops", "--identity", "replica-1", "--probe-address", ":0"),
    )
    try:
        # The loop is the one of the annotations; the client is the command's.
        assert isinstance(manager, kubemoon_sync.Manager)
        assert manager.client.config.origin == "https://127.0.0.2:2"
        assert manager.lease_name == "ops/examples.kubemoon.dev-things"
        assert manager.identity == "replica-1"
        assert manager.probe_address == ("0.0.0.0", 0)
        assert all(c.sharding is None for c in manager.controllers)
    finally:
        close_client(manager.client)
    assert current_run_settings() is None


def test_the_permission_check_is_on_unless_the_flag_turns_it_off(
    files: tuple[str, str],
) -> None:
    module, kubeconfig = files
    for flags, checked in (((), True), (("--no-permission-check",), False)):
        manager = load(f"{module}:with_webhooks", "--kubeconfig", kubeconfig, *flags)
        try:
            assert manager.check_permissions is checked
        finally:
            close_client(manager.client)
    assert settings_from(parse("m:f", "--no-permission-check")).no_permission_check


def test_sharded_shards_every_controller_with_its_leases_in_the_lease_namespace(
    files: tuple[str, str],
) -> None:
    module, kubeconfig = files
    manager = load(
        f"{module}:with_webhooks",
        *("--kubeconfig", kubeconfig, "--sharded", "--lease-namespace", "ops"),
    )
    try:
        (controller,) = manager.controllers
        assert controller.sharding is not None
        assert controller.sharding_config == kubemoon_trio.ShardingConfig(namespace="ops")
        assert manager.election is None
    finally:
        close_client(manager.client)


def test_the_webhook_flags_replace_the_codes_arguments(
    files: tuple[str, str], tmp_path: Path
) -> None:
    module, kubeconfig = files
    certs = WebhookCertificates.create(tmp_path / "certs").directory
    plain = load(f"{module}:with_webhooks", "--kubeconfig", kubeconfig)
    served = load(
        f"{module}:with_webhooks",
        *("--kubeconfig", kubeconfig, "--webhook-port", "9555", "--webhook-host", "127.0.0.1"),
        *("--webhook-cert-dir", str(certs), "--webhook-service", "ops/hooks:8443"),
    )
    try:
        assert plain.webhooks is not None and served.webhooks is not None
        assert repr(plain.webhooks.server) == "<WebhookServer 0.0.0.0:1234>"
        assert plain.webhooks.secret == ("default", "things-webhook-certs")
        assert repr(served.webhooks.server) == "<WebhookServer 127.0.0.1:9555>"
        assert served.webhooks.cert_dir == certs
        assert served.webhooks.secret is None
        assert (served.webhooks.service, served.webhooks.service_port) == (("ops", "hooks"), 8443)
    finally:
        close_client(plain.client)
        close_client(served.client)


def test_the_loop_defaults_to_trio_and_loop_chooses_another_for_unannotated_functions(
    files: tuple[str, str],
) -> None:
    module, kubeconfig = files
    default = load(f"{module}:unannotated", "--kubeconfig", kubeconfig)
    chosen = load(f"{module}:unannotated", "--kubeconfig", kubeconfig, "--loop", "asyncio")
    try:
        assert type(default) is kubemoon_trio.Manager
        assert type(chosen) is kubemoon_asyncio.Manager
        assert isinstance(chosen.client, kubemoon_asyncio.Client)
    finally:
        close_client(default.client)
        close_client(chosen.client)


def test_a_manager_built_at_import_takes_the_flags_too(files: tuple[str, str]) -> None:
    module, _ = files
    manager = load(f"{module}:import_time", "--leader-elect", "--probe-address", "127.0.0.1:9")
    try:
        assert manager.lease_name == "default/kubemoon"
        assert manager.probe_address == ("127.0.0.1", 9)
    finally:
        close_client(manager.client)


def test_a_manager_built_elsewhere_has_no_run_settings() -> None:
    manager = kubemoon_sync.Manager(
        kubemoon_sync.Client(ClientConfig(server="https://127.0.0.1:1"))
    )
    assert manager.run_settings is None


def test_the_teamspace_example_loads_on_asyncio_with_its_webhook(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    manager = load(f"{TEAMSPACE}:manager", "--kubeconfig", str(kubeconfig))
    try:
        assert type(manager) is kubemoon_asyncio.Manager
        assert [c.name for c in manager.controllers] == ["teamspaces"]
        assert manager.webhooks is not None
        assert manager.webhooks.declarations.name == "teamspaces"
    finally:
        close_client(manager.client)


def test_rbac_hands_a_function_taking_a_client_one_that_never_connects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rbac", "generate", f"{TEAMSPACE}:manager"]) == 0
    out = capsys.readouterr().out
    assert "- teamspaces/status" in out
    assert "- teamspaces-validating" in out


@pytest.mark.parametrize(
    ("name", "lease"),
    [
        ("examples.kubemoon.dev/widgets", "examples.kubemoon.dev-widgets"),
        ("Kube Moon!", "kube-moon"),
        ("///", "kubemoon"),
    ],
)
def test_lease_names_from_manager_names(name: str, lease: str) -> None:
    assert RunSettings.lease_name_for(name) == lease


def test_the_run_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--loop",
        "--kubeconfig",
        "--context",
        "--in-cluster",
        "--leader-elect",
        "--lease-namespace",
        "--lease-name",
        "--sharded",
        "--probe-address",
        "--no-permission-check",
        "--log-format",
        "--webhook-port",
        "--webhook-cert-dir",
    ):
        assert flag in out


def test_a_secret_or_a_directory_from_the_command_line_replaces_the_codes_other_choice(
    files: tuple[str, str], tmp_path: Path
) -> None:
    module, kubeconfig = files
    certs = WebhookCertificates.create(tmp_path / "certs").directory
    secret = load(
        f"{module}:with_cert_dir", "--kubeconfig", kubeconfig, "--webhook-secret", "ops/certs"
    )
    directory = load(
        f"{module}:with_webhooks", "--kubeconfig", kubeconfig, "--webhook-cert-dir", str(certs)
    )
    try:
        assert secret.webhooks is not None and directory.webhooks is not None
        assert (secret.webhooks.secret, secret.webhooks.cert_dir) == (("ops", "certs"), None)
        assert (directory.webhooks.secret, directory.webhooks.cert_dir) == (None, certs)
    finally:
        close_client(secret.client)
        close_client(directory.client)
