"""Resources, kinds, object keys and the URL paths built from them.

Rules: every name, namespace, group, version, resource and subresource is validated before
it enters a path, so no value can add a path segment, a query or a fragment. Paths follow
the API server's layout: ``/api/v1`` for the core group, ``/apis/{group}/{version}`` for the
others, ``/namespaces/{ns}/`` before namespaced resources.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import DecodeError, LocalProtocolError

__all__ = [
    "APIResource",
    "GroupVersion",
    "GroupVersionKind",
    "GroupVersionResource",
    "NamespaceRequired",
    "ObjectKey",
    "OwnerReference",
    "ResourcePath",
    "Scope",
    "validate_name",
    "validate_namespace",
]

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
# RFC 3986 pchar without percent-encoding: unreserved, sub-delims, ':' and '@'. Anything else
# ('/', '?', '#', '%', spaces, controls, non-ASCII) could change the meaning of the URL.
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@]+\Z")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63

# Subresources of a namespace object itself: /api/v1/namespaces/{name}/{these}.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def _check(kind: str, value: object, pattern: re.Pattern[str], limit: int) -> str:
    if not isinstance(value, str):
        raise LocalProtocolError(f"{kind} must be a string, got {type(value).__name__}")
    if not value or len(value) > limit or pattern.match(value) is None:
        raise LocalProtocolError(f"invalid {kind}: {value!r}")
    return value


def validate_name(name: object) -> str:
    """Return ``name`` if it is safe as one path segment, else raise LocalProtocolError."""
    checked = _check("name", name, _PATH_SEGMENT, MAX_NAME_LENGTH)
    if checked in (".", ".."):
        raise LocalProtocolError(f"invalid name: {checked!r}")
    return checked


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` if it is a DNS-1123 label, else raise LocalProtocolError."""
    return _check("namespace", namespace, _LABEL, MAX_LABEL_LENGTH)


def _validate_group(group: object) -> str:
    if group == "":
        return ""
    return _check("group", group, _SUBDOMAIN, MAX_NAME_LENGTH)


class Scope(enum.Enum):
    """Whether a resource lives in a namespace or in the whole cluster."""

    NAMESPACED = "Namespaced"
    CLUSTER = "Cluster"


@dataclass(frozen=True, slots=True)
class GroupVersion:
    """An API group and version; the core group is ``""``."""

    group: str
    version: str

    def __post_init__(self) -> None:
        _validate_group(self.group)
        _check("version", self.version, _LABEL, MAX_LABEL_LENGTH)

    @classmethod
    def parse(cls, api_version: str) -> GroupVersion:
        """Parse an ``apiVersion`` string: ``v1`` or ``apps/v1``."""
        if not isinstance(api_version, str):
            raise LocalProtocolError(f"apiVersion must be a string, got {api_version!r}")
        group, sep, version = api_version.rpartition("/")
        if sep and not group:
            raise LocalProtocolError(f"invalid apiVersion: {api_version!r}")
        return cls(group, version)

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` string (``v1``, ``apps/v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_path(self) -> str:
        """``/api/v1`` for the core group, ``/apis/{group}/{version}`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


