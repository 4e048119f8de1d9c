"""The proxy a configuration asks for (``proxy-url``), ready for httpcore's proxy pools.

Rules: as kubectl: ``http://`` and ``https://`` proxies tunnel with CONNECT (the TLS session
with the API server runs inside the tunnel, so the proxy sees no request and no
credential), ``socks5://`` proxies through SOCKS5. Credentials in the proxy URL go to the
proxy only, as ``Proxy-Authorization`` (or SOCKS5 user/password), and never into a repr,
a log line or an error.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from kubemoon_core.kubeconfig import ClientConfig

__all__ = ["ProxySettings", "proxy_settings"]


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Where to connect to reach the API server: the proxy's URL (without credentials),
    its kind (``http``, ``https`` or ``socks5``), its credentials and, for an ``https``
    proxy, the TLS context to verify it with (the system roots)."""

    url: str
    kind: str
    auth: tuple[str, str] | None = field(default=None, repr=False)
    tls: ssl.SSLContext | None = field(default=None, repr=False)


def proxy_settings(config: ClientConfig) -> ProxySettings | None:
    """The proxy of ``config`` (already validated by the core), or None."""
    if config.proxy_url is None:
        return None
    parts = urlsplit(config.proxy_url)
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    url = f"{parts.scheme}://{host}{port}"
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    return ProxySettings(url=url, kind=parts.scheme, auth=auth, tls=tls)
