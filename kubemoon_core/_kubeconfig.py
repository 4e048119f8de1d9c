"""Kubeconfig documents, merged as kubectl merges them, and the frozen client configuration.

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
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import math
import ntpath
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import PurePath, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from . import _json
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._redact import REDACTED, printable, redact_url

__all__ = [
    "ClientConfig",
    "ConfigError",
    "ExecConfig",
    "ExecCredential",
    "Kubeconfig",
    "MAX_KUBECONFIG_BYTES",
    "SERVICE_ACCOUNT_DIR",
    "exec_info",
    "in_cluster_config",
    "merge_kubeconfigs",
    "parse_exec_credential",
]

# Where a pod finds its ServiceAccount token, CA bundle and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
# The proxy schemes client-go accepts in a cluster's proxy-url.
PROXY_SCHEMES = ("http", "https", "socks5")
# The longest install hint kept: it is printed to a person, never a dump.
_INSTALL_HINT_LIMIT = 2000


class ConfigError(KubeMoonError):
    """The configuration is missing, malformed or unsupported.

    ``file`` names the kubeconfig file (or other source) and ``key`` the offending key in
    JSON-path style (``users[0].user.client-key-data``); either may be empty.
    """

    def __init__(self, message: str, *, file: str = "", key: str = "") -> None:
        where = ": ".join(part for part in (file, key) if part)
        super().__init__(f"{where}: {message}" if where else message)
        self.reason = message
        self.file = file
        self.key = key


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """An exec credential plugin (``users[].user.exec``).

    ``command`` is already resolved against the kubeconfig's directory when it is a
    relative path holding the platform's separator (``/`` on POSIX; a backslash is none
    there); any other name is looked up on ``PATH`` when run.
    ``install_hint`` is kept sanitised as client-go does: control and format characters
    other than tab, newline and carriage return (a terminal escape, a bidi override) are
    written as ``U+XXXX``, so printing it cannot drive the terminal. The ``repr`` redacts
    ``args`` and ``env`` (they often carry secrets), as client-go does.
    """

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False
    install_hint: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        hint = printable(self.install_hint, _INSTALL_HINT_LIMIT)
        if hint != self.install_hint:
            object.__setattr__(self, "install_hint", hint)

    def __repr__(self) -> str:
        return (
            f"ExecConfig(api_version={self.api_version!r}, command={self.command!r}, "
            f"args=[{len(self.args)} {REDACTED}], env=[{len(self.env)} {REDACTED}], "
            f"interactive_mode={self.interactive_mode!r}, "
            f"provide_cluster_info={self.provide_cluster_info!r}, "
            f"install_hint={self.install_hint!r}, source={self.source!r})"
        )


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Everything an adapter needs to reach one API server as one identity.

    Produced by :meth:`Kubeconfig.select` or :func:`in_cluster_config`, or built directly.
    ``*_data`` fields hold decoded bytes (PEM); ``*_file`` fields hold the paths a kubeconfig
    gave, joined to its directory when relative. A kubeconfig entry that sets both a file
    and data for the same thing is refused (client-go's clientcmd validation refuses it
    too); on a ClientConfig built directly both may be set and the data wins, as with
    client-go's ``rest.Config``. A ``token_file`` is re-read by the adapters when it
    changes on disk and wins over ``token``; a token (or token file) together with basic
    auth is refused, as client-go refuses it. A ``username`` alone is basic auth with an
    empty password (client-go's rule); a ``password`` alone sends nothing.
    ``insecure_skip_tls_verify`` with a certificate authority is refused for an
    ``https://`` server only: for ``http://`` no TLS setting is read (kubectl's rule).
    ``proxy_url`` is the cluster's ``proxy-url`` (``http``, ``https`` or ``socks5``, as
    client-go accepts), checked here and left to the adapters to use. A non-ASCII server
    host is encoded with IDNA (:attr:`host`, :attr:`origin`, :attr:`host_header` are
    ASCII). The ``repr`` shows no
    credential: tokens, passwords, keys and certificates, exec arguments and environment,
    and the user information of the proxy URL are redacted.
    """

    server: str
    ca_file: str | None = None
    ca_data: bytes | None = field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_file: str | None = None
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_file: str | None = None
    client_key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    exec: ExecConfig | None = None
    namespace: str = "default"
    context: str | None = None
    source: str = ""
    proxy_url: str | None = None

    def __post_init__(self) -> None:
        _split_server(self.server, self.source)
        if self.proxy_url is not None:
            _check_proxy(self.proxy_url, self.source, "")
        if (self.client_cert_file or self.client_cert_data) and not (
            self.client_key_file or self.client_key_data
        ):
            raise ConfigError("a client certificate needs a client key", file=self.source)
        if (self.client_key_file or self.client_key_data) and not (
            self.client_cert_file or self.client_cert_data
        ):
            raise ConfigError("a client key needs a client certificate", file=self.source)
        if (self.token or self.token_file) and self.username is not None:
            raise ConfigError(_TWO_METHODS, file=self.source)
        # kubectl reads no TLS setting for an http:// server, so none can conflict.
        if (
            self.insecure_skip_tls_verify
            and (self.ca_file or self.ca_data)
            and _split_server(self.server, self.source)[0] == "https"
        ):
            raise ConfigError(
                "insecure-skip-tls-verify cannot be combined with a certificate authority",
                file=self.source,
            )

    def __repr__(self) -> str:
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in _SECRET_FIELDS and value is not None:
                text = REDACTED
            elif item.name == "proxy_url" and value is not None:
                text = repr(redact_url(value))
            else:
                text = repr(value)
            shown.append(f"{item.name}={text}")
        return f"ClientConfig({', '.join(shown)})"

    @property
    def credentials_over_plain_http(self) -> bool:
        """True when requests would carry credentials (a bearer token, basic auth, an exec
        plugin's output) to an ``http://`` server, where anyone on the path can read them.

        Adapters warn about it as they warn about ``insecure-skip-tls-verify``: see
        :meth:`plain_http_warning`. (A client certificate is not a credential sent in the
        clear: without TLS it is simply not used.)
        """
        if self.scheme != "http":
            return False
        return bool(self.token or self.token_file or self.username is not None or self.exec)

    def plain_http_warning(self) -> str | None:
        """The warning an adapter emits (and logs) when it builds a client for this
        configuration, or None when there is nothing to warn about."""
        if not self.credentials_over_plain_http:
            return None
        return (
            f"credentials are sent to {self.origin} over plain http: anyone who can see the "
            "traffic can read and reuse them; use an https:// server"
        )

    @property
    def scheme(self) -> str:
        """``https`` or ``http``."""
        return _split_server(self.server, self.source)[0]

    @property
    def host(self) -> str:
        """The host name or IP address of the server (without brackets)."""
        return _split_server(self.server, self.source)[1]

    @property
    def port(self) -> int:
        """The TCP port of the server (443/80 when the URL does not say)."""
        return _split_server(self.server, self.source)[2]

    @property
    def base_path(self) -> str:
        """A path prefix of the server URL (``""`` for most servers)."""
        return _split_server(self.server, self.source)[3]

    @property
    def origin(self) -> str:
        """``scheme://host:port``: the only place requests and credentials may go."""
        scheme, host, port, _ = _split_server(self.server, self.source)
        return f"{scheme}://{_bracket(host)}:{port}"

    @property
    def host_header(self) -> str:
        """The ``Host`` header value for this server."""
        scheme, host, port, _ = _split_server(self.server, self.source)
        default = 443 if scheme == "https" else 80
        return _bracket(host) if port == default else f"{_bracket(host)}:{port}"

    def url(self, target: str) -> str:
        """The absolute URL of a request target, refusing anything outside the origin.

        ``target`` is a ``Request.target``: an absolute path with an optional query. An
        absolute URL, a scheme-relative ``//host`` path, a backslash, a fragment or a
        control character is refused with :class:`LocalProtocolError`.
        """
        if not isinstance(target, str) or not target.startswith("/") or target.startswith("//"):
            raise LocalProtocolError(f"request target {target!r} is not a path on the server")
        # One C-level search each (every request passes here): a backslash, a fragment or a
        # control character; a "." or ".." path segment.
        if _UNSAFE_TARGET.search(target):
            raise LocalProtocolError(f"request target {target!r} is not a safe path")
        if _DOT_SEGMENT.search(target.split("?", 1)[0]):
            raise LocalProtocolError(f"request target {target!r} has dot segments")
        # A path that starts with exactly one "/" cannot change the authority of the URL.
        return f"{self.origin}{self.base_path}{target}"


