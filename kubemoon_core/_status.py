"""Kubernetes ``Status`` documents and the typed ``ApiError`` family.

Rules: any non-2xx response, and the object of a watch ``ERROR`` event, becomes an
``ApiError`` subclass chosen by HTTP code and ``reason``. A body that is not a Status still
yields an error with the code and a bounded excerpt. ``disposition`` tells a caller whether
to retry, relist or handle the error itself. A 404 that is about the request's group,
version or resource rather than an object (see :class:`ResourceNotServed`) is told apart
here, from the response and the request path, never in an adapter.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _json
from ._errors import DecodeError, KubeMoonError
from ._redact import printable, redact_url

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Disposition",
    "Expired",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "MethodNotAllowed",
    "NotFound",
    "RedirectRefused",
    "ResourceNotServed",
    "ServerTimeout",
    "ServiceUnavailable",
    "Status",
    "StatusCause",
    "TooManyRequests",
    "Unauthorized",
    "decode_status",
    "error_from_response",
    "error_from_status",
    "retry_delay",
]

# How much of a non-Status body an error keeps: enough to debug, never a whole dump.
BODY_EXCERPT_LIMIT = 512


class Disposition(enum.Enum):
    """What a caller should do about an error."""

    RETRY = "retry"  # 429, 5xx, timeouts: back off and try the same thing again
    RELIST = "relist"  # 410: the resourceVersion is gone, start from a fresh list
    CALLER = "caller"  # 4xx: a decision for the caller (not found, conflict, invalid...)


@dataclass(frozen=True, slots=True)
class StatusCause:
    """One cause of a failure, typically a field that failed validation."""

    reason: str = ""
    message: str = ""
    field: str = ""


@dataclass(frozen=True, slots=True)
class Status:
    """A decoded ``meta/v1 Status``."""

    code: int
    status: str = ""
    reason: str = ""
    message: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)
    causes: tuple[StatusCause, ...] = ()
    retry_after_seconds: int | None = None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _text(value: Any) -> str:
    # A server's message often ends in a newline; kept, it makes blank lines in logs.
    return _str(value).strip()


def decode_status(document: Any, *, default_code: int = 0) -> Status | None:
    """Decode a parsed JSON value as a Status, or return None if it is not one."""
    if not isinstance(document, Mapping) or document.get("kind") != "Status":
        return None
    code = document.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = default_code
    details = document.get("details")
    if not isinstance(details, Mapping):
        details = {}
    causes = []
    raw_causes = details.get("causes")
    if isinstance(raw_causes, list):
        for raw in raw_causes:
            if isinstance(raw, Mapping):
                causes.append(
                    StatusCause(
                        reason=_str(raw.get("reason")),
                        message=_text(raw.get("message")),
                        field=_str(raw.get("field")),
                    )
                )
    retry = details.get("retryAfterSeconds")
    retry_after = retry if isinstance(retry, int) and not isinstance(retry, bool) else None
    return Status(
        code=code,
        status=_str(document.get("status")),
        reason=_str(document.get("reason")),
        message=_text(document.get("message")),
        details=dict(details),
        causes=tuple(causes),
        retry_after_seconds=retry_after,
    )


class ApiError(KubeMoonError):
    """The API server refused a request; carries the decoded :class:`Status`.

    ``retry_after`` is the server's requested delay in seconds (``Retry-After`` header,
    else ``details.retryAfterSeconds``), or None.
    """

    disposition: Disposition = Disposition.CALLER

    def __init__(self, status: Status, *, retry_after: float | None = None, body: bytes = b""):
        self.status = status
        self.retry_after = retry_after
        self.body_excerpt = body[:BODY_EXCERPT_LIMIT]
        text = status.message.strip() or status.reason.strip() or "no message"
        super().__init__(f"{status.code} {status.reason or type(self).__name__}: {text}")

    @property
    def code(self) -> int:
        """The HTTP status code."""
        return self.status.code

    @property
    def reason(self) -> str:
        """The machine-readable ``reason`` of the Status (``NotFound``, ``Expired``...)."""
        return self.status.reason

    @property
    def causes(self) -> tuple[StatusCause, ...]:
        """Field-level causes, for ``Invalid`` errors in particular."""
        return self.status.causes


class RedirectRefused(ApiError):
    """3xx: the server answered with a redirect, which is never followed.

    A request and its credentials only ever go to the configured API server, so a redirect
    is an error. ``location`` is the raw ``Location`` header (None when absent); the
    message shows it without user information or control characters, cut short.
    """

    def __init__(
        self,
        status: Status,
        *,
        retry_after: float | None = None,
        body: bytes = b"",
        location: str | None = None,
    ):
        super().__init__(status, retry_after=retry_after, body=body)
        self.location = location
        where = (
            f"the server redirected to {printable(redact_url(location))!r}"
            if location is not None
            else "the server gave no Location"
        )
        self.args = (f"{status.code} redirect refused: {where}; redirects are not followed",)


class BadRequest(ApiError):
    """400: the request was malformed."""


class Unauthorized(ApiError):
    """401: the credentials were missing or not accepted."""


class Forbidden(ApiError):
    """403: the identity may not do this."""


class NotFound(ApiError):
    """404: the object or resource does not exist."""


class ResourceNotServed(NotFound):
    """404 because the server does not serve the request's group, version or resource.

    A missing object of a served resource is a plain :class:`NotFound`; this one means the
    request can never succeed as written (a typo in the group, a version the server dropped,
    a CRD that is not installed). It is a :class:`NotFound`, so handlers of that keep
    working; catch this class first to tell the two apart.

    Recognised from the response: a 404 whose body is not a Kubernetes ``Status`` (the API
    server answers an unknown group with the text ``404 page not found``), or the server's
    generic ``Status`` "the server could not find the requested resource" whose ``details``
    name no object (an unknown version, resource or subresource of a served group). A 404
    ``Status`` with any other message is an object's :class:`NotFound`. ``group``,
    ``version``, :attr:`resource` and ``subresource`` are read from the request
    path (empty when it names none; ``group`` is ``""`` for the core group).
    """

    def __init__(
        self,
        status: Status,
        *,
        retry_after: float | None = None,
        body: bytes = b"",
        path: str = "",
    ):
        super().__init__(status, retry_after=retry_after, body=body)
        self.path = path
        self.group, self.version, self.resource, self.subresource = _api_path_parts(path)
        what = _describe_target(self.group, self.version, self.resource, self.subresource)
        said = printable(" ".join(status.message.split()))  # one line
        self.args = (
            f"404 ResourceNotServed: the server does not serve {what}"
            + (f" (it said: {said})" if said else ""),
        )


# The subresources of a namespace: ``/api/v1/namespaces/{name}/{sub}`` is not a namespaced
# collection called ``{sub}`` (the apiserver's request-info parsing makes the same call).
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def _api_path_parts(path: str) -> tuple[str, str, str, str]:
    """(group, version, resource, subresource) named by an API path; parts it lacks are "".

    ``/api/v1/...`` is the core group, ``/apis/{group}/{version}/...`` any other; then an
    optional ``namespaces/{ns}/``, the resource, a name and a subresource.
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[1:]
    elif parts[:1] == ["apis"] and len(parts) > 1:
        group, rest = parts[1], parts[2:]
    else:
        return "", "", "", ""
    version, rest = (rest[0], rest[1:]) if rest else ("", [])
    if len(rest) > 2 and rest[0] == "namespaces" and rest[2] not in _NAMESPACE_SUBRESOURCES:
        rest = rest[2:]
    resource = rest[0] if rest else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return group, version, resource, subresource


