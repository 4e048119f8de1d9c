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

from ._resources import GroupVersionResource

__all__ = [
    "Declared",
    "DeclaredController",
    "DeclaredWebhooks",
    "GroupResource",
    "Permission",
    "PolicyRule",
    "access_review_allowed",
    "derive_rules",
    "describe_missing",
    "has_status",
    "permissions_to_check",
    "review_plan",
    "rules_manifest",
]

# The order verbs are written in: reads first, then writes, as people write them by hand;
# then RBAC's own: ``bind`` (a RoleBinding to a role whose rights the writer lacks) and
# ``escalate`` (a role granting more than the writer holds), on ``roles``/``clusterroles``.
_VERB_ORDER = (
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "bind",
    "escalate",
)

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
# Self-managed webhooks (kubemoon_trio/_webhook_manager.py): every replica GETs the
# certificate Secret, the leader POSTs it once and PUTs it to renew; the leader POSTs each
# configuration once, then GETs and PATCHes it (server-side apply, drift repair), and GETs
# and PATCHes the CRDs whose conversion it serves. A create cannot be limited to a name
# (the object does not exist yet), the rest is limited to the declared names.
SECRET_CREATE_VERBS = ("create",)
SECRET_NAMED_VERBS = ("get", "update")
CONFIGURATION_CREATE_VERBS = ("create",)
CONFIGURATION_NAMED_VERBS = ("get", "patch")
CRD_NAMED_VERBS = ("get", "patch")


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
    resource_names: frozenset[str] = frozenset()
    """Only the objects of these names (``resourceNames``); empty for every object."""

    def __post_init__(self) -> None:
        unknown = sorted(self.verbs - set(_VERB_ORDER) - {"*"})
        if unknown:
            raise ValueError(f"PolicyRule on {self.resource!r}: unknown verbs {unknown}")
        if not self.verbs:
            raise ValueError(f"PolicyRule on {self.resource!r}: no verbs")
        if self.resource_names and self.verbs & {"list", "watch", "create", "deletecollection"}:
            # RBAC cannot limit these by name: the rule would silently allow nothing.
            raise ValueError(
                f"PolicyRule on {self.resource!r}: list, watch, create and deletecollection "
                "cannot be limited to resource names"
            )

    def sorted_verbs(self) -> list[str]:
        """The verbs in the conventional order (get, list, watch, create, ...)."""
        return sorted(self.verbs, key=(*_VERB_ORDER, "*").index)

    def as_dict(self) -> dict[str, Any]:
        """The rule as it appears in a Role's ``rules`` list."""
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": [self.resource]}
        if self.resource_names:
            rule["resourceNames"] = sorted(self.resource_names)
        rule["verbs"] = self.sorted_verbs()
        return rule


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
class DeclaredWebhooks:
    """Self-managed webhooks: the certificate Secret and the objects the leader registers."""

    secret: tuple[str, str] | None = None
    """``(namespace, name)`` of the certificate Secret; ``None`` with certificate files."""
    configurations: Sequence[tuple[str, str]] = ()
    """``(resource, name)``: ``validatingwebhookconfigurations`` or ``mutating...``."""
    crds: Sequence[str] = ()
    """The CRDs whose ``spec.conversion`` the leader keeps."""
    emptied: Sequence[tuple[str, str]] = ()
    """``(resource, name)`` of the configuration of a kind declaring no webhook: the leader
    GETs it and, when it exists (webhooks declared before), empties it with a PATCH."""


@dataclass(frozen=True)
class Declared:
    """What a whole operator declares."""

    controllers: Sequence[DeclaredController] = ()
    caches: Sequence[tuple[GroupResource, str | None]] = ()
    """Extra informers (metadata-only or shared caches), with their namespace or ``None``."""
    events: bool = True
    event_namespaces: Sequence[str] | None = None
    """The namespaces Events are written in (those of the informers), ``None`` for any."""
    lease_namespace: str | None = None
    """The namespace of the leader-election / shard Leases, ``None`` without election."""
    sharded: bool = False
    access_reviews: bool = False
    """A webhook that asks SubjectAccessReviews (``authorization.k8s.io``)."""
    webhooks: DeclaredWebhooks | None = None
    extra: Sequence[PolicyRule] = field(default_factory=tuple)
    """Rules the declarations cannot know, merged with the derived ones."""


