"""The narrow interfaces between the manager, the builder, sharding and webhook management.

The runtime's parts meet here instead of importing one another (controller-runtime's
shape: a builder takes a manager *interface*, the manager sees controllers as runnables):

- :class:`Cluster` is what a controller or a webhook manager needs from the runtime that
  hosts it: the client, the shared informers, the Event recorder, the leadership view, the
  failure reporter, the metrics registry. :class:`Manager` is one.
- :class:`Runnable` is what the manager needs of the things it runs: a name, whether it
  works only while this replica leads, its readiness problems and notes, and ``run``.
  :class:`ControllerRunnable` adds the controller's life cycle (background work that runs
  on every replica, stopping, draining, what is still running, metrics, the shard status).
  The manager reads no controller's sharding and no webhook manager's internals.
- :class:`DeclaringRuntime` is what RBAC derivation (``_permissions.py``) reads of a
  built runtime: its controllers' and informers' declarations, not the Manager's privates.

This module imports none of the modules that implement these interfaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry

from kubemoon_core._rbac import PolicyRule
from kubemoon_core.lowlevel import ControllerMetrics, FailureReporter, WorkItem
from kubemoon_core.webhooks import WebhookDeclarations

from ._cache import SharedInformers
from ._client import Client
from ._events import EventRecorder
from ._informer import Informer
from ._leader import LeaderElection
from ._sharded import ShardingConfig, ShardStatus

__all__ = [
    "Cluster",
    "ControllerRunnable",
    "DeclaringController",
    "DeclaringRuntime",
    "DeclaringWebhooks",
    "Runnable",
]


class Cluster(Protocol):
    """What a controller and a webhook manager use of the runtime hosting them."""

    @property
    def name(self) -> str:
        """The runtime's name: the Events' reporting controller and the field manager."""
        ...

    @property
    def client(self) -> Client: ...

    @property
    def informers(self) -> SharedInformers:
        """The shared informers every controller reads through."""
        ...

    @property
    def events(self) -> EventRecorder: ...

    @property
    def election(self) -> LeaderElection | None:
        """The leadership view (None when not electing: always leading)."""
        ...

    @property
    def lease_name(self) -> str | None:
        """``namespace/name`` of the leader Lease, when electing."""
        ...

    @property
    def failures(self) -> FailureReporter: ...

    @property
    def registry(self) -> CollectorRegistry: ...

    async def wait_permitted(self) -> None:
        """Wait until the start-up permission check passed (it is made again until it does)."""
        ...


class Runnable(Protocol):
    """Something the manager runs."""

    @property
    def name(self) -> str: ...

    @property
    def needs_leader_election(self) -> bool:
        """True when it runs only while this replica leads (and once the caches synced)."""
        ...

    def readiness_problems(self) -> list[str]:
        """Why it is not ready (``/readyz``)."""
        ...

    def readiness_notes(self) -> list[str]:
        """Lines ``/readyz?verbose`` adds that explain, not fail."""
        ...

    async def run(self) -> None: ...


class ControllerRunnable(Runnable, Protocol):
    """A controller, as the manager sees it."""

    async def run_background(self) -> None:
        """What runs on every replica from the start, leading or not (a shard membership)."""
        ...

    def enqueue_cached(self) -> None:
        """Queue every cached primary object once (before the first ``run``)."""
        ...

    def stop(self) -> None: ...

    @property
    def drained(self) -> bool: ...

    async def leave(self) -> None:
        """Hand over what this replica holds at a clean stop (a shard's ranges)."""
        ...

    def running_items(self) -> Sequence[WorkItem]: ...

    def metrics(self, now: float) -> ControllerMetrics: ...

    def shard_status(self) -> ShardStatus | None: ...


class DeclaringController(Protocol):
    """What a controller declares: read to derive its RBAC rules."""

    @property
    def primary_informer(self) -> Informer: ...

    @property
    def sources(self) -> Sequence[tuple[str, Informer]]:
        """(source name, informer) of everything it reads; ``owns:`` names are owned."""
        ...

    @property
    def status_verbs(self) -> tuple[str, ...]: ...

    @property
    def sharding_config(self) -> ShardingConfig | None: ...


class DeclaringWebhooks(Protocol):
    """What self-managed webhooks declare: read to derive their RBAC rules."""

    @property
    def declarations(self) -> WebhookDeclarations: ...

    @property
    def secret(self) -> tuple[str, str] | None: ...


class DeclaringRuntime(Protocol):
    """What RBAC derivation reads of a built (not running) runtime."""

    @property
    def client(self) -> Client: ...

    @property
    def lease_name(self) -> str | None: ...

    @property
    def rbac_extra(self) -> Sequence[PolicyRule]: ...

    @property
    def controllers(self) -> Sequence[DeclaringController]: ...

    @property
    def informers(self) -> Iterable[Informer]: ...

    @property
    def webhooks(self) -> DeclaringWebhooks | None: ...
