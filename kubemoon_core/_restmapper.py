"""Map the names people and manifests use to resources, from discovery data.

Rules: names resolve by plural, singular, short name or kind, case-insensitively, and may
be qualified with a group (``deployments.apps``) or version and group
(``deployments.v1.apps``). When several resources match, discovery order wins (the core
group first, then the server's group order, preferred versions first). Freshness is a TTL
measured with the caller's ``now``. An unknown name asks for one refresh; unknown again
after that refresh, it is a :class:`NoMatchError` until ``retry_interval`` has passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ._errors import KubeMoonError, LocalProtocolError
from ._resources import APIResource, GroupVersionKind

__all__ = ["NoMatchError", "RESTMapper", "RefreshNeeded"]


class NoMatchError(KubeMoonError):
    """No resource of that name or kind is served, even after a fresh discovery."""


@dataclass(frozen=True, slots=True)
class RefreshNeeded:
    """The mapper's answer when the caller must run discovery and :meth:`RESTMapper.load`."""

    reason: str


class RESTMapper:
    """Resolves names and kinds to :class:`APIResource`, fed by discovery.

    ``ttl`` is how long a load stays fresh; ``retry_interval`` how long a name that was
    still unknown after a refresh stays a :class:`NoMatchError` before it may ask again.
    """

    def __init__(self, *, ttl: float = 600.0, retry_interval: float = 30.0) -> None:
        if ttl <= 0 or retry_interval < 0:
            raise LocalProtocolError("ttl must be positive and retry_interval non-negative")
        self.ttl = ttl
        self.retry_interval = retry_interval
        self._loaded_at: float | None = None
        self._by_name: dict[str, list[APIResource]] = {}
        self._by_gvk: dict[GroupVersionKind, APIResource] = {}
        self._awaiting_refresh: set[str] = set()
        self._refreshed_for: set[str] = set()

    def load(self, resources: Iterable[APIResource], now: float) -> None:
        """Replace everything the mapper knows with a complete discovery result."""
        by_name: dict[str, list[APIResource]] = {}
        by_gvk: dict[GroupVersionKind, APIResource] = {}
        for resource in resources:
            names = {resource.gvr.resource, resource.singular_name, resource.kind}
            names.update(resource.short_names)
            for name in names:
                if name:
                    by_name.setdefault(name.lower(), []).append(resource)
            if resource.kind:
                by_gvk.setdefault(resource.gvk, resource)
        self._by_name, self._by_gvk = by_name, by_gvk
        self._loaded_at = now
        self._refreshed_for = self._awaiting_refresh
        self._awaiting_refresh = set()

    def needs_refresh(self, now: float) -> bool:
        """True if the mapper was never loaded or its TTL has run out."""
        return self._loaded_at is None or now - self._loaded_at >= self.ttl

    def resolve(self, name: str, now: float) -> APIResource | RefreshNeeded:
        """Find the resource for ``name``, ask for a refresh, or raise NoMatchError."""
        if self.needs_refresh(now):
            return RefreshNeeded("never loaded" if self._loaded_at is None else "expired")
        found = self._find(name)
        if found is not None:
            return found
        return self._miss(name, now)

    def resolve_kind(self, gvk: GroupVersionKind, now: float) -> APIResource | RefreshNeeded:
        """Find the resource serving objects of ``gvk``."""
        if self.needs_refresh(now):
            return RefreshNeeded("never loaded" if self._loaded_at is None else "expired")
        found = self._by_gvk.get(gvk)
        if found is not None:
            return found
        return self._miss(f"{gvk.kind}.{gvk.version}.{gvk.group}", now)

    def _miss(self, name: str, now: float) -> RefreshNeeded:
        assert self._loaded_at is not None
        recently = now - self._loaded_at < self.retry_interval
        if name in self._refreshed_for and recently:
            raise NoMatchError(f"the server has no resource {name!r}")
        self._awaiting_refresh.add(name)
        return RefreshNeeded(f"{name!r} is unknown")

    def _find(self, name: str) -> APIResource | None:
        lowered = name.lower()
        candidates = self._by_name.get(lowered)
        if candidates:
            return candidates[0]
        base, dot, qualifier = lowered.partition(".")
        if not dot:
            return None
        for resource in self._by_name.get(base, ()):
            gvr = resource.gvr
            if qualifier in (gvr.group, f"{gvr.version}.{gvr.group}"):
                return resource
        return None
