"""Declaring a custom resource with dataclasses and ``typing.Annotated`` markers.

Rules:

- A resource is a dataclass decorated with :func:`custom_resource`; its fields are the
  top-level fields of the object (``spec``, ``status``, ...) plus
  ``metadata: MetadataField = MetadataField()`` (an ``ObjectMeta``, which a dict literal may
  set), which the server owns and the schema leaves out. Nested objects are dataclasses too.
- The supported field types are ``str``, ``int``, ``float``, ``bool``, ``list[T]``,
  ``dict[str, T]``, ``T | None`` (a field that may be absent), ``Literal[...]`` and
  ``enum.Enum`` (enumerations of strings or of integers), nested dataclasses,
  ``datetime`` (an RFC 3339 date-time), ``int | str`` (int-or-string) and ``Any`` (any JSON,
  kept as is). Anything else is refused with a :class:`SchemaError` naming the class and
  the field, as are markers on types they do not apply to.
- Markers are values in ``Annotated[T, ...]``; markers of other libraries are ignored.
- Python field names are snake_case; JSON names are their camelCase form unless
  :class:`JsonName` says otherwise. A dataclass default is also the schema's default.
- A declaration is analysed once, on first use, and the analysis is cached per class.
  A class may contain itself (the codecs follow it); only a CRD schema refuses that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    Protocol,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

from ._errors import LocalProtocolError
from ._resources import APIResource, GroupVersionKind, GroupVersionResource, Scope

__all__ = [
    "Condition",
    "Declared",
    "DeclaredKind",
    "Description",
    "Format",
    "JsonName",
    "Length",
    "ListType",
    "Maximum",
    "Minimum",
    "Pattern",
    "PreserveUnknown",
    "PrinterColumn",
    "ResourceInfo",
    "Rule",
    "Scale",
    "SchemaError",
    "custom_resource",
    "resource_info",
]

T = TypeVar("T")


class SchemaError(LocalProtocolError):
    """A declaration cannot become a structural CRD schema; the message names the field."""


class Declared(Protocol):
    """The type of a declared object: an instance of a dataclass (a kind of
    :mod:`kubemoon_core.builtin`, a :func:`custom_resource` or one of their parts)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


class DeclaredKind(Protocol):
    """An object of a kind (a :func:`custom_resource`, a built-in ``ConfigMap``): a declared
    object with ``metadata``. Its class names a resource where a kind is asked for
    (``owns(ConfigMap)``, ``ctx.owned(ConfigMap)``); type checkers refuse other classes
    there (``WidgetSpec``, ``Manager``), and :func:`resource_info` at run time."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def metadata(self) -> Any:
        """The object's ``metadata``."""


# -- markers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Minimum:
    """The least allowed number (``minimum``; ``exclusiveMinimum`` when ``exclusive``)."""

    value: int | float
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class Maximum:
    """The greatest allowed number (``maximum``; ``exclusiveMaximum`` when ``exclusive``)."""

    value: int | float
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class Length:
    """Bounds on a size: characters of a string, items of a list, keys of a dict.

    Becomes ``minLength``/``maxLength``, ``minItems``/``maxItems`` or
    ``minProperties``/``maxProperties`` according to the type it annotates.
    """

    min: int | None = None
    max: int | None = None


@dataclass(frozen=True, slots=True)
class Pattern:
    """A regular expression a string must match (``pattern``)."""

    regex: str


@dataclass(frozen=True, slots=True)
class Format:
    """An OpenAPI ``format`` (``int64``, ``hostname``, ``uri`` ...)."""

    name: str


@dataclass(frozen=True, slots=True)
class Description:
    """The description of a field (also possible as ``field(metadata={"description": ...})``)."""

    text: str


@dataclass(frozen=True, slots=True)
class JsonName:
    """The JSON name of a field, instead of the camelCase form of its Python name."""

    name: str


_LIST_TYPES = ("atomic", "set", "map")


@dataclass(frozen=True, slots=True)
class ListType:
    """``x-kubernetes-list-type``: ``atomic``, ``set`` or ``map`` with its ``keys``.

    ``keys`` are JSON names of the item dataclass's fields (``x-kubernetes-list-map-keys``).
    """

    kind: Literal["atomic", "set", "map"]
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    """A CEL validation rule (one entry of ``x-kubernetes-validations``)."""

    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: str | None = None
    field_path: str | None = None


