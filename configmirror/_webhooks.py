"""The ConfigMirror webhooks: validation with access reviews, defaults, and conversion.

Rules: what is decided is decided by the pure functions of ``_admission`` and
``_convert``; this module only performs the SubjectAccessReviews (one POST per target
namespace, concurrently) and registers the handlers on a :class:`~kubemoon_core.WebhookApp`.
A review the API server cannot answer denies the mirror (the webhook fails closed, as
its failurePolicy does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from prometheus_client import CollectorRegistry

from kubemoon_core import (
    AdmissionRequest,
    AdmissionResponse,
    KubeMoonError,
    Operation,
    WebhookApp,
    WebhookDeclarations,
)
from kubemoon_trio import Client, WebhookServer

from ._admission import (
    SUBJECT_ACCESS_REVIEWS,
    access_denial,
    access_review,
    default_mirror,
    review_targets,
    validate_mirror,
)
from ._convert import converter
from ._plan import CONFIGMIRRORS_V1BETA1

__all__ = [
    "CONVERT_PATH",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "ConfigMirrorWebhooks",
    "webhook_declarations",
]

CRD_NAME = "configmirrors.kubemoon.dev"
VALIDATE_PATH = "/validate-configmirror"
MUTATE_PATH = "/mutate-configmirror"
CONVERT_PATH = "/convert-configmirror"


class ConfigMirrorWebhooks:
    """The handlers of ConfigMirror's webhooks; :meth:`app` serves them at the paths above.

    ``client`` performs the SubjectAccessReviews (its identity needs ``create`` on
    ``subjectaccessreviews.authorization.k8s.io``).
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    def server(
        self,
        address: tuple[str, int],
        cert_file: str,
        key_file: str,
        registry: CollectorRegistry | None = None,
    ) -> WebhookServer:
        """A server of :meth:`app` on ``address`` with the (reloaded) certificate files."""
        host, port = address
        return WebhookServer(
            self.app(),
            cert_file=cert_file,
            key_file=key_file,
            host=host,
            port=port,
            registry=registry,
        )

    def app(self) -> WebhookApp:
        """A :class:`~kubemoon_core.WebhookApp` with the validating, mutating and
        conversion webhooks registered."""
        app = WebhookApp()
        app.validating(VALIDATE_PATH, self.validate, name="validate.configmirror.kubemoon.dev")
        app.mutating(MUTATE_PATH, mutate, name="default.configmirror.kubemoon.dev")
        app.conversion(CONVERT_PATH, converter(), name="convert.configmirror.kubemoon.dev")
        return app

    async def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Refuse an invalid mirror, or one naming a namespace its author cannot write to."""
        if request.operation not in (Operation.CREATE, Operation.UPDATE) or not request.object:
            return AdmissionResponse.allow()
        problems = validate_mirror(request.object, request.namespace)
        if problems:
            return AdmissionResponse.deny(
                f"invalid ConfigMirror {request.name or '(unnamed)'}: {'; '.join(problems)}",
                code=422,
                reason="Invalid",
            )
        denials = await self._access_denials(request)
        if denials:
            return AdmissionResponse.deny("; ".join(denials))
        return AdmissionResponse.allow()

    async def _access_denials(self, request: AdmissionRequest) -> list[str]:
        targets = review_targets(request)
        answers: dict[str, Mapping[str, Any] | KubeMoonError] = {}

        async def ask(namespace: str) -> None:
            try:
                body = access_review(request.user_info, namespace)
                answers[namespace] = await self.client.create(SUBJECT_ACCESS_REVIEWS, body)
            except KubeMoonError as exc:
                answers[namespace] = exc

        async with trio.open_nursery() as nursery:
            for namespace in targets:
                nursery.start_soon(ask, namespace)
        denials = []
        for namespace in targets:  # in the mirror's order, for a stable message
            answer = answers[namespace]
            if isinstance(answer, KubeMoonError):
                denials.append(f"cannot check access to namespace {namespace!r}: {answer}")
            elif (denied := access_denial(answer, request.user_info, namespace)) is not None:
                denials.append(denied)
        return denials


def mutate(request: AdmissionRequest) -> AdmissionResponse:
    """Apply the defaults of :func:`~configmirror._admission.default_mirror` as a patch."""
    if request.object is None:
        return AdmissionResponse.allow()
    return AdmissionResponse.patched(request.object, default_mirror(request.object))


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
