"""What a Manager's controllers declare, as the input of RBAC derivation.

:func:`declared` reads a built (not running) :class:`~kubemoon_trio.Manager`: each
controller's primary and its ``owns``/``watches`` sources, the other shared informers, the
leader-election Lease and the shard-membership Leases. :func:`derived_rules` turns that into
least-privilege rules with :func:`kubemoon_core._rbac.derive_rules`. Writes a reconcile makes
to kinds it only watches (not ``owns``) cannot be seen from the declarations: pass them in
``extra``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kubemoon_core import (
    ApiError,
    GroupVersionResource,
    KubeMoonError,
    create_request,
    decode_response,
)
from kubemoon_core._rbac import (
    OWNED_WRITE_VERBS,
    Declared,
    DeclaredController,
    DeclaredWebhooks,
    GroupResource,
    Permission,
    PolicyRule,
    access_review_allowed,
    derive_rules,
    describe_missing,
    has_status,
    permissions_to_check,
    review_plan,
)
from kubemoon_core.errors import LocalProtocolError, MissingPermissions, PermissionCheckFailed
from kubemoon_core.webhooks import WebhookEndpoint

from . import _backend
from ._client import Client
from ._runtime_protocols import DeclaringRuntime

__all__ = [
    "check_at_start",
    "check_until_answered",
    "declared",
    "derived_rules",
    "describe_missing",
    "PermissionGate",
    "missing_permissions",
    "start_up_check",
]
# describe_missing is the core's (kubemoon_core._rbac), re-exported for the callers here.

logger = logging.getLogger("kubemoon.manager")


def declared(
    manager: DeclaringRuntime, *, access_reviews: bool = False, extra: Sequence[PolicyRule] = ()
) -> Declared:
    """The declarations of ``manager``'s controllers and informers."""
    controllers: list[DeclaredController] = []
    seen: set[int] = set()
    lease_namespace = manager.lease_name.split("/", 1)[0] if manager.lease_name else None
    more = [*manager.rbac_extra, *extra]
    sharded = False
    elsewhere: list[tuple[GroupResource, str | None]] = []  # sources outside the primary's
    for c in manager.controllers:
        primary = c.primary_informer
        seen.add(id(primary))
        namespace = primary.namespace or None
        owned: list[GroupResource] = []
        watched: list[GroupResource] = []
        for name, informer in c.sources:
            seen.add(id(informer))
            if informer is primary:
                continue
            gr = GroupResource(informer.resource.group, informer.resource.resource)
            where = informer.namespace or None
            if where == namespace:
                (owned if name.startswith("owns:") else watched).append(gr)
                continue
            # Granted where the informer lists and watches (watches() without a namespace
            # is cluster-wide, whatever the primary's); an owned kind is written there too.
            elsewhere.append((gr, where))
            if name.startswith("owns:"):
                verbs = {*OWNED_WRITE_VERBS, *(("get",) if c.sharding_config else ())}
                more.append(PolicyRule(gr.group, gr.resource, frozenset(verbs), where))
        controllers.append(
            DeclaredController(
                primary=GroupResource(primary.resource.group, primary.resource.resource),
                namespace=namespace,
                status=bool(c.status_verbs) and has_status(primary.resource),
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
    caches = elsewhere + [
        (GroupResource(i.resource.group, i.resource.resource), i.namespace or None)
        for i in manager.informers
        if id(i) not in seen
    ]
    # Events go to the namespace of the object they are about: with every informer in a
    # namespace, only there (a reconcile recording about other objects adds ``extra``).
    spaces = {c.primary_informer.namespace or None for c in manager.controllers}
    spaces |= {ns for _, ns in caches}
    spaces |= {i.namespace or None for c in manager.controllers for _, i in c.sources}
    return Declared(
        controllers=controllers,
        caches=caches,
        event_namespaces=None if None in spaces or not spaces else sorted(s for s in spaces if s),
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
    kinds = (
        ("validatingwebhookconfigurations", configs.validating, "validating"),
        ("mutatingwebhookconfigurations", configs.mutating, "mutating"),
    )
    registered = [(resource, doc["metadata"]["name"]) for resource, doc, _ in kinds if doc]
    # A kind declaring no webhook: the leader still looks for its configuration to empty.
    emptied = [
        (resource, f"{hooks.declarations.name}-{suffix}")
        for resource, doc, suffix in kinds
        if not doc
    ]
    crds = [doc["metadata"]["name"] for doc in configs.conversions]
    return DeclaredWebhooks(
        secret=hooks.secret, configurations=registered, crds=crds, emptied=emptied
    )


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
    limit: int | None = None,
    timeout: float = 30.0,
) -> list[Permission]:
    """The permissions of ``rules`` the client's identity lacks, in a stable order.

    One SelfSubjectAccessReview per distinct verb (and per resource name); a permission
    needed in several namespaces is first asked once cluster-wide, and only when that is
    denied in each namespace (:func:`~kubemoon_core.rbac.review_plan`). In batches of at
    most ``concurrency`` at a time and within ``timeout`` seconds in all (past it,
    :class:`~kubemoon_io.TransportTimeout`): a bounded start-up. ``limit`` (None: what the
    rules need, however many) caps the distinct permissions: more is a
    :class:`LocalProtocolError`. A ``/status`` resource is asked as its subresource. A
    review the server refuses (a cluster that forbids them) raises its
    :class:`~kubemoon_core.ApiError`.
    """
    try:
        asks = permissions_to_check(rules, limit=limit)
    except ValueError as exc:
        raise LocalProtocolError(str(exc)) from None
    deadline = _backend.current_time() + timeout
    needed = set(asks)
    plan = review_plan(asks)
    denied = await _denied(client, [review for review, _ in plan], concurrency, deadline)
    missing = [review for review, _ in plan if review in denied and review in needed]
    second = [p for review, implied in plan if review in denied for p in implied]
    if second:
        missing += await _denied(client, second, concurrency, deadline)
    return sorted(set(missing), key=Permission.sort_key)


async def _denied(
    client: Client, asks: Sequence[Permission], concurrency: int, deadline: float
) -> list[Permission]:
    """The permissions of ``asks`` their reviews deny, asked in batches of
    ``concurrency`` before ``deadline``; the first failure to answer raises."""
    denied: list[Permission] = []
    errors: list[KubeMoonError] = []

    async def ask(permission: Permission) -> None:
        request = create_request(_SSAR, permission.review())
        # Every review shares the one deadline: the whole check ends within ``timeout``.
        left = max(deadline - _backend.current_time(), 0.0)
        try:
            answer = decode_response(await client.send(request, timeout=left), request)
        except KubeMoonError as exc:  # refused, unanswered, out of time: the check fails
            errors.append(exc)
            return
        if not access_review_allowed(answer):
            denied.append(permission)

    # Batches of ``concurrency`` reviews: no more requests in flight than that; the first
    # batch with a failure is the last.
    step = max(1, concurrency)
    for start in range(0, len(asks), step):
        async with _backend.TaskGroup() as tasks:
            for item in asks[start : start + step]:
                tasks.start_soon(ask, item)
        if errors:
            raise errors[0]
    return denied


async def check_at_start(manager: DeclaringRuntime, *, timeout: float = 30.0) -> str | None:
    """The Manager's start-up check: one message naming every missing permission, or None.

    Raises what :func:`missing_permissions` raises when the check itself cannot be made.
    """
    missing = await missing_permissions(manager.client, derived_rules(manager), timeout=timeout)
    return describe_missing(missing) if missing else None


async def start_up_check(
    manager: DeclaringRuntime, *, timeout: float = 30.0
) -> MissingPermissions | PermissionCheckFailed | None:
    """:func:`check_at_start`, retried and logged; None when the replica may work.

    Missing rules are one ERROR and a :class:`MissingPermissions`. A review refused with
    403 or 404 (a cluster that forbids or does not serve them) is one WARNING and None:
    the replica starts unchecked. Anything else (a timeout, 5xx, 429, a broken connection)
    is retried with backoff until ``timeout`` seconds have passed, then one ERROR and a
    :class:`PermissionCheckFailed`: a replica whose rights are unknown does not take the
    Lease. More permissions than an explicit limit fail at once, the same way.
    """
    deadline = _backend.current_time() + timeout
    delay = 0.5
    while True:
        left = max(deadline - _backend.current_time(), 0.0)
        try:
            problem = await check_at_start(manager, timeout=left)
        except LocalProtocolError as exc:  # too many reviews: retrying cannot help
            failed = PermissionCheckFailed("the permission check cannot be made", last_error=exc)
            logger.error("not starting controllers: %s (%s)", failed, _SKIP)
            return failed
        except ApiError as exc:
            if exc.code not in (403, 404):
                error: KubeMoonError = exc
            else:
                logger.warning(
                    "could not check RBAC permissions at start (%s); starting unchecked (%s)",
                    exc,
                    _SKIP,
                )
                return None
        except KubeMoonError as exc:
            error = exc
        else:
            if problem is None:
                return None
            # Every missing rule in one ERROR; no controller starts that cannot work.
            logger.error("not starting controllers: %s", problem)
            return MissingPermissions(problem)
        wait = delay
        if isinstance(error, ApiError) and error.retry_after is not None:
            wait = max(wait, error.retry_after)
        if _backend.current_time() + wait >= deadline:
            failed = PermissionCheckFailed(
                f"the start-up permission check was not answered within {timeout:g} s",
                last_error=error,
            )
            logger.error("not starting controllers: %s (%s)", failed, _SKIP)
            return failed
        logger.warning("RBAC permission check not answered (%s); retrying in %g s", error, wait)
        await _backend.sleep(wait)
        delay = min(delay * 2, 8.0)


#: After a check that went unanswered or found a rule missing, how long until it is made
#: again (an ERROR each time it fails; an INFO once it passes).
RECHECK_INTERVAL = 30.0
_SKIP = "check_permissions=False, or kubemoon run --no-permission-check, skips the check"


async def check_until_answered(
    manager: DeclaringRuntime, gate: PermissionGate, *, timeout: float
) -> bool:
    """:func:`start_up_check` until it passes: each outcome goes to ``gate`` (the Manager's
    ``/readyz`` reason and its waits); a check that went unanswered or found a rule missing
    is made again every :data:`RECHECK_INTERVAL` seconds, so rights granted after the
    replica started let it work. True when the replica may work, False when the check can
    never be made (more permissions than an explicit limit)."""
    outcome = await start_up_check(manager, timeout=timeout)
    refused = False
    while outcome is not None and not (
        isinstance(outcome, PermissionCheckFailed)
        and isinstance(outcome.last_error, LocalProtocolError)
    ):
        refused = True
        gate.report(outcome)
        await _backend.sleep(RECHECK_INTERVAL)
        outcome = await start_up_check(manager, timeout=timeout)
    if outcome is None and refused:
        logger.info("RBAC permission check passed on a later attempt; starting controllers")
    gate.report(outcome)
    return outcome is None


class PermissionGate:
    """The start-up check's outcome as a Manager's waits and ``/readyz`` see it."""

    def __init__(self) -> None:
        self.error: MissingPermissions | PermissionCheckFailed | None = None
        self.known = _backend.Event()  # the check had an outcome, or there is none
        self.permitted = _backend.Event()  # the check passed, or there is none

    @property
    def problem(self) -> str | None:
        """The outcome's message, None while the replica may work (or is still checking)."""
        return None if self.error is None else str(self.error)

    def report(self, error: MissingPermissions | PermissionCheckFailed | None) -> None:
        """Record an outcome of :func:`check_until_answered` (None: the replica may work;
        a refusal before it is cleared)."""
        self.error = error
        self.known.set()
        if error is None:
            self.permitted.set()

    def raise_if_refused(self) -> None:
        """Raise the outcome's error (the replica does not campaign while it stands)."""
        if self.error is not None:
            raise self.error
