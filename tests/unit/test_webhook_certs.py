"""The certificate Secret's material: real certificates through every planner step, the
in-memory serving certificate, and Secrets that are broken or hostile."""

from __future__ import annotations

import base64
import ssl
import time
from typing import Any

import pytest

from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.webhooks import (
    CertificateAction,
    CertificatePlan,
    CertificatePlanner,
    CertificatePolicy,
)
from kubemoon_io import CertificateMaterial, ServingCertificate, pem_fingerprints

POLICY = CertificatePolicy(
    ca_validity=1000.0,
    rotate_ca_before=400.0,
    serving_validity=300.0,
    renew_before=100.0,
    propagation=10.0,
    overlap=30.0,
    backdate=60.0,
)
HOSTS = ("127.0.0.1", "localhost")


def step(material: CertificateMaterial, now: float) -> tuple[CertificatePlan, CertificateMaterial]:
    plan = CertificatePlanner(POLICY).plan(material.state(), HOSTS, now)
    return plan, material.perform(plan, hosts=HOSTS, policy=POLICY, now=now)


def roundtrip(material: CertificateMaterial) -> CertificateMaterial:
    return CertificateMaterial.from_secret(material.secret("ns", "certs"))


def test_a_full_rotation_with_real_certificates() -> None:
    now = float(int(time.time()))  # whole seconds: the Secret records milliseconds
    plan, material = step(CertificateMaterial(), now)
    assert plan.action is CertificateAction.CREATE
    material = roundtrip(material)
    state = material.state()
    assert state.ca is not None and state.serving is not None
    assert state.serving_issuer == state.ca.fingerprint
    assert set(state.serving_hosts) == set(HOSTS)
    assert state.bundle == (state.ca.fingerprint,)
    assert state.serving.not_before == pytest.approx(now - 60, abs=1)
    assert step(material, now + 1)[0].action is CertificateAction.NONE
    # Renewal: a new serving certificate from the same CA.
    plan, renewed = step(material, now + 250)
    assert plan.action is CertificateAction.RENEW_SERVING
    assert renewed.ca_cert == material.ca_cert and renewed.cert != material.cert
    # Rotation: the next CA joins the bundle, is published, then signs.
    later = now + 650
    plan, material = step(roundtrip(renewed), later)
    while plan.action is CertificateAction.RENEW_SERVING:
        plan, material = step(material, later)
    assert plan.action is CertificateAction.ADD_NEXT_CA
    assert len(pem_fingerprints(material.bundle)) == 2
    published = roundtrip(material.published_now(later))
    assert published.published == material.bundle_digest
    assert step(published, later + 5)[0].action is CertificateAction.NONE
    plan, switched = step(published, later + 10)
    assert plan.action is CertificateAction.SWITCH_CA
    state = roundtrip(switched).state()
    assert state.ca is not None and state.serving_issuer == state.ca.fingerprint
    assert state.next_ca is None and len(state.bundle) == 2
    assert state.switched_at == pytest.approx(later + 10, abs=0.001)
    plan, dropped = step(roundtrip(switched), later + 40)
    assert plan.action is CertificateAction.SET_BUNDLE
    assert pem_fingerprints(dropped.bundle) == [state.ca.fingerprint]


def test_an_expired_ca_hands_over_to_the_next_one_it_made() -> None:
    # The bundle with the next CA never got published and the CA expired: its successor
    # (in the bundle, maybe already trusted) signs at once; no brand-new CA is made.
    now = float(int(time.time()))
    _, material = step(CertificateMaterial(), now)
    plan, material = step(roundtrip(material), now + 650)
    while plan.action is CertificateAction.RENEW_SERVING:
        plan, material = step(material, now + 650)
    assert plan.action is CertificateAction.ADD_NEXT_CA
    plan, waiting = step(roundtrip(material), now + 999)
    while plan.action is CertificateAction.RENEW_SERVING:  # capped at the CA's expiry
        plan, waiting = step(waiting, now + 999)
    assert plan.action is CertificateAction.NONE  # not published: no switch yet
    waiting = roundtrip(waiting)
    plan, switched = step(waiting, now + 1000)
    assert plan.action is CertificateAction.SWITCH_CA
    state = roundtrip(switched).state()
    assert state.ca is not None and state.ca == waiting.state().next_ca
    assert state.serving_issuer == state.ca.fingerprint and state.serving is not None
    assert state.serving.not_before <= now + 1000 < state.serving.not_after
    # The old CA's certificate stays in the bundle until the overlap ends.
    assert state.bundle[0] == state.ca.fingerprint and len(state.bundle) == 2


