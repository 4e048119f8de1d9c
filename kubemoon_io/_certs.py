"""Webhook certificates: generated with ``cryptography``, kept in a Secret, served from memory.

Rules: :class:`CertificateMaterial` is the content of the certificate Secret (CA, next CA,
serving certificate and key, the CA bundle to publish, and when it was published and
switched); it reads any Secret without raising (what it cannot parse counts as missing, so
the planner replaces it), performs one :class:`~kubemoon_core.webhooks.CertificatePlan` step and
writes the Secret back. Keys are P-256. :class:`ServingCertificate` is the server's
certificate source held in memory: :meth:`ServingCertificate.update` swaps the
``ssl.SSLContext`` atomically, and a pair that does not load keeps the previous one.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import math
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import (
    CertificateAction,
    CertificateFacts,
    CertificatePlan,
    CertificatePolicy,
    CertificateState,
)

from ._tls import _private_files, load_cert_chain
from ._x509 import IssuedCertificate, issue_certificate

__all__ = [
    "CertificateMaterial",
    "CertificateSource",
    "ServingCertificate",
    "pem_fingerprints",
    "require_cryptography",
]

_ANNOTATION = "webhooks.kubemoon.dev/"
PUBLISHED = _ANNOTATION + "ca-bundle-published"
SWITCHED = _ANNOTATION + "ca-switched-at"
_BEGIN = b"-----BEGIN CERTIFICATE-----"


def require_cryptography() -> None:
    """Raise :class:`~kubemoon_core.errors.LocalProtocolError` without ``cryptography``."""
    _x509()


def _x509() -> Any:
    try:
        from cryptography import x509  # noqa: PLC0415 - optional dependency
    except ImportError as exc:  # pragma: no cover - installed with the webhooks extra
        raise LocalProtocolError(
            "managed webhook certificates need the 'cryptography' package "
            "(pip install 'kubemoon[webhooks]')"
        ) from exc
    return x509


def _split(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, each ending in a newline."""
    parts = bundle.split(_BEGIN)
    return [_BEGIN + p.rstrip() + b"\n" for p in parts[1:] if p.strip()]


def _load(pem: bytes) -> Any:
    try:
        return _x509().load_pem_x509_certificate(pem)
    except (ValueError, TypeError):
        return None


def _fingerprint(cert: Any) -> str:
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415

    return str(cert.fingerprint(hashes.SHA256()).hex())


def _facts(cert: Any) -> CertificateFacts:
    return CertificateFacts(
        _fingerprint(cert),
        cert.not_valid_before_utc.timestamp(),
        cert.not_valid_after_utc.timestamp(),
    )


def pem_fingerprints(bundle: bytes) -> list[str]:
    """The SHA-256 fingerprints of the certificates of a PEM bundle (unparsable ones skipped)."""
    return [_fingerprint(c) for pem in _split(bundle) if (c := _load(pem)) is not None]


