"""The webhook server's certificate: PEM files reloaded when they change, and mutual TLS.

Rules: a certificate that cannot be loaded at start is a ``LocalProtocolError`` naming the
files; afterwards the files are compared (mtime, size, inode) at most every ``interval``
seconds, when a connection or a request asks for the context, and a new
``ssl.SSLContext`` (TLS 1.2+, ALPN ``http/1.1``) is built only when they changed. A reload
that fails (a half-written pair: cert and key that do not match yet) keeps the previous
context, is logged, and is tried again at the next check. ``reloads`` counts the
successful ones: the server closes kept-alive connections made with an older one. With a
client CA (``client_ca_file``, or :class:`RequireClientCertificates` around an in-memory
source) client certificates are verified against it, and required per route by the
server (``WebhookApp.precheck``), not by the handshake. Reading the clock is the
backend's (``current_time``).
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from dataclasses import dataclass

from kubemoon_core.errors import LocalProtocolError
from kubemoon_io import CertificateSource, load_cert_chain

from ._backend import current_time

__all__ = ["ReloadingCertificates", "RequireClientCertificates"]

logger = logging.getLogger("kubemoon.webhook")


@dataclass(frozen=True, slots=True)
class _FileStamp:
    mtime_ns: int
    size: int
    inode: int


def _stamp(path: str) -> _FileStamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _FileStamp(st.st_mtime_ns, st.st_size, st.st_ino)


class ReloadingCertificates:
    """The serving certificate, reloaded when its files change (checked per connection).

    Secrets mounted by the kubelet and written by cert-manager change in place: the files
    are compared by mtime, size and inode at most every ``interval`` seconds, and a new
    context is built when either changed. A half-written pair (cert and key that do not
    match yet) keeps the previous context and is tried again on the next check. With a
    ``client_ca_file`` every client must present a certificate that CA signed (mutual
    TLS); that file is watched as well.
    """

    def __init__(
        self, cert_file: str, key_file: str, interval: float, client_ca_file: str | None = None
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.interval = interval
        self._stamps = self._stamp_files()
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            raise LocalProtocolError(
                f"cannot load the webhook certificate {cert_file} and key {key_file}"
                f"{f' or the client CA {client_ca_file}' if client_ca_file else ''}: {exc}"
            ) from exc
        # Constructed outside the event loop too, so no clock yet: the first check is free.
        self._checked_at = -math.inf
        self.reloads = 0

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        load_cert_chain(context, self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL  # required per route: see precheck
        return context

    def _stamp_files(self) -> tuple[_FileStamp | None, ...]:
        files = [self.cert_file, self.key_file]
        if self.client_ca_file is not None:
            files.append(self.client_ca_file)
        return tuple(_stamp(name) for name in files)

    def context(self) -> ssl.SSLContext:
        """The context for a new handshake (after checking the files, if due)."""
        self.check()
        return self._context

    def check(self) -> int:
        """Reload the files if they changed (at most every ``interval`` s); the reload count."""
        now = current_time()
        if now - self._checked_at < self.interval:
            return self.reloads
        self._checked_at = now
        stamps = self._stamp_files()
        if stamps != self._stamps:
            try:
                self._context = self._load()
            except (OSError, ssl.SSLError) as exc:
                logger.warning(
                    "webhook certificate reload failed, keeping the previous one: %s",
                    exc,
                    extra={"cert_file": self.cert_file, "key_file": self.key_file},
                )
            else:
                self._stamps = stamps
                self.reloads += 1
                logger.info(
                    "webhook certificate reloaded from %s",
                    self.cert_file,
                    extra={"cert_file": self.cert_file, "key_file": self.key_file},
                )
        return self.reloads


class RequireClientCertificates:
    """An in-memory certificate source whose contexts verify a client certificate against
    ``ca_file`` (mutual TLS), as ``client_ca_file`` does for files."""

    def __init__(self, inner: CertificateSource, ca_file: str) -> None:
        self._inner = inner
        self._ca_file = ca_file
        self._prepared: ssl.SSLContext | None = None
        try:
            with open(ca_file, "rb"):
                pass
        except OSError as exc:
            raise LocalProtocolError(f"cannot read the client CA {ca_file}: {exc}") from exc

    @property
    def reloads(self) -> int:
        return self._inner.reloads

    def check(self) -> int:
        return self._inner.check()

    def context(self) -> ssl.SSLContext:
        context = self._inner.context()
        if context is not self._prepared:  # a new certificate: a new context to prepare once
            context.load_verify_locations(cafile=self._ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL  # required per route: see precheck
            self._prepared = context
        return context
