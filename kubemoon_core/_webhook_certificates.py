"""The webhook certificate lifecycle as a pure planner.

Rules:

- :class:`CertificatePlanner` decides, from the facts of the certificate Secret and the
  wall-clock ``now`` it is handed (epoch seconds), the one next step of the lifecycle:
  create a CA and serving certificate, renew the serving certificate, add the next CA to
  the bundle, switch to it once the bundle that trusts it has been published for
  ``propagation`` seconds, and drop the previous CA ``overlap`` seconds after the switch.
  Only a CA that expired before that (the bundle could not be published in time) is
  replaced without waiting: by its successor if there is one, else by a new CA.
  It never reads a clock and never generates a key: ``kubemoon_io`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._errors import LocalProtocolError

__all__ = [
    "CertificateAction",
    "CertificateFacts",
    "CertificatePlan",
    "CertificatePlanner",
    "CertificatePolicy",
    "CertificateState",
]

_DAY = 86400.0


@dataclass(frozen=True, slots=True)
class CertificatePolicy:
    """How long certificates live and when they change (seconds).

    The CA lives ``ca_validity`` (5 years) and its successor is added to the bundle
    ``rotate_ca_before`` (1 year) before it expires; the successor signs the serving
    certificate once the bundle trusting it has been published ``propagation`` (60 s); the
    old CA leaves the bundle ``overlap`` (5 min) after that switch, once every replica has
    reloaded. A serving certificate lives ``serving_validity`` (90 days, never past its
    CA) and is renewed ``renew_before`` (30 days) before it expires. Certificates are
    backdated by ``backdate`` against clock skew.
    """

    ca_validity: float = 5 * 365 * _DAY
    rotate_ca_before: float = 365 * _DAY
    serving_validity: float = 90 * _DAY
    renew_before: float = 30 * _DAY
    propagation: float = 60.0
    overlap: float = 300.0
    backdate: float = 3600.0

    def __post_init__(self) -> None:
        for name in (
            "ca_validity",
            "rotate_ca_before",
            "serving_validity",
            "renew_before",
            "propagation",
            "overlap",
            "backdate",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise LocalProtocolError(f"certificate policy: {name} must be >= 0")
        if not 0 < self.renew_before < self.serving_validity:
            raise LocalProtocolError("certificate policy: renew_before must be in (0, validity)")
        if not self.rotate_ca_before < self.ca_validity:
            raise LocalProtocolError("certificate policy: rotate_ca_before must be < ca_validity")
        # The switch to the next CA (rotation start + propagation) comes before a serving
        # certificate capped at the old CA's expiry would be due for renewal.
        if not self.rotate_ca_before > self.renew_before + self.propagation:
            raise LocalProtocolError(
                "certificate policy: rotate_ca_before must exceed renew_before + propagation"
            )


@dataclass(frozen=True, slots=True)
class CertificateFacts:
    """What the planner needs of one certificate: its SHA-256 fingerprint and validity
    (epoch seconds)."""

    fingerprint: str
    not_before: float
    not_after: float


@dataclass(frozen=True, slots=True)
class CertificateState:
    """The certificate Secret as the planner sees it (``kubemoon_io`` reads it).

    ``serving_issuer`` is the fingerprint of the CA that signed the serving certificate
    (None if neither ``ca`` nor ``next_ca`` did); ``bundle`` the fingerprints of the CAs
    in the published bundle and ``bundle_digest`` its digest; ``published`` the digest
    last confirmed in every configuration and ``published_at`` when; ``switched_at`` when
    ``ca`` took over from the previous CA.
    """

    ca: CertificateFacts | None = None
    next_ca: CertificateFacts | None = None
    serving: CertificateFacts | None = None
    serving_issuer: str | None = None
    serving_hosts: tuple[str, ...] = ()
    bundle: tuple[str, ...] = ()
    bundle_digest: str = ""
    published: str | None = None
    published_at: float | None = None
    switched_at: float | None = None


class CertificateAction(enum.Enum):
    """The one step the planner asks for."""

    NONE = "none"
    CREATE = "create"  # a new CA and serving certificate; the bundle is the CA alone
    RENEW_SERVING = "renew-serving"  # a new serving certificate from the current CA
    ADD_NEXT_CA = "add-next-ca"  # a new CA joins the bundle; it signs nothing yet
    SWITCH_CA = "switch-ca"  # the next CA becomes current and signs a serving certificate
    SET_BUNDLE = "set-bundle"  # the bundle becomes :attr:`CertificatePlan.bundle`


@dataclass(frozen=True, slots=True)
class CertificatePlan:
    """The planner's answer: ``action`` with ``reason``; ``bundle`` the CA fingerprints
    the bundle should hold for SET_BUNDLE; ``next_check`` when to ask again (epoch
    seconds; None: after the next publication)."""

    action: CertificateAction
    reason: str
    next_check: float | None
    bundle: tuple[str, ...] = field(default=())


class CertificatePlanner:
    """The certificate lifecycle, one decision at a time (see the module rules)."""

    def __init__(self, policy: CertificatePolicy | None = None) -> None:
        self.policy = policy if policy is not None else CertificatePolicy()

    def __repr__(self) -> str:
        return f"<CertificatePlanner {self.policy}>"

    def plan(self, state: CertificateState, hosts: Iterable[str], now: float) -> CertificatePlan:
        """The next step for ``state`` at ``now`` when serving ``hosts``."""
        p = self.policy
        hosts = tuple(hosts)
        ca, nxt, serving = state.ca, state.next_ca, state.serving

        def act(
            action: CertificateAction, reason: str, bundle: tuple[str, ...] = ()
        ) -> CertificatePlan:
            return CertificatePlan(action, reason, now, bundle)

        if (
            ca is not None
            and now >= ca.not_after
            and nxt is not None
            and nxt.not_before <= now < nxt.not_after
        ):
            # The CA expired before its successor took over (the bundle holding it could
            # not be published in time): nothing it signed is valid any more, so the
            # successor, which the API server may already trust, takes over at once
            # rather than a brand-new CA that it cannot trust yet.
            return act(CertificateAction.SWITCH_CA, "the CA expired; the next CA takes over")
        if ca is None or not ca.not_before <= now < ca.not_after:
            return act(CertificateAction.CREATE, "no valid CA")
        if nxt is not None and not nxt.not_before <= now < nxt.not_after:
            return act(CertificateAction.CREATE, "the next CA is not valid")
        # The bundle: the current CA, the next one while it waits, the previous one(s)
        # until ``overlap`` after the switch.
        wanted = (ca.fingerprint,) + ((nxt.fingerprint,) if nxt else ())
        extra = tuple(f for f in state.bundle if f not in wanted)
        drop_at = (state.switched_at or -float("inf")) + p.overlap
        if extra and now >= drop_at:
            return act(CertificateAction.SET_BUNDLE, "the previous CA's overlap ended", wanted)
        if not set(wanted) <= set(state.bundle):
            return act(CertificateAction.SET_BUNDLE, "the bundle lacks a CA", wanted + extra)
        deadlines = [drop_at] if extra else []
        # The serving certificate.
        cap = ca.not_after
        renew_at = serving.not_after - p.renew_before if serving else now
        if (
            serving is None
            or state.serving_issuer != ca.fingerprint
            or set(state.serving_hosts) != set(hosts)
            or not serving.not_before <= now < serving.not_after
        ):
            return act(CertificateAction.RENEW_SERVING, "the serving certificate is unusable")
        if now >= renew_at and min(now + p.serving_validity, cap) > serving.not_after:
            return act(CertificateAction.RENEW_SERVING, "the serving certificate is due")
        if now < renew_at:
            deadlines.append(renew_at)
        # The CA.
        if nxt is None:
            rotate_at = ca.not_after - p.rotate_ca_before
            if now >= rotate_at:
                return act(CertificateAction.ADD_NEXT_CA, "the CA is due for rotation")
            deadlines.append(rotate_at)
        elif state.published == state.bundle_digest and state.published_at is not None:
            switch_at = state.published_at + p.propagation
            if now >= switch_at:
                return act(CertificateAction.SWITCH_CA, "the next CA's bundle has propagated")
            deadlines.append(switch_at)
        # else: waiting for the bundle with the next CA to be published (no deadline).
        deadlines.append(serving.not_after)
        return CertificatePlan(CertificateAction.NONE, "up to date", min(deadlines))
