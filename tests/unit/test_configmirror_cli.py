"""The ConfigMirror command line and how it wires the runtime (no server needed)."""

from __future__ import annotations

import pytest

from configmirror import (
    ACCEPT_MIRRORS_SELECTOR,
    CONFIGMAPS,
    CONFIGMIRRORS_V1BETA1,
    NAMESPACES,
    ConfigMirrorOperator,
    OperatorOptions,
)
from configmirror._cli import options_from, parse_args
from kubemoon_core import ClientConfig
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
    # One ConfigMap cache and one Namespace cache (the selector's), shared by both.
    informers = manager.informers
    assert len(informers) == 4
    assert informers.get(CONFIGMAPS) is operator.configmaps
    assert informers.get(NAMESPACES, label_selector=selector) is operator.namespaces
    assert {i.namespace for i in informers if i.resource == CONFIGMIRRORS_V1BETA1} == {"a", "b"}
    single = ConfigMirrorOperator(client, OperatorOptions(namespaces=("a",)))
    assert [c.name for c in single.manager.controllers] == ["configmirror"]
