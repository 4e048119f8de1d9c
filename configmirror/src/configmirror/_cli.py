"""``kubemoon-configmirror``: the operator's command line.

Rules: configuration errors exit with status 2 and one clear line; SIGTERM and SIGINT
shut down cleanly through the runtime's manager (no new work, running reconciles finish,
the Lease is released); a lost lease exits with status 1 so the replica restarts as a follower.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from kubemoon_core import KubeMoonError
from kubemoon_core.errors import LeadershipLost, LocalProtocolError
from kubemoon_trio import Client, LeaderElectionConfig, ShardingConfig

from ._logs import configure_logging, configure_tracing
from ._operator import ConfigMirrorOperator
from ._options import OperatorOptions
from ._plan import ACCEPT_MIRRORS_SELECTOR

__all__ = ["main"]

logger = logging.getLogger("configmirror")


def _address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "0.0.0.0", int(port)


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def _service(value: str) -> tuple[str, str, int]:
    namespace, sep, rest = value.partition("/")
    name, _, port = rest.partition(":")
    if not sep or not namespace or not name or (port and not port.isdigit()):
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME[:PORT], got {value!r}")
    return namespace, name, int(port) if port else 443


def _secret(value: str) -> tuple[str, str]:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {value!r}")
    return namespace, name


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="kubemoon-configmirror",
        description="Mirror a source ConfigMap into several namespaces (ConfigMirror).",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    where.add_argument("--in-cluster", action="store_true", help="use the pod's ServiceAccount")
    parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch ConfigMirrors in this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--target-namespace-selector",
        default=ACCEPT_MIRRORS_SELECTOR,
        help="label selector of the namespaces that accept copies (default: %(default)s)",
    )
    parser.add_argument("--workers", type=_positive, default=4, help="concurrent reconciles")
    parser.add_argument(
        "--write-concurrency",
        type=_positive,
        default=4,
        help="writes of one mirror's copies in flight at once (default: %(default)s)",
    )
    parser.add_argument(
        "--probe-address",
        type=_address,
        default=("127.0.0.1", 8080),
        help="HOST:PORT of /healthz, /readyz and /metrics (port 0 picks one)",
    )
    hooks = parser.add_argument_group(
        "webhooks", "validation with access reviews, defaults, and v1alpha1/v1beta1 conversion"
    )
    hooks.add_argument(
        "--webhook-port",
        type=int,
        help="serve the webhooks over HTTPS on this port (default: no webhooks)",
    )
    hooks.add_argument("--webhook-host", default="0.0.0.0", help="address to listen on")
    hooks.add_argument(
        "--webhook-cert-dir",
        help="directory with tls.crt and tls.key (a mounted cert-manager Secret)",
    )
    hooks.add_argument(
        "--webhook-cert-file", help="PEM certificate (instead of --webhook-cert-dir)"
    )
    hooks.add_argument("--webhook-key-file", help="PEM key (instead of --webhook-cert-dir)")
    hooks.add_argument(
        "--webhook-self-managed",
        action="store_true",
        help="keep the certificate in a Secret and register the webhooks (no cert-manager)",
    )
    hooks.add_argument(
        "--webhook-service",
        type=_service,
        help="NAMESPACE/NAME[:PORT] of the webhooks' Service (self-managed, in a cluster)",
    )
    hooks.add_argument(
        "--webhook-secret",
        type=_secret,
        help="NAMESPACE/NAME of the certificate Secret "
        "(default: configmirror-webhook-certs in the Service's namespace)",
    )
    hooks.add_argument(
        "--webhook-client-ca-file",
        help="PEM CA: answer only clients with a certificate it signed (the API server's; "
        "mutual TLS, see docs/webhooks.rst)",
    )
    hooks.add_argument(
        "--webhook-advertise-host",
        help="address the API server reaches the webhooks at (self-managed, no Service)",
    )
    parser.add_argument("--leader-elect", action="store_true", help="run only while leading")
    parser.add_argument("--lease-name", default="kubemoon-configmirror")
    parser.add_argument("--lease-namespace", default="kubemoon-system")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--identity", help="leader-election identity (default: host + random)")
    shards = parser.add_argument_group(
        "sharding",
        "split the ConfigMirrors across every replica started with --sharded: each joins "
        "the group with a Lease of its own in --lease-namespace (which must exist) and "
        "reconciles only the mirrors whose uid hashes into its ranges; with the API "
        "server's ShardedListAndWatch feature gate each replica also receives only its "
        "share of them, without it they are filtered client-side (a warning, a /readyz "
        "verbose line and the metric kubemoon_shard_server_side say which). Do not "
        "combine with --leader-elect",
    )
    shards.add_argument(
        "--sharded",
        action="store_true",
        help="run the mirror controller sharded across the replicas",
    )
    shards.add_argument(
        "--shard-identity",
        help="this replica's member identity (default: POD_NAME, else host name and pid)",
    )
    shards.add_argument(
        "--shard-group",
        default="configmirror",
        help="the group every replica of one deployment shares (default: %(default)s)",
    )
    parser.add_argument(
        "--no-permission-check",
        action="store_true",
        help="do not ask the API server (SelfSubjectAccessReviews) at start whether every "
        "RBAC rule the operator needs is granted (for clusters that forbid the review)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line (ts, level, msg, logger, trace_id, span_id, "
        "controller, namespace, name, ...); tracing follows the OTEL_* variables",
    )
    return parser.parse_args(argv)


def options_from(args: argparse.Namespace) -> OperatorOptions:
    """The operator options a parsed command line asks for."""
    election = None
    if args.leader_elect:
        extra = {"identity": args.identity} if args.identity else {}
        election = LeaderElectionConfig(
            name=args.lease_name,
            namespace=args.lease_namespace,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
            **extra,
        )
    if args.sharded and args.leader_elect:
        raise LocalProtocolError("--sharded replicas all work: do not add --leader-elect")
    sharding = None
    if args.sharded:
        sharding = ShardingConfig(
            identity=args.shard_identity or None,
            namespace=args.lease_namespace,
            group=args.shard_group,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    elif args.shard_identity:
        raise LocalProtocolError("--shard-identity needs --sharded")
    address, cert, key = None, "", ""
    if args.webhook_self_managed:
        if args.webhook_port is None or args.webhook_cert_dir or args.webhook_cert_file:
            raise LocalProtocolError(
                "--webhook-self-managed needs --webhook-port and no certificate files"
            )
        address = (args.webhook_host, args.webhook_port)
    elif args.webhook_port is not None:
        cert_dir = Path(args.webhook_cert_dir) if args.webhook_cert_dir else None
        cert = args.webhook_cert_file or (str(cert_dir / "tls.crt") if cert_dir else "")
        key = args.webhook_key_file or (str(cert_dir / "tls.key") if cert_dir else "")
        if not (cert and key):
            raise LocalProtocolError(
                "--webhook-port needs --webhook-cert-dir, or --webhook-cert-file and "
                "--webhook-key-file"
            )
        address = (args.webhook_host, args.webhook_port)
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        workers=args.workers,
        write_concurrency=args.write_concurrency,
        probe_address=args.probe_address,
        leader_election=election,
        sharding=sharding,
        target_namespace_selector=args.target_namespace_selector,
        webhook_address=address,
        webhook_cert_file=cert,
        webhook_key_file=key,
        webhook_self_managed=args.webhook_self_managed,
        webhook_service=args.webhook_service,
        webhook_secret=args.webhook_secret,
        webhook_advertise_host=args.webhook_advertise_host,
        webhook_client_ca_file=args.webhook_client_ca_file,
        check_permissions=not args.no_permission_check,
    )


async def run(args: argparse.Namespace) -> int:
    """Run the operator until SIGTERM or SIGINT, then shut down cleanly."""
    if args.in_cluster:
        client = Client.in_cluster()
    elif args.kubeconfig:
        client = Client.from_kubeconfig(args.kubeconfig, context=args.context)
    else:
        client = Client.from_environment(context=args.context)
    operator = ConfigMirrorOperator(client, options_from(args))
    manager = operator.manager
    async with client, operator, trio.open_nursery() as nursery:
        # The manager handles the signals: no new work, running reconciles finish, the
        # Lease is released, and run() returns.
        await nursery.start(functools.partial(manager.run, handle_signals=True))
        if manager.probe_port is not None:
            logger.info("probes on %s:%d", args.probe_address[0], manager.probe_port)
        if operator.webhook_server is not None:
            logger.info("webhooks on %s", operator.webhook_server)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kubemoon-configmirror``."""
    args = parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    shutdown_tracing = configure_tracing()  # OTEL_* variables, when the SDK is installed
    status = 0
    try:
        status = trio.run(run, args)
    except* LeadershipLost as lost:
        logger.error("%s", lost.exceptions[0])
        status = 1
    except* KubeMoonError as failed:
        logger.error("error: %s", failed.exceptions[0])
        status = 2
    finally:
        if shutdown_tracing is not None:
            shutdown_tracing()  # exports the last spans
    return status


if __name__ == "__main__":
    sys.exit(main())
