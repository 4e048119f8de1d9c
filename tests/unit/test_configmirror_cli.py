"""The ConfigMirror command line and how it wires the runtime (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from configmirror import (
    ACCEPT_MIRRORS_SELECTOR,
    CONFIGMAPS,
    CONFIGMIRRORS_V1BETA1,
    CONVERT_PATH,
    MUTATE_PATH,
    NAMESPACES,
    VALIDATE_PATH,
    ConfigMirrorOperator,
    OperatorOptions,
)
from configmirror._cli import options_from, parse_args
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_testing import WebhookCertificates
from kubemoon_trio import Client, LeaderElectionConfig


def test_defaults_accept_only_labelled_namespaces_and_do_not_elect() -> None:
    options = options_from(parse_args([]))
    assert options.target_namespace_selector == ACCEPT_MIRRORS_SELECTOR
    assert options.namespaces == ()
    assert options.leader_election is None
    assert options.probe_address == ("127.0.0.1", 8080)


def test_every_flag_reaches_the_options() -> None:
    argv = [
        "--namespace", "a", "--namespace", "b",
        "--target-namespace-selector", "tenant in (blue)",
        "--workers", "2", "--probe-address", ":9090",
        "--leader-elect", "--lease-name", "cm", "--lease-namespace", "ops",
        "--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1",
        "--identity", "me",
    ]  # fmt: skip
    options = options_from(parse_args(argv))
    assert options == OperatorOptions(
        namespaces=("a", "b"),
        workers=2,
        probe_address=("0.0.0.0", 9090),
        leader_election=LeaderElectionConfig(
            "cm", "ops", identity="me", lease_duration=6, renew_deadline=4, retry_period=1
        ),
        target_namespace_selector="tenant in (blue)",
    )


def test_a_bad_probe_address_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--probe-address", "nowhere"])
    assert exited.value.code == 2
    assert "expected HOST:PORT" in capsys.readouterr().err


def test_one_controller_per_namespace_on_shared_caches() -> None:
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    selector = "tenant in (blue)"
    operator = ConfigMirrorOperator(
        client, OperatorOptions(namespaces=("a", "b"), target_namespace_selector=selector)
    )
    manager = operator.manager
    assert [c.name for c in manager.controllers] == ["configmirror-a", "configmirror-b"]
    # One ConfigMap cache (every ConfigMap's metadata: copies too, no ConfigMap is cached
    # with its data, whatever its labels) and one Namespace cache (the selector's), shared.
    informers = manager.informers
    assert len(informers) == 4
    assert informers.get(CONFIGMAPS, metadata_only=True) is operator.configmaps
    assert [i for i in informers if i.resource == CONFIGMAPS] == [operator.configmaps]
    assert informers.get(NAMESPACES, label_selector=selector) is operator.namespaces
    assert {i.namespace for i in informers if i.resource == CONFIGMIRRORS_V1BETA1} == {"a", "b"}
    single = ConfigMirrorOperator(client, OperatorOptions(namespaces=("a",)))
    assert [c.name for c in single.manager.controllers] == ["configmirror"]


def test_webhook_flags() -> None:
    options = options_from(
        parse_args(["--webhook-port", "9443", "--webhook-cert-dir", "/etc/webhook"])
    )
    assert options.webhook_address == ("0.0.0.0", 9443)
    assert (options.webhook_cert_file, options.webhook_key_file) == (
        "/etc/webhook/tls.crt",
        "/etc/webhook/tls.key",
    )
    files = ["--webhook-cert-file", "c.pem", "--webhook-key-file", "k.pem"]
    argv = ["--webhook-port", "0", "--webhook-host", "127.0.0.1", *files]
    options = options_from(parse_args(argv))
    assert options.webhook_address == ("127.0.0.1", 0)
    assert (options.webhook_cert_file, options.webhook_key_file) == ("c.pem", "k.pem")
    with pytest.raises(LocalProtocolError, match="needs --webhook-cert-dir"):
        options_from(parse_args(["--webhook-port", "9443"]))
    assert options_from(parse_args([])).webhook_address is None


def test_the_operator_serves_its_webhooks_through_the_manager(tmp_path: Path) -> None:
    certs = WebhookCertificates.create(tmp_path)
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    options = OperatorOptions(
        webhook_address=("127.0.0.1", 0),
        webhook_cert_file=str(certs.cert_file),
        webhook_key_file=str(certs.key_file),
    )
    operator = ConfigMirrorOperator(client, options)
    assert operator.webhook_server is not None
    assert operator.manager.webhook_servers == [operator.webhook_server]
    assert sorted(operator.webhook_server.app.routes) == sorted(
        [CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH]
    )
    assert ConfigMirrorOperator(client).webhook_server is None


def test_the_client_ca_reaches_the_server_in_both_webhook_modes(tmp_path: Path) -> None:
    """--webhook-client-ca-file turns on mutual TLS for certificate files and for the
    self-managed webhooks alike: a CA file that cannot be read fails at construction."""
    missing = str(tmp_path / "no-such-ca.crt")
    certs = WebhookCertificates.create(tmp_path / "certs")
    files = ["--webhook-cert-dir", str(certs.directory)]
    client = Client(ClientConfig(server="https://127.0.0.1:6443"))
    for mode in (files, ["--webhook-self-managed"]):
        argv = ["--webhook-port", "0", "--webhook-client-ca-file", missing, *mode]
        options = options_from(parse_args(argv))
        assert options.webhook_client_ca_file == missing
        with pytest.raises(LocalProtocolError, match="client CA"):
            ConfigMirrorOperator(client, options)
        # The CA the API server's client certificate comes from is accepted.
        options = options_from(
            parse_args([*argv[:2], "--webhook-client-ca-file", str(certs.ca_file), *mode])
        )
        operator = ConfigMirrorOperator(client, options)
        assert operator.webhook_server is not None
