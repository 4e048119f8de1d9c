"""Least-privilege RBAC rules derived from what an operator declares, as pure data.

A Manager knows what its controllers read and write: each controller's primary kind (read
through a LIST+WATCH cache, finalizers added and removed with a PATCH, status written to
the ``status`` subresource), the kinds it owns (created, replaced and deleted by the
ensure/delete helpers), the kinds it only watches, Events, and Leases for leader election
and shard membership. :func:`derive_rules` turns such a description (:class:`Declared`)
into the rules that allow exactly those requests, merged and sorted so the output is
deterministic and a generated file can be compared byte for byte with a stale one.

Rules the declarations cannot know (a reconcile that reads a Secret with GET, say) are
added with :attr:`Declared.extra`; they are merged with the derived ones.

Nothing here reads a cluster: the caller (the CLI, or the Manager's start-up permission
check) builds the description and decides what to do with the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Declared",
    "DeclaredController",
    "GroupResource",
    "PolicyRule",
    "derive_rules",
    "rules_manifest",
]

# The order verbs are written in: reads first, then writes, as people write them by hand.
_VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")

# What the runtime's requests need (kubemoon_trio/_context.py: the informer LISTs and
# WATCHes, finalizers are PATCHed, ctx.update_status merge-PATCHes the status subresource,
# ctx.ensure POSTs or merge-PATCHes (kubemoon_core/_desired.py plan_write), ctx.delete
# DELETEs; reads come from caches, so no GET, except a sharded ctx.ensure that meets an
# object outside its owner buckets and GETs it).
CACHE_VERBS = ("list", "watch")
FINALIZER_VERBS = ("patch",)
STATUS_VERBS = ("patch",)
OWNED_WRITE_VERBS = ("create", "patch", "delete")
# The Event recorder POSTs an events.k8s.io/v1 Event and PATCHes its series on repeats.
EVENT_VERBS = ("create", "patch")
# Leader election GETs the Lease, POSTs it once and PUTs it (conditional) to renew, take
# over or release; shard membership also LISTs the Leases of its group.
LEASE_VERBS = ("get", "create", "update")
MEMBERSHIP_VERBS = ("list",)


@dataclass(frozen=True, order=True)
class GroupResource:
    """An API group and a resource name (``configmaps``, or ``configmirrors/status``)."""

    group: str
    resource: str


@dataclass(frozen=True)
class PolicyRule:
    """One RBAC rule: verbs on resources of one group, cluster-wide or in one namespace."""

    group: str
    resource: str
    verbs: frozenset[str]
    namespace: str | None = None
    """``None`` for a ClusterRole rule; a namespace for a Role in it."""

    def __post_init__(self) -> None:
        unknown = sorted(self.verbs - set(_VERB_ORDER) - {"*"})
        if unknown:
            raise ValueError(f"PolicyRule on {self.resource!r}: unknown verbs {unknown}")
        if not self.verbs:
            raise ValueError(f"PolicyRule on {self.resource!r}: no verbs")

    def sorted_verbs(self) -> list[str]:
        """The verbs in the conventional order (get, list, watch, create, ...)."""
        return sorted(self.verbs, key=(*_VERB_ORDER, "*").index)

    def as_dict(self) -> dict[str, Any]:
        """The rule as it appears in a Role's ``rules`` list."""
        return {
            "apiGroups": [self.group],
            "resources": [self.resource],
            "verbs": self.sorted_verbs(),
        }


@dataclass(frozen=True)
class DeclaredController:
    """What one controller declares: its primary, what it owns and what it watches."""

    primary: GroupResource
    namespace: str | None = None
    """The namespace the controller's caches are limited to, ``None`` for all."""
    finalizers: bool = True
    status: bool = True
    status_verbs: Sequence[str] = STATUS_VERBS
    """How the status is written: ``patch`` by ``ctx.update_status``, ``update`` for a PUT."""
    owned: Sequence[GroupResource] = ()
    owned_verbs: Sequence[str] = OWNED_WRITE_VERBS
    """How owned kinds are written (``ctx.ensure``/``ctx.delete`` by default)."""
    sharded: bool = False
    watched: Sequence[GroupResource] = ()


