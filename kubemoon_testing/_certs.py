"""Throwaway certificates for webhook servers: a self-signed CA and a serving certificate.

Rules: for development, tests and demos only (production uses cert-manager). Keys are
P-256, certificates valid for a year and backdated an hour against clock skew. Files are
replaced with ``os.replace`` one at a time, as a Secret update can look to a reader: a
server may briefly see a new certificate with the old key and must cope.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WebhookCertificates"]


@dataclass(frozen=True, slots=True)
class _Material:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _generate(hosts: Sequence[str], common_name: str) -> _Material:
    # kubemoon_io's builder imports cryptography (the ``testing`` extra) when called.
    from kubemoon_io._x509 import issue_certificate  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)
    ca = issue_certificate(f"{common_name} CA", not_before=not_before, not_after=not_after)
    serving = issue_certificate(
        common_name, not_before=not_before, not_after=not_after, issuer=ca, hosts=hosts
    )
    return _Material(ca_pem=ca.cert_pem, cert_pem=serving.cert_pem, key_pem=serving.key_pem)


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class WebhookCertificates:
    """A CA and a serving certificate for a webhook on ``hosts``, written to ``directory``.

    Create with :meth:`create` (generates and writes ``ca.crt``, ``tls.crt``, ``tls.key``).
    :meth:`rotate` makes a new CA and certificate in memory; :attr:`ca_bundle` then trusts
    both the new and the previous CA, so inject it first and call :meth:`write` after:
    the API server accepts the old certificate and the new one throughout the swap.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
        common_name: str = "kubemoon-webhook",
    ) -> None:
        self.directory = Path(directory)
        self.hosts = tuple(hosts)
        self.common_name = common_name
        self._current = _generate(self.hosts, common_name)
        self._previous: list[bytes] = []

    def __repr__(self) -> str:
        return f"<WebhookCertificates {self.directory} hosts={','.join(self.hosts)}>"

    @classmethod
    def create(
        cls,
        directory: str | os.PathLike[str],
        *,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
        common_name: str = "kubemoon-webhook",
    ) -> WebhookCertificates:
        """Generate a CA and a serving certificate and write them to ``directory``."""
        certificates = cls(directory, hosts=hosts, common_name=common_name)
        certificates.directory.mkdir(parents=True, exist_ok=True)
        certificates.write()
        return certificates

    @property
    def cert_file(self) -> Path:
        """The serving certificate (PEM)."""
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        """The serving certificate's private key (PEM, mode 0600)."""
        return self.directory / "tls.key"

    @property
    def ca_file(self) -> Path:
        """The CA bundle file (PEM), as written by the last :meth:`write`."""
        return self.directory / "ca.crt"

    @property
    def ca_pem(self) -> bytes:
        """The current CA certificate alone (PEM)."""
        return self._current.ca_pem

    @property
    def ca_bundle(self) -> bytes:
        """The CA bundle to inject: the current CA, then every CA it replaced."""
        return b"".join([self._current.ca_pem, *self._previous])

    def rotate(self) -> None:
        """Make a new CA and serving certificate (in memory; :meth:`write` installs them)."""
        self._previous.insert(0, self._current.ca_pem)
        self._current = _generate(self.hosts, self.common_name)

    def forget_previous(self) -> None:
        """Stop trusting the CAs that :meth:`rotate` replaced (end of a rotation)."""
        self._previous.clear()

    def write(self) -> None:
        """Replace the files: the certificate first, then the key, then the CA bundle."""
        _replace(self.cert_file, self._current.cert_pem, 0o644)
        _replace(self.key_file, self._current.key_pem, 0o600)
        _replace(self.ca_file, self.ca_bundle, 0o644)
