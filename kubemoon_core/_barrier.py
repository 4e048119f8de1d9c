"""The freshness barrier: a range regained after a lapse waits for fresh caches.

A replica paused past its membership Lease (LOST) keeps the caches it had when it froze;
their watches may resume from where they were, relist at the last seen resourceVersion or
wait out a backoff. Reconciling a range it is handed again from those caches writes the
world as it was before the pause. So, once a member whose Lease lapsed gains a range,
no key is handed out until every cache the controller reads is known to be at least as
new as the API server was when the range was gained.

Rules (pure: time comes in as ``now``, answers as decoded objects; nothing is sent here):

- :meth:`FreshnessBarrier.arm` closes the barrier (call it when a range is gained after a
  lapse, so after the read that confirmed the range: the previous holder's writes all
  came before it). It then asks for one cheap consistent read per distinct
  ``(resource, namespace)`` the caches list (:meth:`FreshnessBarrier.reads`: LIST with
  ``limit=1`` and no resourceVersion); each answer's list resourceVersion is that
  resource's *floor*.
- A cache has caught up when its resume point (the reflector's resourceVersion: the last
  list, event or bookmark it applied) compares ``>=`` its floor
  (:func:`~kubemoon_core.lowlevel.compare_resource_versions`: one resource on one server),
  or when a complete list it began after the barrier asked it to relist was applied: a
  consistent LIST started after the arm is itself as new as the floor.
- A cache is asked to relist (:meth:`FreshnessBarrier.relists_due`) when its floor is
  unknown (the read failed, or its resourceVersion is not comparable), when its resume
  point is not comparable with the floor, or when it has not caught up ``grace`` seconds
  after the arm (a quiet watch advances only on bookmarks, about once a minute).
- The barrier opens (:attr:`FreshnessBarrier.open`) once every cache has caught up; it
  stays closed otherwise, however long: work waits rather than acting on a stale view.
  Arming again (another lapse) starts over.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import LocalProtocolError
from ._freshness import compare_resource_versions
from ._request import ListOptions, Request, list_request
from ._resources import GroupVersionResource

__all__ = ["DEFAULT_BARRIER_GRACE", "BarrierState", "CacheProgress", "FreshnessBarrier"]

DEFAULT_BARRIER_GRACE = 2.0
"""Seconds a cache's watch is given to reach its floor before the cache is relisted."""

_ReadKey = tuple[int, GroupVersionResource, str | None]  # (arm, resource, namespace)


class BarrierState(enum.Enum):
    """Whether work may be handed out."""

    OPEN = "open"  # every cache has caught up (or the barrier was never armed)
    CLOSED = "closed"  # armed: waiting for the floors and for the caches to reach them


@dataclass(frozen=True, slots=True)
class CacheProgress:
    """How far one cache has got: its reflector's resume point and its complete lists."""

    resource_version: str
    syncs: int


