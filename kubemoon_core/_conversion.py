"""ConversionReview ``apiextensions.k8s.io/v1``: CRD version conversion as pure functions.

Rules: a :class:`Converter` holds conversion functions keyed by (from apiVersion, to
apiVersion), optionally through a hub version. A review converts every object or none:
the first failure turns the whole answer into ``result.status: Failure`` with a message,
and no converted object is returned. Functions receive a deep copy, so they may mutate it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import _json
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._jsonpatch import _copy, _same

__all__ = [
    "CONVERSION_API_VERSION",
    "ConversionError",
    "ConversionFunction",
    "ConversionRequest",
    "ConversionResponse",
    "Converter",
    "decode_conversion_review",
    "encode_conversion_review",
]

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"


class ConversionFunction(Protocol):
    """Converts one object (a private deep copy it may change) and returns the result."""

    def __call__(self, obj: dict[str, Any], /) -> Mapping[str, Any]: ...


# Metadata a conversion may change; the API server rejects any other metadata change.
_MUTABLE_METADATA = ("labels", "annotations")


class ConversionError(KubeMoonError):
    """An object cannot be converted (no registered path, or a function refused it)."""


@dataclass(frozen=True, slots=True)
class ConversionRequest:
    """A decoded ``ConversionReview.request``."""

    uid: str
    desired_api_version: str
    objects: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ConversionResponse:
    """The outcome of a review: every object converted, or a failure message."""

    converted_objects: tuple[Mapping[str, Any], ...] = ()
    failure: str | None = None

    @property
    def succeeded(self) -> bool:
        """True when every object was converted."""
        return self.failure is None


class Converter:
    """Conversion functions between the apiVersions of one kind.

    ``register(src, dst, fn)`` adds a direct path. With ``hub`` set, any pair without a
    direct path goes ``src -> hub -> dst`` (each half direct, or the identity when it
    starts at the hub). A function returns the converted object; ``apiVersion`` is set to
    the target for it, and changing any metadata but labels and annotations is an error.
    """

    def __init__(self, *, hub: str | None = None) -> None:
        self.hub = hub
        self._functions: dict[tuple[str, str], ConversionFunction] = {}

    def register(self, from_api_version: str, to_api_version: str, fn: ConversionFunction) -> None:
        """Add the conversion ``from_api_version -> to_api_version``."""
        key = (from_api_version, to_api_version)
        if from_api_version == to_api_version:
            raise LocalProtocolError("a conversion must change the apiVersion")
        if key in self._functions:
            raise LocalProtocolError(f"a conversion {from_api_version} -> {to_api_version} exists")
        self._functions[key] = fn

    def _steps(self, source: str, target: str) -> list[tuple[str, ConversionFunction]]:
        if source == target:
            return []
        direct = self._functions.get((source, target))
        if direct is not None:
            return [(target, direct)]
        hub = self.hub
        if hub is not None and hub not in (source, target):
            first = self._functions.get((source, hub))
            second = self._functions.get((hub, target))
            if first is not None and second is not None:
                return [(hub, first), (target, second)]
        raise ConversionError(f"no conversion from {source} to {target}")

    def convert(self, obj: Mapping[str, Any], to_api_version: str) -> dict[str, Any]:
        """Convert one object; raise :class:`ConversionError` when it cannot be."""
        source = obj.get("apiVersion")
        if not isinstance(source, str):
            raise ConversionError("the object has no apiVersion")
        current: dict[str, Any] = _copy(obj)
        for version, fn in self._steps(source, to_api_version):
            before = current.get("metadata")
            result = fn(_copy(current))
            if not isinstance(result, Mapping):
                raise ConversionError(f"the conversion to {version} did not return an object")
            converted = _copy(result)
            converted["apiVersion"] = version
            converted.setdefault("kind", current.get("kind"))
            _check_metadata(before, converted.get("metadata"), version)
            current = converted
        return current

    def review(self, request: ConversionRequest) -> ConversionResponse:
        """Convert every object of a review, in order, or fail the whole review."""
        converted = []
        for index, obj in enumerate(request.objects):
            try:
                converted.append(self.convert(obj, request.desired_api_version))
            except ConversionError as exc:
                return ConversionResponse(failure=f"object {index} ({_describe(obj)}): {exc}")
            except Exception as exc:  # a user function's bug fails the review, not the server
                return ConversionResponse(
                    failure=f"object {index} ({_describe(obj)}): conversion raised "
                    f"{type(exc).__name__}: {exc}"
                )
        return ConversionResponse(converted_objects=tuple(converted))


def _check_metadata(before: Any, after: Any, version: str) -> None:
    def fixed(meta: Any) -> Any:
        if not isinstance(meta, Mapping):
            return meta
        return {k: v for k, v in meta.items() if k not in _MUTABLE_METADATA}

    if not _same(fixed(before), fixed(after)):
        raise ConversionError(
            f"the conversion to {version} changed metadata other than labels and annotations"
        )


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{obj.get('kind')} {name}" if isinstance(name, str) else str(obj.get("kind"))


def decode_conversion_review(body: bytes | Mapping[str, Any]) -> ConversionRequest:
    """Decode a ``ConversionReview`` (bytes or parsed JSON); errors name the JSON path."""
    document = _json.loads(body) if isinstance(body, bytes) else body
    if not isinstance(document, Mapping):
        raise DecodeError("expected an object", path="")
    if document.get("apiVersion") != CONVERSION_API_VERSION:
        raise DecodeError(f"expected {CONVERSION_API_VERSION!r}", path="apiVersion")
    if document.get("kind") != "ConversionReview":
        raise DecodeError("expected 'ConversionReview'", path="kind")
    request = document.get("request")
    if not isinstance(request, Mapping):
        raise DecodeError("expected an object", path="request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise DecodeError("expected a non-empty string", path="request.uid")
    desired = request.get("desiredAPIVersion")
    if not isinstance(desired, str) or not desired:
        raise DecodeError("expected a non-empty string", path="request.desiredAPIVersion")
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise DecodeError("expected an array", path="request.objects")
    for index, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            raise DecodeError("expected an object", path=f"request.objects[{index}]")
        if not isinstance(obj.get("apiVersion"), str):
            raise DecodeError("expected a string", path=f"request.objects[{index}].apiVersion")
    return ConversionRequest(uid=uid, desired_api_version=desired, objects=tuple(objects))


def encode_conversion_review(uid: str, response: ConversionResponse) -> bytes:
    """The JSON bytes of the ``ConversionReview`` answering request ``uid``."""
    answer: dict[str, Any] = {"uid": uid}
    if response.failure is None:
        answer["convertedObjects"] = [dict(obj) for obj in response.converted_objects]
        answer["result"] = {"status": "Success"}
    else:
        answer["convertedObjects"] = []
        answer["result"] = {"status": "Failure", "message": response.failure}
    return _json.dumps(
        {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": answer}
    )