@pytest.mark.parametrize(
    "secret",
    [
        None,
        {},
        {"data": "nope", "metadata": []},
        {"data": {"ca.crt": "!!!not base64", "tls.crt": 5, "tls.key": None}},
        {"data": {"ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nzz\n").decode()}},
        {
            "metadata": {
                "annotations": {
                    "webhooks.kubemoon.dev/ca-bundle-published": "digest nan",
                    "webhooks.kubemoon.dev/ca-switched-at": "later",
                }
            }
        },
    ],
)
def test_broken_secrets_are_replaced_never_raised(secret: Any) -> None:
    material = CertificateMaterial.from_secret(secret)
    state = material.state()
    assert state.ca is None and state.published is None and state.switched_at is None
    plan, created = step(material, time.time())
    assert plan.action is CertificateAction.CREATE
    assert created.state().ca is not None


def test_a_serving_key_that_does_not_match_is_unusable() -> None:
    now = time.time()
    _, first = step(CertificateMaterial(), now)
    _, other = step(CertificateMaterial(), now)
    mixed = CertificateMaterial(
        first.ca_cert, first.ca_key, b"", b"", first.cert, other.key, first.bundle
    )
    state = mixed.state()
    assert state.serving is None  # so the planner renews it
    foreign = CertificateMaterial(
        first.ca_cert, first.ca_key, b"", b"", other.cert, other.key, first.bundle
    )
    assert foreign.state().serving_issuer is None  # signed by a CA this Secret does not hold
    assert step(foreign, now)[0].action is CertificateAction.RENEW_SERVING


def test_serving_certificate_swaps_atomically() -> None:
    now = time.time()
    _, first = step(CertificateMaterial(), now)
    _, second = step(CertificateMaterial(), now)
    source = ServingCertificate()
    assert not source.loaded
    with pytest.raises(LocalProtocolError, match="no webhook certificate"):
        source.context()
    assert source.update(first.cert, first.key)
    assert isinstance(source.context(), ssl.SSLContext)
    assert source.reloads == 0 and source.pem == first.cert
    assert not source.update(first.cert, first.key)  # the same pair: no swap
    before = source.context()
    with pytest.raises(LocalProtocolError, match="cannot load"):
        source.update(first.cert, second.key)
    assert source.context() is before and source.check() == 0
    assert source.update(second.cert, second.key)
    assert source.check() == 1 and source.context() is not before


def test_a_huge_or_refused_pair_keeps_the_served_one_and_is_not_parsed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whoever can write the Secret cannot make every replica parse megabytes on its event
    loop every refresh: parts beyond 64 KiB are refused unread, and a refused pair offered
    again is refused from memory."""
    _, first = step(CertificateMaterial(), time.time())
    source = ServingCertificate()
    assert source.update(first.cert, first.key)
    served = source.context()
    huge = first.cert * (ServingCertificate.MAX_SIZE // len(first.cert) + 1)
    with pytest.raises(LocalProtocolError, match="more than the 65536 accepted"):
        source.update(huge, first.key)
    loads: list[bytes] = []
    real_load = ServingCertificate._load

    def counting(self: ServingCertificate, cert: bytes, key: bytes) -> None:
        loads.append(cert)
        real_load(self, cert, key)

    monkeypatch.setattr(ServingCertificate, "_load", counting)
    for _ in range(3):
        with pytest.raises(LocalProtocolError, match="cannot load"):
            source.update(first.cert, b"garbage")
    assert len(loads) == 1  # parsed once, then refused from memory
    assert source.context() is served and source.reloads == 0
