"""What a Manager's controllers declare, as the input of RBAC derivation.

:func:`declared` reads a built (not running) :class:`~kubemoon_trio.Manager`: each
controller's primary and its ``owns``/``watches`` sources, the other shared informers, the
leader-election Lease and the shard-membership Leases. :func:`derived_rules` turns that into
least-privilege rules with :func:`kubemoon_core._rbac.derive_rules`. Writes a reconcile makes
to kinds it only watches (not ``owns``) cannot be seen from the declarations: pass them in
``extra``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kubemoon_core import GroupVersionResource, LocalProtocolError
from kubemoon_core._rbac import (
    Declared,
    DeclaredController,
    GroupResource,
    PolicyRule,
    derive_rules,
)

from . import _backend
from ._client import Client

if TYPE_CHECKING:
    from ._manager import Manager

__all__ = ["declared", "derived_rules", "describe_missing", "missing_permissions"]


def declared(
    manager: Manager, *, access_reviews: bool = False, extra: Sequence[PolicyRule] = ()
) -> Declared:
    """The declarations of ``manager``'s controllers and informers."""
    controllers: list[DeclaredController] = []
    seen: set[int] = set()
    lease_namespace = manager.lease_name.split("/", 1)[0] if manager.lease_name else None
    more = [*manager.rbac_extra, *extra]
    sharded = False
    for c in manager.controllers:
        primary = c.primary_informer
        seen.add(id(primary))
        owned: list[GroupResource] = []
        watched: list[GroupResource] = []
        for name, informer in c.sources:
            seen.add(id(informer))
            if informer is primary:
                continue
            gr = GroupResource(informer.resource.group, informer.resource.resource)
            (owned if name.startswith("owns:") else watched).append(gr)
        controllers.append(
            DeclaredController(
                primary=GroupResource(primary.resource.group, primary.resource.resource),
                namespace=primary.namespace or None,
                status_verbs=c.status_verbs,
                owned=owned,
                watched=watched,
                sharded=c.sharding_config is not None,
            )
        )
        if c.sharding_config is not None:
            sharded = True
            ns = c.sharding_config.namespace or lease_namespace or "default"
            # Each replica writes its own membership Lease and LISTs its group's.
            more.append(
                PolicyRule(
                    "coordination.k8s.io",
                    "leases",
                    frozenset({"get", "list", "create", "update"}),
                    ns,
                )
            )
    caches = [
        (GroupResource(i.resource.group, i.resource.resource), i.namespace or None)
        for i in manager.informers
        if id(i) not in seen
    ]
    return Declared(
        controllers=controllers,
        caches=caches,
        lease_namespace=lease_namespace,
        sharded=sharded,
        access_reviews=access_reviews,
        extra=more,
    )


def derived_rules(
    manager: Manager, *, access_reviews: bool = False, extra: Sequence[PolicyRule] = ()
) -> list[PolicyRule]:
    """The least-privilege rules ``manager`` needs, merged and sorted."""
    return derive_rules(declared(manager, access_reviews=access_reviews, extra=extra))


_SSAR = GroupVersionResource("authorization.k8s.io", "v1", "selfsubjectaccessreviews")


async def missing_permissions(
    client: Client,
    rules: Sequence[PolicyRule],
    *,
    concurrency: int = 4,
    limit: int = 256,
) -> list[tuple[str, str, str, str | None]]:
    """The (verb, group, resource, namespace) of ``rules`` the client's identity lacks.

    One SelfSubjectAccessReview per verb, at most ``concurrency`` at a time and at most
    ``limit`` in all (more is a :class:`LocalProtocolError`: a bounded start-up). A
    ``/status`` resource is asked as its subresource.
    """
    asks = [(v, r.group, r.resource, r.namespace) for r in rules for v in r.sorted_verbs()]
    if len(asks) > limit:
        raise LocalProtocolError(f"{len(asks)} permissions to check, more than limit={limit}")
    missing: list[tuple[str, str, str, str | None]] = []

    async def ask(verb: str, group: str, resource: str, namespace: str | None) -> None:
        name, _, sub = resource.partition("/")
        attributes: dict[str, str] = {"verb": verb, "group": group, "resource": name}
        if sub:
            attributes["subresource"] = sub
        if namespace is not None:
            attributes["namespace"] = namespace
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await client.create(_SSAR, review)
        if not (answer.get("status") or {}).get("allowed"):
            missing.append((verb, group, resource, namespace))

    # Batches of ``concurrency`` reviews: no more requests in flight than that.
    for start in range(0, len(asks), max(1, concurrency)):
        async with _backend.TaskGroup() as tasks:
            for item in asks[start : start + max(1, concurrency)]:
                tasks.start_soon(ask, *item)
    return sorted(missing, key=lambda m: (m[3] or "", m[1], m[2], m[0]))


def describe_missing(missing: Sequence[tuple[str, str, str, str | None]]) -> str:
    """One line naming every missing permission: ``verb group/resource in namespace``."""
    parts = [
        f"{verb} {group + '/' if group else ''}{resource}"
        + (f" in namespace {ns}" if ns else " (cluster-wide)")
        for verb, group, resource, ns in missing
    ]
    return "missing RBAC permissions: " + "; ".join(parts)


async def check_at_start(manager: Manager) -> str | None:
    """The Manager's start-up check: one message naming every missing permission, or None."""
    missing = await missing_permissions(manager.client, derived_rules(manager))
    return describe_missing(missing) if missing else None