_TWO_METHODS = (
    "more than one authentication method found (a token and basic auth); only one is allowed"
)
_SECRET_FIELDS = frozenset({"ca_data", "client_cert_data", "client_key_data", "token", "password"})
# A host name once IDNA-encoded: letters, digits, "-" and "_" in dot-separated labels.
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
# What a request target may not hold: a backslash, a fragment, a control character (C0,
# space, DEL); and a path segment that is exactly "." or "..".
_UNSAFE_TARGET = re.compile(r"[\\#\x00-\x20\x7f]")
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _shown(url: str) -> str:
    """A URL as an error message may show it: no user information, no control characters."""
    return repr(printable(redact_url(url)))


def _ascii_host(host: str, what: str, source: str) -> str:
    """``host`` as it goes on the wire: a name IDNA-encoded and checked; an IPv6 literal as
    it is (``urlsplit`` has already checked the brackets' content)."""
    if ":" in host:
        return host
    try:
        encoded = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        encoded = ""
    if not _HOST_NAME.fullmatch(encoded):
        raise ConfigError(
            f"{what} has a host that is not a valid DNS name: {printable(host, 100)!r}",
            file=source,
        )
    return encoded


def _split_server(server: object, source: str) -> tuple[str, str, int, str]:
    if not isinstance(server, str) or not server:
        raise ConfigError("the cluster has no server URL", file=source, key="server")
    return _split_url(server, source)


