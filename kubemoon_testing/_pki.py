"""The certificates and keys of a test kube-apiserver, written to its work directory.

One CA signs the apiserver's serving certificate (127.0.0.1 and localhost), the admin's and
the controller manager's client certificates (group ``system:masters``) and the client
certificate the apiserver presents to webhooks; an RSA key signs and verifies
service-account tokens. Valid for a year, backdated an hour against clock skew. The
certificates come from ``kubemoon_io``'s shared builder; ``cryptography`` (optional) is
imported only when a server starts.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._apiserver_errors import ApiServerError
from ._users import _ADMIN_GROUP, _WEBHOOK_CLIENT_USER, ADMIN_USER, CONTROLLER_MANAGER_USER

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class _Pki:
    ca_file: Path
    ca_pem: str
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    kcm_cert: Path
    kcm_key: Path
    webhook_client_cert: Path
    webhook_client_key: Path
    sa_key: Path


def _write_key(path: Path, key_pem: bytes) -> None:
    path.write_bytes(key_pem)
    path.chmod(0o600)


def _generate_pki(directory: Path) -> _Pki:
    """A CA, a serving cert for 127.0.0.1/localhost, an admin client cert, an SA key."""
    # Imported here: cryptography is optional and only needed once a server starts.
    try:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

        from kubemoon_io._x509 import IssuedCertificate, issue_certificate  # noqa: PLC0415
    except ImportError as exc:  # an optional dependency of kubemoon_testing
        raise ApiServerError(
            "the real-apiserver fixture needs the 'cryptography' package to generate "
            "certificates; install it (pip install cryptography)"
        ) from exc

    now = datetime.datetime.now(datetime.UTC)
    # Backdated an hour so a slightly skewed clock never sees "not yet valid".
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=365)

    def leaf(common_name: str, **details: Any) -> IssuedCertificate:
        return issue_certificate(
            common_name, not_before=not_before, not_after=not_after, issuer=ca, **details
        )

    ca = issue_certificate("kubemoon-test-ca", not_before=not_before, not_after=not_after)
    serving = leaf("kube-apiserver", hosts=("127.0.0.1", "localhost"))
    # O=system:masters: the client certificate is an admin that bypasses RBAC.
    client = leaf(ADMIN_USER, usage="client", organization=_ADMIN_GROUP)
    # The controller manager's own identity. system:masters because the garbage collector
    # and the namespace controller must read and delete every resource type, including
    # CRDs a test installs later; a real cluster grants the same reach to their service
    # accounts (roles system:controller:generic-garbage-collector and
    # system:controller:namespace-controller: every verb they need on `*`), and this way
    # the fixture writes no RBAC objects that a test could list or delete.
    kcm = leaf(CONTROLLER_MANAGER_USER, usage="client", organization=_ADMIN_GROUP)
    # What the apiserver presents when a webhook asks for a client certificate (mutual
    # TLS); no group, so it is nobody in particular should it be used against the apiserver.
    webhook_client = leaf(_WEBHOOK_CLIENT_USER, usage="client")
    # RSA because that is what a real cluster's service-account issuer uses; one key
    # file serves both the signing and the verifying flag.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = _Pki(
        ca_file=directory / "ca.crt",
        ca_pem=ca.cert_pem.decode("ascii"),
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        client_cert=directory / "admin.crt",
        client_key=directory / "admin.key",
        kcm_cert=directory / "controller-manager.crt",
        kcm_key=directory / "controller-manager.key",
        webhook_client_cert=directory / "webhook-client.crt",
        webhook_client_key=directory / "webhook-client.key",
        sa_key=directory / "sa.key",
    )
    pki.ca_file.write_text(pki.ca_pem, encoding="ascii")
    pki.serving_cert.write_bytes(serving.cert_pem)
    _write_key(pki.serving_key, serving.key_pem)
    pki.client_cert.write_bytes(client.cert_pem)
    _write_key(pki.client_key, client.key_pem)
    pki.kcm_cert.write_bytes(kcm.cert_pem)
    _write_key(pki.kcm_key, kcm.key_pem)
    pki.webhook_client_cert.write_bytes(webhook_client.cert_pem)
    _write_key(pki.webhook_client_key, webhook_client.key_pem)
    _write_key(
        pki.sa_key,
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )
    return pki
