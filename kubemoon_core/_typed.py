"""Typed decoding and encoding of declared resources, with code generated once per class.

Rules:

- :func:`decode` turns JSON data (dicts, lists, scalars, as a JSON decoder makes them) into
  the declared dataclasses, strictly: no coercion but int to float, every wrong type a
  :class:`TypedDecodeError` naming the JSON path (``.spec.targets[2]: expected str, got
  int``). Unknown keys are an error unless the object has a :class:`PreserveUnknown` field.
  Decoding checks types, not markers: the apiserver validated the values.
- :func:`encode` turns a declared object back into JSON data; fields that are ``None`` are
  left out, an absent ``apiVersion``/``kind`` of a resource is filled in.
- As :mod:`dataclasses` generates ``__init__``, the decoder and encoder of each class are
  generated as Python source and compiled on first use, then cached, so no type hint is
  interpreted per object. Decoded lists and dicts are fresh copies; ``Any`` values (and the
  values of unknown fields) are shared with the input.
- A resource's ``metadata`` decodes into its ``ObjectMeta`` (absent or ``null``: an empty
  one), which keeps the fields it does not know; an empty ``ObjectMeta`` encodes to no
  ``metadata`` key.
"""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from ._declare import PLAIN, ClassInfo, Kind, Node, class_info, missing
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._resources import ObjectKey
from ._store import Store

__all__ = [
    "TypedDecodeError",
    "TypedView",
    "decode",
    "encode",
]

T = TypeVar("T")


class TypedDecodeError(DecodeError):
    """JSON data does not match a declared type; ``path`` names the place (``.spec.x[2]``)."""

    def __str__(self) -> str:
        return f"{self.path or '.'}: {self.reason}"


class _Fail(Exception):
    """Raised inside generated code; each level adds its path segment on the way out."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.segments: list[str] = []

    def at(self, segment: str) -> _Fail:
        self.segments.append(segment)
        return self


_JSON_NAMES = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    list: "list",
    dict: "object",
    type(None): "null",
}


def _expected(what: str, value: object) -> _Fail:
    got = _JSON_NAMES.get(type(value), type(value).__name__)
    return _Fail(f"expected {what}, got {got}")


def _int_as_float(value: int) -> float:
    """An integer read into a float field; one beyond a double's range is refused."""
    try:
        return float(value)
    except OverflowError:
        raise _Fail("expected float, got an integer too large for a double") from None


def _not_in(values: Any, value: object) -> _Fail:
    return _Fail(f"expected one of {', '.join(map(repr, values))}, got {value!r}")


def _locate_item(decode: Callable[[Any], Any], items: list[Any]) -> _Fail:
    """The failure of the first item that does not decode, with its index."""
    for index, item in enumerate(items):
        try:
            decode(item)
        except _Fail as fail:
            return fail.at(f"[{index}]")
    raise AssertionError("unreachable: a decoder failed once and then never")


def _locate_value(decode: Callable[[Any], Any], values: dict[str, Any]) -> _Fail:
    """The failure of the first value that does not decode, with its key."""
    for key, value in values.items():
        try:
            decode(value)
        except _Fail as fail:
            return fail.at(f".{key}")
    raise AssertionError("unreachable: a decoder failed once and then never")


def _parse_datetime(value: object) -> datetime.datetime:
    if type(value) is not str:
        raise _expected("date-time str", value)
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _Fail(f"expected an RFC 3339 date-time, got {value!r}") from None
    if parsed.tzinfo is None:
        raise _Fail(f"expected an RFC 3339 date-time with an offset, got {value!r}")
    return parsed


def _format_datetime(value: datetime.datetime) -> str:
    if value.tzinfo is None:
        raise LocalProtocolError(f"cannot encode a datetime without a timezone: {value!r}")
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class _Codec:
    __slots__ = ("decode", "encode")

    def __init__(self, decode: Callable[[Any], Any], encode: Callable[[Any], Any]) -> None:
        self.decode = decode
        self.encode = encode


_CODECS: dict[type, _Codec] = {}
_BUILDING: set[type] = set()  # classes whose codec is being generated


