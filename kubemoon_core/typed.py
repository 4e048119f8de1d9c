"""Declaring kinds as typed classes, their CRDs and schemas, and decoding objects into them."""

from ._crd import crd_manifest, openapi_schema
from ._declare import (
    Condition,
    Declared,
    DeclaredKind,
    Description,
    Format,
    JsonName,
    Length,
    ListType,
    Maximum,
    Minimum,
    Pattern,
    PreserveUnknown,
    PrinterColumn,
    ResourceInfo,
    Rule,
    Scale,
    custom_resource,
    resource_info,
)
from ._metadata import MetadataField
from ._public import publish
from ._typed import TypedView, decode, encode

__all__ = [
    "Condition",
    "crd_manifest",
    "custom_resource",
    "Declared",
    "DeclaredKind",
    "decode",
    "Description",
    "encode",
    "Format",
    "JsonName",
    "Length",
    "ListType",
    "Maximum",
    "MetadataField",
    "Minimum",
    "openapi_schema",
    "Pattern",
    "PreserveUnknown",
    "PrinterColumn",
    "resource_info",
    "ResourceInfo",
    "Rule",
    "Scale",
    "TypedView",
]

publish(__name__, globals(), __all__)
