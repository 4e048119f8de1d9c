"""AdmissionReview ``admission.k8s.io/v1``: strict request decoding and response building.

Rules: a review is decoded completely or not at all; any field of the wrong shape is a
``DecodeError`` naming its JSON path (``request.userInfo.groups[1]``). Responses are
values; :func:`encode_admission_review` turns one into the exact document the API server
expects, with a mutation's JSON Patch base64-encoded and ``patchType: JSONPatch``.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol

from . import _json
from ._errors import DecodeError, LocalProtocolError
from ._jsonpatch import json_patch
from ._resources import GroupVersionKind, GroupVersionResource
from ._typed import encode

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    ObjT = TypeVar("ObjT", default=Mapping[str, Any])
else:
    from typing import TypeVar

    ObjT = TypeVar("ObjT")  # its default (a mapping) matters to type checkers only

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionHandler",
    "AdmissionRequest",
    "AdmissionResponse",
    "Operation",
    "UserInfo",
    "decode_admission_review",
    "encode_admission_review",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"


class Operation(enum.Enum):
    """The operation an admission request is about."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who sent the request being admitted."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AdmissionRequest(Generic[ObjT]):
    """A decoded ``AdmissionReview.request``.

    ``object`` is the object as it would be stored (None for DELETE and CONNECT),
    ``old_object`` the stored one (UPDATE, DELETE). ``dry_run`` means nothing will be
    persisted, so a handler must not have side effects. A webhook declared for a kind
    (``hooks.validating("/validate", Widget)``) is handed an ``AdmissionRequest[Widget]``:
    both objects decoded into the class; otherwise they are mappings.
    """

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Operation
    user_info: UserInfo
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    object: ObjT | None = None
    old_object: ObjT | None = None
    dry_run: bool = False
    options: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """A handler's verdict: build one with :meth:`allow`, :meth:`deny` or :meth:`patched`."""

    allowed: bool
    code: int | None = None
    message: str = ""
    reason: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()
    # (encoded original, encoded mutated) when :meth:`patched` was given typed objects: a
    # typed webhook diffs the mutation against the object the API server sent instead.
    _typed: tuple[Any, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.patch and not self.allowed:
            raise LocalProtocolError("a denied admission response cannot carry a patch")
        if self.code is not None and not 100 <= self.code <= 599:
            raise LocalProtocolError(f"status code {self.code} is not an HTTP code")

    @classmethod
    def allow(cls, *, warnings: tuple[str, ...] = ()) -> AdmissionResponse:
        """Admit the object unchanged."""
        return cls(True, warnings=tuple(warnings))

    @classmethod
    def deny(
        cls,
        message: str,
        *,
        code: int = 403,
        reason: str = "Forbidden",
        warnings: tuple[str, ...] = (),
    ) -> AdmissionResponse:
        """Refuse the request; ``message`` is what the user sees."""
        return cls(False, code=code, message=message, reason=reason, warnings=tuple(warnings))

    @classmethod
    def patched(
        cls, original: Any, mutated: Any, *, warnings: tuple[str, ...] = ()
    ) -> AdmissionResponse:
        """Admit the object as ``mutated``: the JSON Patch from ``original`` is computed.

        Typed objects (``request.object`` of a kind and its changed copy) are encoded first.
        In a webhook declared for a kind, the patch is then computed again against the
        object the API server sent (:func:`rebase_on_raw`), which the API server applies
        it to: a field the class defaults but the request lacked is added, a field the
        class does not know is kept.
        """
        typed = _is_object(original) or _is_object(mutated)
        original, mutated = (_plain(original), _plain(mutated))
        response = cls(True, warnings=tuple(warnings), patch=tuple(json_patch(original, mutated)))
        if typed:
            object.__setattr__(response, "_typed", (original, mutated))
        return response


def _is_object(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _plain(value: Any) -> Any:
    return encode(value) if _is_object(value) else value


_MISSING: Any = object()


def rebase_on_raw(response: AdmissionResponse, raw: Mapping[str, Any] | None) -> AdmissionResponse:
    """``response`` with its patch computed against ``raw``, the object the API server sent.

    For a response of :meth:`AdmissionResponse.patched` given typed objects, whose patch
    was computed between their encodings: the API server applies it to ``raw``, where a
    field the class defaults may be absent (a CRD schema without that default) and a
    field the class does not know may be present. The target is the encoded mutation
    with every field of ``raw`` that neither encoding holds kept (at any depth; in an
    array, element by element while the request's array and the original's have the same
    length), so applying the new patch to ``raw`` gives exactly that, even when the typed
    objects encode alike (the defaults are added). Any other response is returned as it is.
    """
    typed = response._typed
    if typed is None or raw is None:
        return response
    original, mutated = typed
    target = _overlay(raw, original, mutated)
    return dataclasses.replace(response, patch=tuple(json_patch(raw, target)))


def _overlay(raw: Any, original: Any, mutated: Any) -> Any:
    """``mutated``, with what ``raw`` holds beyond ``original`` and ``mutated`` kept."""
    if isinstance(raw, Mapping) and isinstance(original, Mapping) and isinstance(mutated, Mapping):
        kept = {k: v for k, v in raw.items() if k not in original and k not in mutated}
        for key, value in mutated.items():
            kept[key] = _overlay(raw.get(key, _MISSING), original.get(key, _MISSING), value)
        return kept
    if (
        isinstance(raw, list | tuple)
        and isinstance(original, list | tuple)
        and isinstance(mutated, list | tuple)
        and len(raw) == len(original)
    ):
        common = min(len(original), len(mutated))
        head = [_overlay(raw[i], original[i], mutated[i]) for i in range(common)]
        return [*head, *mutated[common:]]
    return mutated


class AdmissionHandler(Protocol):
    """An admission webhook: a plain function from a request to a verdict."""

    def __call__(self, request: AdmissionRequest, /) -> AdmissionResponse: ...


# --- strict decoding --------------------------------------------------------------------


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):  # dict first: fast path
        raise DecodeError("expected an object", path=path)
    return value


def _string(doc: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
    value = doc.get(key)
    if value is None:
        if required:
            raise DecodeError("missing required field", path=f"{path}.{key}")
        return ""
    if not isinstance(value, str):
        raise DecodeError("expected a string", path=f"{path}.{key}")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise DecodeError("expected an array of strings", path=path)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise DecodeError("expected a string", path=f"{path}[{index}]")
    return tuple(value)


def _optional_object(doc: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    value = doc.get(key)
    return None if value is None else _mapping(value, f"{path}.{key}")


# The same few kinds and resources arrive in every review: validate each once.
_TYPES_CACHE_LIMIT = 1024
_types_cache: dict[tuple[str, str, str, str], GroupVersionKind | GroupVersionResource] = {}


def _typed(doc: Mapping[str, Any], key: str, last: str, *, required: bool) -> Any:
    path = f"request.{key}"
    raw = doc.get(key)
    if raw is None and not required:
        return None
    raw = _mapping(raw, path)
    group, version = _string(raw, "group", path), _string(raw, "version", path, required=True)
    name = _string(raw, last, path, required=True)
    cache_key = (last, group, version, name)
    found = _types_cache.get(cache_key)
    if found is None:
        try:
            if last == "kind":
                found = GroupVersionKind(group, version, name)
            else:
                found = GroupVersionResource(group, version, name)
        except LocalProtocolError as exc:  # a part failed validation
            raise DecodeError(str(exc), path=path) from None
        if len(_types_cache) >= _TYPES_CACHE_LIMIT:
            _types_cache.clear()
        _types_cache[cache_key] = found
    return found


def _gvk(doc: Mapping[str, Any], key: str, *, required: bool) -> GroupVersionKind | None:
    result: GroupVersionKind | None = _typed(doc, key, "kind", required=required)
    return result


def _gvr(doc: Mapping[str, Any], key: str, *, required: bool) -> GroupVersionResource | None:
    result: GroupVersionResource | None = _typed(doc, key, "resource", required=required)
    return result


def _user_info(doc: Mapping[str, Any]) -> UserInfo:
    path = "request.userInfo"
    raw = _mapping(doc.get("userInfo"), path)
    extra_raw = raw.get("extra")
    extra: dict[str, tuple[str, ...]] = {}
    if extra_raw is not None:
        for key, values in _mapping(extra_raw, f"{path}.extra").items():
            extra[key] = _strings(values, f"{path}.extra.{key}")
    return UserInfo(
        username=_string(raw, "username", path),
        uid=_string(raw, "uid", path),
        groups=_strings(raw.get("groups"), f"{path}.groups"),
        extra=extra,
    )


def decode_admission_review(body: bytes | Mapping[str, Any]) -> AdmissionRequest:
    """Decode an ``AdmissionReview`` (bytes or parsed JSON) into an :class:`AdmissionRequest`.

    Raises :class:`DecodeError` naming the path of the first field that is missing or of
    the wrong type, or when ``apiVersion``/``kind`` are not ``admission.k8s.io/v1``
    ``AdmissionReview``.
    """
    document = _json.loads(body) if isinstance(body, bytes) else body
    review = _mapping(document, "")
    if review.get("apiVersion") != ADMISSION_API_VERSION:
        raise DecodeError(f"expected {ADMISSION_API_VERSION!r}", path="apiVersion")
    if review.get("kind") != "AdmissionReview":
        raise DecodeError("expected 'AdmissionReview'", path="kind")
    doc = _mapping(review.get("request"), "request")
    path = "request"
    operation_name = _string(doc, "operation", path, required=True)
    try:
        operation = Operation(operation_name)
    except ValueError:
        raise DecodeError(
            f"unknown operation {operation_name!r}", path="request.operation"
        ) from None
    dry_run = doc.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise DecodeError("expected a boolean", path="request.dryRun")
    kind = _gvk(doc, "kind", required=True)
    resource = _gvr(doc, "resource", required=True)
    assert kind is not None
    assert resource is not None
    return AdmissionRequest(
        uid=_string(doc, "uid", path, required=True),
        kind=kind,
        resource=resource,
        operation=operation,
        user_info=_user_info(doc),
        sub_resource=_string(doc, "subResource", path),
        request_kind=_gvk(doc, "requestKind", required=False),
        request_resource=_gvr(doc, "requestResource", required=False),
        request_sub_resource=_string(doc, "requestSubResource", path),
        name=_string(doc, "name", path),
        namespace=_string(doc, "namespace", path),
        object=_optional_object(doc, "object", path),
        old_object=_optional_object(doc, "oldObject", path),
        dry_run=dry_run,
        options=_optional_object(doc, "options", path),
    )


def _document(uid: str, response: AdmissionResponse) -> dict[str, Any]:
    """The ``AdmissionReview`` answer for request ``uid`` as a JSON-ready dict."""
    answer: dict[str, Any] = {"uid": uid, "allowed": response.allowed}
    if response.code is not None or response.message:
        status: dict[str, Any] = {"message": response.message}
        if response.code is not None:
            status["code"] = response.code
        if response.reason:
            status["reason"] = response.reason
        answer["status"] = status
    if response.warnings:
        answer["warnings"] = list(response.warnings)
    if response.patch:
        encoded = _json.dumps([dict(op) for op in response.patch])
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(encoded).decode("ascii")
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": answer}


def encode_admission_review(uid: str, response: AdmissionResponse) -> bytes:
    """The JSON bytes of the ``AdmissionReview`` answering request ``uid``."""
    return _json.dumps(_document(uid, response))
