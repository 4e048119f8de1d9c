"""The HTTP side of a webhook server, as a pure function of (method, path, headers, body).

Rules: every decision a webhook server makes about a request lives here -- routing (404),
method (405), content type (415), body size (413, decidable from ``Content-Length``
before the body is read), malformed JSON or a wrong ``apiVersion``/``kind`` (400), and
calling the handler. A handler that raises, returns something that is not a verdict, or
a verdict that cannot be encoded, is answered with HTTP 500 and a ``Status`` (not a
review): the API server counts that as a failed call and applies the webhook's
``failurePolicy`` (``Ignore`` admits, ``Fail`` rejects). A converter that raises fails its
ConversionReview. Each route has its own body limit. An adapter only moves bytes -- and,
for a handler that returns an awaitable (an ``async def`` handler that needs I/O, such as
a SubjectAccessReview), awaits it: :meth:`WebhookApp.dispatch` hands back a
:class:`PendingAdmission` and the verdict goes back through :meth:`PendingAdmission.reply`.
"""

from __future__ import annotations

import base64
import enum
import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from . import _json
from ._admission import (
    AdmissionHandler,
    AdmissionRequest,
    AdmissionResponse,
    decode_admission_review,
    encode_admission_review,
)
from ._conversion import Converter, decode_conversion_review, encode_conversion_review
from ._errors import DecodeError, LocalProtocolError
from ._request import PatchType, Request, patch_request
from ._resources import GroupVersionResource

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_CONVERSION_BODY_SIZE",
    "AsyncAdmissionHandler",
    "PendingAdmission",
    "WebhookApp",
    "WebhookKind",
    "WebhookReply",
    "ca_bundle_patch",
]

#: Largest accepted admission review body unless the app or the route says otherwise.
#: Most objects are a few KiB; a route that admits big objects (an UPDATE review carries
#: two copies of one, and the apiserver accepts objects up to ~3 MiB) raises its own limit.
DEFAULT_MAX_BODY_SIZE = 1024 * 1024

#: Largest accepted ConversionReview body unless the route says otherwise: a conversion
#: review carries every object of a list the apiserver converts at once.
DEFAULT_MAX_CONVERSION_BODY_SIZE = 7 * 1024 * 1024

_JSON = "application/json"


class WebhookKind(enum.Enum):
    """What a route serves."""

    VALIDATING = "validating"
    MUTATING = "mutating"
    CONVERSION = "conversion"


