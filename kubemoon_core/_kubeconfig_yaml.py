"""A YAML reader for kubeconfig text that resolves scalars as kubectl's go-yaml v2 does.

Rules: kubectl reads a kubeconfig with go-yaml v2 and converts it to JSON, so the same
text must give the same document here: booleans, numbers, timestamps, tags, anchors and
directives follow go-yaml, not YAML 1.1 as PyYAML reads it. Only the first document counts.
A hostile file is bounded: at most :data:`MAX_KUBECONFIG_BYTES`, nesting at most
``_MAX_DEPTH`` deep, alias expansion refused as go-yaml refuses it. Every failure, PyYAML's
own included, is a :class:`ConfigError` naming the file; no foreign exception escapes.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from ._client_config import ConfigError
from ._redact import printable

__all__ = ["MAX_KUBECONFIG_BYTES"]

#: The longest kubeconfig text read (a kubeconfig is a few kilobytes; a file with hundreds
#: of clusters is well under a megabyte). With the deepest nesting and the most alias
#: expansion accepted below, it bounds what a hostile file costs.
MAX_KUBECONFIG_BYTES = 8 << 20
_MAX_DEPTH = 100
_GO_NUMBER_TAG = "tag:kubemoon.dev,2026:go-number"


class _Refused(Exception):
    """Raised inside the YAML loader; turned into a ConfigError by :func:`_load_yaml`."""


class _GoYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader resolving plain scalars as kubectl's YAML reader does.

    kubectl reads a kubeconfig with go-yaml v2 and then decodes JSON into typed fields,
    so: ``y``/``n``/``yes``/``no``/``on``/``off`` (any of their three spellings) and
    ``true``/``false`` are booleans; numbers follow Go's ``strconv`` (``1e3`` and ``0o17``
    are numbers, ``1:20`` is a string); timestamps and ``=`` stay strings; an anchor may be
    defined again (the later one counts); a local tag (``!foo``) is ignored, ``!!binary``
    is a string, ``!!omap`` and ``!!pairs`` are lists of mappings; only ``%YAML 1.1`` may
    be declared. Nesting deeper than ``_MAX_DEPTH`` is refused (PyYAML composes
    recursively).
    """

    yaml_implicit_resolvers = {}  # noqa: RUF012 - PyYAML keeps its resolvers there
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > _MAX_DEPTH:
                raise _Refused(f"nested more than {_MAX_DEPTH} levels deep")
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if not isinstance(event, yaml.AliasEvent) and event.anchor is not None:
                self.anchors.pop(event.anchor, None)  # go-yaml lets an anchor be redefined
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def process_directives(self) -> Any:
        result = super().process_directives()  # type: ignore[no-untyped-call]
        if self.yaml_version not in (None, (1, 1)):
            raise _Refused("found incompatible YAML document (only %YAML 1.1)")
        return result


_GO_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"), True),
    **dict.fromkeys(("on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE"), False),
    **dict.fromkeys(("off", "Off", "OFF"), False),
}
_GO_SPECIAL_FLOATS = {
    ".nan": float("nan"),
    ".NaN": float("nan"),
    ".NAN": float("nan"),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), float("inf")),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), float("-inf")),
}
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")


def _go_number(text: str) -> int | float | str:
    """A plain scalar starting with a digit, a sign or a dot, as go-yaml v2 resolves it."""
    if text in _GO_SPECIAL_FLOATS:
        return _GO_SPECIAL_FLOATS[text]
    if text.startswith("."):
        return float(text) if _GO_DOT_FLOAT.fullmatch(text) else text
    plain = text.replace("_", "")
    match = _GO_INT.fullmatch(plain)
    if match is not None:
        sign, digits = match.groups()
        if digits[:2] in ("0b", "0B", "0o", "0O", "0x", "0X"):
            value = int(digits[2:], {"b": 2, "o": 8, "x": 16}[digits[1].lower()])
        elif len(digits) > 1 and digits[0] == "0":
            value = int(digits, 8)
        else:
            value = int(digits)
        value = -value if sign == "-" else value
        if -(1 << 63) <= value < (1 << 64):
            return value
    if _GO_FLOAT.fullmatch(plain):
        return float(plain)
    return text


def _construct_go_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float | str:
    return _go_number(str(loader.construct_scalar(node)))


def _construct_go_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    value = str(loader.construct_scalar(node))
    if value not in _GO_BOOLS:
        raise _Refused(f"{printable(value, 40)!r} is not a boolean")
    return _GO_BOOLS[value]


