"""Option objects of the runtime: what :meth:`Manager.serve_webhooks` configures, as data.

Frozen dataclasses replace the keyword lists once forwarded from one constructor to the
next (14 to 19 of them): :class:`WebhookServerOptions` is what the HTTPS server needs,
:class:`WebhookOptions` what the self-managed webhooks need (and holds the former). The
keyword APIs build them (:meth:`WebhookOptions.from_keywords`), so they keep working.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import CertificatePolicy

from ._webhook_server import DEFAULT_INLINE_BODY_SIZE

__all__ = ["WebhookOptions", "WebhookServerOptions"]


@dataclass(frozen=True)
class WebhookServerOptions:
    """Where the webhook server listens and its limits (:class:`WebhookServer`'s defaults).

    ``client_ca_file`` turns on mutual TLS: only callers with a certificate of that CA are
    served. Reviews of at most ``inline_body_size`` bytes are handled on the event loop,
    longer ones on ``handler_threads`` worker threads (0: every review on a thread).
    """

    host: str = "0.0.0.0"
    port: int = 9443
    client_ca_file: str | os.PathLike[str] | None = None
    max_connections: int = 64
    max_handshakes: int = 64
    first_request_timeout: float = 10.0
    request_timeout: float = 30.0
    handler_threads: int = 4
    inline_body_size: int = DEFAULT_INLINE_BODY_SIZE


@dataclass(frozen=True)
class WebhookOptions:
    """How the self-managed webhooks are reached and their certificates kept.

    ``service`` (namespace, name) and ``service_port`` are how the API server reaches them
    (else ``advertise_host`` and the server's port); the CA and serving certificate live in
    ``secret`` (namespace, name; by default ``<declarations>-webhook-certs`` in the
    service's namespace), or come from the files of ``cert_dir``. ``policy`` sets the
    certificates' lifetimes; every ``refresh`` seconds each replica reloads them and every
    ``resync`` seconds the leader re-applies the configurations.
    """

    service: tuple[str, str] | None = None
    service_port: int = 443
    advertise_host: str | None = None
    secret: tuple[str, str] | None = None
    cert_dir: str | os.PathLike[str] | None = None
    policy: CertificatePolicy | None = None
    refresh: float = 10.0
    resync: float = 60.0
    server: WebhookServerOptions = field(default_factory=WebhookServerOptions)

    @classmethod
    def from_keywords(cls, **keywords: Any) -> WebhookOptions:
        """The options of the flat keyword form (``host=``, ``port=``, ``secret=``, ...).

        A keyword that is no option is a :class:`~kubemoon_core.errors.LocalProtocolError`
        naming it.
        """
        own = {f.name for f in dataclasses.fields(cls)} - {"server"}
        served = {f.name for f in dataclasses.fields(WebhookServerOptions)}
        unknown = sorted(set(keywords) - own - served)
        if unknown:
            raise LocalProtocolError(f"unknown webhook option(s): {', '.join(unknown)}")
        server = WebhookServerOptions(**{k: v for k, v in keywords.items() if k in served})
        return cls(**{k: v for k, v in keywords.items() if k in own}, server=server)