@functools.lru_cache(maxsize=64)
def _split_url(server: str, source: str) -> tuple[str, str, int, str]:
    # Cached: adapters read origin and host_header on every request.
    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"invalid server URL {_shown(server)}: {exc}", file=source) from None
    if parts.scheme not in ("https", "http"):
        raise ConfigError(
            f"server URL must be https:// or http://, got {_shown(server)}", file=source
        )
    if not parts.hostname:
        raise ConfigError(f"server URL has no host: {_shown(server)}", file=source)
    host = _ascii_host(parts.hostname, "server URL", source)
    if parts.username is not None or parts.query or parts.fragment:
        raise ConfigError(
            f"server URL must not carry credentials, a query or a fragment: {host}",
            file=source,
        )
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.scheme, host, port, parts.path.rstrip("/")


def _check_proxy(proxy: object, source: str, key: str) -> str:
    """Check a ``proxy-url`` as client-go does; errors never show its user information."""
    if not isinstance(proxy, str) or not proxy:
        raise ConfigError("proxy-url must be a non-empty string", file=source, key=key)
    try:
        parts = urlsplit(proxy)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise ConfigError(
            f"invalid proxy-url {_shown(proxy)}: {exc}", file=source, key=key
        ) from None
    if parts.scheme not in PROXY_SCHEMES:
        raise ConfigError(
            f"proxy-url must be http, https or socks5, got {_shown(proxy)}", file=source, key=key
        )
    if not parts.hostname:
        raise ConfigError(f"proxy-url has no host: {_shown(proxy)}", file=source, key=key)
    _ascii_host(parts.hostname, "proxy-url", source)
    # A path, a query or a fragment is accepted and ignored, as client-go does.
    return proxy


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


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


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


def in_cluster_config(
    env: Mapping[str, str],
    *,
    base_dir: str = SERVICE_ACCOUNT_DIR,
    namespace: str | None = None,
) -> ClientConfig:
    """The configuration of a pod: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and its ServiceAccount.

    The token file (``base_dir/token``) is re-read by the adapters when it rotates; the CA
    bundle is ``base_dir/ca.crt``. ``namespace`` is the content of ``base_dir/namespace``
    as read by the adapter (``default`` when None).
    """
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
            "must be set",
            file="environment",
            key="KUBERNETES_SERVICE_HOST" if not host else "KUBERNETES_SERVICE_PORT",
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("not a port number", file="environment", key="KUBERNETES_SERVICE_PORT")
    base = PurePath(base_dir)
    return ClientConfig(
        server=f"https://{_bracket(host)}:{port}",
        ca_file=str(base / "ca.crt"),
        token_file=str(base / "token"),
        namespace=(namespace or "").strip() or "default",
        context=None,
        source=str(base),
    )


@dataclass(frozen=True, slots=True)
class ExecCredential:
    """What an exec plugin returned: a token and/or a client certificate, and its expiry.

    ``expiration`` is wall-clock seconds since the epoch, or None for "until a 401".
    """

    token: str | None = field(default=None, repr=False)
    client_certificate_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)
    expiration: float | None = None

    def expired(self, now: float) -> bool:
        """True once ``now`` (wall-clock epoch seconds) has reached the expiration."""
        return self.expiration is not None and now >= self.expiration


