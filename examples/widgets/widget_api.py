"""The Widget API of the widgets example, declared as types.

A Widget asks for ``replicas`` ConfigMaps holding ``data``; its controller
(``controller.py``) creates them and reports how many are ready. ``crd.yaml`` next to this
file is generated from these declarations::

    kubemoon crd generate examples/widgets/widget_api.py:Widget -o examples/widgets/crd.yaml

and ``make lint`` fails when it is stale.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated

from kubemoon_core.typed import (
    Condition,
    Description,
    Format,
    Length,
    ListType,
    Maximum,
    MetadataField,
    Minimum,
    PrinterColumn,
    Rule,
    Scale,
    custom_resource,
)

__all__ = ["Tier", "Widget", "WidgetSpec", "WidgetStatus"]


class Tier(enum.Enum):
    """How big a widget may grow: a small one has at most 10 replicas."""

    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"


@dataclass(slots=True)
class WidgetSpec:
    """The desired widget."""

    replicas: Annotated[
        int, Minimum(0), Maximum(50), Description("How many ConfigMaps to keep.")
    ] = 1
    tier: Annotated[Tier, Description("The size class of the widget.")] = Tier.SMALL
    data: Annotated[
        dict[str, str],
        Length(max=64),
        Description("The data of every child ConfigMap."),
    ] = field(default_factory=dict)


@dataclass(slots=True)
class WidgetStatus:
    """What the controller last observed."""

    replicas: Annotated[int | None, Description("How many ConfigMaps exist.")] = None
    ready_replicas: Annotated[
        int | None, Description("How many ConfigMaps hold the current data.")
    ] = None
    observed_generation: Annotated[int | None, Format("int64")] = None
    conditions: Annotated[list[Condition] | None, ListType("map", ("type",))] = None


@custom_resource(
    group="examples.kubemoon.dev",
    version="v1",
    short_names=("wdg",),
    categories=("kubemoon",),
    scale=Scale(spec_replicas_path=".spec.replicas", status_replicas_path=".status.replicas"),
    printer_columns=(
        PrinterColumn("Tier", ".spec.tier"),
        PrinterColumn("Desired", ".spec.replicas", type="integer"),
        PrinterColumn("Ready", ".status.readyReplicas", type="integer"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    ),
)
@dataclass(slots=True)
class Widget:
    """A set of identical ConfigMaps, scaled like a Deployment."""

    spec: Annotated[
        WidgetSpec,
        Rule(
            "self.tier != 'small' || self.replicas <= 10",
            message="a small widget has at most 10 replicas",
            field_path=".replicas",
        ),
    ] = field(default_factory=WidgetSpec)
    status: WidgetStatus | None = None
    metadata: MetadataField = MetadataField()
