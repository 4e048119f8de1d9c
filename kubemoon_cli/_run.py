"""``kubemoon run module:manager``: run an operator without writing its command line.

``module:manager`` (or ``path/to/file.py:manager``) names a Manager of any loop (trio,
asyncio, sync) or a function returning one. A function with a parameter is handed the
Client the command builds (``--kubeconfig``/``--context``, ``--in-cluster``, else the
environment, as ``Client.from_environment``); its loop is the one of the Client its
first parameter is annotated with, or of the Manager its return annotation names
(``--loop`` says it when nothing is annotated; trio by default). The run flags
(leader election, sharding, probes, webhook serving) become the
:class:`~kubemoon_io.RunSettings` of every Manager built while the module is imported
and the function called: the code says what runs, the command line how.

Rules: bad input (a module that does not import, a name that is no Manager, a function
that fails, flags the Manager cannot take) exits with status 2 and one line naming it;
SIGTERM and SIGINT stop the Manager gracefully (no new work, running reconciles finish,
the Lease is released) and exit 0; a lost Lease exits 1, as any other failure while
running does (logged).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
import typing
from collections.abc import Callable
from types import ModuleType
from typing import Any

import kubemoon_asyncio
import kubemoon_sync
import kubemoon_trio
from kubemoon_core import KubeMoonError
from kubemoon_core.errors import LeadershipLost
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_io import JsonLogFormatter, RunSettings, using_run_settings

from ._loading import UsageError, load_module, printable

__all__ = ["add_run_parser", "call_manager", "offline_client", "run", "settings_from"]

logger = logging.getLogger("kubemoon.run")

LOOPS: dict[str, ModuleType] = {
    "trio": kubemoon_trio,
    "asyncio": kubemoon_asyncio,
    "sync": kubemoon_sync,
}
MANAGERS = (kubemoon_trio.Manager, kubemoon_asyncio.Manager, kubemoon_sync.Manager)
AnyManager = kubemoon_trio.Manager | kubemoon_asyncio.Manager | kubemoon_sync.Manager


def _address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "0.0.0.0", int(port)


def _port(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value!r}")
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


def add_run_parser(commands: Any) -> None:
    """Add the ``run`` sub-command to ``commands`` (the ``kubemoon`` sub-parsers)."""
    run_parser = commands.add_parser(
        "run",
        help="run the Manager named module:manager (no argparse in the operator)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    run_parser.add_argument("manager", metavar="module:manager")
    run_parser.add_argument("--loop", choices=sorted(LOOPS), help="default: from annotations")
    where = run_parser.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    where.add_argument("--in-cluster", action="store_true", help="use the pod's ServiceAccount")
    run_parser.add_argument("--context", help="kubeconfig context (default: current-context)")
    run_parser.add_argument("--leader-elect", action="store_true", help="run only while leading")
    run_parser.add_argument("--lease-name", help="default: from the Manager's name")
    run_parser.add_argument(
        "--lease-namespace", default="default", help="the Leases' namespace (default: default)"
    )
    run_parser.add_argument("--identity", help="this replica's Lease identity")
    run_parser.add_argument(
        "--sharded", action="store_true", help="shard every controller across the replicas"
    )
    run_parser.add_argument(
        "--no-permission-check",
        action="store_true",
        help="skip the start-up RBAC check (for clusters that forbid SelfSubjectAccessReviews)",
    )
    run_parser.add_argument(
        "--probe-address",
        type=_address,
        help="HOST:PORT of /healthz, /readyz and /metrics (port 0 picks one)",
    )
    run_parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    run_parser.add_argument(
        "--log-format", default="text", choices=["text", "json"], help="json: one object a line"
    )
    hooks = run_parser.add_argument_group(
        "webhooks", "how the Manager serves its declared webhooks (Manager.serve_webhooks)"
    )
    hooks.add_argument("--webhook-host", help="address to listen on (default: 0.0.0.0)")
    hooks.add_argument("--webhook-port", type=_port, help="HTTPS port (default: 9443)")
    hooks.add_argument("--webhook-cert-dir", help="tls.crt, tls.key and ca.crt (cert-manager)")
    hooks.add_argument(
        "--webhook-service", type=_service, help="NAMESPACE/NAME[:PORT] of the webhooks' Service"
    )
    hooks.add_argument(
        "--webhook-secret", type=_secret, help="NAMESPACE/NAME of the certificate Secret"
    )
    hooks.add_argument(
        "--webhook-advertise-host", help="address the API server reaches (no Service)"
    )
    hooks.add_argument("--webhook-client-ca-file", help="PEM CA of the callers (mutual TLS)")


def settings_from(args: argparse.Namespace) -> RunSettings:
    """The :class:`~kubemoon_io.RunSettings` of a parsed ``kubemoon run`` command line."""
    if args.sharded and args.leader_elect:
        raise UsageError("--sharded replicas all work: do not add --leader-elect")
    if args.lease_name is not None and not args.leader_elect:
        raise UsageError("--lease-name needs --leader-elect")
    if args.identity is not None and not (args.leader_elect or args.sharded):
        raise UsageError("--identity needs --leader-elect or --sharded")
    if args.in_cluster and args.context is not None:
        raise UsageError("--context names a kubeconfig context: not with --in-cluster")
    if args.webhook_cert_dir is not None and args.webhook_secret is not None:
        raise UsageError("give --webhook-cert-dir or --webhook-secret, not both")
    return RunSettings(
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        identity=args.identity,
        probe_address=args.probe_address,
        sharded=args.sharded,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        webhook_cert_dir=args.webhook_cert_dir,
        webhook_service=args.webhook_service,
        webhook_secret=args.webhook_secret,
        webhook_advertise_host=args.webhook_advertise_host,
        webhook_client_ca_file=args.webhook_client_ca_file,
        no_permission_check=args.no_permission_check,
    )


def _loop_of(hint: object) -> str | None:
    for loop, module in LOOPS.items():
        if isinstance(hint, type) and issubclass(hint, (module.Manager, module.Client)):
            return loop
    return None


def annotated_loop(function: Callable[..., object]) -> str | None:
    """The loop whose Client the first parameter of ``function`` is annotated with, or
    whose Manager it is annotated to return; None when neither says."""
    try:
        hints = typing.get_type_hints(function)
        parameters = list(inspect.signature(function).parameters)
    except Exception:  # unresolvable annotations are the user's: fall back to --loop
        return None
    for hint in ([hints.get(parameters[0])] if parameters else []) + [hints.get("return")]:
        loop = _loop_of(hint)
        if loop is not None:
            return loop
    return None


def offline_client(loop: str) -> Any:
    """A Client of ``loop`` that is never connected (to build a Manager for ``rbac``)."""
    return LOOPS[loop].Client(ClientConfig(server="https://127.0.0.1:6443"))


def close_client(client: Any) -> None:
    """Close a Client of any loop outside a running loop."""
    if isinstance(client, kubemoon_sync.Client):
        client.close()
    elif isinstance(client, kubemoon_asyncio.Client):
        import asyncio  # noqa: PLC0415 - only for this loop's client

        asyncio.run(client.aclose())
    else:
        import trio  # noqa: PLC0415 - only for this loop's client

        trio.run(client.aclose)


def _takes_client(function: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def call_manager(
    spec: str, found: object, make_client: Callable[[str], Any], loop: str | None = None
) -> tuple[AnyManager, Any]:
    """The Manager ``found`` is, or returns when called (with ``make_client(loop)`` when it
    takes a parameter); and that client, or None. ``spec`` names it in errors."""
    if isinstance(found, MANAGERS):
        return found, None
    if not callable(found) or isinstance(found, type):
        raise UsageError(f"{printable(spec)} is not a Manager (nor a function returning one)")
    client = None
    if _takes_client(found):
        annotated = annotated_loop(found)
        if loop is not None and annotated is not None and loop != annotated:
            raise UsageError(f"--loop {loop}: {printable(spec)} is annotated for {annotated}")
        client = make_client(loop or annotated or "trio")
    try:
        made = found() if client is None else found(client)
    except (Exception, SystemExit) as exc:  # the user's function: report it, no traceback
        if client is not None:
            close_client(client)
        if isinstance(exc, SystemExit):
            raise UsageError(f"{printable(spec)}() called sys.exit({exc.code!r})") from None
        raise UsageError(f"{printable(spec)}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, MANAGERS):
        if client is not None:
            close_client(client)
        raise UsageError(
            f"{printable(spec)} is not a Manager (nor a function returning one): "
            f"it returned {type(made).__name__}"
        )
    return made, client


def _client_factory(args: argparse.Namespace) -> Callable[[str], Any]:
    def make(loop: str) -> Any:
        client_type = LOOPS[loop].Client
        if args.in_cluster:
            return client_type.in_cluster()
        if args.kubeconfig is not None:
            return client_type.from_kubeconfig(args.kubeconfig, context=args.context)
        return client_type.from_environment(context=args.context)

    return make


def load_manager(args: argparse.Namespace, settings: RunSettings) -> AnyManager:
    """Import ``args.manager`` and build its Manager under ``settings``; checked against
    the flags (raises :class:`UsageError`)."""
    module_name, sep, attr = args.manager.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected module:manager or file.py:manager, got {args.manager!r}")
    with using_run_settings(settings):
        module = load_module(module_name)
        found = getattr(module, attr, None)
        if found is None:
            raise UsageError(f"{printable(module_name)} has no {printable(attr)}")
        try:
            manager, client = call_manager(args.manager, found, _client_factory(args), args.loop)
        except KubeMoonError as exc:  # the command's client: a bad kubeconfig, context...
            raise UsageError(f"cannot build the client: {exc}") from None
    chosen = _loop_of(type(manager))
    problem = None
    if args.loop is not None and args.loop != chosen:
        problem = f"--loop {args.loop}: {printable(args.manager)} is a {chosen} Manager"
    elif client is not None and _loop_of(type(client)) != chosen:
        problem = (
            f"{printable(args.manager)} returned a {chosen} Manager for a "
            f"{_loop_of(type(client))} Client"
        )
    elif client is None and (args.kubeconfig or args.in_cluster or args.context):
        problem = (
            f"--kubeconfig/--context/--in-cluster: {printable(args.manager)} builds its own "
            "client (give the function a parameter to be handed the command's)"
        )
    elif settings.webhook_options and manager.webhooks is None:
        problem = f"--webhook-*: {printable(args.manager)} serves no webhooks"
    elif settings.sharded and not manager.controllers:
        problem = f"--sharded: {printable(args.manager)} has no controllers"
    if problem is not None:
        close_client(manager.client)
        if client is not None and client is not manager.client:
            close_client(client)
        raise UsageError(problem)
    return manager


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        for key in ("controller", "key", "reconcile_id", "error"):
            if hasattr(record, key):
                line += f" {key}={getattr(record, key)}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str, fmt: str) -> None:
    """Logs to stderr in ``fmt`` (``json``: :class:`~kubemoon_io.JsonLogFormatter`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def run(args: argparse.Namespace) -> int:
    """Run ``kubemoon run``; return the exit status."""
    configure_logging(args.log_level, args.log_format)
    try:
        manager = load_manager(args, settings_from(args))
    except UsageError as exc:
        print(f"kubemoon: error: {exc}", file=sys.stderr)
        return 2
    logger.info(
        "running %s: %d controller(s) on %s",
        printable(args.manager),
        len(manager.controllers),
        _loop_of(type(manager)),
    )
    try:
        manager.run_forever()  # SIGTERM/SIGINT: a graceful stop, then it returns
    except LeadershipLost as lost:
        logger.error("%s", lost)
        return 1
    except KubeMoonError as failed:
        logger.error("stopped: %s: %s", type(failed).__name__, failed)
        return 1
    logger.info("stopped")
    return 0