@dataclass(frozen=True, slots=True)
class WebhookReply:
    """The HTTP response to send, plus what logs and metrics need to know about it.

    ``webhook`` is the route's name (``""`` when no route matched), ``uid`` the review's
    uid when one was decoded, ``outcome`` a short word (``allowed``, ``denied``,
    ``patched``, ``converted``, ``failed``, ``error``, or the HTTP error's reason) and
    ``message`` the denial, failure or error text. ``error`` is the exception a failed
    handler raised (or the one that kept its verdict from being encoded), for the log.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    webhook: str = ""
    uid: str = ""
    outcome: str = ""
    message: str = ""
    error: BaseException | None = field(default=None, compare=False, repr=False)


class AsyncAdmissionHandler(Protocol):
    """An admission webhook that needs I/O: an ``async def`` from a request to a verdict.

    Served only by an async :class:`~kubemoon_trio.WebhookServer` (trio or asyncio), which
    awaits it; :meth:`WebhookApp.handle` answers its requests with an error instead.
    """

    def __call__(self, request: AdmissionRequest, /) -> Awaitable[AdmissionResponse]: ...


@dataclass(frozen=True, slots=True)
class _Route:
    name: str
    kind: WebhookKind
    handler: AdmissionHandler | AsyncAdmissionHandler | None
    converter: Converter | None
    max_body_size: int


@dataclass(frozen=True, slots=True)
class PendingAdmission:
    """An admission review whose handler returned an awaitable: the adapter awaits
    ``verdict``, then answers with :meth:`reply` (or :meth:`failed` if it raised)."""

    webhook: str
    kind: WebhookKind
    request: AdmissionRequest
    verdict: Awaitable[Any]

    def reply(self, verdict: object) -> WebhookReply:
        """The answer for the awaited ``verdict`` (anything but a verdict is an HTTP 500)."""
        if inspect.isawaitable(verdict):
            # Handed back unawaited (by handle() or a blocking server): close a coroutine
            # so it does not warn "never awaited", and say what to do instead.
            close = getattr(verdict, "close", None)
            if callable(close):
                close()
            error = TypeError("the handler is asynchronous: serve it with an async server")
            return _verdict_reply(self.webhook, self.kind, self.request, None, error)
        return _verdict_reply(self.webhook, self.kind, self.request, verdict)

    def failed(self, error: Exception) -> WebhookReply:
        """The answer when awaiting ``verdict`` raised ``error``: an HTTP 500."""
        return _verdict_reply(self.webhook, self.kind, self.request, None, error)


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class WebhookApp:
    """Routes webhook requests to admission handlers and converters, without I/O.

    Register routes with :meth:`validating`, :meth:`mutating` and :meth:`conversion`.
    An adapter calls :meth:`precheck` once the request head has arrived (it may answer
    before reading the body), :meth:`too_large` when a body without ``Content-Length``
    grows past :meth:`body_limit`, and :meth:`handle` with the complete body.

    ``max_body_size`` is the body limit of admission routes registered without one of
    their own; conversion routes default to :data:`DEFAULT_MAX_CONVERSION_BODY_SIZE`.
    """

    def __init__(self, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.max_body_size = _positive(max_body_size)
        self._routes: dict[str, _Route] = {}

    def _add(self, path: str, route: _Route) -> None:
        if not path.startswith("/") or "?" in path:
            raise LocalProtocolError(
                f"a webhook path must start with '/' and have no query: {path!r}"
            )
        if path in self._routes:
            raise LocalProtocolError(f"a webhook is already registered at {path!r}")
        self._routes[path] = route

    def validating(
        self,
        path: str,
        handler: AdmissionHandler | AsyncAdmissionHandler,
        *,
        name: str = "",
        max_body_size: int | None = None,
    ) -> None:
        """Serve a validating admission webhook at ``path`` (its verdict may not patch).

        ``handler`` may be an ``async def`` (:class:`AsyncAdmissionHandler`) when it needs
        I/O; an async webhook server awaits it. ``max_body_size`` is this route's body
        limit (default: the app's ``max_body_size``).
        """
        limit = self.max_body_size if max_body_size is None else _positive(max_body_size)
        self._add(path, _Route(name or path, WebhookKind.VALIDATING, handler, None, limit))

    def mutating(
        self,
        path: str,
        handler: AdmissionHandler | AsyncAdmissionHandler,
        *,
        name: str = "",
        max_body_size: int | None = None,
    ) -> None:
        """Serve a mutating admission webhook at ``path`` (``handler`` may be async;
        ``max_body_size`` as for :meth:`validating`)."""
        limit = self.max_body_size if max_body_size is None else _positive(max_body_size)
        self._add(path, _Route(name or path, WebhookKind.MUTATING, handler, None, limit))

    def conversion(
        self,
        path: str,
        converter: Converter,
        *,
        name: str = "",
        max_body_size: int = DEFAULT_MAX_CONVERSION_BODY_SIZE,
    ) -> None:
        """Serve a CRD conversion webhook at ``path`` with ``converter`` (bodies up to
        ``max_body_size`` bytes)."""
        limit = _positive(max_body_size)
        self._add(path, _Route(name or path, WebhookKind.CONVERSION, None, converter, limit))

    @property
    def routes(self) -> Mapping[str, tuple[str, WebhookKind]]:
        """Every registered path with its webhook name and kind."""
        return {path: (route.name, route.kind) for path, route in self._routes.items()}

    # -- request handling ------------------------------------------------------------------

    def _route(self, target: str) -> _Route | None:
        # The API server appends ``?timeout=10s``; only the path selects the webhook.
        return self._routes.get(urlsplit(target).path)

    def body_limit(self, target: str) -> int:
        """The largest body accepted at ``target`` (the app's default for an unknown path)."""
        route = self._route(target)
        return route.max_body_size if route else self.max_body_size

    def handled_without_blocking(self, target: str) -> bool:
        """Whether the handler at ``target`` is a coroutine function (or has an async
        ``__call__``): code its author wrote not to block, which may run on an event loop.
        A plain handler or a converter is the user's synchronous code and may block (a
        network call, a lock), so adapters run it on a worker thread. An unknown path is
        answered 404 at once: True."""
        route = self._route(target)
        if route is None:
            return True
        handler = route.handler
        if handler is None:  # a conversion: the user's converter is synchronous code
            return False
        return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - an object's async __call__
        )

    def webhook_name(self, target: str) -> str:
        """The name of the webhook serving ``target`` (a path, maybe with a query), or ``""``."""
        route = self._route(target)
        return route.name if route else ""

    def precheck(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        *,
        client_certified: bool | None = None,
    ) -> WebhookReply | None:
        """Decide from the request head alone; ``None`` means: read the body, then handle.

        Answers 404 (unknown path), 405 (not POST), 415 (not JSON) and 413 (a declared
        ``Content-Length`` above the route's :meth:`body_limit`). ``client_certified``
        says whether the peer presented a client certificate the server verified (None:
        the server asks for none); False answers 403 on admission routes. Conversion
        routes take callers without one: the API server presents its admission client
        certificate to admission webhooks only, never to a CRD's conversion webhook.
        """
        route = self._route(target)
        if route is None:
            return _error(404, "NotFound", f"no webhook at {urlsplit(target).path!r}", "")
        if client_certified is False and route.kind is not WebhookKind.CONVERSION:
            return _error(
                403,
                "Forbidden",
                "admission webhooks answer only clients with a verified certificate",
                route.name,
            )
        if method.upper() != "POST":
            reply = _error(405, "MethodNotAllowed", "webhooks accept POST only", route.name)
            return WebhookReply(
                reply.status,
                (*reply.headers, ("Allow", "POST")),
                reply.body,
                reply.webhook,
                outcome=reply.outcome,
                message=reply.message,
            )
        if _media_type(_header(headers, "content-type")) != _JSON:
            return _error(
                415, "UnsupportedMediaType", "the body must be application/json", route.name
            )
        length = _header(headers, "content-length")
        digits = (length or "").strip()
        if digits.isascii() and digits.isdigit() and int(digits[:20]) > route.max_body_size:
            return self.too_large(target)
        return None

    def too_large(self, target: str) -> WebhookReply:
        """The 413 answer for a body longer than the route's :meth:`body_limit`."""
        return _error(
            413,
            "RequestEntityTooLarge",
            f"the body exceeds {self.body_limit(target)} bytes",
            self.webhook_name(target),
        )

    def handle(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        prechecked: bool = False,
    ) -> WebhookReply:
        """Answer one complete request.

        The head checks of :meth:`precheck` come first, unless ``prechecked`` says the
        caller already ran them and got ``None``. An async handler cannot be awaited here:
        its request is answered with HTTP 500 (serve it with :meth:`dispatch`).
        """
        result = self.dispatch(method, target, headers, body, prechecked=prechecked)
        if isinstance(result, PendingAdmission):
            return result.reply(result.verdict)
        return result

    def dispatch(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        prechecked: bool = False,
    ) -> WebhookReply | PendingAdmission:
        """Like :meth:`handle`, but an async handler's awaitable comes back as a
        :class:`PendingAdmission` for the caller to await."""
        route = self._route(target)
        if not prechecked or route is None:
            early = self.precheck(method, target, headers)
            if early is not None:
                return early
        assert route is not None  # precheck answered 404 otherwise
        if len(body) > route.max_body_size:
            return self.too_large(target)
        try:
            document = _json.loads(body)
            if route.converter is not None:
                return _convert(route, route.converter, document)
            assert route.handler is not None
            return _admit(route, route.handler, document)
        except DecodeError as exc:
            return _error(400, "BadRequest", f"malformed review: {exc}", route.name)


def _positive(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise LocalProtocolError(f"max_body_size must be a positive integer, not {limit!r}")
    return limit


def _error(
    status: int,
    reason: str,
    message: str,
    webhook: str,
    *,
    uid: str = "",
    error: BaseException | None = None,
) -> WebhookReply:
    body = _json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": status,
            "reason": reason,
            "message": message,
        }
    )
    return WebhookReply(
        status,
        _json_headers(body),
        body,
        webhook,
        uid,
        outcome=reason,
        message=message,
        error=error,
    )


