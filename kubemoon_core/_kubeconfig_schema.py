"""What one kubeconfig document must look like, checked as kubectl's typed decoding checks it.

Rules: kubectl decodes each file into client-go's ``clientcmd/api/v1`` types, so a wrong
type anywhere (in any file, in an entry never used) fails the whole load; so does a
``*-data`` field that is not Go's padded base64, or a ``kind``/``apiVersion`` other than
``v1``/``Config``. :func:`_document` turns text or parsed YAML into a checked mapping;
the merging and selection rules are :mod:`._kubeconfig`'s. Errors are :class:`ConfigError`
naming the file and the key, and never echo a value (it may be a private key).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from ._client_config import ConfigError
from ._kubeconfig_yaml import _load_yaml
from ._redact import printable

__all__: list[str] = []


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


# What kubectl decodes a kubeconfig file into (client-go's clientcmd/api/v1 types, as JSON):
# a wrong type anywhere, in any file, fails the load of the whole configuration, whether or
# not the entry is ever used. "string", "bool", "bytes" (base64), "any", "strings" (a list of
# strings); a dict is an object with those fields (others ignored); ("list", T) and
# ("map", T) hold T.
_Schema = Any
_EXTENSIONS: _Schema = ("list", {"name": "string", "extension": "any"})
_CLUSTER: _Schema = {
    "server": "string",
    "tls-server-name": "string",
    "insecure-skip-tls-verify": "bool",
    "certificate-authority": "string",
    "certificate-authority-data": "bytes",
    "proxy-url": "string",
    "disable-compression": "bool",
    "extensions": _EXTENSIONS,
}
_EXEC: _Schema = {
    "command": "string",
    "args": "strings",
    "env": ("list", {"name": "string", "value": "string"}),
    "apiVersion": "string",
    "installHint": "string",
    "provideClusterInfo": "bool",
    "interactiveMode": "string",
}
_USER: _Schema = {
    "client-certificate": "string",
    "client-certificate-data": "bytes",
    "client-key": "string",
    "client-key-data": "bytes",
    "token": "string",
    "tokenFile": "string",
    "as": "string",
    "as-uid": "string",
    "as-groups": "strings",
    "as-user-extra": ("map", "strings"),
    "username": "string",
    "password": "string",
    "auth-provider": {"name": "string", "config": ("map", "string")},
    "exec": _EXEC,
    "extensions": _EXTENSIONS,
}
_CONTEXT: _Schema = {
    "cluster": "string",
    "user": "string",
    "namespace": "string",
    "extensions": _EXTENSIONS,
}
_CONFIG: _Schema = {
    "kind": "string",
    "apiVersion": "string",
    "preferences": {"colors": "bool", "extensions": _EXTENSIONS},
    "clusters": ("list", {"name": "string", "cluster": _CLUSTER}),
    "users": ("list", {"name": "string", "user": _USER}),
    "contexts": ("list", {"name": "string", "context": _CONTEXT}),
    "current-context": "string",
    "extensions": _EXTENSIONS,
}
_TYPE_NAMES = {
    "string": "a string",
    "bool": "true or false",
    "bytes": "a base64 string",
    "strings": "a list of strings",
}


def _check_type(value: Any, schema: _Schema, file: str, key: str) -> None:
    """Refuse ``value`` where kubectl's typed decoding of the file would fail."""
    if value is None or schema == "any":
        return  # JSON null decodes to the zero value of any type
    if schema == "string":
        ok = isinstance(value, str)
    elif schema == "bool":
        ok = isinstance(value, bool)
    elif schema == "bytes":
        if isinstance(value, str):
            _go_base64(value, file, key)
        ok = isinstance(value, str)
    elif schema == "strings":
        ok = isinstance(value, list) and all(isinstance(v, str | None) for v in value)
    elif isinstance(schema, dict):
        if not isinstance(value, Mapping):
            raise ConfigError("must be a mapping", file=file, key=key)
        for name, inner in schema.items():
            _check_type(value.get(name), inner, file, _join(key, name))
        return
    elif schema[0] == "list":
        if not isinstance(value, list):
            raise ConfigError("must be a list", file=file, key=key)
        for i, item in enumerate(value):
            _check_type(item, schema[1], file, f"{key}[{i}]")
        return
    else:  # ("map", T)
        if not isinstance(value, Mapping):
            raise ConfigError("must be a mapping", file=file, key=key)
        for name, item in value.items():
            _check_type(item, schema[1], file, _join(key, str(name)))
        return
    if not ok:
        raise ConfigError(f"must be {_TYPE_NAMES.get(schema, schema)}", file=file, key=key)


# Go's base64.StdEncoding as encoding/json uses it for []byte: padding required, and the
# line breaks of wrapped base64 (CR and LF, anywhere) ignored; nothing else.
_GO_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _go_base64(value: str, file: str, key: str) -> bytes:
    compact = value.replace("\r", "").replace("\n", "")
    if not _GO_BASE64.fullmatch(compact):
        # Never echo the value: it may be a private key.
        raise ConfigError("is not valid base64", file=file, key=key)
    return base64.b64decode(compact)


def _document(path: str, document: Mapping[str, Any] | str | bytes | None) -> Mapping[str, Any]:
    if isinstance(document, str | bytes):
        document = _load_yaml(document, path)
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError("a kubeconfig must be a mapping", file=path)
    _check_type(document, _CONFIG, path, "")
    kind = document.get("kind") or ""
    version = document.get("apiVersion") or ""
    if (kind, version) not in (("", ""), ("Config", ""), ("", "v1"), ("Config", "v1")):
        shown = printable(f"{version}/{kind}", 100)
        raise ConfigError(f"not a kubeconfig: {shown!r} (expected v1/Config)", file=path)
    return document
