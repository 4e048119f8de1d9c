"""Run a core :class:`~kubemoon_core.Controller` with tasks as its workers.

Rules: the controller decides everything (which key, when, what an outcome means); this
loop hands each work item to a task, reports the outcome with the loop's clock, and sleeps
until a key is added (:meth:`ControllerRunner.wake`) or the controller's next deadline.
An exception escaping the user's reconcile is a ``Failed`` outcome, never a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kubemoon_core._controller import Controller, Failed, Outcome, WorkItem

from . import _backend

__all__ = ["ControllerRunner", "Reconcile"]

logger = logging.getLogger("kubemoon.controller")

Reconcile = Callable[[WorkItem], Awaitable[Outcome]]


class ControllerRunner:
    """Drives ``controller`` in real time, running ``reconcile`` for each work item.

    Feed changes with ``controller.receive(...)`` and then call :meth:`wake`. ``run`` ends
    after :meth:`stop` once every running reconcile has finished.
    """

    def __init__(self, controller: Controller, reconcile: Reconcile) -> None:
        self.controller = controller
        self._reconcile = reconcile
        self._wakeup = _backend.Event()

    def wake(self) -> None:
        """Tell the loop that keys may be ready."""
        self._wakeup.set()

    def stop(self) -> None:
        """Hand out no new work; ``run`` returns when running reconciles are done."""
        self.controller.shutdown()
        self.wake()

    async def _run_one(self, item: WorkItem) -> None:
        try:
            outcome = await self._reconcile(item)
        except Exception as exc:  # user code: any failure is a retryable outcome
            logger.warning(
                "reconcile failed: %s",
                exc,
                extra={"key": str(item.key), "reconcile_id": item.reconcile_id},
                exc_info=not isinstance(exc, OSError),
            )
            outcome = Failed(exc)
        self.controller.report(item, outcome, _backend.current_time())
        self.wake()

    async def run(self) -> None:
        """Run workers until :meth:`stop` and the last running reconcile has reported."""
        async with _backend.TaskGroup() as workers:
            while True:
                item = self.controller.next_work(_backend.current_time())
                if item is not None:
                    workers.start_soon(self._run_one, item)
                    continue
                if self.controller.is_drained:
                    return
                deadline = self.controller.next_deadline()
                self._wakeup = _backend.Event()
                await _backend.wait_event(self._wakeup, deadline)
