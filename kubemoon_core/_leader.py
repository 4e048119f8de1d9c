"""Leader election on a ``coordination.k8s.io/v1`` Lease, as a pure state machine.

Rules (client-go's leaderelection, made explicit):

- One request at a time: ``next_request(now, wall_time)`` returns the GET, CREATE or
  UPDATE to perform when one is due, the adapter answers with ``receive_response`` or, for
  a lost response or connection error (including its own request timeout),
  ``request_failed``. Every write carries the ``metadata.resourceVersion`` last observed,
  so a 409 means the race was lost.
- A follower polls every ``retry_period * (1 + r * 1.2)`` seconds (client-go's
  ``JitterFactor``; ``r`` from the injected ``random.Random``). It takes the lease when it
  does not exist (CREATE), has no holder, is its own, or has expired.
- Expiry is judged only on the local monotonic clock: a lease held by another expires
  ``leaseDurationSeconds`` after *this* candidate first saw the current version of the
  record (its observed time). The holder's ``renewTime`` is written for humans and other
  tools and is never read back. The wall-clock ``wall_time`` an adapter passes is only
  formatted into ``acquireTime``/``renewTime``; the machine reads no clock.
- A record counts as changed when its resourceVersion or any of its leader fields differ
  from the last observation; a write by anyone therefore refreshes the observed time.
- The leader renews every ``retry_period``. It stops leading ``renew_deadline`` after it
  *sent* its last successful write (not after the answer came: the server may have applied
  the write any time after it was sent). A renew that conflicts is followed by a GET (the
  answer to an earlier renew may have been lost); the leader renews again if the lease is
  still its own, and stops leading otherwise.
- ``release(now)`` stops leading at once (the caller must have stopped the work the lease
  guards) and then writes the lease with no holder and ``leaseDurationSeconds: 1``, as
  client-go's ReleaseOnCancel does, conditional on the resourceVersion last observed. A
  release asked while a request is in flight waits for its outcome, whatever it is: a
  successful write or a GET naming this candidate is released at once; a failed request
  or a conflicting write (a lost renew may have landed, changing the resourceVersion) is
  followed by one GET, and the lease is released if it still names this candidate; if
  that GET fails too, the release is written blind with the last observed
  resourceVersion (a 409 if the lease changed meanwhile). A release is only ever written
  over a record that names this candidate, and one that fails is not retried.
- Duplicate identities: with an ``instance`` (a random id per process), every write
  carries it in the annotation :data:`HOLDER_INSTANCE_ANNOTATION`. A Lease naming this
  identity with another instance was written by another process: before this one wrote
  the Lease, it counts as another holder's (an earlier process's, after a restart: taken
  once it expires); once this one has written it, or when it changes again while
  followed, two live processes share the identity and the machine stops for good in
  ``DUPLICATE`` (a leader stops leading), so at most one of them keeps working.
- Deadlines are applied before any input at the same ``now``; ``next_request`` never
  changes the role, so call ``tick(now)`` when ``next_deadline()`` passes.

With clock rates within a factor ``1 ± e`` of true time, two leaderships cannot overlap as
long as ``renew_deadline / (1 - e) <= lease_duration / (1 + e)`` (e up to 0.2 with the
defaults): the old leader stops at most ``renew_deadline`` local seconds after sending the
write that a new leader must then see unchanged for ``lease_duration`` local seconds.
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import _json
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._leader_states import (
    _LEADING_STATES,
    _REQUESTS,
    _STOP_REASONS,
    _TABLE,
    _TRANSITIONS,
    LeaderInput,
    LeaderState,
    _Op,
    _Wait,
)
from ._request import Request, Response, create_request, get_request, replace_request
from ._resources import GroupVersionResource
from ._status import error_from_response
from ._transitions import TransitionTable

__all__ = [
    "HOLDER_INSTANCE_ANNOTATION",
    "JITTER_FACTOR",
    "LEASES",
    "LeaderElector",
    "LeaderEvent",
    "LeaderInput",
    "LeaderState",
    "LeaseRecord",
    "NewLeader",
    "StartedLeading",
    "StoppedLeading",
    "takeover_bound",
]

LEASES = GroupVersionResource("coordination.k8s.io", "v1", "leases")
"""The resource leader election locks."""

HOLDER_INSTANCE_ANNOTATION = "kubemoon.dev/holder-instance"
"""The Lease annotation naming the process (its random instance id) that wrote it."""
_MAX_INSTANCE = 256  # a longer annotation value is no instance of ours: ignored

JITTER_FACTOR = 1.2
"""client-go's leaderelection JitterFactor: follower polls wait retry_period * [1, 2.2)."""


