"""The ConfigMirror webhooks: validation with access reviews, defaults, and conversion.

Rules: what is decided is decided by the pure functions of ``_admission`` and
``_convert``, on the v1beta1 (storage) form of ``object`` and ``oldObject`` whatever
version the request came in. This module performs the SubjectAccessReviews and registers
the handlers on a :class:`~kubemoon_core.webhooks.WebhookApp`:

- reviews go out on a connection pool of their own (``review_connections`` connections,
  as many reviews in flight at once), never on the operator's, so a flood of admission
  requests cannot slow reconciles;
- one request causes at most ``max_access_reviews`` of them; a change needing more is
  denied with a message naming the cap, unless its author may create ConfigMaps in
  every namespace (one review that covers every named target);
- answers are cached for ``decision_ttl`` seconds by everything a review asks (user,
  uid, groups, extra, verb, namespace, resource, name), and identical reviews in flight
  at once are sent once;
- a review the apiserver cannot answer denies the mirror (fail closed, as the
  webhook's failurePolicy does); such failures are not cached;
- the mutating webhook records who the mirror acts for in ``kubemoon.dev/author``
  (:func:`~configmirror._admission.expected_author`), the validating webhook refuses any
  other value; :class:`AccessReviews` (the cache, the in-flight sharing and the bound) is
  also what the operator re-checks that author with before it writes a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import trio
from prometheus_client import CollectorRegistry

from kubemoon_core import GroupVersionResource, KubeMoonError
from kubemoon_core.errors import ConversionError, LocalProtocolError
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    Operation,
    UserInfo,
    WebhookApp,
    WebhookDeclarations,
)
from kubemoon_trio import Client, WebhookServer

from ._admission import (
    ALL_NAMESPACES,
    AUTHOR_ANNOTATION,
    MAX_ACCESS_REVIEWS,
    SUBJECT_ACCESS_REVIEWS,
    AccessCheck,
    DecisionCache,
    access_denial,
    access_review,
    author_annotation,
    cap_denial,
    decision_key,
    default_mirror,
    deletion_update,
    expected_author,
    required_checks,
    storage_form,
    validate_mirror,
)
from ._convert import converter
from ._plan import CONFIGMIRRORS_V1BETA1

__all__ = [
    "CONVERT_PATH",
    "DECISION_TTL",
    "MUTATE_PATH",
    "REVIEW_CONNECTIONS",
    "VALIDATE_PATH",
    "AccessReviewer",
    "AccessReviews",
    "ConfigMirrorWebhooks",
    "webhook_declarations",
]

CRD_NAME = "configmirrors.kubemoon.dev"
VALIDATE_PATH = "/validate-configmirror"
MUTATE_PATH = "/mutate-configmirror"
CONVERT_PATH = "/convert-configmirror"
DECISION_TTL = 5.0
"""Seconds an access-review answer is reused (by default)."""
REVIEW_CONNECTIONS = 4
"""Connections of the access reviews' own pool (by default)."""


class AccessReviewer(Protocol):
    """What sends the SubjectAccessReviews: :class:`~kubemoon_trio.Client`'s ``create``."""

    async def create(
        self, resource: GroupVersionResource, obj: Mapping[str, Any], /
    ) -> dict[str, Any]: ...


class _Flight:
    """One review in flight; requests asking the same wait for its answer."""

    def __init__(self) -> None:
        self.done = trio.Event()
        # Until answered, a failure: a review cancelled in flight denies its waiters.
        self.answer: str | KubeMoonError | None = KubeMoonError(
            "the access review was not answered"
        )


class AccessReviews:
    """SubjectAccessReviews sent on ``review_client``, at most ``concurrency`` at once,
    identical ones in flight sent once, answers kept for ``decision_ttl`` seconds (with
    ``cache_allowed=False``, only denials are kept: an allowance is never reused once its
    review is answered). Failures are never kept."""

    def __init__(
        self,
        review_client: AccessReviewer,
        *,
        decision_ttl: float = DECISION_TTL,
        concurrency: int = REVIEW_CONNECTIONS,
        cache_allowed: bool = True,
    ) -> None:
        if concurrency < 1:
            raise LocalProtocolError(f"concurrency must be at least 1, got {concurrency}")
        self.review_client = review_client
        # Reviews wait here rather than in the pool's queue (which is walked on every
        # release): at most `concurrency` are sent at once.
        self._sending = trio.CapacityLimiter(concurrency)
        self.decisions = DecisionCache(ttl=decision_ttl)
        self.cache_allowed = cache_allowed
        self.sent = 0
        self._flights: dict[tuple[Any, ...], _Flight] = {}

    async def ask(
        self, user: UserInfo, checks: list[AccessCheck]
    ) -> dict[AccessCheck, str | KubeMoonError | None]:
        """The answer to each of ``checks`` for ``user``, asked together: a denial
        message, None (allowed), or why the review could not be made."""
        answers: dict[AccessCheck, str | KubeMoonError | None] = {}

        async def ask(check: AccessCheck) -> None:
            answers[check] = await self.decide(user, check)

        async with trio.open_nursery() as nursery:
            for check in checks:
                nursery.start_soon(ask, check)
        return answers

    async def decide(self, user: UserInfo, check: AccessCheck) -> str | KubeMoonError | None:
        """The denial message (None: allowed), or why the review could not be made."""
        key = decision_key(user, check)
        found, denial = self.decisions.get(key, trio.current_time())
        if found:
            return denial
        flight = self._flights.get(key)
        if flight is not None:
            await flight.done.wait()
            return flight.answer
        flight = self._flights[key] = _Flight()
        try:
            async with self._sending:
                self.sent += 1
                answer = await self.review_client.create(
                    SUBJECT_ACCESS_REVIEWS, access_review(user, check)
                )
            flight.answer = access_denial(answer, user, check)
            if flight.answer is not None or self.cache_allowed:
                self.decisions.put(key, flight.answer, trio.current_time())
        except KubeMoonError as exc:
            flight.answer = exc
        finally:
            del self._flights[key]
            flight.done.set()
        return flight.answer