@dataclass(frozen=True, slots=True)
class PreserveUnknown:
    """Marks the ``dict[str, Any]`` field that keeps an object's unknown fields.

    The object's schema then says ``x-kubernetes-preserve-unknown-fields``; decoding puts
    every undeclared key in this field and encoding writes them back. Without such a field,
    an unknown key is a decoding error.
    """


Marker = Minimum | Maximum | Length | Pattern | Format | Description | JsonName | ListType | Rule
_MARKERS = (Minimum, Maximum, Length, Pattern, Format, Description, JsonName, ListType, Rule)


# -- the analysis of a type -----------------------------------------------------------------


class Kind(enum.Enum):
    """What a node of a declaration is (internal to the generator and the codecs)."""

    STR = "string"
    INT = "integer"
    FLOAT = "number"
    BOOL = "boolean"
    ANY = "any"
    INT_OR_STR = "int-or-string"
    LITERAL = "literal"
    ENUM = "enum"
    DATETIME = "date-time"
    LIST = "array"
    MAP = "map"
    OBJECT = "object"


SCALARS = frozenset({Kind.STR, Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.LITERAL, Kind.ENUM})
# Scalars whose decoded value is the JSON value itself.
PLAIN = frozenset({Kind.STR, Kind.INT, Kind.BOOL, Kind.ANY, Kind.INT_OR_STR, Kind.LITERAL})


@dataclass(slots=True)
class Node:
    """One analysed type: its kind, item type, class (dataclass or enum) and markers."""

    kind: Kind
    item: Node | None = None
    cls: Any = None
    values: tuple[Any, ...] = ()
    markers: tuple[Marker, ...] = ()

    @property
    def value_type(self) -> type:
        """``str`` or ``int``: the JSON type of a literal or enum's values."""
        return type(self.values[0])


@dataclass(slots=True)
class FieldInfo:
    """One dataclass field: Python and JSON names, type, default, description."""

    name: str
    json_name: str
    node: Node
    optional: bool
    default: Any
    factory: Callable[[], Any] | None
    description: str | None

    @property
    def required(self) -> bool:
        """Whether the field must be present in JSON."""
        return not self.optional and self.default is _MISSING and self.factory is None


@dataclass(slots=True)
class ClassInfo:
    """An analysed dataclass: its fields, its unknown-fields field and its description."""

    cls: type
    fields: tuple[FieldInfo, ...]
    extra: str | None
    description: str | None
    resource: ResourceInfo | None
    metadata_class: type | None = None  # a resource's ObjectMeta (its MetadataField's)


_MISSING: Any = dataclasses.MISSING
_METADATA_HINT = "metadata: MetadataField = MetadataField() (an ObjectMeta; was dict[str, Any])"
_INFO: dict[type, ClassInfo] = {}
_IN_PROGRESS: set[type] = set()


def missing() -> Any:
    """The sentinel of a field without a default."""
    return _MISSING


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _type_name(tp: object) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def class_info(cls: type) -> ClassInfo:
    """Analyse a dataclass once (cached); raise :class:`SchemaError` if it is unsupported."""
    info = _INFO.get(cls)
    if info is not None:
        return info
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise SchemaError(f"{_type_name(cls)} is not a dataclass")
    _IN_PROGRESS.add(cls)
    try:
        info = _analyse_class(cls)
    finally:
        _IN_PROGRESS.discard(cls)
    _INFO[cls] = info
    return info


def _description(cls: type) -> str | None:
    doc = cls.__doc__
    # dataclasses invents "Name(field: type, ...)" when there is no docstring.
    if not doc or doc.startswith(f"{cls.__name__}("):
        return None
    return " ".join(doc.split("\n\n")[0].split())


