"""The simulator's two failures: a Kubernetes ``Status`` answer, and a refusal to guess.

Rules: :class:`StatusError` is an answer kube-apiserver would give too (its code, reason,
message and details follow kube-apiserver's wording); :class:`NotModelled` is raised for
anything the simulator does not model, so a test never gets a silently different answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kubemoon_core import KubeMoonError

__all__ = ["NotModelled", "StatusError", "qualified_resource"]


def qualified_resource(group: str, resource: str) -> str:
    """How kube-apiserver names a resource in messages: ``configmaps``,
    ``widgets.example.com``."""
    return f"{resource}.{group}" if group else resource


class StatusError(KubeMoonError):
    """A failure answered with a ``meta/v1 Status`` body, as kube-apiserver answers it."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        group: str = "",
        kind: str | None = None,
        causes: list[dict[str, Any]] | None = None,
        empty_details: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.group = group
        self.kind = kind
        self.causes = causes
        self.empty_details = empty_details

    def status(self) -> dict[str, Any]:
        """The ``Status`` document (kind, apiVersion, metadata, status, message, reason,
        details, code; empty details fields left out as kube-apiserver leaves them out)."""
        doc: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        if details or self.empty_details:
            doc["details"] = details
        doc["code"] = self.code
        return doc

    @classmethod
    def not_found(cls, group: str, resource: str, name: str) -> StatusError:
        """``configmaps "x" not found`` (404 NotFound)."""
        return cls(
            404,
            "NotFound",
            f'{qualified_resource(group, resource)} "{name}" not found',
            name=name,
            group=group,
            kind=resource,
        )

    @classmethod
    def already_exists(cls, group: str, resource: str, name: str) -> StatusError:
        """``configmaps "x" already exists`` (409 AlreadyExists)."""
        return cls(
            409,
            "AlreadyExists",
            f'{qualified_resource(group, resource)} "{name}" already exists',
            name=name,
            group=group,
            kind=resource,
        )

    @classmethod
    def conflict(cls, group: str, resource: str, name: str) -> StatusError:
        """The optimistic-concurrency failure (409 Conflict)."""
        return cls(
            409,
            "Conflict",
            f"Operation cannot be fulfilled on {qualified_resource(group, resource)} "
            f'"{name}": the object has been modified; please apply your changes to the '
            "latest version and try again",
            name=name,
            group=group,
            kind=resource,
        )

    @classmethod
    def no_route(cls) -> StatusError:
        """What kube-apiserver answers for a subresource a resource does not have."""
        return cls(
            404,
            "NotFound",
            "the server could not find the requested resource",
            empty_details=True,
        )

    @classmethod
    def no_new_finalizers(
        cls, group: str, kind: str, name: str, added: Iterable[str], *, custom: bool
    ) -> StatusError:
        """422 Invalid: an update adds finalizers to an object being deleted
        (apimachinery's ``ValidateNoNewFinalizers``). A custom resource's strategy
        validates the metadata a second time, so its cause is listed twice (the message
        names it once); a ConfigMap's (1.37, declarative validation) lists it once."""
        found = ", ".join(json.dumps(finalizer) for finalizer in sorted(added))
        detail = (
            "Forbidden: no new finalizers can be added if the object is being deleted, "
            f"found new finalizers []string{{{found}}}"
        )
        what = f"{kind}.{group}" if group else kind
        cause = {"reason": "FieldValueForbidden", "message": detail, "field": "metadata.finalizers"}
        return cls(
            422,
            "Invalid",
            f'{what} "{name}" is invalid: metadata.finalizers: {detail}',
            name=name,
            group=group,
            kind=kind,
            causes=[cause, dict(cause)] if custom else [cause],
        )

    @classmethod
    def bad_request(cls, message: str) -> StatusError:
        """400 BadRequest with no details."""
        return cls(400, "BadRequest", message)

    @classmethod
    def expired(cls, message: str) -> StatusError:
        """410 Expired (a compacted resourceVersion or continue token)."""
        return cls(410, "Expired", message)

    @classmethod
    def invalid(cls, group: str, kind: str, name: str, *, field: str, detail: str) -> StatusError:
        """422 Invalid with one field cause, worded as kube-apiserver words it."""
        what = f"{kind}.{group}" if group else kind
        message = f'{what} "{name}" is invalid: {field}: {detail}'
        return cls(
            422,
            "Invalid",
            message,
            name=name,
            group=group,
            kind=kind,
            causes=[{"reason": "FieldValueInvalid", "message": detail, "field": field}],
        )


class NotModelled(KubeMoonError):
    """The request uses something the simulator does not model (it refuses rather than
    answer differently from kube-apiserver). The HTTP front end answers it with 501 and
    records it in ``SimulatedCluster.refusals``."""

    def __init__(self, feature: str) -> None:
        super().__init__(f"kubemoon simulator: {feature} is not modelled")
        self.feature = feature