@dataclass(frozen=True, slots=True)
class GroupVersionResource:
    """A resource by group, version and plural name (``apps``, ``v1``, ``deployments``)."""

    group: str
    version: str
    resource: str

    def __post_init__(self) -> None:
        _validate_group(self.group)
        _check("version", self.version, _LABEL, MAX_LABEL_LENGTH)
        _check("resource", self.resource, _LABEL, MAX_LABEL_LENGTH)

    @property
    def group_version(self) -> GroupVersion:
        """The group and version alone."""
        return GroupVersion(self.group, self.version)

    def __str__(self) -> str:
        return (
            f"{self.resource}.{self.version}.{self.group}"
            if self.group
            else (f"{self.resource}.{self.version}")
        )


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    """A kind addressed by group and version (``apps``, ``v1``, ``Deployment``)."""

    group: str
    version: str
    kind: str

    def __post_init__(self) -> None:
        _validate_group(self.group)
        _check("version", self.version, _LABEL, MAX_LABEL_LENGTH)
        _check("kind", self.kind, _KIND, MAX_LABEL_LENGTH)

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` string objects of this kind carry."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> GroupVersionKind:
        """Read the kind of an object from its ``apiVersion`` and ``kind``."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise LocalProtocolError("object has no string apiVersion and kind")
        gv = GroupVersion.parse(api_version)
        return cls(gv.group, gv.version, kind)


@dataclass(frozen=True, slots=True)
class APIResource:
    """A resource as discovery describes it: its GVR, kind, scope, verbs and aliases."""

    gvr: GroupVersionResource
    kind: str
    scope: Scope
    verbs: tuple[str, ...] = ()
    singular_name: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def namespaced(self) -> bool:
        """True for namespaced resources."""
        return self.scope is Scope.NAMESPACED

    @property
    def gvk(self) -> GroupVersionKind:
        """The kind of the resource's objects."""
        return GroupVersionKind(self.gvr.group, self.gvr.version, self.kind)


class NamespaceRequired(LocalProtocolError):
    """A namespaced kind was to be written or read without a namespace: refused before
    anything is sent (the server would answer 404 or 405).

    ``kind`` and ``resource`` name what was asked for, ``name`` the object (None for a
    collection); the message says where a namespace comes from.
    """

    def __init__(
        self,
        resource: GroupVersionResource,
        kind: str,
        name: str | None = None,
        *,
        hint: str = "give namespace= or metadata.namespace",
    ) -> None:
        what = f"{kind} {name!r}" if name else kind
        super().__init__(f"{what} ({resource}) is namespaced but has no namespace: {hint}")
        self.resource = resource
        self.kind = kind
        self.name = name


@dataclass(frozen=True, slots=True)
class ResourcePath:
    """The URL path of a collection, an object or an object's subresource.

    ``namespace`` is None for cluster-scoped resources and for listing a namespaced
    resource across all namespaces. ``name`` is None for collections.
    """

    gvr: GroupVersionResource
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    def __post_init__(self) -> None:
        if self.namespace is not None:
            validate_namespace(self.namespace)
        if self.name is not None:
            validate_name(self.name)
        if self.subresource is not None:
            _check("subresource", self.subresource, _LABEL, MAX_LABEL_LENGTH)
            if self.name is None:
                raise LocalProtocolError("a subresource needs an object name")
        # The API server reads namespaces/{x}/{y} as resource y in namespace x, unless y is a
        # subresource of the namespace object; paths that would be misread are refused.
        if self.gvr.resource == "namespaces":
            if self.namespace is not None:
                raise LocalProtocolError("namespaces are cluster-scoped; do not give a namespace")
            if self.subresource is not None and self.subresource not in _NAMESPACE_SUBRESOURCES:
                raise LocalProtocolError(
                    f"namespaces have no subresource {self.subresource!r} the server can route"
                )

    def render(self) -> str:
        """The path, e.g. ``/apis/apps/v1/namespaces/ns/deployments/web/scale``."""
        parts = [self.gvr.group_version.api_path]
        if self.namespace is not None:
            parts.append(f"namespaces/{self.namespace}")
        parts.append(self.gvr.resource)
        if self.name is not None:
            parts.append(self.name)
        if self.subresource is not None:
            parts.append(self.subresource)
        return "/".join(parts)

    def __str__(self) -> str:
        return self.render()

    @classmethod
    def parse(cls, path: str) -> ResourcePath:
        """Parse a path produced by :meth:`render` (the API server's own rules)."""
        segments = path.split("/")
        if len(segments) < 4 or segments[0] != "":
            raise LocalProtocolError(f"not a resource path: {path!r}")
        if segments[1] == "api":
            group, version, rest = "", segments[2], segments[3:]
        elif segments[1] == "apis" and len(segments) >= 5:
            group, version, rest = segments[2], segments[3], segments[4:]
        else:
            raise LocalProtocolError(f"not a resource path: {path!r}")
        namespace: str | None = None
        # Like the API server: namespaces/{ns}/{resource}... unless the third part is a
        # subresource of the namespace object itself.
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in _NAMESPACE_SUBRESOURCES:
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            raise LocalProtocolError(f"not a resource path: {path!r}")
        gvr = GroupVersionResource(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        return cls(gvr, namespace, name, subresource)


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """The identity of an object in a cache: namespace ("" if cluster-scoped) and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        """Read the key of an object from its metadata."""
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(metadata, Mapping):
            raise DecodeError("object has no metadata", path="metadata")
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise DecodeError("object has no name", path="metadata.name")
        namespace = metadata.get("namespace", "")
        if not isinstance(namespace, str):
            raise DecodeError("namespace is not a string", path="metadata.namespace")
        return cls(namespace, name)

    @classmethod
    def parse(cls, key: str) -> ObjectKey:
        """Parse ``namespace/name`` or ``name``."""
        namespace, _, name = key.rpartition("/")
        if not name:
            raise LocalProtocolError(f"invalid object key: {key!r}")
        return cls(namespace, name)


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """An entry of ``metadata.ownerReferences``."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False

    @classmethod
    def all_of(cls, obj: Mapping[str, Any]) -> tuple[OwnerReference, ...]:
        """The owner references of an object; malformed entries are skipped."""
        metadata = obj.get("metadata")
        refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
        if not isinstance(refs, list):
            return ()
        out = []
        for ref in refs:
            if not isinstance(ref, Mapping):
                continue
            api_version, kind = ref.get("apiVersion"), ref.get("kind")
            name, uid = ref.get("name"), ref.get("uid")
            if (
                isinstance(api_version, str)
                and isinstance(kind, str)
                and isinstance(name, str)
                and isinstance(uid, str)
            ):
                out.append(cls(api_version, kind, name, uid, ref.get("controller") is True))
        return tuple(out)
