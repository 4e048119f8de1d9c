"""Structural OpenAPI schemas and CustomResourceDefinition manifests of declared resources.

Rules:

- The schema is *structural* by construction: every node has a ``type`` (or is
  int-or-string, or keeps unknown fields), ``additionalProperties`` only on a dict, never
  beside ``properties``, and ``metadata``, ``apiVersion`` and ``kind`` are left to the
  server.
- A default (a dataclass field's default) is encoded as the object would be and must match
  the field's type and bounds, as the apiserver insists.
- A manifest takes one or more versions of one kind; exactly one of several is the storage
  version, and a conversion webhook, if given, is written into ``spec.conversion``.
- Everything refused raises :class:`SchemaError` naming the Python class and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._declare import (
    ClassInfo,
    Description,
    Format,
    Kind,
    Length,
    ListType,
    Maximum,
    Minimum,
    Node,
    Pattern,
    ResourceInfo,
    Rule,
    SchemaError,
    class_info,
    missing,
    resource_info,
)
from ._errors import LocalProtocolError
from ._typed import _Fail, node_codec

__all__ = [
    "ConversionWebhook",
    "ServiceReference",
    "crd_manifest",
    "openapi_schema",
]

_TYPES = {
    Kind.STR: "string",
    Kind.INT: "integer",
    Kind.FLOAT: "number",
    Kind.BOOL: "boolean",
}


def openapi_schema(cls: type) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a declared dataclass (``openAPIV3Schema``)."""
    return _object_schema(class_info(cls), None)


_OPEN: set[type] = set()  # the classes whose schema is being built (to refuse recursion)


def _object_schema(info: ClassInfo, description: str | None) -> dict[str, Any]:
    if info.cls in _OPEN:
        raise SchemaError(f"{info.cls.__name__} contains itself: a CRD schema cannot be recursive")
    _OPEN.add(info.cls)
    try:
        return _object_schema_of(info, description)
    finally:
        _OPEN.discard(info.cls)


def _object_schema_of(info: ClassInfo, description: str | None) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    description = description or info.description
    if description:
        schema["description"] = description
    schema["type"] = "object"
    properties = {}
    for f in info.fields:
        where = f"{info.cls.__name__}.{f.name}"
        prop = _node_schema(f.node, f.description, where)
        if f.factory is not None or f.default is not missing():
            default = f.factory() if f.factory is not None else f.default
            if default is not None:
                prop["default"] = _default(f.node, default, where)
        properties[f.json_name] = prop
    if properties:
        schema["properties"] = properties
    required = [f.json_name for f in info.fields if f.required]
    if required:
        schema["required"] = required
    if info.extra is not None:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def _node_schema(node: Node, description: str | None, where: str) -> dict[str, Any]:
    kind = node.kind
    if description is None:
        texts = [m.text for m in node.markers if isinstance(m, Description)]
        description = texts[-1] if texts else None
    schema: dict[str, Any]
    if kind is Kind.OBJECT:
        schema = _object_schema(class_info(node.cls), description)
    else:
        schema = {"description": description} if description else {}
        if kind in _TYPES:
            schema["type"] = _TYPES[kind]
        elif kind is Kind.ANY:
            schema["x-kubernetes-preserve-unknown-fields"] = True
        elif kind is Kind.INT_OR_STR:
            schema["x-kubernetes-int-or-string"] = True
        elif kind is Kind.DATETIME:
            schema.update(type="string", format="date-time")
        elif kind in (Kind.LITERAL, Kind.ENUM):
            schema["type"] = "string" if node.value_type is str else "integer"
            schema["enum"] = list(node.values)
        else:
            assert node.item is not None
            item = _node_schema(node.item, None, f"{where}[]")
            if kind is Kind.LIST:
                schema.update(type="array", items=item)
            elif node.item.kind is Kind.ANY:
                schema.update(type="object")
                schema["x-kubernetes-preserve-unknown-fields"] = True
            else:
                schema.update(type="object", additionalProperties=item)
    _add_markers(schema, node)
    return schema


_LENGTH_KEYS = {
    Kind.STR: ("minLength", "maxLength"),
    Kind.LIST: ("minItems", "maxItems"),
    Kind.MAP: ("minProperties", "maxProperties"),
}