_Key = tuple[str, str, str, tuple[str, ...]]


def _add(
    into: dict[_Key, set[str]],
    gr: GroupResource,
    verbs: Iterable[str],
    namespace: str | None,
    names: Iterable[str] = (),
) -> None:
    key = (namespace or "", gr.group, gr.resource, tuple(sorted(set(names))))
    into.setdefault(key, set()).update(verbs)


def _add_webhooks(acc: dict[_Key, set[str]], hooks: DeclaredWebhooks) -> None:
    if hooks.secret is not None:
        namespace, name = hooks.secret
        secrets = GroupResource("", "secrets")
        _add(acc, secrets, SECRET_CREATE_VERBS, namespace)
        _add(acc, secrets, SECRET_NAMED_VERBS, namespace, [name])
    for resource in sorted({r for r, _ in hooks.configurations}):
        gr = GroupResource("admissionregistration.k8s.io", resource)
        names = [n for r, n in hooks.configurations if r == resource]
        _add(acc, gr, CONFIGURATION_CREATE_VERBS, None)
        _add(acc, gr, CONFIGURATION_NAMED_VERBS, None, names)
    for resource in sorted({r for r, _ in hooks.emptied}):
        gr = GroupResource("admissionregistration.k8s.io", resource)
        names = [n for r, n in hooks.emptied if r == resource]
        _add(acc, gr, CONFIGURATION_NAMED_VERBS, None, names)
    if hooks.crds:
        crds = GroupResource("apiextensions.k8s.io", "customresourcedefinitions")
        _add(acc, crds, CRD_NAMED_VERBS, None, hooks.crds)


def derive_rules(declared: Declared) -> list[PolicyRule]:
    """The least-privilege rules for ``declared``, merged per resource and sorted.

    One rule per (namespace, group, resource); cluster-wide rules first, then each
    namespace's, each sorted by group and resource, so the same declarations always give
    the same list.
    """
    acc: dict[_Key, set[str]] = {}
    for c in declared.controllers:
        primary = set(CACHE_VERBS)
        if c.finalizers:
            primary.update(FINALIZER_VERBS)
        _add(acc, c.primary, primary, c.namespace)
        if c.status and c.status_verbs:
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
        events = GroupResource("events.k8s.io", "events")
        if declared.event_namespaces is None:
            _add(acc, events, EVENT_VERBS, None)
        for ns in declared.event_namespaces or ():
            _add(acc, events, EVENT_VERBS, ns)
    if declared.access_reviews:
        _add(acc, GroupResource("authorization.k8s.io", "subjectaccessreviews"), ("create",), None)
    if declared.lease_namespace is not None:
        verbs = (*LEASE_VERBS, *(MEMBERSHIP_VERBS if declared.sharded else ()))
        _add(acc, GroupResource("coordination.k8s.io", "leases"), verbs, declared.lease_namespace)
    if declared.webhooks is not None:
        _add_webhooks(acc, declared.webhooks)
    for rule in declared.extra:
        gr = GroupResource(rule.group, rule.resource)
        _add(acc, gr, rule.verbs, rule.namespace, rule.resource_names)
    return [
        PolicyRule(group, resource, frozenset(verbs), ns or None, frozenset(names))
        for (ns, group, resource, names), verbs in sorted(acc.items())
    ]


def has_status(resource: GroupVersionResource) -> bool:
    """Whether ``resource`` may have a ``status`` subresource: False for a built-in kind
    whose objects have no ``status`` (ConfigMaps, Secrets, Leases...), True otherwise."""
    from . import builtin  # noqa: PLC0415 - the generated kinds, only when asked

    for value in vars(builtin).values():
        info = getattr(value, "__kubemoon_resource__", None)
        if info is not None and (info.group, info.plural) == (resource.group, resource.resource):
            return "status" in getattr(value, "__dataclass_fields__", {})
    return True


