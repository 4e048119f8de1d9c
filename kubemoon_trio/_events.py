"""Records Kubernetes Events (``events.k8s.io/v1``) without ever blocking a reconcile.

Rules: the core :class:`~kubemoon_core.lowlevel.EventRecorder` decides what to write (new Events,
series updates, spam filtering, bounded caches); :meth:`EventRecorder.record` only queues
the writes it plans and returns at once. A background task performs them, each bounded in
time, and flushes due series updates. A failed write is logged at DEBUG and forgotten: an
Event is never worth failing or slowing a reconcile. At most ``max_pending`` writes wait;
more are dropped and counted. An Event recorded where writes are gated (a reconcile under
a leadership or a shard range: ``kubemoon_io.gated_writes``) is written under that gate,
when the writer gets to it; a series update under the gate of the latest record of that
same Event (so of the object it is about, never another's: a shard member must not write
an Event of an object outside its range). A gate that lapsed meanwhile stops the write
like any other failure; a series update whose record's gate is no longer known is dropped.
"""

from __future__ import annotations

import collections
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from kubemoon_core import KubeMoonError
from kubemoon_core.lowlevel import EventOutcome, EventWrite
from kubemoon_core.lowlevel import EventRecorder as EventMachine
from kubemoon_core.typed import Declared, encode
from kubemoon_io import SendGuard, current_send_guard, gated_writes

from . import _backend
from ._client import Client

__all__ = ["EventRecorder"]

logger = logging.getLogger("kubemoon.events")

_GUARDS_KEPT = 4096  # Events whose latest record's guard is kept for their series updates


class EventRecorder:
    """Queues Events for a background writer; see the module rules.

    ``reporting_controller`` names the program (``example.com/my-operator``) and
    ``reporting_instance`` this replica.
    """

    def __init__(
        self,
        client: Client,
        reporting_controller: str,
        reporting_instance: str,
        *,
        max_pending: int = 1000,
        request_timeout: float = 10.0,
        machine: EventMachine | None = None,
    ) -> None:
        self._client = client
        self.machine = machine or EventMachine(reporting_controller, reporting_instance)
        self._pending: collections.deque[tuple[EventWrite, SendGuard | None]] = collections.deque()
        # The guard of each Event's latest record (None: recorded ungated), least recent
        # first; bounded like the machine's own series cache.
        self._guards: collections.OrderedDict[str, SendGuard | None] = collections.OrderedDict()
        self._max_pending = max_pending
        self._request_timeout = request_timeout
        self._wakeup = _backend.Event()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.writes = 0
        self.dropped = 0

    def record(
        self,
        regarding: Mapping[str, Any] | Declared,
        type: str,
        reason: str,
        note: str,
        *,
        action: str = "Reconcile",
        related: Mapping[str, Any] | None = None,
    ) -> None:
        """Record that ``reason`` happened to ``regarding`` (``type`` Normal or Warning), a
        mapping or a declared object."""
        if not isinstance(regarding, Mapping):
            regarding = encode(regarding)
        plan = self.machine.record(
            regarding,
            type,
            reason,
            note,
            action=action,
            now=_backend.current_time(),
            wall=datetime.datetime.now(datetime.UTC),
            related=related,
        )
        self.outcomes[plan.outcome.value] += 1
        if plan.outcome is EventOutcome.INVALID:
            logger.debug("event %s not recorded: %s", reason, plan.reason)
        guard = current_send_guard()
        if plan.event:
            self._guards[plan.event] = guard
            self._guards.move_to_end(plan.event)
            if len(self._guards) > _GUARDS_KEPT:
                self._guards.popitem(last=False)
        self._queue(plan.writes, guard)
        if plan.outcome is EventOutcome.COUNTED:
            # A series update may now be due later: the writer, perhaps asleep with no
            # deadline, must look again at when.
            self._wakeup.set()

    def _queue(self, writes: tuple[EventWrite, ...], guard: SendGuard | None) -> None:
        for write in writes:
            if len(self._pending) >= self._max_pending:
                self.dropped += 1
                self.machine.request_failed(write, _backend.current_time())
                continue
            self._pending.append((write, guard))
        if writes:
            self._wakeup.set()

    def _queue_series_updates(self, writes: tuple[EventWrite, ...]) -> None:
        for write in writes:
            if write.event not in self._guards:
                self.machine.request_failed(write, _backend.current_time())  # gate unknown
                continue
            self._queue((write,), self._guards[write.event])

    async def run(self) -> None:
        """Write queued Events and due series updates until cancelled."""
        while True:
            self._queue_series_updates(self.machine.flush(_backend.current_time()))
            while self._pending:
                await self._write(*self._pending.popleft())
            self._wakeup = _backend.Event()
            if self._pending:
                continue
            await _backend.wait_event(self._wakeup, self.machine.next_deadline())

    async def _write(self, write: EventWrite, guard: SendGuard | None) -> None:
        try:
            with gated_writes(guard):
                response = await self._client.send(write.request, timeout=self._request_timeout)
        except KubeMoonError as exc:  # AuthorityLost too: the gate lapsed
            logger.debug("event write failed: %s", exc)
            self.machine.request_failed(write, _backend.current_time())
            return
        self.writes += 1
        if not response.ok:
            logger.debug("event write answered %s", response.status_code)
        self.machine.receive_response(write, response, _backend.current_time())