def _add_markers(schema: dict[str, Any], node: Node) -> None:
    rules: list[dict[str, str]] = []
    for m in node.markers:
        if isinstance(m, Format):
            schema["format"] = m.name
        elif isinstance(m, Minimum | Maximum):
            key = "minimum" if isinstance(m, Minimum) else "maximum"
            schema[key] = m.value
            if m.exclusive:
                schema[f"exclusive{key.capitalize()}"] = True
        elif isinstance(m, Length):
            low, high = _LENGTH_KEYS[node.kind]
            if m.min is not None:
                schema[low] = m.min
            if m.max is not None:
                schema[high] = m.max
        elif isinstance(m, Pattern):
            schema["pattern"] = m.regex
        elif isinstance(m, ListType):
            schema["x-kubernetes-list-type"] = m.kind
            if m.keys:
                schema["x-kubernetes-list-map-keys"] = list(m.keys)
        elif isinstance(m, Rule):
            rule = {"rule": m.rule}
            for key, value in (
                ("message", m.message),
                ("messageExpression", m.message_expression),
                ("reason", m.reason),
                ("fieldPath", m.field_path),
            ):
                if value is not None:
                    rule[key] = value
            rules.append(rule)
    if rules:
        schema["x-kubernetes-validations"] = rules


def _default(node: Node, value: Any, where: str) -> Any:
    """The JSON form of a default, refused unless it has the field's type and bounds."""
    codec = node_codec(node)
    try:
        encoded = codec.encode(value)
        codec.decode(encoded)
    except (_Fail, AttributeError, TypeError, LocalProtocolError):
        raise SchemaError(f"{where}: the default {value!r} does not match the type") from None
    for m in node.markers:
        if not _within(m, encoded):
            raise SchemaError(f"{where}: the default {value!r} breaks {m}")
    return encoded


def _within(marker: Any, value: Any) -> bool:
    if isinstance(marker, Minimum):
        return bool(value > marker.value or (value == marker.value and not marker.exclusive))
    if isinstance(marker, Maximum):
        return bool(value < marker.value or (value == marker.value and not marker.exclusive))
    if isinstance(marker, Length):
        size = len(value)
        return (marker.min is None or size >= marker.min) and (
            marker.max is None or size <= marker.max
        )
    if isinstance(marker, Pattern):
        return re.search(marker.regex, value) is not None
    return True


# -- manifests ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceReference:
    """A Service in the cluster that serves the conversion webhook."""

    namespace: str
    name: str
    path: str | None = None
    port: int | None = None


@dataclass(frozen=True, slots=True)
class ConversionWebhook:
    """Where the apiserver sends ConversionReviews: a ``service`` or a ``url``.

    ``ca_bundle`` is the base64-encoded PEM of the CA that signed the webhook's certificate.
    """

    service: ServiceReference | None = None
    url: str | None = None
    ca_bundle: str | None = None
    review_versions: tuple[str, ...] = ("v1",)