def _pair_ok(cert_pem: bytes, key_pem: bytes) -> Any:
    """The certificate if ``key_pem`` is its private key, else None."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    cert = _load(cert_pem)
    if cert is None:
        return None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != cert.public_key().public_bytes(
        encoding, public
    ):
        return None
    return cert


def _issued_by(cert: Any, ca: Any) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return False
    return True


def _hosts(cert: Any) -> tuple[str, ...]:
    x509 = _x509()
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    names = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
    names += [str(n) for n in sans.get_values_for_type(x509.IPAddress)]
    return tuple(names)


def _generate(
    common_name: str,
    now: float,
    validity: float,
    backdate: float,
    *,
    issuer: tuple[bytes, bytes] | None,
    hosts: Sequence[str] = (),
    not_after_cap: float | None = None,
) -> tuple[bytes, bytes]:
    """A CA (``issuer`` None) or a serving certificate signed by ``issuer`` (cert, key)."""
    _x509()  # cryptography is installed, or LocalProtocolError

    def when(t: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(int(t), datetime.UTC)

    not_after = now + validity
    if not_after_cap is not None:
        not_after = min(not_after, not_after_cap)
    issued = issue_certificate(
        common_name,
        not_before=when(now - backdate),
        not_after=when(not_after),
        issuer=None if issuer is None else IssuedCertificate(*issuer),
        usage="server",
        hosts=hosts,
    )
    return issued.cert_pem, issued.key_pem


def _b64(value: object) -> bytes:
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _millis(when: float) -> str:
    # Rounded down: a recorded time is never later than the event, so no wait it starts
    # ends late.
    return f"{math.floor(when * 1000) / 1000:.3f}"


@dataclass(frozen=True, slots=True)
class CertificateMaterial:
    """The content of the certificate Secret (PEM bytes; empty when absent)."""

    ca_cert: bytes = b""
    ca_key: bytes = b""
    next_ca_cert: bytes = b""
    next_ca_key: bytes = b""
    cert: bytes = b""
    key: bytes = b""
    bundle: bytes = b""
    published: str | None = None
    published_at: float | None = None
    switched_at: float | None = None

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any] | None) -> CertificateMaterial:
        """Read a Secret as returned by the API server (None: no Secret yet)."""
        if not isinstance(secret, Mapping):
            return cls()
        data = secret.get("data")
        data = data if isinstance(data, Mapping) else {}
        metadata = secret.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        annotations = annotations if isinstance(annotations, Mapping) else {}
        published, published_at = None, None
        text = annotations.get(PUBLISHED)
        if isinstance(text, str) and len(parts := text.split()) == 2:
            published, published_at = parts[0], _number(parts[1])
            if published_at is None:
                published = None
        switched = annotations.get(SWITCHED)
        return cls(
            ca_cert=_b64(data.get("ca.crt")),
            ca_key=_b64(data.get("ca.key")),
            next_ca_cert=_b64(data.get("next-ca.crt")),
            next_ca_key=_b64(data.get("next-ca.key")),
            cert=_b64(data.get("tls.crt")),
            key=_b64(data.get("tls.key")),
            bundle=_b64(data.get("ca-bundle.crt")),
            published=published,
            published_at=published_at,
            switched_at=_number(switched) if isinstance(switched, str) else None,
        )

    def secret(self, namespace: str, name: str) -> dict[str, Any]:
        """The Secret holding this material (without a resourceVersion)."""
        files = {
            "ca.crt": self.ca_cert,
            "ca.key": self.ca_key,
            "next-ca.crt": self.next_ca_cert,
            "next-ca.key": self.next_ca_key,
            "tls.crt": self.cert,
            "tls.key": self.key,
            "ca-bundle.crt": self.bundle,
        }
        annotations = {}
        if self.published is not None and self.published_at is not None:
            annotations[PUBLISHED] = f"{self.published} {_millis(self.published_at)}"
        if self.switched_at is not None:
            annotations[SWITCHED] = _millis(self.switched_at)
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "type": "Opaque",
            "data": {k: base64.b64encode(v).decode("ascii") for k, v in files.items() if v},
        }

    @property
    def bundle_digest(self) -> str:
        """The SHA-256 of the bundle (what a publication confirms)."""
        return hashlib.sha256(self.bundle).hexdigest()

    def state(self) -> CertificateState:
        """The planner's view of this material (unusable parts are left out)."""
        ca = _pair_ok(self.ca_cert, self.ca_key)
        nxt = _pair_ok(self.next_ca_cert, self.next_ca_key)
        serving = _pair_ok(self.cert, self.key)
        issuer = None
        if serving is not None:
            for candidate in (ca, nxt):
                if candidate is not None and _issued_by(serving, candidate):
                    issuer = _fingerprint(candidate)
                    break
        return CertificateState(
            ca=_facts(ca) if ca is not None else None,
            next_ca=_facts(nxt) if nxt is not None else None,
            serving=_facts(serving) if serving is not None else None,
            serving_issuer=issuer,
            serving_hosts=_hosts(serving) if serving is not None else (),
            bundle=tuple(pem_fingerprints(self.bundle)),
            bundle_digest=self.bundle_digest,
            published=self.published,
            published_at=self.published_at,
            switched_at=self.switched_at,
        )

    def published_now(self, now: float) -> CertificateMaterial:
        """This material with its current bundle recorded as published at ``now``."""
        return dataclasses.replace(self, published=self.bundle_digest, published_at=now)

    def perform(
        self,
        plan: CertificatePlan,
        *,
        hosts: Sequence[str],
        policy: CertificatePolicy,
        now: float,
        common_name: str = "kubemoon-webhook",
    ) -> CertificateMaterial:
        """The material after ``plan``'s step (NONE: unchanged)."""
        action = plan.action

        def new_ca() -> tuple[bytes, bytes]:
            return _generate(
                f"{common_name} CA {int(now)}",
                now,
                policy.ca_validity,
                policy.backdate,
                issuer=None,
            )

        def serving(ca: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
            ca_after = _load(ca[0]).not_valid_after_utc.timestamp()
            return _generate(
                common_name,
                now,
                policy.serving_validity,
                policy.backdate,
                issuer=ca,
                hosts=hosts,
                not_after_cap=ca_after,
            )

        if action is CertificateAction.NONE:
            return self
        if action is CertificateAction.CREATE:
            ca = new_ca()
            cert, key = serving(ca)
            return CertificateMaterial(ca[0], ca[1], b"", b"", cert, key, ca[0])
        if action is CertificateAction.RENEW_SERVING:
            cert, key = serving((self.ca_cert, self.ca_key))
            return dataclasses.replace(self, cert=cert, key=key)
        if action is CertificateAction.ADD_NEXT_CA:
            nxt = new_ca()
            return dataclasses.replace(
                self, next_ca_cert=nxt[0], next_ca_key=nxt[1], bundle=self.bundle + nxt[0]
            )
        if action is CertificateAction.SWITCH_CA:
            nxt = (self.next_ca_cert, self.next_ca_key)
            cert, key = serving(nxt)
            # The new CA first, then the old one until the overlap ends.
            others = [p for p in _split(self.bundle) if p.strip() != nxt[0].strip()]
            return dataclasses.replace(
                self,
                ca_cert=nxt[0],
                ca_key=nxt[1],
                next_ca_cert=b"",
                next_ca_key=b"",
                cert=cert,
                key=key,
                bundle=b"".join([nxt[0], *others]),
                switched_at=now,
            )
        # SET_BUNDLE: the wanted fingerprints, from every CA this material knows.
        pool: dict[str, bytes] = {}
        for pem in [self.ca_cert, self.next_ca_cert, *_split(self.bundle)]:
            cert_obj = _load(pem) if pem else None
            if cert_obj is not None:
                pool.setdefault(_fingerprint(cert_obj), pem.rstrip() + b"\n")
        return dataclasses.replace(self, bundle=b"".join(pool[f] for f in plan.bundle if f in pool))


class CertificateSource(Protocol):
    """Where a webhook server gets the context of each handshake (files or memory).

    ``context()`` is asked for every handshake; ``check()`` returns a generation number that
    changes whenever the certificate did (kept-alive connections then end after their next
    answer); ``reloads`` counts those changes.
    """

    @property
    def reloads(self) -> int:
        """How many times the certificate changed since start."""
        ...

    def context(self) -> ssl.SSLContext:
        """The context for a new handshake."""
        ...

    def check(self) -> int:
        """Reload if due; the number of reloads so far."""
        ...


class ServingCertificate:
    """The webhook server's certificate held in memory, swapped atomically.

    A drop-in for the file-watching source of :class:`~kubemoon_trio.WebhookServer`:
    :meth:`context` is the context of the next handshake and :attr:`reloads` counts swaps
    (a kept-alive connection closes after its answer once it changed).
    """

    # A serving certificate with its chain is a few KiB; a Secret holds at most 1 MiB.
    MAX_SIZE = 64 * 1024

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._pair: tuple[bytes, bytes] = (b"", b"")
        self._refused: tuple[tuple[bytes, bytes], str] | None = None
        self.reloads = 0

    def __repr__(self) -> str:
        return f"<ServingCertificate loaded={self.loaded} reloads={self.reloads}>"

    @property
    def loaded(self) -> bool:
        """True once a certificate was loaded."""
        return self._context is not None

    @property
    def pem(self) -> bytes:
        """The certificate being served (PEM; empty before the first load)."""
        return self._pair[0]

    def update(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Serve this pair from the next handshake on; False when it is the same pair.

        A pair that does not load, or either part longer than ``MAX_SIZE`` bytes,
        raises :class:`~kubemoon_core.errors.LocalProtocolError` and the previous certificate
        stays; the same refused pair offered again is refused without parsing it again.
        """
        if (cert_pem, key_pem) == self._pair:
            return False
        if self._refused is not None and self._refused[0] == (cert_pem, key_pem):
            raise LocalProtocolError(self._refused[1])
        try:
            self._load(cert_pem, key_pem)
        except LocalProtocolError as exc:
            self._refused = ((cert_pem, key_pem), str(exc))
            raise
        self._refused = None
        return True

    def _load(self, cert_pem: bytes, key_pem: bytes) -> None:
        for part, value in (("certificate", cert_pem), ("key", key_pem)):
            if len(value) > self.MAX_SIZE:
                raise LocalProtocolError(
                    f"the webhook {part} is {len(value)} bytes, more than the "
                    f"{self.MAX_SIZE} accepted"
                )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        try:
            with _private_files(cert_pem, key_pem) as (cert_file, key_file):
                load_cert_chain(context, cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise LocalProtocolError(f"cannot load the webhook certificate: {exc}") from exc
        if self._context is not None:
            self.reloads += 1
        self._context, self._pair = context, (cert_pem, key_pem)

    def context(self) -> ssl.SSLContext:
        """The context for a new handshake."""
        if self._context is None:
            raise LocalProtocolError("no webhook certificate loaded yet")
        return self._context

    def check(self) -> int:
        """The swap count (the server compares it to a connection's)."""
        return self.reloads
