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

from kubemoon_core._rbac import (
    Declared,
    DeclaredController,
    GroupResource,
    PolicyRule,
    derive_rules,
)

from ._manager import Manager

__all__ = ["Manager", "declared", "derived_rules"]


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
