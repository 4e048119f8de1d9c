"""The ConfigMirror API, declared as types: ``deploy/base/crd.yaml`` is generated from it.

Two versions: ``v1alpha1`` (:class:`ConfigMirror`, still served) and ``v1beta1``
(:class:`ConfigMirrorV1beta1`, the storage version), converted by the operator's
conversion webhook (``configmirror._convert``). ``make lint`` regenerates the manifest with
the command in ``deploy/base/crd.yaml``'s first line and fails when the checked-in file is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from kubemoon_core.typed import (
    Condition,
    Description,
    Format,
    Length,
    ListType,
    MetadataField,
    Pattern,
    PrinterColumn,
    custom_resource,
)

__all__ = [
    "ConfigMirror",
    "ConfigMirrorSpec",
    "ConfigMirrorSpecV1beta1",
    "ConfigMirrorStatus",
    "ConfigMirrorV1beta1",
    "LabelSelector",
    "MirrorTargets",
    "TargetStatus",
]

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

Namespace = Annotated[str, Length(1, 63), Pattern(_DNS_LABEL)]


@dataclass(slots=True)
class ConfigMirrorSpec:
    """What to mirror and where."""

    source: Annotated[
        str,
        Description("The name of a ConfigMap in the ConfigMirror's own namespace."),
        Length(1, 253),
        Pattern(_DNS_SUBDOMAIN),
    ]
    target_namespaces: Annotated[
        list[Namespace],
        Description("The namespaces that receive a copy of the source."),
        Length(max=256),
        ListType("set"),
    ]


@dataclass(slots=True)
class TargetStatus:
    """The state of the copy in one target namespace."""

    namespace: str
    state: Literal["Synced", "Conflict", "Pending", "NotAllowed"]
    message: str | None = None
    uid: Annotated[
        str | None,
        Description(
            "The UID of the copy the operator keeps there. Outside the namespaces that the "
            "mirror targets and that accept copies, only a copy recorded here is deleted."
        ),
    ] = None


@dataclass(slots=True)
class ConfigMirrorStatus:
    """What the operator last observed and did."""

    observed_generation: Annotated[int | None, Format("int64")] = None
    conditions: Annotated[list[Condition] | None, ListType("map", ("type",))] = None
    targets: Annotated[list[TargetStatus] | None, ListType("map", ("namespace",))] = None


_COLUMNS = (
    PrinterColumn("Source", ".spec.source"),
    PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    PrinterColumn("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
)


@custom_resource(
    group="kubemoon.dev",
    version="v1alpha1",
    kind="ConfigMirror",
    short_names=("cmir",),
    printer_columns=_COLUMNS,
)
@dataclass(slots=True)
class ConfigMirror:
    """Mirrors one ConfigMap into several namespaces."""

    spec: ConfigMirrorSpec
    status: ConfigMirrorStatus | None = None
    metadata: MetadataField = MetadataField()


@dataclass(slots=True)
class LabelSelector:
    """Selects namespaces by their labels (every label listed must match)."""

    match_labels: dict[str, str] | None = None


@dataclass(slots=True)
class MirrorTargets:
    """Where copies go: the namespaces named, and those the selector matches."""

    namespaces: Annotated[
        list[Namespace],
        Description("Namespaces that receive a copy of the source."),
        Length(max=256),
        ListType("set"),
    ]
    namespace_selector: Annotated[
        LabelSelector | None,
        Description("Namespaces with these labels receive a copy too."),
    ] = None


@dataclass(slots=True)
class ConfigMirrorSpecV1beta1:
    """What to mirror and where."""

    source: Annotated[
        str,
        Description("The name of a ConfigMap in the ConfigMirror's own namespace."),
        Length(1, 253),
        Pattern(_DNS_SUBDOMAIN),
    ]
    targets: MirrorTargets


@custom_resource(
    group="kubemoon.dev",
    version="v1beta1",
    kind="ConfigMirror",
    short_names=("cmir",),
    printer_columns=_COLUMNS,
    storage=True,
)
@dataclass(slots=True)
class ConfigMirrorV1beta1:
    """Mirrors one ConfigMap into several namespaces."""

    spec: ConfigMirrorSpecV1beta1
    status: ConfigMirrorStatus | None = None
    metadata: MetadataField = MetadataField()
