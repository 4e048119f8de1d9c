"""ConfigMirror declared for msgspec's own decoder (bench_typed.py): the same dataclasses as
configmirror/src/configmirror/_api.py, with fields named as the JSON (msgspec cannot rename a
dataclass's fields). Imported only when msgspec is installed."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

When = Annotated[datetime.datetime, msgspec.Meta(tz=True)]


@dataclass(slots=True)
class Spec:
    source: str
    targetNamespaces: list[str]


@dataclass(slots=True)
class Condition:
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: When
    observedGeneration: int | None = None


@dataclass(slots=True)
class Target:
    namespace: str
    state: Literal["Synced", "Conflict", "Pending"]
    message: str | None = None


@dataclass(slots=True)
class Status:
    observedGeneration: int | None = None
    conditions: list[Condition] | None = None
    targets: list[Target] | None = None


@dataclass(slots=True)
class Mirror:
    spec: Spec
    apiVersion: Literal["kubemoon.dev/v1alpha1"] | None = None
    kind: Literal["ConfigMirror"] | None = None
    metadata: dict[str, Any] | None = None
    status: Status | None = None