def crd_manifest(*classes: type, conversion: ConversionWebhook | None = None) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one kind's versions.

    Each class is one version of the same group and kind (and names, and scope). With
    several, exactly one must be declared ``storage=True``. ``conversion`` sets a webhook
    in ``spec.conversion``; without it the apiserver's ``None`` strategy applies.
    """
    if not classes:
        raise LocalProtocolError("crd_manifest needs at least one class")
    infos = [resource_info(cls) for cls in classes]
    for info in infos:
        if info.builtin:
            raise SchemaError(f"{info.cls.__name__} is a built-in kind, not a custom resource")
    first = infos[0]
    seen: set[str] = set()
    for info in infos:
        same = (info.group, info.kind, info.plural, info.singular, info.scope)
        if same != (first.group, first.kind, first.plural, first.singular, first.scope):
            raise SchemaError(
                f"{info.cls.__name__}: group, kind, names and scope differ from "
                f"{first.cls.__name__}'s"
            )
        if info.version in seen:
            raise SchemaError(f"{info.cls.__name__}: version {info.version} declared twice")
        seen.add(info.version)
    # Short names and categories are the CRD's: versions that state them must agree.
    short_names = {info.short_names for info in infos if info.short_names}
    categories = {info.categories for info in infos if info.categories}
    if len(short_names) > 1 or len(categories) > 1:
        raise SchemaError(f"{first.kind}: the versions declare different short names or categories")
    storage = [info for info in infos if info.storage]
    if len(infos) == 1 and first.storage is not False:
        storage = infos
    if len(storage) != 1:
        raise SchemaError(
            f"{first.kind}: exactly one version must be storage=True, "
            f"got {[i.version for i in storage]}"
        )
    names: dict[str, Any] = {
        "kind": first.kind,
        "listKind": f"{first.kind}List",
        "plural": first.plural,
        "singular": first.singular,
    }
    if short_names:
        names["shortNames"] = list(short_names.pop())
    if categories:
        names["categories"] = list(categories.pop())
    spec: dict[str, Any] = {
        "group": first.group,
        "names": names,
        "scope": first.scope.value,
        "versions": [_version(info, info is storage[0]) for info in infos],
    }
    if conversion is not None:
        spec["conversion"] = _conversion(conversion)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": first.crd_name},
        "spec": spec,
    }


def _version(info: ResourceInfo, storage: bool) -> dict[str, Any]:
    cls_info = class_info(info.cls)
    version: dict[str, Any] = {"name": info.version, "served": info.served, "storage": storage}
    has_status = any(f.json_name == "status" for f in cls_info.fields)
    subresources: dict[str, Any] = {}
    if info.status_subresource or (info.status_subresource is None and has_status):
        if not has_status:
            raise SchemaError(f"{info.cls.__name__}: a status subresource needs a status field")
        subresources["status"] = {}
    if info.scale is not None:
        scale = {
            "specReplicasPath": _path(cls_info, info.scale.spec_replicas_path, ".spec", Kind.INT),
            "statusReplicasPath": _path(
                cls_info, info.scale.status_replicas_path, ".status", Kind.INT
            ),
        }
        if info.scale.label_selector_path is not None:
            scale["labelSelectorPath"] = _path(
                cls_info, info.scale.label_selector_path, ".status", Kind.STR
            )
        subresources["scale"] = scale
    if subresources:
        version["subresources"] = subresources
    if info.printer_columns:
        version["additionalPrinterColumns"] = [_column(c) for c in info.printer_columns]
    version["schema"] = {"openAPIV3Schema": openapi_schema(info.cls)}
    return version


def _path(info: ClassInfo, path: str, prefix: str, kind: Kind) -> str:
    """Check that a scale path names a declared field of the right kind."""
    where = f"{info.cls.__name__}: scale path {path!r}"
    if not path.startswith(prefix + "."):
        raise SchemaError(f"{where} must be under {prefix}")
    current: ClassInfo | None = info
    node: Node | None = None
    for name in path[1:].split("."):
        fields = {f.json_name: f for f in current.fields} if current is not None else {}
        if name not in fields:
            raise SchemaError(f"{where} names no declared field")
        node = fields[name].node
        current = class_info(node.cls) if node.kind is Kind.OBJECT else None
    assert node is not None
    if node.kind is not kind:
        raise SchemaError(f"{where} must name a {kind.value} field")
    return path


def _column(column: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
    if column.description:
        out["description"] = column.description
    if column.format:
        out["format"] = column.format
    if column.priority:
        out["priority"] = column.priority
    return out


def _conversion(webhook: ConversionWebhook) -> dict[str, Any]:
    if (webhook.service is None) == (webhook.url is None):
        raise LocalProtocolError("a conversion webhook needs exactly one of service and url")
    config: dict[str, Any] = {}
    if webhook.service is not None:
        service: dict[str, Any] = {
            "namespace": webhook.service.namespace,
            "name": webhook.service.name,
        }
        if webhook.service.path is not None:
            service["path"] = webhook.service.path
        if webhook.service.port is not None:
            service["port"] = webhook.service.port
        config["service"] = service
    else:
        config["url"] = webhook.url
    if webhook.ca_bundle is not None:
        config["caBundle"] = webhook.ca_bundle
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": config,
            "conversionReviewVersions": list(webhook.review_versions),
        },
    }