def _describe_target(group: str, version: str, resource: str, subresource: str) -> str:
    group, version = printable(group, 100), printable(version, 100)
    if not version:
        return f"group {group!r}" if group else "the requested path"
    api = f"{group}/{version}" if group else f"{version} (core group)"
    if not resource:
        return f"the API {api}"
    named = f"{resource}/{subresource}" if subresource else resource
    return f"resource {named!r} in {api}"


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb."""


class Conflict(ApiError):
    """409: a write lost an optimistic-concurrency race or a field-manager conflict."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: create found an object of that name."""


class Gone(ApiError):
    """410: the requested resourceVersion is no longer available; relist."""

    disposition = Disposition.RELIST


class Expired(Gone):
    """410 with reason Expired: a resourceVersion or continue token has expired."""


class Invalid(ApiError):
    """422: the object failed validation; see :attr:`causes`."""


class TooManyRequests(ApiError):
    """429: throttled by API Priority and Fairness or max-inflight; honour retry_after."""

    disposition = Disposition.RETRY


class InternalError(ApiError):
    """500: the server failed."""

    disposition = Disposition.RETRY


class ServiceUnavailable(ApiError):
    """503: the server is not ready or is shutting down."""

    disposition = Disposition.RETRY


class ServerTimeout(ApiError):
    """504, or reason ServerTimeout/Timeout: the server could not finish in time."""

    disposition = Disposition.RETRY


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def _error_class(status: Status) -> type[ApiError]:
    if status.reason == "AlreadyExists" and status.code == 409:
        return AlreadyExists
    if status.reason == "Expired" and status.code == 410:
        return Expired
    if status.reason in ("ServerTimeout", "Timeout") and status.code >= 500:
        return ServerTimeout
    cls = _BY_CODE.get(status.code)
    if cls is not None:
        return cls
    return _RetryableApiError if status.code >= 500 else ApiError


