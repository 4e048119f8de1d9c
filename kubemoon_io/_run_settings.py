"""What ``kubemoon run``'s command line asks of the Managers built under it.

Rules: only ``kubemoon run`` sets them (:func:`using_run_settings`), for the time it
imports the user's module and calls the function naming the Manager; every adapter's
Manager built then reads them (:func:`current_run_settings`), one built elsewhere sees
None. A setting given here wins over the Manager's own argument: the command line is the
last word on how a process runs (leader election, probes, sharding, the webhook port and
certificates), the code says what it runs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["RunSettings", "current_run_settings", "using_run_settings"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How ``kubemoon run`` runs a Manager; None and False leave the code's choice.

    ``leader_elect`` holds the Lease ``lease_name`` (default: :meth:`lease_name_for` of
    the Manager's name) in ``lease_namespace``; ``sharded`` shards every controller of the
    Manager (member Leases in ``lease_namespace``, group: the controller's name).
    The ``webhook_*`` settings replace the arguments of the same names of
    :meth:`kubemoon_trio.Manager.serve_webhooks` (``webhook_service`` is namespace, name and
    port). ``no_permission_check`` turns off the Manager's start-up RBAC check
    (``Manager(check_permissions=...)``), for clusters that forbid SelfSubjectAccessReviews.
    """

    leader_elect: bool = False
    lease_name: str | None = None
    lease_namespace: str = "default"
    identity: str | None = None
    probe_address: tuple[str, int] | None = None
    sharded: bool = False
    webhook_host: str | None = None
    webhook_port: int | None = None
    webhook_cert_dir: str | None = None
    webhook_service: tuple[str, str, int] | None = None
    webhook_secret: tuple[str, str] | None = None
    webhook_advertise_host: str | None = None
    webhook_client_ca_file: str | None = None
    no_permission_check: bool = False

    @staticmethod
    def lease_name_for(manager_name: str) -> str:
        """A Lease name made from a Manager's name (``examples.kubemoon.dev/widgets`` ->
        ``examples.kubemoon.dev-widgets``): lower case, other characters replaced by ``-``."""
        name = re.sub(r"[^a-z0-9.-]+", "-", manager_name.lower()).strip(".-")
        return name[:253] or "kubemoon"

    @property
    def webhook_options(self) -> bool:
        """True when some ``webhook_*`` setting is given."""
        return any(
            value is not None
            for value in (
                self.webhook_host,
                self.webhook_port,
                self.webhook_cert_dir,
                self.webhook_service,
                self.webhook_secret,
                self.webhook_advertise_host,
                self.webhook_client_ca_file,
            )
        )


_CURRENT: ContextVar[RunSettings | None] = ContextVar("kubemoon_run_settings", default=None)


def current_run_settings() -> RunSettings | None:
    """The settings of the ``kubemoon run`` building a Manager now, else None."""
    return _CURRENT.get()


@contextlib.contextmanager
def using_run_settings(settings: RunSettings) -> Iterator[RunSettings]:
    """Make ``settings`` the :func:`current_run_settings` inside the ``with`` block."""
    token = _CURRENT.set(settings)
    try:
        yield settings
    finally:
        _CURRENT.reset(token)