class ConfigMirrorWebhooks:
    """The handlers of ConfigMirror's webhooks; :meth:`app` serves them at the paths above.

    The SubjectAccessReviews go out on a new client of ``client``'s configuration with a
    pool of ``review_connections`` connections (its identity needs ``create`` on
    ``subjectaccessreviews.authorization.k8s.io``), or on ``review_client`` when given
    (then not closed here). Close with :meth:`aclose` (or ``async with``); a server made
    by :meth:`server` closes it when it stops serving. ``max_access_reviews`` caps the
    reviews of one request (at least 2); ``decision_ttl`` is how long an answer is
    reused (0: never); at most ``review_connections`` (at least 1) are sent at once.
    Bad values raise :class:`~kubemoon_core.errors.LocalProtocolError`.
    """

    def __init__(
        self,
        client: Client,
        *,
        max_access_reviews: int = MAX_ACCESS_REVIEWS,
        decision_ttl: float = DECISION_TTL,
        review_connections: int = REVIEW_CONNECTIONS,
        review_client: AccessReviewer | None = None,
    ) -> None:
        if max_access_reviews < 2:
            raise LocalProtocolError(
                f"max_access_reviews must be at least 2 (the source and all namespaces), "
                f"got {max_access_reviews}"
            )
        if review_connections < 1:
            raise LocalProtocolError(
                f"review_connections must be at least 1, got {review_connections}"
            )
        self.client = client
        self.max_access_reviews = max_access_reviews
        self._own_client: Client | None = None
        if review_client is None:
            review_client = self._own_client = Client(
                client.config, max_connections=review_connections
            )
        self.review_client: AccessReviewer = review_client
        self.reviews = AccessReviews(
            review_client, decision_ttl=decision_ttl, concurrency=review_connections
        )

    @property
    def decisions(self) -> DecisionCache:
        """The cache of access-review answers."""
        return self.reviews.decisions

    @property
    def reviews_sent(self) -> int:
        """How many SubjectAccessReviews were sent."""
        return self.reviews.sent

    async def aclose(self) -> None:
        """Close the access reviews' own pool (a no-op with a ``review_client`` given)."""
        if self._own_client is not None:
            await self._own_client.aclose()

    async def __aenter__(self) -> ConfigMirrorWebhooks:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def server(
        self,
        address: tuple[str, int],
        cert_file: str,
        key_file: str,
        registry: CollectorRegistry | None = None,
        client_ca_file: str | None = None,
    ) -> WebhookServer:
        """A server of :meth:`app` on ``address`` with the (reloaded) certificate files
        (and mutual TLS with ``client_ca_file``); it closes the access reviews' pool when
        it stops serving."""
        host, port = address
        return _ReviewingServer(
            self,
            self.app(),
            cert_file=cert_file,
            key_file=key_file,
            client_ca_file=client_ca_file,
            host=host,
            port=port,
            registry=registry,
        )

    def app(self) -> WebhookApp:
        """A :class:`~kubemoon_core.webhooks.WebhookApp` with the validating, mutating and
        conversion webhooks registered."""
        app = WebhookApp()
        app.validating(VALIDATE_PATH, self.validate, name="validate.configmirror.kubemoon.dev")
        app.mutating(MUTATE_PATH, mutate, name="default.configmirror.kubemoon.dev")
        app.conversion(CONVERT_PATH, converter(), name="convert.configmirror.kubemoon.dev")
        return app

    async def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Refuse an invalid mirror, or one reaching what its author could not read or
        write; decided on the v1beta1 form. Finishing a deletion (a change of the
        finalizers only) is always allowed; any other change of a mirror being deleted
        is validated as usual."""
        if request.operation not in (Operation.CREATE, Operation.UPDATE) or not request.object:
            return AdmissionResponse.allow()
        if deletion_update(request):
            return AdmissionResponse.allow()
        problems = validate_mirror(request.object, request.namespace)
        if problems:
            return AdmissionResponse.deny(
                f"invalid ConfigMirror {request.name or '(unnamed)'}: {'; '.join(problems)}",
                code=422,
                reason="Invalid",
            )
        author = expected_author(request)
        if author_annotation(request.object) != author:
            return AdmissionResponse.deny(
                f"annotation {AUTHOR_ANNOTATION} records who the ConfigMirror acts for and "
                "is set by the mutating webhook"
                + (
                    " to the requesting user"
                    if author is not None and author != author_annotation(request.old_object)
                    else " (it may not be changed by hand)"
                )
            )
        new = storage_form(request.object)  # validate_mirror converted it already
        old = None
        if request.operation is Operation.UPDATE and request.old_object is not None:
            try:
                old = storage_form(request.old_object)
            except ConversionError:
                old = None  # judged as new: everything it reaches is reviewed
        checks = required_checks(old, new, request.namespace)
        denials = await self._access_denials(request.user_info, checks)
        if denials:
            return AdmissionResponse.deny("; ".join(denials))
        return AdmissionResponse.allow()

    async def _access_denials(self, user: UserInfo, checks: list[AccessCheck]) -> list[str]:
        if len(checks) <= self.max_access_reviews:
            answers = await self.reviews.ask(user, checks)
            return [_message(check, answers[check]) for check in checks if answers[check]]
        # Too many to review one by one: only a right in every namespace covers them all.
        covering = AccessCheck("create", ALL_NAMESPACES)
        asked = [c for c in checks if c.verb == "get"] + [covering]
        answers = await self.reviews.ask(user, asked)
        if answers[covering] is not None:
            return [cap_denial(checks, self.max_access_reviews)]
        return [_message(check, answers[check]) for check in asked if answers[check]]


def _message(check: AccessCheck, answer: str | KubeMoonError | None) -> str:
    if isinstance(answer, KubeMoonError):
        return f"cannot check whether the user may {check.describe()}: {answer}"
    return answer or ""


class _ReviewingServer(WebhookServer):
    """A :class:`~kubemoon_trio.WebhookServer` that closes the reviews' pool when done."""

    def __init__(self, hooks: ConfigMirrorWebhooks, app: WebhookApp, **options: Any) -> None:
        super().__init__(app, **options)
        self._hooks = hooks

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve as :meth:`WebhookServer.serve`; close the reviews' pool afterwards."""
        try:
            await super().serve(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await self._hooks.aclose()


def mutate(request: AdmissionRequest) -> AdmissionResponse:
    """Apply the defaults of :func:`~configmirror._admission.default_mirror` as a patch."""
    if request.object is None:
        return AdmissionResponse.allow()
    if request.old_object is not None and request.old_object.get("metadata", {}).get(
        "deletionTimestamp"
    ):
        # Defaults are for live mirrors: sorting the targets of one being deleted would
        # turn the operator's finalizer removal into a spec change to validate.
        return AdmissionResponse.allow()
    defaulted = default_mirror(request.object)
    author = expected_author(request)
    # Copies: default_mirror may return an object sharing request.object's metadata.
    found = defaulted.get("metadata")
    metadata = dict(found) if isinstance(found, Mapping) else {}
    found = metadata.get("annotations")
    annotations = dict(found) if isinstance(found, Mapping) else {}
    if author is not None:
        annotations[AUTHOR_ANNOTATION] = author
    else:
        annotations.pop(AUTHOR_ANNOTATION, None)
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    defaulted["metadata"] = metadata
    return AdmissionResponse.patched(request.object, defaulted)


async def _unserved(request: AdmissionRequest) -> AdmissionResponse:
    """The validating handler of declarations made without a client (for YAML only)."""
    return AdmissionResponse.deny("the ConfigMirror validating webhook runs without a client")


def webhook_declarations(webhooks: ConfigMirrorWebhooks | None = None) -> WebhookDeclarations:
    """ConfigMirror's three webhooks declared once: served by the operator and registered
    by its leader (``--webhook-self-managed``), or printed for GitOps with
    ``kubemoon webhooks generate configmirror:webhook_declarations``.

    Validation and defaults cover ConfigMirrors (in the stored v1beta1; the API server
    converts a v1alpha1 request first) on create and update: status updates are the
    operator's and need no review. Both fail closed; the access reviews have no side
    effects.
    """
    hooks = WebhookDeclarations("configmirror")
    validate = webhooks.validate if webhooks is not None else _unserved
    hooks.validating(
        VALIDATE_PATH,
        CONFIGMIRRORS_V1BETA1,
        name="validate.configmirror.kubemoon.dev",
        scope="Namespaced",
    )(validate)
    hooks.mutating(
        MUTATE_PATH,
        CONFIGMIRRORS_V1BETA1,
        name="default.configmirror.kubemoon.dev",
        scope="Namespaced",
    )(mutate)
    hooks.conversion(CONVERT_PATH, CRD_NAME, converter(), name="convert.configmirror.kubemoon.dev")
    return hooks