class FreshnessBarrier:
    """Holds a regained range's work until the caches are fresh; see the module rules.

    ``caches`` names each cache the controller reads and the ``(resource, namespace)`` it
    lists (namespace None: every namespace). Driving it:

    1. :meth:`arm` when a range is gained after a lapse of the Lease;
    2. send each of :meth:`reads` and give its decoded answer (None when it failed) to
       :meth:`read_finished`;
    3. relist each cache :meth:`relists_due` names; call :meth:`update` with every cache's
       :class:`CacheProgress` (on changes, and at :meth:`next_deadline`) until :attr:`open`.
    """

    def __init__(
        self,
        caches: Mapping[str, tuple[GroupVersionResource, str | None]],
        *,
        grace: float = DEFAULT_BARRIER_GRACE,
    ) -> None:
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise LocalProtocolError(f"grace must be a non-negative number, got {grace!r}")
        for name, (resource, namespace) in caches.items():
            if not isinstance(resource, GroupVersionResource):
                raise LocalProtocolError(f"cache {name!r}: a GroupVersionResource is needed")
            if namespace is not None and not isinstance(namespace, str):
                raise LocalProtocolError(f"cache {name!r}: a namespace is a string or None")
        self._caches = dict(caches)
        self._grace = float(grace)
        self._state = BarrierState.OPEN
        self._armed_at = float("-inf")
        self._unsent: list[tuple[GroupVersionResource, str | None]] = []
        # (resource, namespace) -> the floor; None: unknown, relist instead
        self._floors: dict[tuple[GroupVersionResource, str | None], str | None] = {}
        self._relisted: dict[str, int] = {}  # cache -> its syncs when asked to relist
        self._caught_up: set[str] = set()
        self.arms = 0
        """How many times the barrier was armed."""
        self.relists = 0
        """How many relists it asked for."""

    def __repr__(self) -> str:
        return f"<FreshnessBarrier {self._state.name} caught_up={len(self._caught_up)}>"

    @property
    def state(self) -> BarrierState:
        """OPEN or CLOSED."""
        return self._state

    @property
    def open(self) -> bool:
        """True when work may be handed out."""
        return self._state is BarrierState.OPEN

    def arm(self, now: float) -> None:
        """Close the barrier: a range was gained after the Lease lapsed."""
        self._state = BarrierState.CLOSED if self._caches else BarrierState.OPEN
        self._armed_at = now
        self._unsent = sorted(set(self._caches.values()), key=lambda k: (str(k[0]), k[1] or ""))
        self._floors = {}
        self._relisted = {}
        self._caught_up = set()
        self.arms += 1

    def reads(self) -> list[tuple[_ReadKey, Request]]:
        """The consistent reads to send now (each once), with the key to answer them by."""
        unsent, self._unsent = self._unsent, []
        return [
            (
                (self.arms, resource, namespace),
                list_request(resource, namespace=namespace, options=ListOptions(limit=1)),
            )
            for resource, namespace in unsent
        ]

    def read_finished(self, key: _ReadKey, answer: object | None) -> None:
        """The decoded answer of the read ``key`` (None: it failed)."""
        arm, resource, namespace = key
        if self._state is not BarrierState.CLOSED or arm != self.arms:
            return  # an answer to a read sent before the last arm may predate it: ignored
        if (resource, namespace) in self._floors:
            return
        rv: Any = None
        if isinstance(answer, Mapping):
            metadata = answer.get("metadata")
            if isinstance(metadata, Mapping):
                rv = metadata.get("resourceVersion")
        if not isinstance(rv, str) or compare_resource_versions(rv, rv) is None:
            rv = None
        self._floors[resource, namespace] = rv

    def relists_due(self, now: float, progress: Mapping[str, CacheProgress]) -> list[str]:
        """The caches to relist now (each at most once per arm), in name order."""
        if self._state is not BarrierState.CLOSED:
            return []
        self.update(progress)
        late = now >= self._armed_at + self._grace
        due = []
        for name, key in sorted(self._caches.items()):
            if name in self._caught_up or name in self._relisted or name not in progress:
                continue
            floor = self._floors.get(key, "")
            unknown = key in self._floors and floor is None
            if late or unknown or self._incomparable(progress[name], floor):
                self._relisted[name] = progress[name].syncs
                due.append(name)
        self.relists += len(due)
        return due

    @staticmethod
    def _incomparable(progress: CacheProgress, floor: str | None) -> bool:
        return bool(floor) and (
            compare_resource_versions(progress.resource_version, floor or "") is None
        )

    def update(self, progress: Mapping[str, CacheProgress]) -> bool:
        """Judge the caches by their progress; True once the barrier is open."""
        if self._state is BarrierState.OPEN:
            return True
        for name, key in self._caches.items():
            seen = progress.get(name)
            if seen is None or name in self._caught_up:
                continue
            floor = self._floors.get(key)
            relisted = self._relisted.get(name)
            if (
                floor is not None
                and compare_resource_versions(seen.resource_version, floor) in (0, 1)
            ) or (relisted is not None and seen.syncs > relisted):
                self._caught_up.add(name)
        if len(self._caught_up) == len(self._caches):
            self._state = BarrierState.OPEN
        return self._state is BarrierState.OPEN

    def next_deadline(self) -> float | None:
        """When the laggards are due to be relisted (None once nothing is pending)."""
        if self._state is not BarrierState.CLOSED:
            return None
        if all(n in self._caught_up or n in self._relisted for n in self._caches):
            return None
        return self._armed_at + self._grace
