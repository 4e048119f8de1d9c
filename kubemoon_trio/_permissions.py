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

from kubemoon_core import GroupVersionResource
from kubemoon_core._rbac import (
    Declared,
    DeclaredController,
    DeclaredWebhooks,
    GroupResource,
    Permission,
    PolicyRule,
    access_review_allowed,
    derive_rules,
    describe_missing,
    permissions_to_check,
)
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import WebhookEndpoint

from . import _backend
from ._client import Client
from ._runtime_protocols import DeclaringRuntime

__all__ = ["declared", "derived_rules", "describe_missing", "missing_permissions"]
# describe_missing is the core's (kubemoon_core._rbac), re-exported for the callers here.


def declared(
    manager: DeclaringRuntime, *, access_reviews: bool = False, extra: Sequence[PolicyRule] = ()
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
        webhooks=_declared_webhooks(manager),
        extra=more,
    )


def _declared_webhooks(manager: DeclaringRuntime) -> DeclaredWebhooks | None:
    """What the Manager's self-managed webhooks read and write (served with
    :meth:`~kubemoon_trio.Manager.serve_webhooks`; a plain webhook server registers nothing)."""
    hooks = manager.webhooks
    if hooks is None:
        return None
    # The names do not depend on where the webhooks are reached.
    configs = hooks.declarations.configurations(WebhookEndpoint(service=("default", "rbac")))
    registered = [
        (resource, doc["metadata"]["name"])
        for resource, doc in (
            ("validatingwebhookconfigurations", configs.validating),
            ("mutatingwebhookconfigurations", configs.mutating),
        )
        if doc is not None
    ]
    crds = [doc["metadata"]["name"] for doc in configs.conversions]
    return DeclaredWebhooks(secret=hooks.secret, configurations=registered, crds=crds)


def derived_rules(
    manager: DeclaringRuntime, *, access_reviews: bool = False, extra: Sequence[PolicyRule] = ()
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
) -> list[Permission]:
    """The permissions of ``rules`` the client's identity lacks, in a stable order.

    One SelfSubjectAccessReview per verb (and per resource name), at most ``concurrency``
    at a time and at most ``limit`` in all (more is a :class:`LocalProtocolError`: a
    bounded start-up). A ``/status`` resource is asked as its subresource.
    """
    try:
        asks = permissions_to_check(rules, limit=limit)
    except ValueError as exc:
        raise LocalProtocolError(str(exc)) from None
    missing: list[Permission] = []

    async def ask(permission: Permission) -> None:
        answer = await client.create(_SSAR, permission.review())
        if not access_review_allowed(answer):
            missing.append(permission)

    # Batches of ``concurrency`` reviews: no more requests in flight than that.
    for start in range(0, len(asks), max(1, concurrency)):
        async with _backend.TaskGroup() as tasks:
            for item in asks[start : start + max(1, concurrency)]:
                tasks.start_soon(ask, item)
    return sorted(missing, key=Permission.sort_key)


async def check_at_start(manager: DeclaringRuntime) -> str | None:
    """The Manager's start-up check: one message naming every missing permission, or None."""
    missing = await missing_permissions(manager.client, derived_rules(manager))
    return describe_missing(missing) if missing else None
