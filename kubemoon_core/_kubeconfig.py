"""Kubeconfig documents merged as kubectl merges them, and the context a client selects.

Rules: this module reads no file, no environment and no clock; adapters hand it the text (or
parsed YAML) of each kubeconfig file with the file's path, the environment of an in-cluster
pod, and wall-clock times. Merging follows kubectl: the first file to set a map key
(a cluster, user or context name) wins and entries are never merged field by field; the
first non-empty ``current-context`` wins; one file naming two entries alike is refused, as
client-go refuses it. Relative file references are joined to the directory of the file that
holds them and cleaned lexically, as Go's ``filepath.Join`` does; absolute ones are used as
written. Every configuration error is a :class:`ConfigError` naming the file and the key.
Secrets (tokens, passwords, keys, exec arguments, environment and output, user information
in URLs) never appear in a ``repr`` or an error message.

Its neighbours: :mod:`._kubeconfig_yaml` reads the text as kubectl's YAML reader does,
:mod:`._kubeconfig_schema` checks each document's types, :mod:`._client_config` holds the
:class:`ClientConfig` a context becomes, and :mod:`._exec_credentials` speaks to exec
plugins.
"""

from __future__ import annotations

import ntpath
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import Any

from ._client_config import (
    _TWO_METHODS,
    ClientConfig,
    ConfigError,
    ExecConfig,
    _check_proxy,
    _split_server,
)
from ._exec_credentials import EXEC_API_VERSIONS
from ._kubeconfig_schema import _document, _go_base64
from ._redact import REDACTED, printable, redact_url

__all__ = [
    "Kubeconfig",
    "merge_kubeconfigs",
]

# The interactiveMode values client-go accepts for an exec plugin.
_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")


# Entry fields shown as written in a repr; every other field is redacted (deny by default:
# an unknown field, an auth-provider's config or an extension may hold anything).
_SHOWN_FIELDS = frozenset(
    {
        "certificate-authority",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "disable-compression",
        "client-certificate",
        "client-key",
        "tokenFile",
        "username",
        "cluster",
        "user",
        "namespace",
    }
)
_SHOWN_EXEC_FIELDS = frozenset(
    {"apiVersion", "command", "interactiveMode", "provideClusterInfo", "installHint"}
)


def _redacted(body: Mapping[str, Any]) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for name, value in body.items():
        if value is None or name in _SHOWN_FIELDS:
            shown[name] = value
        elif name in ("server", "proxy-url") and isinstance(value, str):
            shown[name] = redact_url(value)
        elif name == "exec" and isinstance(value, Mapping):
            shown[name] = {k: v if k in _SHOWN_EXEC_FIELDS else REDACTED for k, v in value.items()}
        else:
            shown[name] = REDACTED
    return shown


