"""Kubeconfig documents, merged as kubectl merges them, and the frozen client configuration.

Rules: this module reads no file, no environment and no clock; adapters hand it the text (or
parsed YAML) of each kubeconfig file with the file's path, the environment of an in-cluster
pod, and wall-clock times. Merging follows kubectl: the first file to set a map key
(a cluster, user or context name) wins and entries are never merged field by field; the
first non-empty ``current-context`` wins. File references are resolved against the directory
of the file that holds them. Every configuration error is a :class:`ConfigError` naming the
file and the key. Secrets (tokens, passwords, keys, exec output) never appear in a ``repr``
or an error message.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit

import yaml

from . import _json
from ._errors import DecodeError, KubeMoonError, LocalProtocolError

__all__ = [
    "ClientConfig",
    "ConfigError",
    "ExecConfig",
    "ExecCredential",
    "Kubeconfig",
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
    relative path with a separator; a bare name is looked up on ``PATH`` when run.
    """

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False
    install_hint: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Everything an adapter needs to reach one API server as one identity.

    Produced by :meth:`Kubeconfig.select` or :func:`in_cluster_config`, or built directly.
    ``*_data`` fields hold decoded bytes (PEM); ``*_file`` fields hold absolute paths when
    they came from a kubeconfig. When both a file and data are set, the data wins (as in
    client-go). A ``token_file`` is re-read by the adapters when it changes on disk and
    wins over ``token``.
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

    def __post_init__(self) -> None:
        _split_server(self.server, self.source)
        if (self.client_cert_file or self.client_cert_data) and not (
            self.client_key_file or self.client_key_data
        ):
            raise ConfigError("a client certificate needs a client key", file=self.source)
        if (self.client_key_file or self.client_key_data) and not (
            self.client_cert_file or self.client_cert_data
        ):
            raise ConfigError("a client key needs a client certificate", file=self.source)
        if (self.username is None) != (self.password is None):
            raise ConfigError("basic auth needs both username and password", file=self.source)
        if self.insecure_skip_tls_verify and (self.ca_file or self.ca_data):
            raise ConfigError(
                "insecure-skip-tls-verify cannot be combined with a certificate authority",
                file=self.source,
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
        if any(ch in target for ch in "\\#") or any(
            ord(ch) < 0x21 or ord(ch) == 0x7F for ch in target
        ):
            raise LocalProtocolError(f"request target {target!r} is not a safe path")
        path = target.split("?", 1)[0]
        if any(segment in (".", "..") for segment in path.split("/")):
            raise LocalProtocolError(f"request target {target!r} has dot segments")
        # A path that starts with exactly one "/" cannot change the authority of the URL.
        return f"{self.origin}{self.base_path}{target}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _split_server(server: object, source: str) -> tuple[str, str, int, str]:
    if not isinstance(server, str) or not server:
        raise ConfigError("the cluster has no server URL", file=source, key="server")
    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"invalid server URL {server!r}: {exc}", file=source) from None
    if parts.scheme not in ("https", "http"):
        raise ConfigError(f"server URL must be https:// or http://, got {server!r}", file=source)
    if not parts.hostname:
        raise ConfigError(f"server URL has no host: {server!r}", file=source)
    if parts.username is not None or parts.query or parts.fragment:
        raise ConfigError(
            f"server URL must not carry credentials, a query or a fragment: {parts.hostname}",
            file=source,
        )
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One named cluster, user or context, with where it came from."""

    name: str
    body: Mapping[str, Any]
    file: str
    key: str


@dataclass(frozen=True, slots=True)
class Kubeconfig:
    """Kubeconfig documents merged by kubectl's rules; :meth:`select` makes a ClientConfig."""

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
        if not name:
            raise ConfigError("no context chosen and no current-context set", file=where)
        ctx = self.contexts.get(name)
        if ctx is None:
            key = "current-context" if context is None else "context"
            raise ConfigError(f"context {name!r} is not defined", file=where, key=key)
        cluster_name = _string(ctx.body, "cluster", ctx.file, ctx.key)
        user_name = _string(ctx.body, "user", ctx.file, ctx.key)
        namespace = _string(ctx.body, "namespace", ctx.file, ctx.key) or "default"
        if not cluster_name:
            raise ConfigError(
                "the context names no cluster", file=ctx.file, key=f"{ctx.key}.cluster"
            )
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            raise ConfigError(
                f"cluster {cluster_name!r} is not defined", file=ctx.file, key=f"{ctx.key}.cluster"
            )
        user: _Entry | None = None
        if user_name:
            user = self.users.get(user_name)
            if user is None:
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


def _string(body: Mapping[str, Any], name: str, file: str, key: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError("must be a string", file=file, key=_join(key, name))
    return value


def _bool(body: Mapping[str, Any], name: str, file: str, key: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError("must be true or false", file=file, key=f"{key}.{name}")
    return value


def _data(body: Mapping[str, Any], name: str, file: str, key: str) -> bytes | None:
    value = _string(body, name, file, key)
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        # Never echo the value: it may be a private key.
        raise ConfigError("is not valid base64", file=file, key=f"{key}.{name}") from None


def _path(body: Mapping[str, Any], name: str, file: str, key: str) -> str | None:
    value = _string(body, name, file, key)
    if not value:
        return None
    return _resolve(value, file)


def _resolve(value: str, file: str) -> str:
    path = PurePath(value)
    if path.is_absolute() or not file:
        return value
    return str(PurePath(file).parent / path)


_CLUSTER_KEYS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "proxy-url",
        "disable-compression",
        "extensions",
    }
)