_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile("^(?:" + "|".join(_GO_BOOLS) + ")$"), list("yYnNtTfFoO")
)
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^<<$"), ["<"])
_GoYamlLoader.add_implicit_resolver(_GO_NUMBER_TAG, re.compile(r"^[-+.0-9]"), list("-+.0123456789"))


def _construct_untagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """A node with a local tag (``!foo``), read as if it had none, as go-yaml reads it."""
    if node.tag.startswith("tag:yaml.org,2002:"):
        raise _Refused(f"unknown tag {printable(node.tag, 60)!r}")
    if isinstance(node, yaml.ScalarNode):
        return str(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


def _construct_go_binary(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    data = yaml.SafeLoader.construct_yaml_binary(loader, node)
    return bytes(data).decode("utf-8", errors="replace")  # Go: a string of those bytes


def _construct_go_timestamp(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    """An explicit ``!!timestamp``: kept as its text (timestamps stay strings), and refused,
    as go-yaml refuses it, when the text is no timestamp."""
    if not isinstance(node, yaml.ScalarNode):
        raise _Refused("!!timestamp must be a scalar")
    text = str(loader.construct_scalar(node))
    if yaml.SafeLoader.timestamp_regexp.match(text) is None:
        raise _Refused(f"cannot decode {printable(text, 60)!r} as a !!timestamp")
    return text


def _construct_go_pairs(loader: yaml.SafeLoader, node: yaml.Node) -> list[Any]:
    if not isinstance(node, yaml.SequenceNode):
        raise _Refused("!!omap and !!pairs must be sequences")
    return loader.construct_sequence(node, deep=True)


_GoYamlLoader.add_constructor(_GO_NUMBER_TAG, _construct_go_number)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:bool", _construct_go_bool)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:binary", _construct_go_binary)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:omap", _construct_go_pairs)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:pairs", _construct_go_pairs)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_go_timestamp)
_GoYamlLoader.add_constructor(None, _construct_untagged)


def _check_jsonable(document: Any) -> None:
    """Refuse what kubectl cannot turn into JSON: a null map key, NaN or an infinity,
    anywhere in the document (unknown fields included). Shared (aliased) containers are
    visited once."""
    seen: set[int] = set()
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise _Refused("NaN and infinities cannot be read (kubectl converts YAML to JSON)")
        if not isinstance(value, dict | list) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            if None in value:
                raise _Refused("a mapping key is null")
            stack.extend(value.values())
        else:
            stack.extend(value)


def _check_aliasing(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it as go-yaml v2 refuses it (a YAML bomb).

    go-yaml counts every node it decodes, expanding aliases; when more than 100 of them
    come from aliases in a document of more than 1000, the share from aliases may be at
    most 99 % up to 400 000 nodes, falling to 10 % at 4 000 000.
    """
    sizes: dict[int, int] = {}
    unique = 0

    def size(node: yaml.Node) -> int:
        nonlocal unique
        known = sizes.get(id(node))
        if known is not None:
            return known
        unique += 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        sizes[id(node)] = total
        return total

    decoded = size(root)
    aliased = decoded - unique
    low, high = 400_000, 4_000_000
    if decoded <= low:
        allowed = 0.99
    elif decoded >= high:
        allowed = 0.10
    else:
        allowed = 0.99 - 0.89 * (decoded - low) / (high - low)
    if aliased > 100 and decoded > 1000 and aliased / decoded > allowed:
        raise _Refused("the document contains excessive aliasing")


def _load_yaml(text: str | bytes, path: str) -> Any:
    """Parse kubeconfig text as kubectl reads it; every failure is a ConfigError."""
    if len(text) > MAX_KUBECONFIG_BYTES:
        raise ConfigError(f"the kubeconfig is larger than {MAX_KUBECONFIG_BYTES} bytes", file=path)
    loader: _GoYamlLoader | None = None
    try:
        loader = _GoYamlLoader(text)
        # Only the first document counts, as with go-yaml: what follows is never parsed.
        if not loader.check_node():
            return None
        node = loader.get_node()
        assert node is not None  # check_node() said a document follows
        _check_aliasing(node)
        document = loader.construct_document(node)
        _check_jsonable(document)
        return document
    except _Refused as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"invalid YAML{where}", file=path) from None
    except (ValueError, TypeError, RecursionError, AttributeError, LookupError):
        # PyYAML's own constructors fail with these on explicitly tagged nonsense.
        raise ConfigError("invalid YAML", file=path) from None
    finally:
        if loader is not None:
            loader.dispose()