class _Gen:
    """Source lines and the constants they refer to, for one class's two functions."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "_Fail": _Fail,
            "_expected": _expected,
            "_not_in": _not_in,
            "_int_as_float": _int_as_float,
            "_locate_item": _locate_item,
            "_locate_value": _locate_value,
            "_parse_datetime": _parse_datetime,
            "_format_datetime": _format_datetime,
            "_KubeMoonError": KubeMoonError,
        }
        self.counter = 0

    def const(self, value: Any) -> str:
        self.counter += 1
        name = f"_c{self.counter}"
        self.namespace[name] = value
        return name

    def function(self, cls: type, which: str) -> str:
        """The constant naming the decoder or encoder of ``cls``; late-bound while that
        class's own codec is being generated (a class containing itself)."""
        if cls in _BUILDING:

            def late(value: Any) -> Any:
                return getattr(_CODECS[cls], which)(value)

            return self.const(late)
        return self.const(getattr(codec(cls), which))

    def var(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    # -- decoding: statements that read `src`, check it and assign the result to `dst` --

    def decode(self, node: Node, src: str, dst: str, indent: str) -> list[str]:
        kind = node.kind
        if kind in PLAIN:
            return [f"{indent}{dst} = {src}", *self.check(node, src, indent)]
        if kind is Kind.FLOAT:
            return [
                f"{indent}if type({src}) is float: {dst} = {src}",
                f"{indent}elif type({src}) is int: {dst} = _int_as_float({src})",
                f"{indent}else: raise _expected('float', {src})",
            ]
        if kind is Kind.ENUM:
            members = self.const(node.cls._value2member_map_)
            return [
                f"{indent}{dst} = {members}.get({src}) "
                f"if type({src}) is {node.value_type.__name__} else None",
                f"{indent}if {dst} is None: raise _not_in({self.const(node.values)}, {src})",
            ]
        if kind is Kind.DATETIME:
            return [f"{indent}{dst} = _parse_datetime({src})"]
        if kind is Kind.OBJECT:
            return [f"{indent}{dst} = {self.function(node.cls, 'decode')}({src})"]
        assert node.item is not None
        is_list = kind is Kind.LIST
        head = (
            f"{indent}if type({src}) is not list: raise _expected('list', {src})"
            if is_list
            else f"{indent}if type({src}) is not dict: raise _expected('object', {src})"
        )
        if node.item.kind is Kind.OBJECT:
            # A comprehension: the index of a failing item is looked up only on failure.
            fn = self.function(node.item.cls, "decode")
            if is_list:
                body, locate = f"[{fn}(x) for x in {src}]", "_locate_item"
            else:
                body, locate = f"{{k: {fn}(x) for k, x in {src}.items()}}", "_locate_value"
            return [
                head,
                f"{indent}try: {dst} = {body}",
                f"{indent}except _Fail: raise {locate}({fn}, {src}) from None",
            ]
        i, x = self.var(), self.var()
        if is_list:
            loop, segment = f"for {i}, {x} in enumerate({src}):", f"f'[{{{i}}}]'"
        else:
            loop, segment = f"for {i}, {x} in {src}.items():", f"'.' + {i}"
        inner = indent + "        "
        if node.item.kind in PLAIN:
            # Check every item in place, then copy the container in one call.
            copy = f"{dst} = list({src})" if is_list else f"{dst} = dict({src})"
            checks = self.check(node.item, x, inner)
            if not checks:
                return [head, f"{indent}{copy}"]
            return [
                head,
                f"{indent}{loop}",
                f"{indent}    try:",
                *checks,
                f"{indent}    except _Fail as e: raise e.at({segment})",
                f"{indent}{copy}",
            ]
        item = self.var()
        store = f"{dst}.append({item})" if is_list else f"{dst}[{i}] = {item}"
        return [
            head,
            f"{indent}{dst} = []" if is_list else f"{indent}{dst} = {{}}",
            f"{indent}{loop}",
            f"{indent}    try:",
            *self.decode(node.item, x, item, inner),
            f"{indent}    except _Fail as e: raise e.at({segment})",
            f"{indent}    {store}",
        ]

    def check(self, node: Node, src: str, indent: str) -> list[str]:
        kind = node.kind
        if kind is Kind.ANY:
            return []
        if kind is Kind.INT_OR_STR:
            bad = f"type({src}) is not int and type({src}) is not str"
            return [f"{indent}if {bad}: raise _expected('int or str', {src})"]
        if kind is Kind.LITERAL:
            name, values = node.value_type.__name__, self.const(frozenset(node.values))
            return [
                f"{indent}if type({src}) is not {name} or {src} not in {values}:",
                f"{indent}    raise _not_in({self.const(node.values)}, {src})",
            ]
        name = {Kind.STR: "str", Kind.INT: "int", Kind.BOOL: "bool"}[kind]
        return [f"{indent}if type({src}) is not {name}: raise _expected('{name}', {src})"]

    # -- encoding: an expression of `src` --

    def encode(self, node: Node, src: str) -> str:
        kind = node.kind
        if kind in PLAIN or kind is Kind.FLOAT:
            return src
        if kind is Kind.ENUM:
            return f"{src}.value"
        if kind is Kind.DATETIME:
            return f"_format_datetime({src})"
        if kind is Kind.OBJECT:
            return f"{self.function(node.cls, 'encode')}({src})"
        assert node.item is not None
        x = self.var()
        inner = self.encode(node.item, x)
        if kind is Kind.LIST:
            return f"list({src})" if inner == x else f"[{inner} for {x} in {src}]"
        return f"dict({src})" if inner == x else f"{{k: {inner} for k, {x} in {src}.items()}}"


def _arguments(cls: type, values: dict[str, str]) -> str:
    """The call arguments of ``cls``: positional in field order (the fastest call), but
    keyword-only fields by name."""
    fields = dataclasses.fields(cls)
    return ", ".join(f"{f.name}={values[f.name]}" if f.kw_only else values[f.name] for f in fields)


def _class_source(gen: _Gen, info: ClassInfo) -> str:
    resource = info.resource
    cls = gen.const(info.cls)
    lines = ["def decode(d):", "    if type(d) is not dict: raise _expected('object', d)"]
    lines.append("    get = d.get")
    count = sum(f.required for f in info.fields)
    lines.append(f"    n = {count}")
    if resource is not None:
        for key, value in (("apiVersion", resource.api_version), ("kind", resource.kind)):
            lines += [
                f"    v = get({key!r})",
                "    if v is not None:",
                "        n += 1",
                f"        if v != {value!r}: raise _Fail('expected {value}, got %r' % (v,))"
                f".at('.{key}')",
            ]
        assert info.metadata_class is not None  # class_info refuses a resource without
        lines += [
            "    metadata = get('metadata')",
            "    if metadata is None: metadata = {}",
            "    else: n += 1",
            f"    try: metadata = {gen.function(info.metadata_class, 'decode')}(metadata)",
            "    except _Fail as e: raise e.at('.metadata')",
        ]
    args = {"metadata": "metadata"} if resource is not None else {}
    nothing = gen.const(object())
    for index, f in enumerate(info.fields):
        v, out = f"r{index}", f"x{index}"
        args[f.name] = out
        lines.append(f"    {v} = get({f.json_name!r}, {nothing})")
        if f.required:
            lines.append(
                f"    if {v} is {nothing}: raise _Fail('required field is missing')"
                f".at({'.' + f.json_name!r})"
            )
            body_indent = "    "
        else:
            if f.factory is not None:
                absent = f"{gen.const(f.factory)}()"
            elif f.default is not missing():
                absent = gen.const(f.default)
            else:
                absent = "None"
            lines.append(f"    if {v} is {nothing}: {out} = {absent}")
            if f.optional:
                lines.append(f"    elif {v} is None: n += 1; {out} = None")
            lines.append("    else:")
            lines.append("        n += 1")
            body_indent = "        "
        lines.append(f"{body_indent}try:")
        lines += gen.decode(f.node, v, out, body_indent + "    ")
        lines.append(f"{body_indent}except _Fail as e: raise e.at({'.' + f.json_name!r})")
    known = {f.json_name for f in info.fields}
    if resource is not None:
        known |= {"apiVersion", "kind", "metadata"}
    known_const = gen.const(frozenset(known))
    if info.extra is not None:
        lines += [
            "    if len(d) != n:",
            f"        extra = {{k: v for k, v in d.items() if k not in {known_const}}}",
            "    else: extra = {}",
        ]
        args[info.extra] = "extra"
    else:
        lines += [
            "    if len(d) != n:",
            "        for k in d:",
            f"            if k not in {known_const}: raise _Fail('unknown field').at('.' + k)",
        ]
    lines += [
        "    try:",
        f"        return {cls}({_arguments(info.cls, args)})",
        "    except _KubeMoonError: raise",
        "    except Exception as e:",
        f"        raise _Fail('{info.cls.__name__} refused the value: %s' % (e,)) from None",
    ]
    lines.append("def encode(o):")
    if resource is not None:
        api, kind = resource.api_version, resource.kind
        lines.append(f"    d = {{'apiVersion': {api!r}, 'kind': {kind!r}}}")
        assert info.metadata_class is not None
        lines.append(f"    m = {gen.function(info.metadata_class, 'encode')}(o.metadata)")
        lines.append("    if m: d['metadata'] = m")
    else:
        lines.append("    d = {}")
    for f in info.fields:
        expr = gen.encode(f.node, "v")
        lines.append(f"    v = o.{f.name}")
        if f.optional:
            lines.append(f"    if v is not None: d[{f.json_name!r}] = {expr}")
        else:
            lines.append(f"    d[{f.json_name!r}] = {expr}")
    if info.extra is not None:
        lines.append(f"    for k, v in o.{info.extra}.items(): d.setdefault(k, v)")
    lines.append("    return d")
    return "\n".join(lines) + "\n"


def codec(cls: type) -> _Codec:
    """The compiled decoder and encoder of a declared dataclass (cached)."""
    found = _CODECS.get(cls)
    if found is not None:
        return found
    info = class_info(cls)
    gen = _Gen()
    _BUILDING.add(cls)
    try:
        source = _class_source(gen, info)
    finally:
        _BUILDING.discard(cls)
    exec(compile(source, f"<kubemoon codec of {cls.__qualname__}>", "exec"), gen.namespace)
    found = _Codec(gen.namespace["decode"], gen.namespace["encode"])
    _CODECS[cls] = found
    return found


def node_codec(node: Node) -> _Codec:
    """A decoder and encoder of one analysed node (used for schema defaults)."""
    gen = _Gen()
    source = "\n".join(
        [
            "def decode(v):",
            *gen.decode(node, "v", "out", "    "),
            "    return out",
            "def encode(v):",
            f"    return {gen.encode(node, 'v')}",
        ]
    )
    exec(compile(source + "\n", "<kubemoon codec of a node>", "exec"), gen.namespace)
    return _Codec(gen.namespace["decode"], gen.namespace["encode"])


def fail_to_error(fail: _Fail) -> TypedDecodeError:
    """The public error of a failure inside generated code."""
    return TypedDecodeError(fail.reason, path="".join(reversed(fail.segments)))


def decode(cls: type[T], data: object) -> T:
    """Decode JSON data into the declared dataclass ``cls``, strictly.

    Raises :class:`TypedDecodeError` (a :class:`DecodeError`) naming the JSON path of the
    first mismatch, and :class:`SchemaError` if ``cls`` is not a supported declaration.
    An object that is a ``cls`` already is returned with a :class:`DeprecationWarning`
    (for one release: ``ctx.condition`` returns typed conditions now).
    """
    found = _CODECS.get(cls) or codec(cls)
    try:
        result: T = found.decode(data)
    except _Fail as fail:
        if type(data) is cls:
            # ``[decode(Condition, c) for c in ctx.condition(...)]`` from when the context
            # returned mappings: accepted for one release (looked at only on failure).
            warnings.warn(
                f"decode({cls.__name__}, ...) was given a {cls.__name__} already; "
                "it is returned as it is (drop the decode)",
                DeprecationWarning,
                stacklevel=2,
            )
            return data
        raise fail_to_error(fail) from None
    return result


def encode(obj: object) -> dict[str, Any]:
    """Encode a declared object into JSON data (dicts, lists, scalars), leaving out ``None``."""
    cls = type(obj)
    found = _CODECS.get(cls) or codec(cls)
    result: dict[str, Any] = found.encode(obj)
    return result


class TypedView(Generic[T]):
    """A read-only typed view of a :class:`Store` holding objects of one declared kind.

    Objects are decoded on first read and the result kept while the store holds the same
    object (stored objects are never mutated, so identity says "unchanged"). Reading an
    object that does not decode raises :class:`TypedDecodeError`.
    """

    __slots__ = ("_cache", "_cls", "_store")

    def __init__(self, store: Store, cls: type[T]) -> None:
        codec(cls)  # refuse an unsupported class now rather than on first read
        self._store = store
        self._cls = cls
        self._cache: dict[ObjectKey, tuple[Mapping[str, Any], T]] = {}

    def __len__(self) -> int:
        return len(self._store)

    def _typed(self, key: ObjectKey, obj: Mapping[str, Any]) -> T:
        cached = self._cache.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        typed = decode(self._cls, obj)
        self._cache[key] = (obj, typed)
        return typed

    def get(self, key: ObjectKey) -> T | None:
        """The typed object with this key, or None."""
        obj = self._store.get(key)
        if obj is None:
            self._cache.pop(key, None)
            return None
        return self._typed(key, obj)

    def items(self) -> list[tuple[ObjectKey, T]]:
        """Every (key, typed object) pair, in the store's order; forgets deleted objects."""
        pairs = [(key, self._typed(key, obj)) for key, obj in self._store.items()]
        if len(self._cache) > len(pairs):
            live = {key for key, _ in pairs}
            self._cache = {k: v for k, v in self._cache.items() if k in live}
        return pairs

    def objects(self) -> list[T]:
        """Every typed object, in the store's order."""
        return [typed for _, typed in self.items()]