def _cluster_settings(entry: _Entry) -> dict[str, Any]:
    body, file, key = entry.body, entry.file, entry.key
    server = _string(body, "server", file, key)
    if not server:
        raise ConfigError("the cluster has no server", file=file, key=f"{key}.server")
    if _string(body, "proxy-url", file, key):
        raise ConfigError("proxy-url is not supported", file=file, key=f"{key}.proxy-url")
    try:
        _split_server(server, file)
    except ConfigError as exc:
        raise ConfigError(exc.reason, file=file, key=f"{key}.server") from None
    return {
        "server": server,
        "ca_file": _path(body, "certificate-authority", file, key),
        "ca_data": _data(body, "certificate-authority-data", file, key),
        "insecure_skip_tls_verify": _bool(body, "insecure-skip-tls-verify", file, key),
        "tls_server_name": _string(body, "tls-server-name", file, key) or None,
    }


def _user_settings(entry: _Entry, cluster: _Entry) -> dict[str, Any]:
    body, file, key = entry.body, entry.file, entry.key
    for unsupported in ("auth-provider", "as", "as-groups", "as-uid", "as-user-extra"):
        if body.get(unsupported):
            raise ConfigError("is not supported", file=file, key=f"{key}.{unsupported}")
    username = _string(body, "username", file, key) or None
    password = _string(body, "password", file, key) or None
    if (username is None) != (password is None):
        raise ConfigError("basic auth needs both username and password", file=file, key=key)
    settings: dict[str, Any] = {
        "client_cert_file": _path(body, "client-certificate", file, key),
        "client_cert_data": _data(body, "client-certificate-data", file, key),
        "client_key_file": _path(body, "client-key", file, key),
        "client_key_data": _data(body, "client-key-data", file, key),
        "token": _string(body, "token", file, key) or None,
        "token_file": _path(body, "tokenFile", file, key),
        "username": username,
        "password": password,
        "exec": _exec_config(body.get("exec"), file, f"{key}.exec"),
    }
    has_cert = settings["client_cert_file"] or settings["client_cert_data"]
    has_key = settings["client_key_file"] or settings["client_key_data"]
    if bool(has_cert) != bool(has_key):
        raise ConfigError("a client certificate and key go together", file=file, key=key)
    return settings


def _exec_config(raw: Any, file: str, key: str) -> ExecConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError("must be a mapping", file=file, key=key)
    api_version = _string(raw, "apiVersion", file, key)
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"unsupported exec apiVersion {api_version!r} (use one of {EXEC_API_VERSIONS})",
            file=file,
            key=f"{key}.apiVersion",
        )
    command = _string(raw, "command", file, key)
    if not command:
        raise ConfigError("the exec plugin has no command", file=file, key=f"{key}.command")
    # A relative command with a separator is relative to the kubeconfig; a bare name is a
    # PATH lookup left to the adapter.
    if "/" in command or "\\" in command:
        command = _resolve(command, file)
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError("must be a list of strings", file=file, key=f"{key}.args")
    env: list[tuple[str, str]] = []
    raw_env = raw.get("env") or []
    if not isinstance(raw_env, list):
        raise ConfigError("must be a list", file=file, key=f"{key}.env")
    for i, item in enumerate(raw_env):
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise ConfigError("must have string name and value", file=file, key=f"{key}.env[{i}]")
        env.append((item["name"], item["value"]))
    mode = _string(raw, "interactiveMode", file, key)
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
        provide_cluster_info=_bool(raw, "provideClusterInfo", file, key),
        install_hint=_string(raw, "installHint", file, key),
        source=file,
    )


def _document(path: str, document: Mapping[str, Any] | str | bytes | None) -> Mapping[str, Any]:
    if isinstance(document, str | bytes):
        try:
            document = yaml.safe_load(document)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"invalid YAML{where}", file=path) from None
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError("a kubeconfig must be a mapping", file=path)
    return document


def _entries(doc: Mapping[str, Any], section: str, inner: str, path: str) -> list[_Entry]:
    raw = doc.get(section)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("must be a list", file=path, key=section)
    out = []
    for i, item in enumerate(raw):
        key = f"{section}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError("must be a mapping", file=path, key=key)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError("has no name", file=path, key=f"{key}.name")
        body = item.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise ConfigError("must be a mapping", file=path, key=f"{key}.{inner}")
        out.append(_Entry(name, body, path, f"{key}.{inner}"))
    return out


def merge_kubeconfigs(
    sources: Sequence[tuple[str, Mapping[str, Any] | str | bytes | None]],
) -> Kubeconfig:
    """Merge kubeconfig documents given as ``(path, text-or-parsed-YAML)``, in order.

    As kubectl does with ``KUBECONFIG``: the first document to define a cluster, user or
    context name wins (later definitions of that name are ignored whole), and the first
    non-empty ``current-context`` wins. Relative file paths are resolved against each
    document's own directory. Pass only files that exist; an empty document is empty.
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
            current = _string(doc, "current-context", path, "")
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


def parse_exec_credential(output: bytes, exec_config: ExecConfig) -> ExecCredential:
    """Decode the standard output of an exec plugin into an :class:`ExecCredential`.

    The output must be an ``ExecCredential`` of the configured apiVersion with a token or a
    client certificate and key. Errors never quote the output (it holds the secret).
    """
    where = {"file": exec_config.source, "key": f"exec {exec_config.command}"}
    try:
        document = _json.loads(output)
    except DecodeError:
        raise ConfigError("the exec plugin did not print valid JSON", **where) from None
    if not isinstance(document, Mapping) or document.get("kind") != "ExecCredential":
        raise ConfigError("the exec plugin did not print an ExecCredential", **where)
    if document.get("apiVersion") != exec_config.api_version:
        raise ConfigError(
            f"the exec plugin answered apiVersion {str(document.get('apiVersion'))[:80]!r}, "
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