class _Body(dict[str, Any]):
    """The fields of a kubeconfig entry, whose repr redacts every secret."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(_redacted(self))

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class _Entry:
    """One named cluster, user or context, with where it came from."""

    name: str
    body: Mapping[str, Any]
    file: str
    key: str


@dataclass(frozen=True, slots=True)
class Kubeconfig:
    """Kubeconfig documents merged by kubectl's rules; :meth:`select` makes a ClientConfig.

    Its ``repr`` (and that of every entry) shows names, files and harmless fields only:
    tokens, passwords, keys, exec arguments and environment are redacted.
    """

    clusters: Mapping[str, _Entry]
    users: Mapping[str, _Entry]
    contexts: Mapping[str, _Entry]
    current_context: str
    files: tuple[str, ...]

    @property
    def context_names(self) -> tuple[str, ...]:
        """The names of all contexts, in file order."""
        return tuple(self.contexts)

    def select(self, context: str | None = None) -> ClientConfig:
        """The configuration of ``context``, or of ``current-context`` when None."""
        where = ", ".join(self.files) or "kubeconfig"
        name = context if context is not None else self.current_context
        ctx = self.contexts.get(name)
        if ctx is None and not name:
            raise ConfigError("no context chosen and no current-context set", file=where)
        if ctx is None:
            key = "current-context" if context is None else "context"
            raise ConfigError(f"context {name!r} is not defined", file=where, key=key)
        cluster_name = _string(ctx.body, "cluster")
        user_name = _string(ctx.body, "user")
        namespace = _string(ctx.body, "namespace") or "default"
        # As kubectl: a name is looked up even when empty (an entry may be nameless).
        cluster = self.clusters.get(cluster_name)
        if cluster is None and not cluster_name:
            raise ConfigError(
                "the context names no cluster", file=ctx.file, key=f"{ctx.key}.cluster"
            )
        if cluster is None:
            raise ConfigError(
                f"cluster {cluster_name!r} is not defined", file=ctx.file, key=f"{ctx.key}.cluster"
            )
        user = self.users.get(user_name)
        if user is None and user_name:
            raise ConfigError(
                f"user {user_name!r} is not defined", file=ctx.file, key=f"{ctx.key}.user"
            )
        settings: dict[str, Any] = {"namespace": namespace, "context": name}
        settings.update(_cluster_settings(cluster))
        if user is not None:
            settings.update(_user_settings(user, cluster))
        try:
            return ClientConfig(**settings, source=cluster.file)
        except ConfigError as exc:
            raise ConfigError(exc.reason, file=cluster.file, key=cluster.key) from None


def _string(body: Mapping[str, Any], name: str) -> str:
    """A string field ("" when unset); :func:`_check_type` has checked its type at load."""
    value = body.get(name)
    return value if isinstance(value, str) else ""


def _bool(body: Mapping[str, Any], name: str) -> bool:
    """A boolean field (False when unset); its type was checked at load."""
    return body.get(name) is True


def _data(body: Mapping[str, Any], name: str, file: str, key: str) -> bytes | None:
    value = _string(body, name)
    return _go_base64(value, file, f"{key}.{name}") or None if value else None


def _path(body: Mapping[str, Any], name: str, file: str, key: str) -> str | None:
    value = _string(body, name)
    if not value:
        return None
    if "\x00" in value:  # no file can have that name (kubectl: "invalid argument")
        raise ConfigError("the path contains a NUL character", file=file, key=f"{key}.{name}")
    return _resolve(value, file)


# Lexical cleaning as Go's filepath.Clean does it, in this platform's path flavour.
_PATHS: Any = posixpath if isinstance(PurePath(), PurePosixPath) else ntpath


def _resolve(value: str, file: str) -> str:
    """Join a relative ``value`` to the directory of ``file`` and clean the result, as
    client-go's ``filepath.Join`` does; an absolute path is returned as written."""
    path = PurePath(value)
    if path.is_absolute() or not file:
        return value
    joined: str = _PATHS.normpath(str(PurePath(file).parent / path))
    # POSIX keeps a leading "//"; Go's Clean does not.
    if joined.startswith("//") and not joined.startswith("///"):
        joined = joined[1:]
    return joined


def _cluster_settings(entry: _Entry) -> dict[str, Any]:
    body, file, key = entry.body, entry.file, entry.key
    server = _string(body, "server")
    if not server:
        raise ConfigError("the cluster has no server", file=file, key=f"{key}.server")
    proxy = _string(body, "proxy-url") or None
    if proxy is not None:
        _check_proxy(proxy, file, f"{key}.proxy-url")
    try:
        _split_server(server, file)
    except ConfigError as exc:
        raise ConfigError(exc.reason, file=file, key=f"{key}.server") from None
    _one_of(body, "certificate-authority", file, key)
    return {
        "server": server,
        "ca_file": _path(body, "certificate-authority", file, key),
        "ca_data": _data(body, "certificate-authority-data", file, key),
        "insecure_skip_tls_verify": _bool(body, "insecure-skip-tls-verify"),
        "tls_server_name": _string(body, "tls-server-name") or None,
        "proxy_url": proxy,
    }


def _one_of(body: Mapping[str, Any], name: str, file: str, key: str) -> None:
    """client-go's validation refuses a file and data for the same thing."""
    if body.get(name) and body.get(f"{name}-data"):
        raise ConfigError(f"{name}-data and {name} are both set; set one", file=file, key=key)


def _user_settings(entry: _Entry, cluster: _Entry) -> dict[str, Any]:
    body, file, key = entry.body, entry.file, entry.key
    for unsupported in ("auth-provider", "as", "as-groups", "as-uid", "as-user-extra"):
        if body.get(unsupported):
            raise ConfigError("is not supported", file=file, key=f"{key}.{unsupported}")
    # As client-go: a username alone is basic auth with an empty password; a password
    # alone authenticates nothing (but still counts as a method next to a token).
    username = _string(body, "username") or None
    password = _string(body, "password") or None
    if body.get("token") and (username is not None or password is not None):
        raise ConfigError(_TWO_METHODS, file=file, key=key)
    if username is not None and body.get("tokenFile"):
        raise ConfigError(_TWO_METHODS, file=file, key=key)
    has_cert = bool(body.get("client-certificate") or body.get("client-certificate-data"))
    if has_cert:
        _one_of(body, "client-certificate", file, key)
        _one_of(body, "client-key", file, key)
    settings: dict[str, Any] = {
        "client_cert_file": _path(body, "client-certificate", file, key),
        "client_cert_data": _data(body, "client-certificate-data", file, key),
        # A key without a certificate is ignored, as client-go ignores it.
        "client_key_file": _path(body, "client-key", file, key) if has_cert else None,
        "client_key_data": _data(body, "client-key-data", file, key) if has_cert else None,
        "token": _string(body, "token") or None,
        "token_file": _path(body, "tokenFile", file, key),
        "username": username,
        "password": password,
        "exec": _exec_config(body.get("exec"), file, f"{key}.exec"),
    }
    if has_cert and not (settings["client_key_file"] or settings["client_key_data"]):
        raise ConfigError("a client certificate needs a client key", file=file, key=key)
    return settings


