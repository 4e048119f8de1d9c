"""Building X.509 certificates: one builder for every certificate KubeMoon makes.

Three callers share it: the managed webhook certificates (``kubemoon_io._certs``), the
throwaway webhook certificates of ``kubemoon_testing.WebhookCertificates`` and the PKI of
the test kube-apiserver (``kubemoon_testing._pki``). None of them owns it: it lives here,
below both packages (``kubemoon_testing`` may import ``kubemoon_io``, never the reverse).

Rules: keys are P-256; a certificate without an issuer is a self-signed CA (path length 0,
may sign certificates and CRLs), one with an issuer is a leaf for ``usage`` (``"server"``
or ``"client"``) naming ``hosts`` (an IP address where a host parses as one, else a DNS
name) in its subject alternative names when there are any. Every certificate carries its
subject key identifier and the authority key identifier of its issuer (Python 3.13's
``VERIFY_X509_STRICT`` insists on it). ``cryptography`` is imported on the first call:
callers check it is installed and raise their own error.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """A certificate and its private key, PEM-encoded (the key as PKCS#8, unencrypted)."""

    cert_pem: bytes
    key_pem: bytes


def issue_certificate(
    common_name: str,
    *,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    issuer: IssuedCertificate | None = None,
    usage: Literal["server", "client"] = "server",
    hosts: Sequence[str] = (),
    organization: str | None = None,
) -> IssuedCertificate:
    """A new key and a certificate for it: a self-signed CA when ``issuer`` is None, else a
    leaf signed by ``issuer`` (see the module rules)."""
    from cryptography import x509  # noqa: PLC0415 - optional dependency
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    ca = issuer is None
    if issuer is None:
        signer_key: Any = key
        issuer_name, issuer_public_key = subject, cast("Any", key.public_key())
    else:
        signer_cert = x509.load_pem_x509_certificate(issuer.cert_pem)
        signer_key = serialization.load_pem_private_key(issuer.key_pem, password=None)
        issuer_name, issuer_public_key = signer_cert.subject, signer_cert.public_key()
    key_usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(key_usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_public_key), critical=False
        )
    )
    if not ca:
        purpose = (
            ExtendedKeyUsageOID.SERVER_AUTH
            if usage == "server"
            else ExtendedKeyUsageOID.CLIENT_AUTH
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return IssuedCertificate(cert.public_bytes(pem), key_pem)
