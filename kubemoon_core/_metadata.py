"""The ``metadata`` field of a typed kind: an :class:`ObjectMeta` that a dict literal may set.

Rules:

- A kind declares ``metadata: MetadataField = MetadataField()``. Reading ``obj.metadata``
  gives an ``ObjectMeta`` (type checkers see that too); setting it, in the constructor or
  later, takes an ``ObjectMeta`` or a mapping of the JSON form (``{"name": "x",
  "ownerReferences": [...]}``), decoded strictly into an ``ObjectMeta`` (unknown keys are
  kept in ``ObjectMeta.unknown_fields``). Left out, it is an empty ``ObjectMeta``. A mapping
  must be JSON data: a key that is no ``str`` or a value that is no JSON value (a ``set``,
  an object), anywhere inside, is a :class:`LocalProtocolError` naming its place at once,
  not a key silently sent as ``"1"`` or a write failing later.
- ``MetadataField`` is a data descriptor, so the dataclass ``__init__``'s parameter is typed
  by its ``__set__`` (``ObjectMeta | Mapping[str, Any]``) and the attribute by its ``__get__``.
  In a slotted dataclass the value lives in the slot: :func:`custom_resource` (and the
  built-in kinds' decorator, :func:`builtin_resource`, here because it binds the same way)
  puts a descriptor bound to that slot in place of the slot's own; so does the analysis of a
  class (:func:`~kubemoon_core._declare.class_info`) for a ``MetadataField`` of any name in
  a nested class (a template's), which ``custom_resource`` analyses at once when it can.
  Outside a slotted class the value is kept under the field's own name, whatever it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ._declare import ResourceInfo
from ._errors import LocalProtocolError
from ._resources import Scope
from ._typed import decode

if TYPE_CHECKING:
    from .builtin.meta_v1 import ObjectMeta

__all__ = ["MetadataField"]

T = TypeVar("T")

_OBJECT_META: list[type[ObjectMeta]] = []
_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_json(value: Mapping[Any, Any]) -> None:
    """Refuse a mapping that is not JSON data (str keys, JSON values), naming the place."""
    stack: list[tuple[str, Any]] = [("", dict(value))]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if type(key) is not str:
                    raise LocalProtocolError(f"metadata{path}: key {key!r} is no str")
                stack.append((f"{path}[{key!r}]", inner))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", inner) for i, inner in enumerate(item))
        elif not isinstance(item, _JSON_SCALARS):
            raise LocalProtocolError(f"metadata{path}: {type(item).__name__} is no JSON value")


def _object_meta() -> type[ObjectMeta]:
    """The ``ObjectMeta`` class, imported on first use: the generated kinds import this
    module while the ``builtin`` package that holds it is being imported."""
    if not _OBJECT_META:
        from .builtin.meta_v1 import ObjectMeta  # noqa: PLC0415 - see above

        _OBJECT_META.append(ObjectMeta)
    return _OBJECT_META[0]


class MetadataField:
    """The ``metadata`` field of a kind: reads give an ``ObjectMeta``; an ``ObjectMeta`` or a
    mapping of its JSON form may be assigned (``Widget(metadata={"name": "w"})``)."""

    __slots__ = ("_name", "_slot")
    _kubemoon_metadata_field = True

    @staticmethod
    def meta_class() -> type[ObjectMeta]:
        """The class a ``metadata`` field holds (what the codecs decode it into)."""
        return _object_meta()

    def __init__(self) -> None:
        self._slot: MemberDescriptorType | None = None
        self._name = "metadata"

    def __set_name__(self, owner: type, name: str) -> None:
        # A field of another name (a template's ``template_metadata``) keeps its own value.
        self._name = name

    def bind_slot(self, slot: MemberDescriptorType) -> MetadataField:
        """A descriptor keeping its value in ``slot`` (the slot of a slotted dataclass)."""
        bound = MetadataField()
        bound._slot = slot
        bound._name = slot.__name__
        return bound

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> MetadataField: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> ObjectMeta: ...

    def __get__(self, obj: object, owner: type[Any] | None = None) -> MetadataField | ObjectMeta:
        if obj is None:
            return self  # the class attribute: the dataclass field's default
        if self._slot is not None:
            value: ObjectMeta = self._slot.__get__(obj, owner)
            return value
        try:
            found: ObjectMeta = obj.__dict__[self._name]
        except KeyError:
            raise AttributeError(self._name) from None
        return found

    def __set__(self, obj: object, value: ObjectMeta | Mapping[str, Any]) -> None:
        meta_class = _OBJECT_META[0] if _OBJECT_META else _object_meta()
        meta: ObjectMeta
        if isinstance(value, meta_class):
            meta = value
        elif isinstance(value, MetadataField):  # the dataclass default: no metadata given
            meta = meta_class()
        elif isinstance(value, Mapping):
            _check_json(value)
            meta = decode(meta_class, dict(value))
            for key in meta.unknown_fields:
                if key == "unknown_fields":
                    raise LocalProtocolError(
                        "metadata 'unknown_fields' is no JSON name: give unknown fields as "
                        "keys of the mapping itself"
                    )
                if key in meta_class.__dataclass_fields__:  # a Python name, not the JSON one
                    head, *rest = key.split("_")
                    json_name = head + "".join(part.title() for part in rest)
                    raise LocalProtocolError(f"metadata {key!r}: use {json_name!r}")
        else:
            raise LocalProtocolError(
                f"metadata must be an ObjectMeta or a mapping, got {type(value).__name__}"
            )
        if self._slot is not None:
            self._slot.__set__(obj, meta)
        else:
            obj.__dict__[self._name] = meta


def builtin_resource(
    group: str, version: str, kind: str, plural: str, scope: Scope
) -> Callable[[type[T]], type[T]]:
    """Class decorator of a generated built-in kind (``ConfigMap``...): it decodes and encodes
    like a custom resource, but is no CRD (``crd_manifest`` refuses it)."""

    def decorate(cls: type[T]) -> type[T]:
        info = ResourceInfo(
            cls=cls,
            group=group,
            version=version,
            kind=kind,
            plural=plural,
            singular=kind.lower(),
            scope=scope,
            short_names=(),
            categories=(),
            printer_columns=(),
            status_subresource=None,
            scale=None,
            served=True,
            storage=None,
            builtin=True,
        )
        setattr(cls, "__kubemoon_resource__", info)  # noqa: B010 - mypy: not a declared attr
        field = cls.__dataclass_fields__["metadata"]  # type: ignore[attr-defined]
        slot = cls.__dict__["metadata"]
        setattr(cls, "metadata", field.default.bind_slot(slot))  # noqa: B010 - see above
        return cls

    return decorate