def _json_headers(body: bytes) -> tuple[tuple[str, str], ...]:
    return (("Content-Type", _JSON), ("Content-Length", str(len(body))))


def _admit(
    route: _Route, handler: AdmissionHandler | AsyncAdmissionHandler, document: Any
) -> WebhookReply | PendingAdmission:
    request = decode_admission_review(document)
    try:
        verdict: object = handler(request)
    except Exception as exc:  # a handler's bug is a failed call, never a crashed server
        return _verdict_reply(route.name, route.kind, request, None, exc)
    if inspect.isawaitable(verdict):
        return PendingAdmission(route.name, route.kind, request, verdict)
    return _verdict_reply(route.name, route.kind, request, verdict)


def _verdict_reply(
    name: str,
    kind: WebhookKind,
    request: AdmissionRequest,
    verdict: object,
    error: Exception | None = None,
) -> WebhookReply:
    if error is None:
        if not isinstance(verdict, AdmissionResponse):
            error = TypeError(
                f"the handler returned {type(verdict).__name__}, not AdmissionResponse"
            )
        elif verdict.patch and kind is WebhookKind.VALIDATING:
            error = TypeError("a validating webhook cannot patch the object")
    if error is None:
        assert isinstance(verdict, AdmissionResponse)
        try:
            body = encode_admission_review(request.uid, verdict)
        except Exception as exc:  # e.g. a datetime in a patch: still an answer
            error = exc
        else:
            outcome = "patched" if verdict.patch else "allowed" if verdict.allowed else "denied"
            return WebhookReply(
                200, _json_headers(body), body, name, request.uid, outcome, verdict.message
            )
    return _failed(name, request.uid, error)