def _exec_config(raw: Any, file: str, key: str) -> ExecConfig | None:
    if raw is None:
        return None
    # The types of every field were checked at load (_check_type); what is left is what
    # client-go validates on the selected user.
    api_version = _string(raw, "apiVersion")
    if not api_version:
        raise ConfigError("the exec plugin has no apiVersion", file=file, key=f"{key}.apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"unsupported exec apiVersion {api_version!r} (use one of {EXEC_API_VERSIONS})",
            file=file,
            key=f"{key}.apiVersion",
        )
    command = _string(raw, "command")
    if not command:
        raise ConfigError("the exec plugin has no command", file=file, key=f"{key}.command")
    # A relative command with this platform's separator is relative to the kubeconfig
    # (client-go checks filepath.Separator only: "\\" is no separator on POSIX); a bare
    # name is a PATH lookup left to the adapter.
    if _PATHS.sep in command:
        command = _resolve(command, file)
    args = [a or "" for a in raw.get("args") or ()]  # a null argument is "", as in Go
    env: list[tuple[str, str]] = []
    for i, item in enumerate(raw.get("env") or ()):
        # As client-go: the name is required, a missing value (or a null entry) is empty.
        entry = item or {}
        name = _string(entry, "name")
        if not name:
            raise ConfigError(
                "the environment variable has no name", file=file, key=f"{key}.env[{i}]"
            )
        env.append((name, _string(entry, "value")))
    # No process can be given a NUL character (kubectl fails when it runs the plugin).
    if any("\x00" in text for text in (command, *args, *(n + v for n, v in env))):
        raise ConfigError("the exec plugin contains a NUL character", file=file, key=key)
    mode = _string(raw, "interactiveMode")
    if not mode:
        if api_version.endswith("/v1"):
            raise ConfigError(
                "interactiveMode is required for exec apiVersion v1",
                file=file,
                key=f"{key}.interactiveMode",
            )
        mode = "IfAvailable"
    if mode not in _INTERACTIVE_MODES:
        raise ConfigError(
            f"interactiveMode must be one of {_INTERACTIVE_MODES}",
            file=file,
            key=f"{key}.interactiveMode",
        )
    return ExecConfig(
        api_version=api_version,
        command=command,
        args=tuple(args),
        env=tuple(env),
        interactive_mode=mode,
        provide_cluster_info=_bool(raw, "provideClusterInfo"),
        install_hint=_string(raw, "installHint"),
        source=file,
    )


def _entries(doc: Mapping[str, Any], section: str, inner: str, path: str) -> list[_Entry]:
    # Types were checked at load (_check_type): a list of mappings or nulls.
    out = []
    names: set[str] = set()
    for i, raw_item in enumerate(doc.get(section) or ()):
        key = f"{section}[{i}]"
        item = raw_item or {}  # null: an empty, nameless entry
        # A missing name is the name "" (kubectl accepts it; only a context naming no
        # cluster or user, or an empty current-context, reaches it).
        name = item.get("name") or ""
        if name in names:
            # client-go refuses the file rather than pick one of the two.
            raise ConfigError(
                f"duplicate name {printable(name, 100)!r} in {section}",
                file=path,
                key=f"{key}.name",
            )
        names.add(name)
        body = item.get(inner) or {}
        out.append(_Entry(name, _Body(body), path, f"{key}.{inner}"))
    return out


def merge_kubeconfigs(
    sources: Sequence[tuple[str, Mapping[str, Any] | str | bytes | None]],
) -> Kubeconfig:
    """Merge kubeconfig documents given as ``(path, text-or-parsed-YAML)``, in order.

    As kubectl does with ``KUBECONFIG``: the first document to define a cluster, user or
    context name wins (later definitions of that name are ignored whole), and the first
    non-empty ``current-context`` wins; a name defined twice in one document is refused.
    Relative file paths are resolved against each document's own directory. Pass only
    files that exist; an empty document is empty.
    """
    clusters: dict[str, _Entry] = {}
    users: dict[str, _Entry] = {}
    contexts: dict[str, _Entry] = {}
    current = ""
    for path, raw in sources:
        doc = _document(path, raw)
        for target, section, inner in (
            (clusters, "clusters", "cluster"),
            (users, "users", "user"),
            (contexts, "contexts", "context"),
        ):
            for entry in _entries(doc, section, inner, path):
                target.setdefault(entry.name, entry)
        if not current:
            current = _string(doc, "current-context")
    return Kubeconfig(clusters, users, contexts, current, tuple(path for path, _ in sources))
