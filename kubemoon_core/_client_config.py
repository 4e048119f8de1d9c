"""The frozen client configuration: one API server reached as one identity.

Rules: :class:`ClientConfig` is what every adapter is built from, whether it came from a
kubeconfig (:mod:`._kubeconfig`), from a pod's environment (:func:`in_cluster_config`) or
from user code. It checks its server URL once (https or http, an IDNA-encoded host, no
credentials, query or fragment in the URL) and :meth:`ClientConfig.url` keeps every request
target on that origin. :class:`ExecConfig` lives here because a ClientConfig holds one; how
an exec plugin is run and answered is :mod:`._exec_credentials`. Nothing here reads a
file, the environment or a clock; secrets never appear in a ``repr`` or an error message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from urllib.parse import urlsplit

from ._errors import KubeMoonError, LocalProtocolError
from ._redact import REDACTED, printable, redact_url

__all__ = [
    "ClientConfig",
    "ConfigError",
    "ExecConfig",
    "SERVICE_ACCOUNT_DIR",
    "in_cluster_config",
]

# Where a pod finds its ServiceAccount token, CA bundle and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
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