class _RetryableApiError(ApiError):
    """Another 5xx: retryable, with no class of its own."""

    disposition = Disposition.RETRY


def error_from_status(status: Status, *, retry_after: float | None = None) -> ApiError:
    """Build the ApiError subclass that matches a decoded Status."""
    if retry_after is None and status.retry_after_seconds is not None:
        retry_after = float(status.retry_after_seconds)
    return _error_class(status)(status, retry_after=retry_after)


def _retry_after_header(headers: Iterable[tuple[str, str]]) -> float | None:
    for name, value in headers:
        if name.lower() == "retry-after":
            try:
                seconds = float(value.strip())
            except ValueError:
                return None  # an HTTP-date: not used by the API server; ignore it
            return seconds if seconds >= 0 else None
    return None


# What the API server says (apimachinery's generic 404) when it serves the group but not the
# version, resource or subresource of a request.
_NOT_SERVED_MESSAGE = "the server could not find the requested resource"


def _names_no_object(status: Status) -> bool:
    """A 404 Status about the request's resource, not an object: the server's generic text,
    and details that name no object."""
    details = status.details
    return (
        status.message == _NOT_SERVED_MESSAGE
        and not details.get("name")
        and not details.get("kind")
    )


def error_from_response(
    status_code: int, headers: Iterable[tuple[str, str]], body: bytes, *, path: str = ""
) -> ApiError:
    """Decode a non-2xx response into an ApiError, whatever its body holds.

    ``path`` is the request's path (for a :class:`ResourceNotServed`, which names the
    group, version and resource the server does not serve).
    """
    status: Status | None = None
    try:
        status = decode_status(_json.loads(body), default_code=status_code)
    except DecodeError:
        status = None
    not_served = False
    if status is None:
        # Servers end such texts with a newline; an error message does not keep it.
        excerpt = body[:BODY_EXCERPT_LIMIT].decode("utf-8", "replace").strip()
        status = Status(code=status_code, status="Failure", message=excerpt)
        not_served = status_code == 404
    else:
        # The HTTP code is authoritative; a Status claiming another code is a server quirk.
        status = dataclasses.replace(status, code=status_code)
        not_served = status_code == 404 and _names_no_object(status)
    headers = tuple(headers)
    retry_after = _retry_after_header(headers)
    if retry_after is None and status.retry_after_seconds is not None:
        retry_after = float(status.retry_after_seconds)
    if 300 <= status_code < 400:
        location = next((v for k, v in headers if k.lower() == "location"), None)
        return RedirectRefused(status, retry_after=retry_after, body=body, location=location)
    if not_served:
        return ResourceNotServed(status, retry_after=retry_after, body=body, path=path)
    return _error_class(status)(status, retry_after=retry_after, body=body)


# The longest Retry-After a client honours: a server asking for more is waited out once
# at this length, then asked again.
MAX_REQUEST_RETRY_AFTER = 60.0


def retry_delay(error: ApiError, attempt: int, *, max_retries: int) -> float | None:
    """How long to wait before retrying a request that failed with ``error``, or None.

    Only retryable errors (429, 5xx) that carry a ``Retry-After`` are retried, at most
    ``max_retries`` times (``attempt`` counts the retries made so far); the delay is the
    server's, capped at ``MAX_REQUEST_RETRY_AFTER`` seconds.
    """
    if error.disposition is not Disposition.RETRY or error.retry_after is None:
        return None
    if attempt >= max_retries:
        return None
    return min(error.retry_after, MAX_REQUEST_RETRY_AFTER)
