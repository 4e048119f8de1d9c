"""How the operator runs: the options the command line fills in."""

from __future__ import annotations

from dataclasses import dataclass

from kubemoon_trio import LeaderElectionConfig, ShardingConfig

from ._plan import ACCEPT_MIRRORS_SELECTOR

__all__ = ["OperatorOptions"]


@dataclass(frozen=True)
class OperatorOptions:
    """How the operator runs; the command line fills these in."""

    namespaces: tuple[str, ...] = ()  # where ConfigMirrors are watched; () is everywhere
    workers: int = 4
    write_concurrency: int = 4  # a mirror's copy writes in flight at once
    probe_address: tuple[str, int] | None = None
    leader_election: LeaderElectionConfig | None = None
    # Sharded: the mirrors are split across every replica run with the same group.
    sharding: ShardingConfig | None = None
    target_namespace_selector: str = ACCEPT_MIRRORS_SELECTOR
    stall_margin: float = 30.0
    grace_period: float = 30.0
    # Before reconciling, ask the API server (SelfSubjectAccessReviews) for every RBAC rule
    # the operator needs and report all missing ones at once; off for clusters that forbid
    # the review (--no-permission-check).
    check_permissions: bool = True
    # The webhooks (validating, mutating, conversion) are served when an address is given;
    # the certificate and key are PEM files, reloaded when they change.
    webhook_address: tuple[str, int] | None = None
    webhook_cert_file: str = ""
    webhook_key_file: str = ""
    # Self-managed webhooks: the operator keeps the certificate in ``webhook_secret`` and
    # its leader registers the webhooks, reached through ``webhook_service`` (namespace,
    # name, port) in a cluster, or at ``webhook_advertise_host`` on a laptop.
    webhook_self_managed: bool = False
    webhook_service: tuple[str, str, int] | None = None
    webhook_secret: tuple[str, str] | None = None
    webhook_advertise_host: str | None = None
    # How often the leader puts the configurations back as declared (seconds).
    webhook_resync: float = 60.0
    # Mutual TLS on the webhook port (either mode): only clients presenting a certificate
    # this CA (PEM file) signed -- the API server's -- are answered.
    webhook_client_ca_file: str | None = None
