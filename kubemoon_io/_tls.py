"""The ``ssl.SSLContext`` of a :class:`~kubemoon_core.kubeconfig.ClientConfig`, shared by both
adapters.

Rules: system trust roots unless a CA file or CA data is configured (then only that CA);
hostname checking always on, except with ``insecure-skip-tls-verify``, which the config
must say explicitly and which warns (:class:`InsecureTLSWarning`) and logs. Client
certificates given as data go through 0600 temporary files that are deleted at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
import warnings
from collections.abc import Iterator

from kubemoon_core._client_config import ClientConfig, ConfigError

__all__ = ["InsecureTLSWarning", "check_transport", "load_cert_chain", "ssl_context"]

logger = logging.getLogger("kubemoon.tls")


class InsecureTLSWarning(UserWarning):
    """The configuration turned TLS verification off (``insecure-skip-tls-verify``), or
    sends credentials over plain ``http://``."""


def check_transport(config: ClientConfig) -> None:
    """Warn (and log) about credentials sent over plain http."""
    message = config.plain_http_warning()
    if message is not None:
        warnings.warn(message, InsecureTLSWarning, stacklevel=3)
        logger.warning("%s", message)


class _EncryptedKey(Exception):
    """OpenSSL asked for a passphrase: the key is encrypted."""


def _refuse_passphrase() -> bytes:
    raise _EncryptedKey


def load_cert_chain(
    context: ssl.SSLContext,
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str] | None,
) -> None:
    """``context.load_cert_chain`` that never asks for a passphrase.

    Without a password callback OpenSSL prompts on the controlling terminal for an
    encrypted key, blocking the calling thread (the event loop) until someone types; here
    an encrypted key raises :class:`ssl.SSLError` at once, as any other unusable key does.
    """
    try:
        context.load_cert_chain(cert_file, key_file, password=_refuse_passphrase)
    except _EncryptedKey:
        raise ssl.SSLError(
            0, "the private key is encrypted (a key with a passphrase is not supported)"
        ) from None


@contextlib.contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """Write each content to a 0600 file in a 0700 directory; delete them all afterwards."""
    with tempfile.TemporaryDirectory(prefix="kubemoon-") as directory:
        paths = []
        for index, content in enumerate(contents):
            path = os.path.join(directory, f"{index}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, content)
            finally:
                os.close(fd)
            paths.append(path)
        yield paths


def _load_client_cert(
    context: ssl.SSLContext,
    config: ClientConfig,
    cert_data: bytes | None,
    key_data: bytes | None,
) -> None:
    cert_data = cert_data or config.client_cert_data
    key_data = key_data or config.client_key_data
    cert_file, key_file = config.client_cert_file, config.client_key_file
    if not (cert_data or cert_file):
        return
    try:
        if cert_data is None and key_data is None:
            assert cert_file is not None
            load_cert_chain(context, cert_file, key_file)
            return
        cert = cert_data if cert_data is not None else _read(cert_file, config)
        key = key_data if key_data is not None else _read(key_file, config)
        with _private_files(cert, key) as (cert_path, key_path):
            load_cert_chain(context, cert_path, key_path)
    except (ssl.SSLError, OSError) as exc:
        # The reason only: never the key material.
        reason = getattr(exc, "reason", None) or exc.strerror or type(exc).__name__
        raise ConfigError(
            f"cannot load the client certificate and key: {reason}",
            file=config.source,
            key="client-certificate",
        ) from None


def _read(path: str | None, config: ClientConfig) -> bytes:
    if path is None:
        raise ConfigError("a client certificate needs a client key", file=config.source)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", file=config.source) from None


def ssl_context(
    config: ClientConfig,
    *,
    client_cert_data: bytes | None = None,
    client_key_data: bytes | None = None,
) -> ssl.SSLContext:
    """Build the TLS context for ``config``.

    ``client_cert_data``/``client_key_data`` override the configured client certificate
    (an exec plugin may return one).
    """
    if config.insecure_skip_tls_verify:
        message = (
            f"TLS verification of {config.origin} is disabled by insecure-skip-tls-verify "
            f"in {config.source or 'the configuration'}"
        )
        warnings.warn(message, InsecureTLSWarning, stacklevel=3)
        logger.warning("%s", message)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif config.ca_data:
        try:
            context = ssl.create_default_context(cadata=config.ca_data.decode("ascii"))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"certificate-authority-data is not a PEM certificate: {exc}",
                file=config.source,
                key="certificate-authority-data",
            ) from None
    elif config.ca_file:
        try:
            context = ssl.create_default_context(cafile=config.ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"cannot load certificate-authority {config.ca_file}: {exc}",
                file=config.source,
                key="certificate-authority",
            ) from None
    else:
        context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    _load_client_cert(context, config, client_cert_data, client_key_data)
    return context
