"""JSON Patch (RFC 6902): compute a patch from two documents, and apply one.

Rules: documents are plain JSON values (dict, list, str, int, float, bool, None). Equality
is JSON equality with types kept apart (``True`` is not ``1``, ``1`` is not ``1.0``), so
applying ``json_patch(a, b)`` to ``a`` gives a document that encodes exactly like ``b``.
Nothing is mutated in place: both functions work on copies. Errors while applying name
the operation index and its pointer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import KubeMoonError

__all__ = [
    "JSONPatchError",
    "apply_json_patch",
    "escape_pointer_token",
    "json_patch",
]

Operation = dict[str, Any]


class JSONPatchError(KubeMoonError):
    """A JSON Patch cannot be applied (bad pointer, failed ``test``, malformed operation)."""


def escape_pointer_token(token: str) -> str:
    """One reference token of a JSON Pointer (RFC 6901): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps bool, int and float apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)  # 0.0 and -0.0 encode differently
    return bool(a == b)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality as RFC 6902 section 4.6 defines it for ``test``: numbers compare by
    value (``1`` equals ``1.0``), but a boolean is never a number (``true`` is not ``1``)."""
    if _number(a) and _number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# An array whose element-wise diff needs more operations than this, and more than half
# its length, is replaced as a whole: one insertion at the front would otherwise shift
# every element into an operation of its own.
_ARRAY_OPS_LIMIT = 16


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def json_patch(original: Any, modified: Any) -> list[Operation]:
    """The RFC 6902 operations that turn ``original`` into ``modified`` (``[]`` if equal).

    Objects are compared key by key and arrays index by index (extra elements are added
    at the end or removed from the end), so a small change gives a small patch. An array
    whose element-wise diff would take more than 16 operations and more than half its
    length (an element inserted at the front of a long list) becomes one ``replace``.
    """
    ops: list[Operation] = []
    _diff(original, modified, "", ops)
    return ops


def _diff(a: Any, b: Any, path: str, ops: list[Operation]) -> None:
    # Values go into operations as copies (_copy), so the patch shares nothing with the
    # inputs; nothing else is copied.
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{escape_pointer_token(key)}"})
        for key, value in b.items():
            child = f"{path}/{escape_pointer_token(key)}"
            if key in a:
                _diff(a[key], value, child, ops)
            else:
                ops.append({"op": "add", "path": child, "value": _copy(value)})
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        # Past this many operations the array is replaced whole: stop diffing it there.
        limit = max(_ARRAY_OPS_LIMIT, max(len(a), len(b)) // 2)
        common = min(len(a), len(b))
        elements: list[Operation] = []
        for index in range(common):
            _diff(a[index], b[index], f"{path}/{index}", elements)
            if len(elements) > limit:
                break
        else:
            # Removed from the end backwards, so the indexes stay valid as we go.
            for index in range(len(a) - 1, common - 1, -1):
                elements.append({"op": "remove", "path": f"{path}/{index}"})
            for index in range(common, len(b)):
                elements.append({"op": "add", "path": f"{path}/{index}", "value": _copy(b[index])})
        if len(elements) > limit:
            ops.append({"op": "replace", "path": path, "value": _copy(b)})
        else:
            ops.extend(elements)
    elif not _same(_plain(a), _plain(b)):
        ops.append({"op": "replace", "path": path, "value": _copy(b)})


def _plain(value: Any) -> Any:
    """A Mapping as a dict and a tuple as a list (what _copy makes of them), else itself."""
    if isinstance(value, Mapping | list | tuple) and not isinstance(value, dict | list):
        return _copy(value)
    return value


def _parse_pointer(pointer: Any, where: str) -> list[str]:
    if not isinstance(pointer, str):
        raise JSONPatchError(f"{where}: a JSON pointer must be a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JSONPatchError(f"{where}: JSON pointer {pointer!r} must start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        if raw.replace("~0", "").replace("~1", "").count("~"):
            raise JSONPatchError(f"{where}: bad '~' escape in JSON pointer {pointer!r}")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def _index(container: list[Any], token: str, where: str, *, end_ok: bool) -> int:
    if token == "-" and end_ok:
        return len(container)
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise JSONPatchError(f"{where}: {token!r} is not an array index")
    index = int(token)
    if index > len(container) or (index == len(container) and not end_ok):
        raise JSONPatchError(f"{where}: index {index} is out of range")
    return index


def _parent(doc: Any, tokens: list[str], where: str) -> Any:
    """The container holding the last token (every earlier token must exist)."""
    node = doc
    for token in tokens[:-1]:
        node = _get(node, token, where)
    return node


def _get(node: Any, token: str, where: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise JSONPatchError(f"{where}: member {token!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, where, end_ok=False)]
    raise JSONPatchError(f"{where}: cannot descend into a {type(node).__name__}")


def _resolve(doc: Any, tokens: list[str], where: str) -> Any:
    node = doc
    for token in tokens:
        node = _get(node, token, where)
    return node


def _add(doc: Any, tokens: list[str], value: Any, where: str) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens, where)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], where, end_ok=True), value)
    else:
        raise JSONPatchError(f"{where}: cannot add into a {type(parent).__name__}")
    return doc


def _remove(doc: Any, tokens: list[str], where: str) -> tuple[Any, Any]:
    """Remove the target; return the document and the removed value."""
    if not tokens:
        raise JSONPatchError(f"{where}: cannot remove the whole document")
    parent = _parent(doc, tokens, where)
    removed = _get(parent, tokens[-1], where)
    if isinstance(parent, dict):
        del parent[tokens[-1]]
    else:
        del parent[_index(parent, tokens[-1], where, end_ok=False)]
    return doc, removed


def apply_json_patch(document: Any, patch: Sequence[Mapping[str, Any]] | Any) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) to a copy.

    Raises :class:`JSONPatchError` naming the failing operation; ``document`` itself is
    never modified.
    """
    if not isinstance(patch, Sequence) or isinstance(patch, str | bytes):
        raise JSONPatchError("a JSON patch must be a list of operations")
    doc = _copy(document)
    for number, op in enumerate(patch):
        where = f"operation {number}"
        if not isinstance(op, Mapping):
            raise JSONPatchError(f"{where}: an operation must be an object")
        name = op.get("op")
        tokens = _parse_pointer(op.get("path"), where)
        if name in ("add", "replace", "test") and "value" not in op:
            raise JSONPatchError(f"{where}: {name!r} needs a 'value'")
        if name == "add":
            doc = _add(doc, tokens, _copy(op["value"]), where)
        elif name == "remove":
            doc, _ = _remove(doc, tokens, where)
        elif name == "replace":
            if tokens:
                _resolve(doc, tokens, where)  # the target must exist
                doc, _ = _remove(doc, tokens, where)
            doc = _add(doc, tokens, _copy(op["value"]), where)
        elif name in ("move", "copy"):
            source = _parse_pointer(op.get("from"), where)
            if name == "move":
                if tokens[: len(source)] == source and len(tokens) > len(source):
                    raise JSONPatchError(f"{where}: cannot move a value into itself")
                doc, value = _remove(doc, source, where)
            else:
                value = _copy(_resolve(doc, source, where))
            doc = _add(doc, tokens, value, where)
        elif name == "test":
            if not _equal(_resolve(doc, tokens, where), op["value"]):
                raise JSONPatchError(f"{where}: test failed at {op['path']!r}")
        else:
            raise JSONPatchError(f"{where}: unknown op {name!r}")
    return doc
