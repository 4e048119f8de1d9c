"""What the simulator knows of a resource: names, scope, and the rules of its strategy.

Rules: only built-in resources whose registry strategy is modelled are offered (see
:data:`BUILTIN_RESOURCES`); any other built-in resource is refused with
:class:`NotModelled`. Custom resources come from classes declared with
``kubemoon_core.typed.custom_resource`` (or an explicit :class:`SimResource`) and follow
kube-apiserver's custom resource strategy.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from kubemoon_core import GroupVersionResource, Scope
from kubemoon_core._declare import class_info
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.typed import openapi_schema, resource_info

from ._errors import NotModelled

__all__ = ["BUILTIN_RESOURCES", "Generation", "SimResource", "custom", "resource_of_class"]


class Generation(enum.Enum):
    """When ``metadata.generation`` is set and bumped."""

    NONE = "none"
    """Never set (ConfigMap, Secret, Namespace, Lease...)."""
    SPEC = "spec"
    """1 on create; +1 when anything but ``metadata`` and ``status`` changes."""
    NON_METADATA = "non-metadata"
    """1 on create; +1 when anything but ``metadata`` changes (a custom resource without a
    status subresource)."""


@dataclass(frozen=True, slots=True)
class SimResource:
    """A resource the simulator serves."""

    group: str
    version: str
    resource: str
    kind: str
    scope: Scope
    generation: Generation
    status_subresource: bool
    custom: bool
    """Custom resources: list items keep ``apiVersion`` and ``kind``, unstructured lists
    carry ``continue``, updates need a ``resourceVersion``."""
    cls: type | None = None
    """The declared class of a custom resource: every object written must round-trip
    through it unchanged (the simulator does not model a schema's defaulting and pruning,
    so it refuses an object they would change)."""

    gvr: GroupVersionResource = field(init=False, repr=False, compare=False)
    """Group, version, plural (built once: the model asks for it on every write)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "gvr", GroupVersionResource(self.group, self.version, self.resource)
        )

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def namespaced(self) -> bool:
        """True when objects live in namespaces."""
        return self.scope is Scope.NAMESPACED

    @property
    def allow_unconditional_update(self) -> bool:
        """Whether a PUT without ``metadata.resourceVersion`` is accepted."""
        return not self.custom


def _builtin(
    group: str,
    version: str,
    resource: str,
    kind: str,
    *,
    scope: Scope = Scope.NAMESPACED,
    generation: Generation = Generation.NONE,
    status: bool = False,
) -> SimResource:
    return SimResource(group, version, resource, kind, scope, generation, status, custom=False)


BUILTIN_RESOURCES: tuple[SimResource, ...] = (
    _builtin("", "v1", "configmaps", "ConfigMap"),
    _builtin("", "v1", "secrets", "Secret"),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount"),
    _builtin("", "v1", "namespaces", "Namespace", scope=Scope.CLUSTER, status=True),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease"),
    # What an operator's EventRecorder writes; only the Events kube-apiserver's validation
    # accepts are modelled (see SimApiServer's content checks).
    _builtin("events.k8s.io", "v1", "events", "Event"),
)
"""The built-in resources whose strategy the simulator models."""


def resource_of_class(cls: type) -> SimResource:
    """The :class:`SimResource` of a class declared with ``custom_resource``; the status
    subresource is on as ``crd_manifest`` would declare it."""
    info = resource_info(cls)
    if info.builtin:
        for resource in BUILTIN_RESOURCES:
            if resource.gvr == info.gvr:
                return resource
        raise NotModelled(f"the built-in resource {info.gvr}")
    has_status = any(f.json_name == "status" for f in class_info(cls).fields)
    status = bool(info.status_subresource or (info.status_subresource is None and has_status))
    if "x-kubernetes-validations" in json.dumps(openapi_schema(cls)):
        raise NotModelled(
            f"the validation rules (CEL) of {info.gvr}: describe it with custom(...) to "
            "simulate it without them"
        )
    return SimResource(
        info.group,
        info.version,
        info.plural,
        info.kind,
        info.scope,
        Generation.SPEC if status else Generation.NON_METADATA,
        status,
        custom=True,
        cls=cls,
    )


def custom(
    group: str,
    version: str,
    resource: str,
    kind: str,
    *,
    scope: Scope = Scope.NAMESPACED,
    status_subresource: bool = True,
) -> SimResource:
    """A custom resource described by hand (as a CRD would declare it)."""
    if "." not in group:
        raise LocalProtocolError(f"a custom resource group needs a dot, got {group!r}")
    generation = Generation.SPEC if status_subresource else Generation.NON_METADATA
    resource_ = SimResource(
        group, version, resource, kind, scope, generation, status_subresource, custom=True
    )
    resource_.gvr  # noqa: B018 - validates the names
    return resource_
