"""Run a core :class:`~kubemoon_core.lowlevel.LeaderElector` against the API server.

Rules: the elector decides what to request and what every answer or failure means; this
loop performs its requests with a bounded timeout, passes the wall clock only for the
timestamps the elector writes, and sleeps until ``next_deadline()``.
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Callable

from kubemoon_core import KubeMoonError
from kubemoon_core._leader import LeaderElector, LeaderEvent, StartedLeading, StoppedLeading
from kubemoon_io import _tracing

from . import _backend
from ._client import Client

__all__ = ["LeaderElection"]

logger = logging.getLogger("kubemoon.leader")


class LeaderElection:
    """Keeps ``elector`` campaigning; ``is_leader`` and :meth:`wait_leading` expose it.

    ``request_timeout`` bounds each request: a lost answer must not outlive the renew
    deadline. :meth:`release` gives the lease up (call it after stopping the guarded work).
    """

    def __init__(
        self,
        client: Client,
        elector: LeaderElector,
        *,
        request_timeout: float = 5.0,
        on_result: Callable[[str, BaseException | None], object] | None = None,
    ):
        self.client = client
        self.elector = elector
        self.request_timeout = request_timeout
        self._on_result = on_result
        self._releasing = False
        self._duplicate_reported = False
        self._leading = _backend.Event()
        self._lost = _backend.Event()

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the lease."""
        return self.elector.is_leader

    @property
    def leading_event(self) -> _backend.Event:
        """Set once this candidate has become the leader."""
        return self._leading

    async def wait_leading(self) -> None:
        """Return once this candidate has become the leader."""
        await self._leading.wait()

    async def wait_lost(self) -> None:
        """Return once this candidate has stopped leading after having led."""
        await self._lost.wait()

    def _handle(self, events: list[LeaderEvent]) -> None:
        lease = self.elector.lease
        for event in events:
            _tracing.leader_transition(event, self.elector.identity)
            if isinstance(event, StartedLeading):
                logger.info("lease %s: started leading as %s", lease, self.elector.identity)
                self._leading.set()
            elif isinstance(event, StoppedLeading):
                level = logging.INFO if self._releasing else logging.WARNING
                logger.log(level, "lease %s: stopped leading as %s", lease, self.elector.identity)
                self._lost.set()
            elif event.identity:
                logger.info("lease %s: leader is now %s", lease, event.identity)
            else:
                logger.info("lease %s: free (no holder)", lease)
        if self.elector.duplicate and not self._duplicate_reported:
            self._duplicate_reported = True
            logger.error(
                "lease %s: another process runs with the identity %s: this one stops "
                "campaigning for good (%s)",
                lease,
                self.elector.identity,
                self.elector.last_error,
            )
            self._lost.set()

    async def _perform(self) -> bool:
        now = _backend.current_time()
        request = self.elector.next_request(now, datetime.datetime.now(datetime.UTC))
        if request is None:
            return False
        # A leader's renew deadline must fire on time even while a renew hangs.
        limit = min(now + self.request_timeout, self.elector.next_deadline() or math.inf)
        try:
            async with _backend.fail_after(limit - now):
                response = await self.client.send(request, timeout=limit - now)
        except (KubeMoonError, TimeoutError) as exc:
            logger.info("lease %s: request failed: %s", self.elector.lease, exc)
            self._handle(self.elector.request_failed(_backend.current_time()))
            self._report(request.method, exc)
        except BaseException:
            # Cancelled mid-request: the elector must not wait for an answer forever.
            self._handle(self.elector.request_failed(_backend.current_time()))
            raise
        else:
            self._handle(self.elector.receive_response(response, _backend.current_time()))
            # A GET answered 404 is the normal step before the Lease is created.
            absent = request.method == "GET" and response.status_code == 404
            self._report(request.method, None if response.ok or absent else self.elector.last_error)
        return True

    def _report(self, method: str, error: BaseException | None) -> None:
        if self._on_result is not None:
            verb = {"GET": "get", "POST": "create", "PUT": "update"}.get(method, method.lower())
            self._on_result(verb, error)

    async def run(self) -> None:
        """Campaign and renew until cancelled."""
        while True:
            self._handle(self.elector.tick(_backend.current_time()))
            if await self._perform():
                continue
            deadline = self.elector.next_deadline()
            await _backend.sleep_until(math.inf if deadline is None else deadline)

    async def release(self) -> None:
        """Stop leading and write the lease free, so a successor need not wait it out.

        The release is written whatever a request in flight did (the elector may check
        the Lease first); each request is bounded by ``request_timeout``.
        """
        self._releasing = True
        self._handle(self.elector.release(_backend.current_time()))
        with _backend.shielded():
            while await self._perform():
                pass