def _analyse_class(cls: type) -> ClassInfo:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise SchemaError(f"{cls.__name__}: cannot resolve the type hints: {exc}") from None
    resource: ResourceInfo | None = getattr(cls, "__kubemoon_resource__", None)
    if resource is not None and resource.cls is not cls:
        resource = None  # inherited from a decorated base class: not this class's own
    fields: list[FieldInfo] = []
    extra: str | None = None
    metadata_class: type | None = None
    seen: dict[str, str] = {}
    _bind_metadata(cls)
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        if not f.init:
            raise SchemaError(f"{where}: fields with init=False cannot be decoded")
        tp, optional, markers = _unwrap_field(hints[f.name])
        if any(isinstance(m, PreserveUnknown) for m in markers):
            if extra is not None:
                raise SchemaError(f"{where}: a second PreserveUnknown field")
            if tp != dict[str, Any] or optional:
                raise SchemaError(f"{where}: a PreserveUnknown field must be dict[str, Any]")
            extra = f.name
            continue
        if resource is not None and f.name == "metadata":
            if optional or not hasattr(f.default, "bind_slot"):  # not MetadataField()
                raise SchemaError(f"{where}: {_METADATA_HINT}")
            metadata_class = typing.cast(Any, f.default).meta_class()
            continue
        names = [m.name for m in markers if isinstance(m, JsonName)]
        json_name = names[-1] if names else _camel(f.name)
        if not json_name:
            raise SchemaError(f"{where}: empty JSON name")
        if json_name in seen:
            raise SchemaError(f"{where}: JSON name {json_name!r} is also {seen[json_name]}'s")
        if resource is not None and json_name in ("apiVersion", "kind", "metadata"):
            raise SchemaError(f"{where}: {json_name!r} is reserved in a resource")
        seen[json_name] = f.name
        node = analyse(tp, tuple(m for m in markers if not isinstance(m, JsonName)), where)
        descriptions = [m.text for m in node.markers if isinstance(m, Description)]
        description = descriptions[-1] if descriptions else f.metadata.get("description")
        factory: Callable[[], Any] | None = (
            None if f.default_factory is _MISSING else f.default_factory  # type: ignore[assignment]
        )
        default = f.default
        if hasattr(default, "bind_slot"):  # a MetadataField outside a resource: an ObjectMeta
            default, factory = _MISSING, default.meta_class()
        fields.append(FieldInfo(f.name, json_name, node, optional, default, factory, description))
    if resource is not None and "metadata" not in {f.name for f in dataclasses.fields(cls)}:
        raise SchemaError(f"{cls.__name__}: a resource needs a field {_METADATA_HINT}")
    return ClassInfo(cls, tuple(fields), extra, _description(cls), resource, metadata_class)


