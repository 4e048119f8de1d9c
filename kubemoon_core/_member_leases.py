"""Membership Leases: what a shard member writes and what it reads back.

One ``coordination.k8s.io/v1`` Lease per member, named ``<group>-<identity>`` and labelled
with its group (:data:`GROUP_LABEL`); its annotations carry the ranges it claims
(:data:`CLAIMS_ANNOTATION`, ``start-end`` in lower-case hex, comma-separated), whether it
is leaving (:data:`LEAVING_ANNOTATION`) and the process that wrote it
(``kubemoon.dev/holder-instance``). Reading is bounded (a tenant could write a huge
annotation) and anything malformed is a :class:`DecodeError`. The machine that decides
from these records is :class:`~kubemoon_core._membership.ShardMember`. Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import DecodeError, LocalProtocolError
from ._leader import HOLDER_INSTANCE_ANNOTATION
from ._shard import ShardRange

__all__ = [
    "CLAIMS_ANNOTATION",
    "GROUP_LABEL",
    "LEAVING_ANNOTATION",
    "MemberRecord",
    "decode_claims",
    "encode_claims",
    "member_lease",
    "member_record_from_lease",
]

GROUP_LABEL = "shards.kubemoon.dev/group"
"""The label naming the group a membership Lease belongs to."""
CLAIMS_ANNOTATION = "shards.kubemoon.dev/claims"
"""The annotation listing the ranges a member claims (``start-end`` hex, comma-separated)."""
LEAVING_ANNOTATION = "shards.kubemoon.dev/leaving"
"""The annotation (``"true"``) of a member that is leaving the group."""

# A tenant could write a huge annotation: bound what is read.
MAX_CLAIMS = 256
MAX_CLAIMS_TEXT = 16 * 1024
_MAX_INSTANCE = 256  # a longer annotation value is no instance of ours: ignored


def encode_claims(ranges: Iterable[ShardRange]) -> str:
    """The claims annotation's value: ``start-end`` in hex, comma-separated."""
    return ",".join(f"{r.start:x}-{r.end:x}" for r in ranges)


def decode_claims(text: str) -> tuple[ShardRange, ...]:
    """Read a claims annotation; a malformed one is a :class:`DecodeError`."""
    if not isinstance(text, str):
        raise DecodeError("the claims annotation is not a string", path=CLAIMS_ANNOTATION)
    if len(text) > MAX_CLAIMS_TEXT:
        raise DecodeError("the claims annotation is too long", path=CLAIMS_ANNOTATION)
    if not text:
        return ()
    parts = text.split(",")
    if len(parts) > MAX_CLAIMS:
        raise DecodeError(f"more than {MAX_CLAIMS} claims", path=CLAIMS_ANNOTATION)
    claims: list[ShardRange] = []
    for index, part in enumerate(parts):
        start, sep, end = part.partition("-")
        try:
            if not sep or not all(c in "0123456789abcdef" for c in start + end):
                raise ValueError(part)
            claims.append(ShardRange(int(start, 16), int(end, 16)))
        except (ValueError, LocalProtocolError):
            raise DecodeError(
                f"claim {index} is not a range 'start-end' in lower-case hex: {part[:40]!r}",
                path=CLAIMS_ANNOTATION,
            ) from None
    return tuple(claims)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """What one membership Lease says: who, which version, what it claims, leaving or not,
    and the process that wrote it (its ``instance``; ``""`` when the Lease does not say)."""

    identity: str
    version: str
    claims: tuple[ShardRange, ...] = ()
    leaving: bool = False
    instance: str = ""


def member_lease(
    group: str,
    identity: str,
    claims: Iterable[ShardRange],
    *,
    namespace: str,
    wall_time: datetime.datetime,
    lease_duration: float = 15.0,
    leaving: bool = False,
    resource_version: str | None = None,
    instance: str | None = None,
) -> dict[str, Any]:
    """The membership Lease of ``identity`` in ``group``, named ``<group>-<identity>``.

    ``wall_time`` (timezone-aware) only becomes ``renewTime`` for humans; expiry is judged
    on observers' monotonic clocks. ``resource_version`` makes the write conditional;
    ``instance`` (this process's random id) goes into the annotation
    ``kubemoon.dev/holder-instance``.
    """
    for name, value in (("group", group), ("identity", identity), ("namespace", namespace)):
        if not isinstance(value, str) or not value:
            raise LocalProtocolError(f"{name} must be a non-empty string, got {value!r}")
    _check_instance(instance)
    if not isinstance(wall_time, datetime.datetime) or wall_time.tzinfo is None:
        raise LocalProtocolError("wall_time must be a timezone-aware datetime")
    annotations = {CLAIMS_ANNOTATION: encode_claims(claims)}
    if leaving:
        annotations[LEAVING_ANNOTATION] = "true"
    if instance is not None:
        annotations[HOLDER_INSTANCE_ANNOTATION] = instance
    metadata: dict[str, Any] = {
        "name": f"{group}-{identity}",
        "namespace": namespace,
        "labels": {GROUP_LABEL: group},
        "annotations": annotations,
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": max(1, round(lease_duration)),
            "renewTime": wall_time.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


def member_record_from_lease(lease: Mapping[str, Any]) -> MemberRecord:
    """Read a membership Lease; anything malformed is a :class:`DecodeError`.

    The identity is ``spec.holderIdentity``, the version ``metadata.resourceVersion``.
    """
    if not isinstance(lease, Mapping):
        raise DecodeError("a Lease is not a JSON object")
    metadata = lease.get("metadata")
    spec = lease.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise DecodeError("a Lease needs metadata and spec", path="metadata")
    identity = spec.get("holderIdentity")
    version = metadata.get("resourceVersion")
    if not isinstance(identity, str) or not identity:
        raise DecodeError("a membership Lease has no holder", path="spec.holderIdentity")
    if not isinstance(version, str) or not version:
        raise DecodeError("a Lease has no resourceVersion", path="metadata.resourceVersion")
    annotations = metadata.get("annotations")
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, Mapping):
        raise DecodeError("annotations is not an object", path="metadata.annotations")
    claims = decode_claims(annotations.get(CLAIMS_ANNOTATION, ""))
    leaving = annotations.get(LEAVING_ANNOTATION) == "true"
    instance = annotations.get(HOLDER_INSTANCE_ANNOTATION)
    if not isinstance(instance, str) or len(instance) > _MAX_INSTANCE:
        instance = ""
    return MemberRecord(identity, version, claims, leaving, instance)


def _check_instance(instance: object) -> None:
    if instance is not None and (
        not isinstance(instance, str) or not instance or len(instance) > _MAX_INSTANCE
    ):
        raise LocalProtocolError("instance must be a non-empty string of 256 characters at most")
