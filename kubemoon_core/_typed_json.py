"""Bytes to a declared object in one call: :func:`decode_json`, with msgspec when installed.

Rules:

- :func:`decode_json` gives what ``decode(cls, json.loads(data))`` gives (the same object,
  or a :class:`TypedDecodeError` naming the same JSON path), and malformed JSON is a
  :class:`~kubemoon_core.errors.DecodeError`. It never lets a foreign exception out.
- With msgspec installed (``pip install 'kubemoon[msgspec]'``), each declaration gets a
  mirror of ``msgspec.Struct`` classes (JSON names, the same strictness: unknown fields
  forbidden, date-times with an offset, no coercion but int to float), generated once per
  class: msgspec parses and checks the bytes in C, then a generated function builds the
  declared dataclasses from the structs without checking again.
- When msgspec refuses a document (or the declared class refuses a value), the document
  is judged again the Python way, so the error (a :class:`TypedDecodeError` and its path,
  or a :class:`DecodeError` for malformed JSON) is exactly the one :func:`decode` raises,
  and a document only msgspec refuses still decodes. Errors are rare; the second pass
  costs only then.
- Integers of any size are read exactly either way: an ``int`` or ``Any`` field given
  ``100000000000000000000`` holds that int, never a float (the active backend reads it as
  the standard library does); a ``float`` field given an integer beyond a double's range
  is a :class:`TypedDecodeError`.
- ``ObjectMeta`` (a resource's ``metadata``, a template's) and its lists' entries
  (``OwnerReference``, ``ManagedFieldsEntry``) keep unknown fields, which only a newer
  apiserver sends (they say ``_kubemoon_unknown_rare``): their mirrors forbid them, so a
  document with one is judged again the Python way, which keeps them. Another nested
  class with a ``PreserveUnknown`` field is mirrored as a plain JSON object and decoded
  from it by the Python codec, so no unknown field is lost. Declarations msgspec cannot
  mirror (a ``PreserveUnknown`` field at the top, a class containing itself) and every
  class when msgspec is absent or turned off (:func:`use_msgspec`) go through the active
  JSON backend and :func:`decode`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from ._declare import ClassInfo, Kind, Node, class_info, missing
from ._json import loads
from ._typed import codec, decode

__all__ = ["decode_json", "use_msgspec"]

T = TypeVar("T")

try:
    import msgspec
except ImportError:  # pragma: no cover - the dev extra installs it
    msgspec = None  # type: ignore[assignment]

_ENABLED = msgspec is not None
# class -> (msgspec's decode, the converter); classes msgspec cannot mirror.
_FAST: dict[type, tuple[Callable[[bytes | str], Any], Callable[[Any], Any]]] = {}
_SLOW: set[type] = set()


def use_msgspec(enabled: bool = True) -> bool:
    """Decode with msgspec when it is installed (the default); return whether it is now on."""
    global _ENABLED
    _ENABLED = enabled and msgspec is not None
    return _ENABLED


def _unknown_rare(cls: type) -> bool:
    """Whether the unknown fields ``cls`` keeps come only from a newer apiserver
    (``ObjectMeta`` and its lists' entries): mirrored forbidding them."""
    return getattr(cls, "_kubemoon_unknown_rare", False) is True


def _as_json_object(cls: type) -> bool:
    """Whether a nested class is mirrored as a plain JSON object (it keeps unknown fields,
    and they are not rare)."""
    return class_info(cls).extra is not None and not _unknown_rare(cls)


class _Unsupported(Exception):
    """This declaration cannot be mirrored in msgspec; decode it the other way."""


class _Mirror:
    """Builds the msgspec Struct mirror of one declaration and its converter's source."""

    def __init__(self) -> None:
        self.structs: dict[type, Any] = {}
        self.open: set[type] = set()
        self.namespace: dict[str, Any] = {}
        self.lines: list[str] = []
        self.names: dict[type, str] = {}
        self.counter = 0

    def name_of(self, cls: type) -> str:
        """The name of the converter function of ``cls`` (its class is ``<name>_cls``)."""
        name = self.names.get(cls)
        if name is None:
            name = self.names[cls] = f"_conv{len(self.names)}"
            self.namespace[f"{name}_cls"] = cls
        return name

    def struct(self, cls: type) -> Any:
        found = self.structs.get(cls)
        if found is not None:
            return found
        if cls in self.open:
            raise _Unsupported(f"{cls.__name__} contains itself")
        self.open.add(cls)
        info = class_info(cls)
        if info.extra is not None and not _unknown_rare(cls):
            raise _Unsupported(f"{cls.__name__} keeps unknown fields")
        fields: list[tuple[str, Any, Any]] = []
        if info.resource is not None:
            for key, value in (
                ("apiVersion", info.resource.api_version),
                ("kind", info.resource.kind),
            ):
                fields.append((key, Literal[value] | None, None))
            assert info.metadata_class is not None
            meta = self.type_of(Node(Kind.OBJECT, cls=info.metadata_class))
            fields.append(("metadata", meta | None, None))
        for f in info.fields:
            tp = self.type_of(f.node)
            if f.optional:
                tp = tp | None
            if f.required:
                fields.append((f.json_name, tp, msgspec.NODEFAULT))
            elif f.factory is not None:
                fields.append((f.json_name, tp, msgspec.field(default_factory=f.factory)))
            elif f.default is not missing():
                fields.append((f.json_name, tp, f.default))
            else:
                fields.append((f.json_name, tp, None))
        names = [(f"f{i}", tp, default) for i, (_, tp, default) in enumerate(fields)]
        rename = {f"f{i}": json for i, (json, _, _) in enumerate(fields)}
        struct = msgspec.defstruct(
            f"{cls.__name__}Mirror",
            [(n, tp) if d is msgspec.NODEFAULT else (n, tp, d) for n, tp, d in names],
            kw_only=True,
            forbid_unknown_fields=True,
            rename=rename,
        )
        self.structs[cls] = struct
        self.open.discard(cls)
        self.converter(info, [json for json, _, _ in fields])
        return struct

    def type_of(self, node: Node) -> Any:
        kind = node.kind
        simple = {Kind.STR: str, Kind.INT: int, Kind.FLOAT: float, Kind.BOOL: bool}
        if kind in simple:
            return simple[kind]
        if kind is Kind.ANY:
            return Any
        if kind is Kind.INT_OR_STR:
            return int | str
        if kind is Kind.LITERAL:
            return Literal[node.values]
        if kind is Kind.ENUM:
            return node.cls
        if kind is Kind.DATETIME:
            return Annotated[datetime.datetime, msgspec.Meta(tz=True)]
        if kind is Kind.OBJECT:
            if _as_json_object(node.cls):
                return dict[str, Any]  # decoded by the Python codec, unknown fields kept
            return self.struct(node.cls)
        assert node.item is not None
        item = self.type_of(node.item)
        return list[item] if kind is Kind.LIST else dict[str, item]  # type: ignore[valid-type]

    def convert(self, node: Node, src: str) -> str:
        """An expression turning the struct value ``src`` into the declared value."""
        if node.kind is Kind.OBJECT:
            if _as_json_object(node.cls):
                return f"{self.python_decoder(node.cls)}({src})"
            return f"{self.name_of(node.cls)}({src})"
        if node.kind in (Kind.LIST, Kind.MAP) and node.item is not None:
            self.counter += 1
            x = f"x{self.counter}"
            inner = self.convert(node.item, x)
            if inner == x:
                return src
            if node.kind is Kind.LIST:
                return f"[{inner} for {x} in {src}]"
            return f"{{k{self.counter}: {inner} for k{self.counter}, {x} in {src}.items()}}"
        return src

    def python_decoder(self, cls: type) -> str:
        """The name of the Python codec's decoder of ``cls`` (it raises on a mismatch, and
        :func:`decode_json` then judges the document again the Python way)."""
        name = f"{self.name_of(cls)}_py"
        self.namespace[name] = codec(cls).decode
        return name

    def converter(self, info: ClassInfo, json_names: list[str]) -> None:
        index = {json: f"s.f{i}" for i, json in enumerate(json_names)}
        name = self.name_of(info.cls)
        args: dict[str, str] = {}
        if info.resource is not None:
            assert info.metadata_class is not None
            src = index["metadata"]
            meta = self.convert(Node(Kind.OBJECT, cls=info.metadata_class), src)
            self.namespace["_meta_cls"] = info.metadata_class
            args["metadata"] = f"_meta_cls() if {src} is None else {meta}"
        if info.extra is not None:  # rare unknown fields: the mirror forbade them
            args[info.extra] = "{}"
        for f in info.fields:
            src = index[f.json_name]
            expr = self.convert(f.node, src)
            if f.optional and expr != src:
                expr = f"None if {src} is None else {expr}"
            args[f.name] = expr
        call = ", ".join(
            f"{f.name}={args[f.name]}" if f.kw_only else args[f.name]
            for f in dataclasses.fields(info.cls)
        )
        self.lines += [f"def {name}(s):", f"    return {name}_cls({call})"]


def _prepare(cls: type) -> tuple[Callable[[bytes | str], Any], Callable[[Any], Any]] | None:
    """msgspec's decoder of the mirror of ``cls`` and the converter, or None (unsupported)."""
    class_info(cls)  # an unsupported declaration is refused as decode refuses it
    mirror = _Mirror()
    try:
        struct = mirror.struct(cls)
        source = "\n".join(mirror.lines) + "\n"
        code = compile(source, f"<kubemoon msgspec converter of {cls.__qualname__}>", "exec")
        exec(code, mirror.namespace)
        pair = (msgspec.json.Decoder(struct).decode, mirror.namespace[mirror.name_of(cls)])
    except Exception:  # _Unsupported, or a shape msgspec refuses: the Python way then
        _SLOW.add(cls)
        return None
    _FAST[cls] = pair
    return pair


def decode_json(cls: type[T], data: bytes | str) -> T:
    """Decode JSON text straight into the declared dataclass ``cls``, strictly.

    The result and the errors are those of ``decode(cls, json.loads(data))``: a
    :class:`TypedDecodeError` naming the JSON path of a mismatch, a
    :class:`~kubemoon_core.errors.DecodeError` for malformed JSON. With msgspec installed (and
    :func:`use_msgspec` on) the bytes are parsed and checked in one pass.
    """
    if _ENABLED:
        pair = _FAST.get(cls)
        if pair is None and cls not in _SLOW:
            pair = _prepare(cls)
        if pair is not None:
            try:
                result: T = pair[1](pair[0](data))
            except Exception:  # judged again below, exactly as without msgspec
                pass
            else:
                return result
    return decode(cls, loads(data))
