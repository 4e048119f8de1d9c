"""What the simulated API server accepts in a request body, before any write.

Rules: the parts of kube-apiserver's validation that are modelled answer as it does (a
422 Invalid name, a 403 in a terminating namespace, a 400 namespace mismatch); a body
that kube-apiserver would refuse, default or prune in a way that is not modelled raises
:class:`NotModelled`. Nothing here writes: :class:`SimApiServer` calls these checks
before it stores anything.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any, cast

from kubemoon_core import GroupVersionResource, KubeMoonError
from kubemoon_core.typed import decode, encode

from ._errors import NotModelled, StatusError, qualified_resource
from ._json import Key, _clone, _metadata, _without
from ._kinds import SimResource
from ._raw import RawJSON

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


class _Validation:
    """The checks of a request body (a part of :class:`SimApiServer`)."""

    if TYPE_CHECKING:
        _objects: dict[GroupVersionResource, dict[Key, dict[str, Any]]]

    def _check_namespace(self, resource: SimResource, namespace: str | None, name: str) -> None:
        if not resource.namespaced:
            return
        if not namespace:
            raise NotModelled("a namespaced write without a namespace in the path")
        ns = self._objects[_NAMESPACES].get(("", namespace))
        if ns is None:
            raise StatusError.not_found("", "namespaces", namespace)
        if "deletionTimestamp" in _metadata(ns):
            raise StatusError(
                403,
                "Forbidden",
                f'{qualified_resource(resource.group, resource.resource)} "{name}" is '
                f"forbidden: unable to create new content in namespace {namespace} because "
                "it is being terminated",
                name=name,
                group=resource.group,
                kind=resource.resource,
            )

    def _check_body(
        self, resource: SimResource, body: Any, namespace: str | None
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise NotModelled("a request body that is not a JSON object")
        if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
            raise NotModelled(
                f"a body whose apiVersion/kind is not {resource.api_version}/{resource.kind} "
                f"(got {body.get('apiVersion')!r}/{body.get('kind')!r})"
            )
        body = _clone(body)
        metadata = body.get("metadata", {})
        if not isinstance(metadata, dict):
            raise NotModelled("metadata that is not an object")
        body["metadata"] = metadata
        if resource.namespaced:
            given = metadata.get("namespace")
            if given not in (None, "") and given != namespace:
                raise StatusError.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        metadata.pop("managedFields", None)
        metadata.pop("selfLink", None)
        self._check_content(resource, body)
        return cast(dict[str, Any], body)

    def _check_content(self, resource: SimResource, body: dict[str, Any]) -> None:
        """The parts of kube-apiserver's validation that are modelled; the rest refused."""
        metadata = body["metadata"]
        if resource.cls is not None:
            if any(isinstance(value, RawJSON) for value in body.values()):
                raise NotModelled(f"an object of {resource.gvr} too deep to decode")
            try:
                encoded = encode(decode(resource.cls, body))
            except KubeMoonError as exc:
                raise NotModelled(
                    f"an object the schema of {resource.gvr} refuses ({exc})"
                ) from None
            if _without(encoded, "metadata") != _without(body, "metadata"):
                raise NotModelled(
                    f"an object the schema of {resource.gvr} would default or prune "
                    "(send it complete, as the declared class encodes it)"
                )
        for field in ("labels", "annotations"):
            values = metadata.get(field)
            if values is not None and (
                not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
            ):
                raise NotModelled(f"metadata.{field} that is not a map of strings")
        finalizers = metadata.get("finalizers")
        if finalizers is not None and (
            not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
        ):
            raise NotModelled("metadata.finalizers that is not a list of strings")
        if resource.gvr == _CONFIGMAPS:
            for field in ("data", "binaryData"):
                values = body.get(field)
                if values is not None and (
                    not isinstance(values, dict)
                    or not all(
                        isinstance(v, str) and _CONFIGMAP_KEY.fullmatch(k)
                        for k, v in values.items()
                    )
                ):
                    raise NotModelled(f"ConfigMap {field} that kube-apiserver would refuse")
        if resource.gvr == _SECRETS:
            body.setdefault("type", "Opaque")
            values = body.get("data")
            if values is not None:
                if not isinstance(values, dict):
                    raise NotModelled("Secret data that is not a map")
                for value in values.values():
                    try:
                        base64.b64decode(value, validate=True)
                    except (binascii.Error, TypeError, ValueError):
                        raise NotModelled("Secret data that is not base64") from None
            if "stringData" in body:
                raise NotModelled("Secret stringData")
        if resource.gvr == _EVENTS:
            _check_event(body)

    def _validate_name(self, resource: SimResource, name: str) -> None:
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            raise StatusError.invalid(
                resource.group,
                resource.kind,
                name,
                field="metadata.name",
                detail=f'Invalid value: "{name}": {_SUBDOMAIN_MESSAGE}',
            )
        if resource.gvr.resource == "namespaces" and ("." in name or len(name) > 63):
            raise NotModelled("a namespace name that is not a DNS label")


_EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")
_NAMESPACES = GroupVersionResource("", "v1", "namespaces")
_CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
_SECRETS = GroupVersionResource("", "v1", "secrets")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_EVENT_SHORT_FIELDS = ("reportingController", "reportingInstance", "action", "reason")


def _check_event(body: dict[str, Any]) -> None:
    """An ``events.k8s.io/v1`` Event as kube-apiserver's validation accepts it (the fields
    an event recorder sets); any other is refused with NotModelled, since the simulator does
    not reproduce the 422 that kube-apiserver would answer."""

    def refuse(why: str) -> NotModelled:
        return NotModelled(f"an Event kube-apiserver's validation would refuse ({why})")

    if not isinstance(body.get("eventTime"), str) or not body["eventTime"]:
        raise refuse("eventTime is required")
    for field in _EVENT_SHORT_FIELDS:
        value = body.get(field)
        if not isinstance(value, str) or not value or len(value) > 128:
            raise refuse(f"{field} must be 1 to 128 characters")
    if body.get("type") not in ("Normal", "Warning"):
        raise refuse("type must be Normal or Warning")
    note = body.get("note", "")
    if not isinstance(note, str) or len(note.encode()) > 1024:
        raise refuse("note must be at most 1 kB")
    for field in ("regarding", "related"):
        if field in body and not isinstance(body[field], dict):
            raise refuse(f"{field} must be an object reference")
    series = body.get("series")
    if series is not None and (
        not isinstance(series, dict)
        or not isinstance(series.get("count"), int)
        or series["count"] < 2
        or not series.get("lastObservedTime")
    ):
        raise refuse("series needs a count of at least 2 and a lastObservedTime")