def _failed(name: str, uid: str, error: BaseException) -> WebhookReply:
    """HTTP 500: the apiserver treats the call as failed and applies the failurePolicy."""
    return _error(
        500,
        "InternalError",
        f"webhook {name} failed: {type(error).__name__}: {error}",
        name,
        uid=uid,
        error=error,
    )


def _convert(route: _Route, converter: Converter, document: Any) -> WebhookReply:
    request = decode_conversion_review(document)
    response = converter.review(request)
    try:
        body = encode_conversion_review(request.uid, response)
    except Exception as exc:  # a converted object that is not JSON: still an answer
        return _failed(route.name, request.uid, exc)
    outcome = "converted" if response.succeeded else "failed"
    return WebhookReply(
        200,
        _json_headers(body),
        body,
        route.name,
        request.uid,
        outcome,
        response.failure or "",
    )


# --- CA bundle injection ---------------------------------------------------------------------

_WEBHOOK_CONFIGURATIONS = {
    "ValidatingWebhookConfiguration": GroupVersionResource(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
    ),
    "MutatingWebhookConfiguration": GroupVersionResource(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
    ),
}
_CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def ca_bundle_patch(
    obj: Mapping[str, Any], ca_bundle: bytes, *, webhooks: Sequence[str] | None = None
) -> Request:
    """A JSON-Patch request that writes ``ca_bundle`` (PEM) into a webhook configuration.

    ``obj`` is the object as read from the API server: a ``ValidatingWebhookConfiguration``
    or ``MutatingWebhookConfiguration`` (every webhook's ``clientConfig.caBundle``, or
    only those named in ``webhooks``), or a ``CustomResourceDefinition`` with a
    ``Webhook`` conversion strategy (``spec.conversion.webhook.clientConfig.caBundle``).
    The patch first tests ``metadata.resourceVersion``, so it fails with 422 rather than
    patch the wrong list entry if the object changed since it was read.
    """
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise LocalProtocolError("the object has no metadata.name")
    version = metadata.get("resourceVersion")
    if not isinstance(version, str) or not version:
        raise LocalProtocolError("the object has no metadata.resourceVersion: read it first")
    encoded = base64.b64encode(ca_bundle).decode("ascii")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    ]
    if kind in _WEBHOOK_CONFIGURATIONS:
        resource = _WEBHOOK_CONFIGURATIONS[str(kind)]
        entries = obj.get("webhooks")
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(entry, Mapping) or "clientConfig" not in entry:
                continue
            if webhooks is not None and entry.get("name") not in webhooks:
                continue
            path = f"/webhooks/{index}/clientConfig/caBundle"
            ops.append({"op": "add", "path": path, "value": encoded})
        if len(ops) == 1:
            raise LocalProtocolError("no webhook of the configuration matches")
    elif kind == "CustomResourceDefinition":
        resource = _CRDS
        spec = obj.get("spec")
        conversion = spec.get("conversion") if isinstance(spec, Mapping) else None
        webhook = conversion.get("webhook") if isinstance(conversion, Mapping) else None
        if (
            not isinstance(conversion, Mapping)
            or conversion.get("strategy") != "Webhook"
            or not isinstance(webhook, Mapping)
            or not isinstance(webhook.get("clientConfig"), Mapping)
        ):
            raise LocalProtocolError("the CRD has no Webhook conversion with a clientConfig")
        ops.append(
            {
                "op": "add",
                "path": "/spec/conversion/webhook/clientConfig/caBundle",
                "value": encoded,
            }
        )
    else:
        raise LocalProtocolError(f"cannot inject a CA bundle into a {kind!r}")
    return patch_request(resource, metadata["name"], ops, patch_type=PatchType.JSON)