def _split_annotated(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    if get_origin(tp) is Annotated:
        return tp.__origin__, tuple(tp.__metadata__)
    return tp, ()


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _unwrap_field(tp: Any) -> tuple[Any, bool, tuple[Any, ...]]:
    """(inner type, may be absent, markers) of a field's annotation."""
    tp, markers = _split_annotated(tp)
    optional = False
    if _is_union(tp) and type(None) in get_args(tp):
        optional = True
        rest = tuple(a for a in get_args(tp) if a is not type(None))
        tp = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007 - built at run time
    tp, more = _split_annotated(tp)
    return tp, optional, markers + more


def analyse(tp: Any, markers: tuple[Any, ...], where: str) -> Node:
    """The node of a type with its markers; ``where`` names the field in errors."""
    tp, more = _split_annotated(tp)
    own = tuple(m for m in markers + more if isinstance(m, _MARKERS))
    node = _analyse_type(tp, where)
    node.markers = own
    _check_markers(node, where)
    return node


def _analyse_type(tp: Any, where: str) -> Node:
    simple = {str: Kind.STR, int: Kind.INT, float: Kind.FLOAT, bool: Kind.BOOL}
    if getattr(tp, "_kubemoon_metadata_field", False):  # outside a resource: an ObjectMeta
        tp = tp.meta_class()
    if tp is Any:
        return Node(Kind.ANY)
    if tp is datetime.datetime:
        return Node(Kind.DATETIME)
    if isinstance(tp, type) and tp in simple:
        return Node(simple[tp])
    origin, args = get_origin(tp), get_args(tp)
    if _is_union(tp):
        if set(args) == {int, str}:
            return Node(Kind.INT_OR_STR)
        if type(None) in args:
            raise SchemaError(f"{where}: None is only allowed for a whole field (T | None)")
        raise SchemaError(f"{where}: unions other than int | str are not supported: {tp}")
    if origin is Literal:
        return Node(Kind.LITERAL, values=_enum_values(args, where))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = _enum_values(tuple(member.value for member in tp), where)
        return Node(Kind.ENUM, cls=tp, values=values)
    if origin is list and len(args) == 1:
        return Node(Kind.LIST, item=_item(args[0], where))
    if origin is dict and len(args) == 2:
        if args[0] is not str:
            raise SchemaError(f"{where}: dict keys must be str, not {_type_name(args[0])}")
        return Node(Kind.MAP, item=_item(args[1], where))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp not in _IN_PROGRESS:  # a recursive reference is analysed by its outer use
            class_info(tp)  # refuse it now, naming its own field
        return Node(Kind.OBJECT, cls=tp)
    raise SchemaError(f"{where}: unsupported type {_type_name(tp)}")


def _item(tp: Any, where: str) -> Node:
    node = analyse(tp, (), f"{where}[]")
    if any(isinstance(m, JsonName) for m in node.markers):
        raise SchemaError(f"{where}[]: JsonName applies to a field, not an item")
    return node


def _enum_values(values: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    kinds = {type(v) for v in values}
    if not values or len(kinds) != 1 or not kinds <= {str, int}:
        raise SchemaError(f"{where}: enum values must be all str or all int, got {values!r}")
    return values


# Which node kinds each marker applies to.
_APPLIES: dict[type, frozenset[Kind]] = {
    Minimum: frozenset({Kind.INT, Kind.FLOAT}),
    Maximum: frozenset({Kind.INT, Kind.FLOAT}),
    Length: frozenset({Kind.STR, Kind.LIST, Kind.MAP}),
    Pattern: frozenset({Kind.STR}),
    Format: frozenset({Kind.STR, Kind.INT, Kind.FLOAT, Kind.INT_OR_STR}),
    ListType: frozenset({Kind.LIST}),
}


def _check_markers(node: Node, where: str) -> None:
    for m in node.markers:
        kinds = _APPLIES.get(type(m))
        if kinds is not None and node.kind not in kinds:
            raise SchemaError(f"{where}: {type(m).__name__} does not apply to {node.kind.value}")
        if isinstance(m, Length) and any(b is not None and b < 0 for b in (m.min, m.max)):
            raise SchemaError(f"{where}: a length bound is negative: {m}")
        if isinstance(m, Pattern):
            try:
                re.compile(m.regex)
            except re.error as exc:
                raise SchemaError(f"{where}: invalid pattern {m.regex!r}: {exc}") from None
        if isinstance(m, Rule) and not m.rule.strip():
            raise SchemaError(f"{where}: an empty CEL rule")
        if isinstance(m, ListType):
            _check_list_type(node, m, where)


def _check_list_type(node: Node, marker: ListType, where: str) -> None:
    assert node.item is not None
    if marker.kind not in _LIST_TYPES:
        raise SchemaError(f"{where}: list type must be one of {_LIST_TYPES}, not {marker.kind!r}")
    if marker.kind != "map":
        if marker.keys:
            raise SchemaError(f"{where}: keys are only for a list type 'map'")
        if marker.kind == "set" and node.item.kind not in SCALARS | {Kind.DATETIME}:
            raise SchemaError(f"{where}: a list type 'set' needs scalar items")
        return
    if node.item.kind is not Kind.OBJECT or not marker.keys:
        raise SchemaError(f"{where}: a list type 'map' needs dataclass items and keys")
    by_json = {f.json_name: f for f in class_info(node.item.cls).fields}
    for key in marker.keys:
        f = by_json.get(key)
        if f is None:
            raise SchemaError(f"{where}: map key {key!r} is not a field of the items")
        defaulted = not f.optional and f.default is not _MISSING
        if f.node.kind not in SCALARS or not (f.required or defaulted):
            raise SchemaError(
                f"{where}: map key {key!r} must be a scalar that is required or has a default"
            )


# -- resources ------------------------------------------------------------------------------

_PRINTER_TYPES = ("integer", "number", "string", "boolean", "date")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
_LOWER = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A column of ``kubectl get`` (``additionalPrinterColumns``)."""

    name: str
    json_path: str
    type: Literal["integer", "number", "string", "boolean", "date"] = "string"
    description: str | None = None
    format: str | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Scale:
    """The scale subresource: where the replica counts (and label selector) live."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """What :func:`custom_resource` declared about a class: names, scope, subresources."""

    cls: type
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: Scope
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    status_subresource: bool | None
    scale: Scale | None
    served: bool
    storage: bool | None
    builtin: bool = False
    """True for a kind the API server serves itself (generated in :mod:`kubemoon_core.builtin`)."""

    @property
    def gvr(self) -> GroupVersionResource:
        """The resource's group, version and plural name."""
        return GroupVersionResource(self.group, self.version, self.plural)

    @property
    def gvk(self) -> GroupVersionKind:
        """The resource's group, version and kind."""
        return GroupVersionKind(self.group, self.version, self.kind)

    @property
    def api_resource(self) -> APIResource:
        """The resource with its scope: requests built for it refuse a namespaced kind
        without a namespace (:class:`~kubemoon_core.errors.NamespaceRequired`)."""
        names = {"short_names": self.short_names, "categories": self.categories}
        return APIResource(self.gvr, self.kind, self.scope, singular_name=self.singular, **names)

    @property
    def api_version(self) -> str:
        """``group/version`` (``version`` alone for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition's name: ``plural.group``."""
        return f"{self.plural}.{self.group}"


def custom_resource(
    *,
    group: str,
    version: str,
    kind: str | None = None,
    plural: str | None = None,
    singular: str | None = None,
    scope: Scope = Scope.NAMESPACED,
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    printer_columns: tuple[PrinterColumn, ...] = (),
    status_subresource: bool | None = None,
    scale: Scale | None = None,
    served: bool = True,
    storage: bool | None = None,
) -> Callable[[type[T]], type[T]]:
    """Class decorator: the dataclass is the ``kind`` of ``group/version``.

    ``kind`` defaults to the class name, ``singular`` to the lowercased kind and ``plural``
    to the singular plus ``s``. The status subresource is on when the class has a
    ``status`` field, unless ``status_subresource=False``. ``storage`` may stay ``None``
    when the CRD has a single version. Names are checked here; the fields on first use.
    """

    def decorate(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise SchemaError(f"{_type_name(cls)}: custom_resource needs a dataclass")
        the_kind = kind or cls.__name__
        the_singular = singular or the_kind.lower()
        info = ResourceInfo(
            cls=cls,
            group=group,
            version=version,
            kind=the_kind,
            plural=plural or f"{the_singular}s",
            singular=the_singular,
            scope=scope,
            short_names=tuple(short_names),
            categories=tuple(categories),
            printer_columns=tuple(printer_columns),
            status_subresource=status_subresource,
            scale=scale,
            served=served,
            storage=storage,
        )
        _check_names(info)
        setattr(cls, "__kubemoon_resource__", info)  # noqa: B010 - mypy: not a declared attr
        _bind_metadata(cls)
        # Now, so that nested classes' MetadataFields are bound before objects are made;
        # a class naming one defined later is analysed (and refused) on first use instead.
        with contextlib.suppress(Exception):
            class_info(cls)
        return cls

    return decorate


def _bind_metadata(cls: type) -> None:
    """Slotted: each ``MetadataField`` (of any name) bound to its slot replaces the slot's
    own, so that constructing and assigning convert a mapping into an ``ObjectMeta``."""
    for name, field in getattr(cls, "__dataclass_fields__", {}).items():
        bind = getattr(getattr(field, "default", None), "bind_slot", None)
        if isinstance(cls.__dict__.get(name), types.MemberDescriptorType) and bind:
            setattr(cls, name, bind(cls.__dict__[name]))


def _check_names(info: ResourceInfo) -> None:
    where = info.cls.__name__
    try:
        info.gvr  # noqa: B018 - validates group, version and plural
    except LocalProtocolError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if "." not in info.group:
        raise SchemaError(f"{where}: a CRD group needs a dot (example.com), got {info.group!r}")
    if not _KIND.match(info.kind):
        raise SchemaError(f"{where}: kind must be CamelCase, got {info.kind!r}")
    for what, names in (
        ("singular", (info.singular,)),
        ("short name", info.short_names),
        ("category", info.categories),
    ):
        for name in names:
            if not _LOWER.match(name):
                raise SchemaError(f"{where}: {what} must be a lowercase DNS label: {name!r}")
    for column in info.printer_columns:
        if not column.name or not column.json_path.startswith("."):
            raise SchemaError(f"{where}: printer column needs a name and a .path: {column}")
        if column.type not in _PRINTER_TYPES or column.priority < 0:
            raise SchemaError(f"{where}: printer column type must be one of {_PRINTER_TYPES}")


def resource_info(cls: type) -> ResourceInfo:
    """The :class:`ResourceInfo` of a class decorated with :func:`custom_resource`."""
    info = class_info(cls).resource
    if info is None:
        raise SchemaError(f"{cls.__name__} is not declared with @custom_resource")
    return info


@dataclass(slots=True)
class Condition:
    """One condition of a resource's status, in the shape of metav1.Condition.

    Use it as ``Annotated[list[Condition], ListType("map", ("type",))]``.
    """

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: datetime.datetime
    observed_generation: Annotated[int | None, Format("int64")] = None
