"""Exec credential plugins: what the plugin is told, and how its answer is read.

Rules: the adapter runs the plugin (a process is I/O); this module builds the
``KUBERNETES_EXEC_INFO`` it is given (:func:`exec_info`) and decodes what it printed
(:func:`parse_exec_credential`) into an :class:`ExecCredential`, refusing anything that is
not an ``ExecCredential`` of the configured apiVersion with a token or a PEM client
certificate and key. Expiry is judged on wall-clock time the caller passes in. Errors are
:class:`ConfigError` and never quote the plugin's output: it holds the secret.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _json
from ._client_config import ClientConfig, ConfigError, ExecConfig
from ._errors import DecodeError
from ._redact import printable

__all__ = [
    "ExecCredential",
    "exec_info",
    "parse_exec_credential",
]

# The ExecCredential versions client-go speaks to plugins.
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


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
