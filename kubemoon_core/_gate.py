"""Write gates: a write that a Lease authorises is sent only while that Lease is valid.

Rules (pure: time comes in as ``now``, local monotonic seconds):

- An *authority* is whatever makes a write safe: leadership of a Lease, or a shard range
  held in a member's Lease. It is described by a function ``valid_until(now)`` giving the
  local time the authority ends (``None``: not held at ``now``), for example
  :meth:`~kubemoon_core.lowlevel.LeaderElector.valid_until` or
  :meth:`~kubemoon_core.sharding.ShardMember.write_deadline`.
- A :class:`WriteGate` lets a write be sent at ``now`` only when every authority it holds
  is valid until later than ``now + margin``. ``margin`` keeps back time for the window
  between the check and the request's arrival at the API server (writing the bytes and
  the network), so that window never reaches past the point another holder may take over.
- :meth:`WriteGate.check` raises :class:`AuthorityLost` naming the authority and how long
  ago it ended; the adapter calls it immediately before a gated request's first byte is
  written, on the connection it will be written to, and again before its body.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ._errors import KubeMoonError, LocalProtocolError

__all__ = ["DEFAULT_GATE_MARGIN", "AuthorityLost", "WriteGate"]

DEFAULT_GATE_MARGIN = 1.0
"""Seconds of validity a gated write keeps back for its way to the API server."""


class AuthorityLost(KubeMoonError):
    """A write was not sent: the leadership or shard range that authorises it is not (or no
    longer) valid on this process's monotonic clock. Its work must stop; the key is
    retried by whichever replica holds the authority."""


class WriteGate:
    """Whether a write gated by ``authorities`` may be sent at ``now``; see the module rules.

    ``authorities`` pairs a name for messages (``"leadership of ns/lease"``) with its
    ``valid_until(now)`` function. The functions must be pure queries of their machines.
    """

    __slots__ = ("_authorities", "_margin")

    def __init__(
        self,
        authorities: Iterable[tuple[str, Callable[[float], float | None]]],
        *,
        margin: float = DEFAULT_GATE_MARGIN,
    ) -> None:
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not margin >= 0:
            raise LocalProtocolError(f"margin must be a non-negative number, got {margin!r}")
        if math.isinf(margin):
            raise LocalProtocolError("margin must be finite")
        pairs = tuple(authorities)
        for pair in pairs:
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not callable(pair[1])
            ):
                raise LocalProtocolError(
                    f"an authority is a (name, valid_until) pair, got {pair!r}"
                )
        self._authorities = pairs
        self._margin = float(margin)

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self._authorities)
        return f"<WriteGate [{names}] margin={self._margin:g}>"

    @property
    def margin(self) -> float:
        """Seconds of validity kept back for the way to the API server."""
        return self._margin

    def valid_until(self, now: float) -> float | None:
        """The local time gated writes must stop (every authority's end less the margin),
        or None when one authority is not held at ``now``."""
        ends = []
        for _, valid_until in self._authorities:
            end = valid_until(now)
            if end is None:
                return None
            ends.append(end)
        return min(ends, default=math.inf) - self._margin

    def may_write(self, now: float) -> bool:
        """Whether a gated write may be sent at ``now``."""
        end = self.valid_until(now)
        return end is not None and now < end

    def check(self, now: float, what: str = "a write") -> None:
        """Raise :class:`AuthorityLost` unless a gated write may be sent at ``now``.

        ``what`` names the write in the message (``"PUT /api/v1/..."``).
        """
        for name, valid_until in self._authorities:
            end = valid_until(now)
            if end is None:
                raise AuthorityLost(f"not sending {what}: this process does not hold the {name}")
            if not now < end - self._margin:
                raise AuthorityLost(
                    f"not sending {what}: the {name} is valid only until {end - now:+.3f} s "
                    f"from now, within the {self._margin:g} s margin kept for the way to the "
                    "API server"
                    if now < end
                    else f"not sending {what}: the {name} ended {now - end:.3f} s ago "
                    "(its renew deadline passed on this process's monotonic clock)"
                )