@dataclass(frozen=True)
class Declared:
    """What a whole operator declares."""

    controllers: Sequence[DeclaredController] = ()
    caches: Sequence[tuple[GroupResource, str | None]] = ()
    """Extra informers (metadata-only or shared caches), with their namespace or ``None``."""
    events: bool = True
    lease_namespace: str | None = None
    """The namespace of the leader-election / shard Leases, ``None`` without election."""
    sharded: bool = False
    access_reviews: bool = False
    """A webhook that asks SubjectAccessReviews (``authorization.k8s.io``)."""
    extra: Sequence[PolicyRule] = field(default_factory=tuple)
    """Rules the declarations cannot know, merged with the derived ones."""


def _add(
    into: dict[tuple[str, str, str], set[str]],
    gr: GroupResource,
    verbs: Iterable[str],
    namespace: str | None,
) -> None:
    into.setdefault((namespace or "", gr.group, gr.resource), set()).update(verbs)


def derive_rules(declared: Declared) -> list[PolicyRule]:
    """The least-privilege rules for ``declared``, merged per resource and sorted.

    One rule per (namespace, group, resource); cluster-wide rules first, then each
    namespace's, each sorted by group and resource, so the same declarations always give
    the same list.
    """
    acc: dict[tuple[str, str, str], set[str]] = {}
    for c in declared.controllers:
        primary = set(CACHE_VERBS)
        if c.finalizers:
            primary.update(FINALIZER_VERBS)
        _add(acc, c.primary, primary, c.namespace)
        if c.status:
            status = GroupResource(c.primary.group, c.primary.resource + "/status")
            _add(acc, status, c.status_verbs, c.namespace)
        owned_verbs = (*CACHE_VERBS, *c.owned_verbs, *(("get",) if c.sharded else ()))
        for owned in c.owned:
            _add(acc, owned, owned_verbs, c.namespace)
        for watched in c.watched:
            _add(acc, watched, CACHE_VERBS, c.namespace)
    for gr, ns in declared.caches:
        _add(acc, gr, CACHE_VERBS, ns)
    if declared.events:
        # Events go to the involved object's namespace, which may be any the caches see.
        _add(acc, GroupResource("events.k8s.io", "events"), EVENT_VERBS, None)
    if declared.access_reviews:
        _add(acc, GroupResource("authorization.k8s.io", "subjectaccessreviews"), ("create",), None)
    if declared.lease_namespace is not None:
        verbs = (*LEASE_VERBS, *(MEMBERSHIP_VERBS if declared.sharded else ()))
        _add(acc, GroupResource("coordination.k8s.io", "leases"), verbs, declared.lease_namespace)
    for rule in declared.extra:
        _add(acc, GroupResource(rule.group, rule.resource), rule.verbs, rule.namespace)
    return [
        PolicyRule(group, resource, frozenset(verbs), ns or None)
        for (ns, group, resource), verbs in sorted(acc.items())
    ]


def rules_manifest(
    rules: Sequence[PolicyRule],
    *,
    name: str,
    service_account: str,
    service_account_namespace: str,
) -> list[Mapping[str, Any]]:
    """A ServiceAccount, a ClusterRole and its binding, and a Role + RoleBinding per namespace.

    The namespaced Roles are named ``<name>-<namespace>``; everything binds
    ``service_account`` in ``service_account_namespace``.
    """
    subject = [
        {"kind": "ServiceAccount", "name": service_account, "namespace": service_account_namespace}
    ]
    docs: list[Mapping[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": service_account_namespace},
        }
    ]
    cluster = [r.as_dict() for r in rules if r.namespace is None]
    if cluster:
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": cluster,
            }
        )
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": subject,
            }
        )
    namespaces = sorted({r.namespace for r in rules if r.namespace is not None})
    for ns in namespaces:
        role = f"{name}-{ns}"
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": role, "namespace": ns},
                "rules": [r.as_dict() for r in rules if r.namespace == ns],
            }
        )
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": subject,
            }
        )
    return docs