def exec_info(exec_config: ExecConfig, cluster: ClientConfig | None = None) -> str:
    """The ``KUBERNETES_EXEC_INFO`` value for a non-interactive run of the plugin."""
    spec: dict[str, Any] = {"interactive": False}
    if exec_config.provide_cluster_info and cluster is not None:
        info: dict[str, Any] = {"server": cluster.server}
        if cluster.tls_server_name:
            info["tls-server-name"] = cluster.tls_server_name
        if cluster.insecure_skip_tls_verify:
            info["insecure-skip-tls-verify"] = True
        if cluster.ca_data:
            info["certificate-authority-data"] = base64.b64encode(cluster.ca_data).decode()
        spec["cluster"] = info
    document = {"apiVersion": exec_config.api_version, "kind": "ExecCredential", "spec": spec}
    return _json.dumps(document).decode()


def _timestamp(value: str) -> float:
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("a timestamp needs a time zone")
    return moment.timestamp()


# A PEM block: a BEGIN line, base64 lines, the END line with the same label (RFC 7468).
_PEM_BLOCK = re.compile(
    r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\s]*?)-----END \1-----", re.ASCII
)
_CERTIFICATE_LABEL = re.compile(r"CERTIFICATE")
_PRIVATE_KEY_LABEL = re.compile(r"(?:RSA |EC |ENCRYPTED )?PRIVATE KEY")


def _is_pem(text: str, label: re.Pattern[str]) -> bool:
    """Whether ``text`` holds a PEM block with a matching label and a base64 body.

    The core cannot load the certificate (no ssl here); the adapter's TLS context does,
    and a non-PEM value is refused early with a message that never quotes it.
    """
    found = False
    for block in _PEM_BLOCK.finditer(text):
        try:
            base64.b64decode("".join(block.group(2).split()), validate=True)
        except (binascii.Error, ValueError):
            return False
        found = found or label.fullmatch(block.group(1)) is not None
    return found


def parse_exec_credential(output: bytes, exec_config: ExecConfig) -> ExecCredential:
    """Decode the standard output of an exec plugin into an :class:`ExecCredential`.

    The output must be an ``ExecCredential`` of the configured apiVersion with a token, a
    client certificate and key (PEM, as ``clientCertificateData`` and ``clientKeyData``
    hold them), or both; the certificate and key are carried as PEM bytes for the adapter's
    TLS context. Errors never quote the output (it holds the secret).
    """
    where = {"file": exec_config.source, "key": f"exec {exec_config.command}"}
    try:
        document = _json.loads(output)
    except DecodeError:
        raise ConfigError("the exec plugin did not print valid JSON", **where) from None
    if not isinstance(document, Mapping) or document.get("kind") != "ExecCredential":
        raise ConfigError("the exec plugin did not print an ExecCredential", **where)
    if document.get("apiVersion") != exec_config.api_version:
        answered = printable(str(document.get("apiVersion")), 80)
        raise ConfigError(
            f"the exec plugin answered apiVersion {answered!r}, "
            f"expected {exec_config.api_version!r}",
            **where,
        )
    status = document.get("status")
    if not isinstance(status, Mapping):
        raise ConfigError("the ExecCredential has no status", **where)
    token = status.get("token")
    cert = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    if token is not None and not isinstance(token, str):
        raise ConfigError("status.token must be a string", **where)
    if not all(v is None or isinstance(v, str) for v in (cert, key)):
        raise ConfigError("status client certificate data must be strings", **where)
    if bool(cert) != bool(key):
        raise ConfigError("status needs both clientCertificateData and clientKeyData", **where)
    if not token and not cert:
        raise ConfigError("status has neither a token nor a client certificate", **where)
    if cert and not _is_pem(cert, _CERTIFICATE_LABEL):
        raise ConfigError("status.clientCertificateData is not a PEM certificate", **where)
    if key and not _is_pem(key, _PRIVATE_KEY_LABEL):
        raise ConfigError("status.clientKeyData is not a PEM private key", **where)
    expiration: float | None = None
    raw_expiry = status.get("expirationTimestamp")
    if raw_expiry is not None:
        try:
            if not isinstance(raw_expiry, str):
                raise TypeError
            expiration = _timestamp(raw_expiry)
        except (ValueError, TypeError, OverflowError):
            raise ConfigError(
                "status.expirationTimestamp is not an RFC 3339 time", **where
            ) from None
    return ExecCredential(
        token=token or None,
        client_certificate_data=cert.encode() if isinstance(cert, str) and cert else None,
        client_key_data=key.encode() if isinstance(key, str) and key else None,
        expiration=expiration,
    )