def takeover_bound(lease_duration: float = 15.0, retry_period: float = 2.0) -> float:
    """The longest a standby takes to lead after the leader died without releasing the Lease
    (not counting the one write that takes it): 23.8 s with the defaults.

    The dead leader's last renew was written at some time ``w``; a follower first sees
    that version at its next poll, before ``w + retry_period * (1 + JITTER_FACTOR)``, and
    judges it expired ``lease_duration`` after seeing it; its first poll after that takes
    the lease, before another ``retry_period * (1 + JITTER_FACTOR)``. So:
    ``lease_duration + 2 * retry_period * (1 + JITTER_FACTOR)``. (A released Lease is
    taken at the follower's next poll.) Its caches are warm, so it reconciles at once.
    """
    return lease_duration + 2.0 * retry_period * (1.0 + JITTER_FACTOR)


@dataclass(frozen=True, slots=True)
class StartedLeading:
    """This candidate now holds the lease: start the work it guards."""


@dataclass(frozen=True, slots=True)
class StoppedLeading:
    """This candidate no longer leads: stop the guarded work now. ``reason`` says why."""

    reason: str


@dataclass(frozen=True, slots=True)
class NewLeader:
    """The observed holder of the lease changed; ``identity`` is ``""`` when none holds it."""

    identity: str


LeaderEvent = StartedLeading | StoppedLeading | NewLeader
"""The events a :class:`LeaderElector` emits."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader fields of a Lease ``spec``, with the object's resourceVersion."""

    resource_version: str
    holder_identity: str = ""
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0
    holder_instance: str = ""


def _optional(spec: Mapping[str, Any], name: str, kind: type) -> Any:
    value = spec.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise DecodeError(f"{name} must be a {kind.__name__}", path=f"spec.{name}")
    return value


def _parse_lease(document: Any) -> tuple[dict[str, Any], LeaseRecord]:
    if not isinstance(document, dict):
        raise DecodeError("a Lease must be an object")
    metadata = document.get("metadata")
    rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if not isinstance(rv, str) or not rv:
        raise DecodeError("a Lease needs a resourceVersion", path="metadata.resourceVersion")
    spec = document.get("spec")
    if spec is None:
        spec = {}
    elif not isinstance(spec, dict):
        raise DecodeError("spec must be an object", path="spec")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    instance = (
        annotations.get(HOLDER_INSTANCE_ANNOTATION) if isinstance(annotations, dict) else None
    )
    if not isinstance(instance, str) or len(instance) > _MAX_INSTANCE:
        instance = ""
    record = LeaseRecord(
        resource_version=rv,
        holder_identity=_optional(spec, "holderIdentity", str) or "",
        lease_duration_seconds=_optional(spec, "leaseDurationSeconds", int),
        acquire_time=_optional(spec, "acquireTime", str),
        renew_time=_optional(spec, "renewTime", str),
        lease_transitions=_optional(spec, "leaseTransitions", int) or 0,
        holder_instance=instance,
    )
    return document, record


def _micro_time(wall_time: datetime.datetime) -> str:
    if not isinstance(wall_time, datetime.datetime) or wall_time.utcoffset() is None:
        raise LocalProtocolError("wall_time must be a timezone-aware datetime")
    return wall_time.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise LocalProtocolError(f"{name} must be a positive number, got {value!r}")
    if math.isinf(value):
        raise LocalProtocolError(f"{name} must be finite")
    return float(value)