@dataclass(frozen=True)
class Permission:
    """One request to ask about: ``verb`` on ``resource`` (``pods/status`` names a
    subresource) of ``group``, in ``namespace`` or cluster-wide, of the object ``name`` or
    of any."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None
    name: str | None = None

    def review(self) -> dict[str, Any]:
        """The SelfSubjectAccessReview that asks whether the caller may do this."""
        resource, _, sub = self.resource.partition("/")
        attributes: dict[str, str] = {"verb": self.verb, "group": self.group}
        attributes["resource"] = resource
        if sub:
            attributes["subresource"] = sub
        if self.namespace is not None:
            attributes["namespace"] = self.namespace
        if self.name is not None:
            attributes["name"] = self.name
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }

    def describe(self) -> str:
        """``verb group/resource [name] in namespace N`` (or ``(cluster-wide)``)."""
        what = f"{self.verb} {self.group + '/' if self.group else ''}{self.resource}"
        if self.name is not None:
            what += f" {self.name}"
        return what + (f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)")

    def sort_key(self) -> tuple[str, str, str, str, str]:
        """Namespace, group, resource, name, verb: the order missing ones are reported in."""
        return (self.namespace or "", self.group, self.resource, self.name or "", self.verb)


def permissions_to_check(
    rules: Sequence[PolicyRule], *, limit: int | None = 256
) -> list[Permission]:
    """One :class:`Permission` per verb (and per resource name) of ``rules``, each once, at
    most ``limit`` (``None``: as many as the rules need).

    More than ``limit`` is a :class:`ValueError`: a caller's explicit bound.
    """
    asks = list(
        dict.fromkeys(
            Permission(verb, r.group, r.resource, r.namespace, name)
            for r in rules
            for name in (sorted(r.resource_names) if r.resource_names else [None])
            for verb in r.sorted_verbs()
        )
    )
    if limit is not None and len(asks) > limit:
        raise ValueError(f"{len(asks)} permissions to check, more than limit={limit}")
    return asks


def review_plan(asks: Sequence[Permission]) -> list[tuple[Permission, tuple[Permission, ...]]]:
    """The first round of access reviews for ``asks``: ``(review, implied)`` pairs.

    A permission needed in two or more namespaces is asked once cluster-wide (the review
    without a namespace, allowed only when every namespace is): ``implied`` lists the
    namespaced permissions that answer settles when allowed, and that are asked one by
    one when it is denied (so a missing one is still named with its namespace). Any other
    permission is its own review with ``implied`` empty. A review is needed itself when it
    is one of ``asks`` (denied: it is missing). An operator with the same controllers in
    many namespaces and cluster-wide rights is checked with as many reviews as one
    namespace needs. Order: that of ``asks``' first occurrences.
    """
    spread: dict[Permission, list[Permission]] = {}
    for p in asks:
        if p.namespace is not None:
            wide = Permission(p.verb, p.group, p.resource, None, p.name)
            spread.setdefault(wide, []).append(p)
    plan: dict[Permission, tuple[Permission, ...]] = {}
    for p in asks:
        wide = Permission(p.verb, p.group, p.resource, None, p.name)
        members = spread.get(wide, [])
        if len(members) < 2:
            plan.setdefault(p, ())
        else:
            plan[wide] = tuple(members)
    return list(plan.items())


def access_review_allowed(answer: Mapping[str, Any]) -> bool:
    """Whether an access review's answer allows the request (anything else: no)."""
    status = answer.get("status")
    return isinstance(status, Mapping) and status.get("allowed") is True


def describe_missing(missing: Sequence[Permission]) -> str:
    """One line naming every missing permission, in :meth:`Permission.sort_key` order."""
    ordered = sorted(missing, key=Permission.sort_key)
    return "missing RBAC permissions: " + "; ".join(p.describe() for p in ordered)


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