class LeaderElector:
    """Campaigns for, holds and releases one Lease; see the module rules.

    ``identity`` must be unique among the candidates (client-go uses the hostname plus a
    random suffix); ``instance``, a random id of this process, lets the machine detect a
    second process started with the same identity (see the module rules). Durations are
    seconds: ``lease_duration`` > ``renew_deadline`` > ``JITTER_FACTOR * retry_period``, as
    client-go requires.
    """

    __slots__ = (
        "_due",
        "_get",
        "_identity",
        "_in_flight",
        "_instance",
        "_last_error",
        "_last_now",
        "_lease_duration",
        "_name",
        "_namespace",
        "_object",
        "_observed",
        "_observed_time",
        "_renew_deadline",
        "_reported",
        "_retry_period",
        "_rng",
        "_sent",
        "_state",
        "_valid_until",
        "_wrote",
    )

    @classmethod
    def transitions(cls) -> TransitionTable[LeaderState, LeaderInput]:
        """The elector's transition table; each edge's action says when its next request
        is due."""
        return _TABLE

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        identity: str,
        rng: random.Random,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        instance: str | None = None,
    ) -> None:
        if instance is not None and (
            not isinstance(instance, str) or not instance or len(instance) > _MAX_INSTANCE
        ):
            raise LocalProtocolError(
                "instance must be a non-empty string of 256 characters at most"
            )
        if not isinstance(identity, str) or not identity:
            raise LocalProtocolError("identity must be a non-empty string")
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a random.Random")
        self._lease_duration = _positive("lease_duration", lease_duration)
        self._renew_deadline = _positive("renew_deadline", renew_deadline)
        self._retry_period = _positive("retry_period", retry_period)
        if self._lease_duration <= self._renew_deadline:
            raise LocalProtocolError("lease_duration must be greater than renew_deadline")
        if self._renew_deadline <= JITTER_FACTOR * self._retry_period:
            raise LocalProtocolError("renew_deadline must be greater than retry_period * 1.2")
        self._get = get_request(LEASES, name, namespace=namespace)  # validates both names
        self._name, self._namespace, self._identity, self._rng = name, namespace, identity, rng
        self._state = LeaderState.FOLLOWING
        self._due = -math.inf  # the first GET is due at once
        self._in_flight: _Op | None = None
        self._sent = 0.0  # when the request in flight was produced
        self._valid_until = -math.inf  # a leader stops leading at this monotonic time
        self._object: dict[str, Any] | None = None  # the last Lease object observed
        self._observed: LeaseRecord | None = None
        self._observed_time = 0.0
        self._reported: str | None = None
        self._last_now = -math.inf
        self._last_error: KubeMoonError | None = None
        self._instance = instance
        self._wrote = False  # a write of this process succeeded (it held the lease)

    # --- what the adapter reads ---------------------------------------------------------

    @property
    def state(self) -> LeaderState:
        """The current state."""
        return self._state

    @property
    def duplicate(self) -> bool:
        """True once another live process was found holding the lease under this identity."""
        return self._state is LeaderState.DUPLICATE

    @property
    def is_leader(self) -> bool:
        """True between a StartedLeading and the next StoppedLeading."""
        return self._state in _LEADING_STATES

    @property
    def identity(self) -> str:
        """This candidate's identity."""
        return self._identity

    @property
    def renew_deadline(self) -> float:
        """Seconds a leadership lasts after the send time of its last acknowledged write."""
        return self._renew_deadline

    @property
    def lease(self) -> str:
        """The Lease elected on, as ``namespace/name`` (for log lines)."""
        return f"{self._namespace}/{self._name}"

    @property
    def leader(self) -> str | None:
        """The holder of the lease as last observed (``""``: none), or None if unknown."""
        return None if self._observed is None else self._observed.holder_identity

    @property
    def observed_record(self) -> LeaseRecord | None:
        """The lease record as last observed."""
        return self._observed

    @property
    def last_error(self) -> KubeMoonError | None:
        """Why the last failed request failed (an ApiError, a DecodeError), if one did."""
        return self._last_error

    def valid_until(self, now: float) -> float | None:
        """The local time this leadership ends (its renew deadline: the send time of the
        last acknowledged write plus ``renew_deadline``), or None when not leading at
        ``now``. A pure query: it changes nothing (call :meth:`tick` to act on expiry)."""
        if self._state in _LEADING_STATES and now < self._valid_until:
            return self._valid_until
        return None

    def may_write(self, now: float) -> bool:
        """Whether the work this leadership guards may still write at ``now``."""
        return self.valid_until(now) is not None

    def next_deadline(self) -> float | None:
        """When to call back (``tick`` then ``next_request``); None: wait for an answer.

        A deadline in the past (``-inf`` before the first request) means at once.
        """
        deadlines = []
        if self._in_flight is None and self._state in _REQUESTS:
            deadlines.append(self._due)
        if self._state in _LEADING_STATES:
            deadlines.append(self._valid_until)
        return min(deadlines, default=None)

    # --- what the adapter feeds ---------------------------------------------------------

    def next_request(self, now: float, wall_time: datetime.datetime) -> Request | None:
        """The request to perform now, or None (one in flight, none due, or stopped).

        ``wall_time`` is the current wall-clock time, used only for the timestamps a write
        carries. A leader past its renew deadline gets None: call :meth:`tick`.
        """
        self._advance(now)
        stamp = _micro_time(wall_time)
        op = _REQUESTS.get(self._state)
        if op is None or self._in_flight is not None or now < self._due:
            return None
        if self._state in _LEADING_STATES and now >= self._valid_until:
            return None
        if op is _Op.GET:
            request = self._get
        elif op is _Op.CREATE:
            request = create_request(LEASES, self._lease(stamp), namespace=self._namespace)
        else:
            request = replace_request(
                LEASES, self._lease(stamp), namespace=self._namespace, name=self._name
            )
        self._in_flight, self._sent = op, now
        return request

    def receive_response(self, response: Response, now: float) -> list[LeaderEvent]:
        """Take the answer to the request in flight; return the events it causes."""
        self._advance(now)
        op = self._in_flight
        if op is None:
            raise LocalProtocolError("no request is in flight")
        events: list[LeaderEvent] = []
        self._expire(now, events)
        self._in_flight = None
        self._step(self._classify(op, response, now, events), now, events)
        return events

    def request_failed(self, now: float) -> list[LeaderEvent]:
        """The request in flight got no answer (lost, refused, timed out)."""
        self._advance(now)
        if self._in_flight is None:
            raise LocalProtocolError("no request is in flight")
        events: list[LeaderEvent] = []
        self._expire(now, events)
        self._in_flight = None
        self._step(LeaderInput.FAILED, now, events)
        return events

    def tick(self, now: float) -> list[LeaderEvent]:
        """Apply the deadlines that have passed (a leader's renew deadline)."""
        self._advance(now)
        events: list[LeaderEvent] = []
        self._expire(now, events)
        return events

    def release(self, now: float) -> list[LeaderEvent]:
        """Stop campaigning; stop leading at once and give the lease up if it is held."""
        self._advance(now)
        events: list[LeaderEvent] = []
        self._expire(now, events)
        busy = self._in_flight is not None
        self._step(LeaderInput.RELEASE_BUSY if busy else LeaderInput.RELEASE, now, events)
        return events

    # --- the machine ---------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if not now >= self._last_now:  # also refuses NaN
            raise LocalProtocolError(f"time went backwards: {now} < {self._last_now}")
        self._last_now = now

    def _expire(self, now: float, events: list[LeaderEvent]) -> None:
        if self._state in _LEADING_STATES and now >= self._valid_until:
            busy = self._in_flight is not None
            self._step(LeaderInput.EXPIRED_BUSY if busy else LeaderInput.EXPIRED, now, events)

    def _step(self, event: LeaderInput, now: float, events: list[LeaderEvent]) -> None:
        _TABLE.step(self._state, event)  # AssertionError naming both if the table has none
        target, wait = _TRANSITIONS[(self._state, event)]
        if target is LeaderState.RELEASING and not self._observed_mine():
            # Never clear a holder that is not this candidate (or a lease never seen): the
            # table's one guard, named in those edges' actions.
            target = LeaderState.STOPPED
        was_leader, is_leader = self._state in _LEADING_STATES, target in _LEADING_STATES
        if was_leader and not is_leader:
            events.insert(0, StoppedLeading(_STOP_REASONS[event]))
        if event is LeaderInput.WRITTEN and is_leader:
            self._valid_until = self._sent + self._renew_deadline
        self._state = target
        if wait is _Wait.NOW:
            self._due = now
        elif wait is _Wait.RETRY:
            self._due = now + self._retry_period
        else:
            self._due = now + self._retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
        if is_leader and not was_leader:
            events.append(StartedLeading())

    def _observed_mine(self) -> bool:
        return self._observed is not None and self._observed.holder_identity == self._identity

    def _classify(
        self, op: _Op, response: Response, now: float, events: list[LeaderEvent]
    ) -> LeaderInput:
        code = response.status_code
        if not response.ok:
            self._last_error = error_from_response(code, response.headers, response.body)
            if op is _Op.GET and code == 404:
                self._object = self._observed = None
                return LeaderInput.ABSENT
            if op is _Op.GET:
                return LeaderInput.FAILED
            if code == 409 or (code == 404 and op is _Op.UPDATE):
                return LeaderInput.CONFLICT
            return LeaderInput.FAILED
        try:
            document, record = _parse_lease(_json.loads(response.body))
        except DecodeError as exc:
            self._last_error = exc
            return LeaderInput.FAILED
        before = self._observed
        self._observe(document, record, now, events)
        if op is not _Op.GET:
            self._wrote = True
            return LeaderInput.WRITTEN
        holder = record.holder_identity
        if holder == self._identity:
            instance = record.holder_instance
            if self._instance is None or not instance or instance == self._instance:
                return LeaderInput.MINE
            # Another process wrote it under this identity: a live one if this process
            # wrote the lease too, or if it renews while followed; else an earlier one.
            renewed = (
                before is not None
                and before != record
                and before.holder_identity == holder
                and before.holder_instance == instance
            )
            if self._wrote or renewed:
                self._last_error = LocalProtocolError(
                    f"the Lease {self.lease} is also held by another process with the "
                    f"identity {holder!r} (instance {instance[:40]!r}, this one is "
                    f"{self._instance!r}): replica identities must be unique"
                )
                return LeaderInput.DUPLICATE
        seconds = record.lease_duration_seconds
        duration = self._lease_duration if seconds is None else float(seconds)
        if not holder or self._observed_time + duration <= now:
            return LeaderInput.FREE
        return LeaderInput.HELD

    def _observe(
        self, document: dict[str, Any], record: LeaseRecord, now: float, events: list[LeaderEvent]
    ) -> None:
        self._object = document
        if record != self._observed:
            self._observed, self._observed_time = record, now
        if record.holder_identity != self._reported:
            self._reported = record.holder_identity
            events.append(NewLeader(record.holder_identity))

    def _lease(self, stamp: str) -> dict[str, Any]:
        """The Lease to write in the current state, at wall time ``stamp``."""
        spec: dict[str, Any] = {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": math.ceil(self._lease_duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        mine = {} if self._instance is None else {HOLDER_INSTANCE_ANNOTATION: self._instance}
        if self._state is LeaderState.CREATING:
            metadata: dict[str, Any] = {"name": self._name, "namespace": self._namespace}
            if mine:
                metadata["annotations"] = mine
            return {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": metadata,
                "spec": spec,
            }
        old, obj = self._observed, self._object
        assert old is not None, "every other write follows an observation"
        assert obj is not None, "every other write follows an observation"
        if self._state is LeaderState.RELEASING:
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["leaseTransitions"] = old.lease_transitions
        elif old.holder_identity == self._identity:
            spec["acquireTime"] = old.acquire_time or stamp
            spec["leaseTransitions"] = old.lease_transitions
        else:
            spec["leaseTransitions"] = old.lease_transitions + 1
        # Keep everything else of the observed object: metadata (with the resourceVersion
        # that makes the write conditional) and any spec field this machine does not own.
        old_spec = obj.get("spec")
        written = {**obj, "spec": {**(old_spec if isinstance(old_spec, dict) else {}), **spec}}
        if mine:
            old_meta = obj.get("metadata")
            meta = dict(old_meta) if isinstance(old_meta, dict) else {}
            annotations = meta.get("annotations")
            meta["annotations"] = {**(annotations if isinstance(annotations, dict) else {}), **mine}
            written["metadata"] = meta
        return written
