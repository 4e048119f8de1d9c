"""Run a core :class:`~kubemoon_core.lowlevel.Controller` with tasks as its workers.

Rules: the controller decides everything (which key, when, what an outcome means); this
loop hands each work item to a task, reports the outcome with the loop's clock, and sleeps
until a key is added (:meth:`ControllerRunner.wake`) or the controller's next deadline.
An exception escaping the user's reconcile, or a reconcile that returns something other
than an outcome (a forgotten ``return``), is a ``Failed`` outcome of that key (logged,
counted, retried with backoff), never a crash. Every log line names the controller and
the key.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable

from kubemoon_core._controller import (
    Controller,
    Failed,
    FailedTerminally,
    Outcome,
    Reconciled,
    Requeue,
    RequeueAfter,
    WorkItem,
)
from kubemoon_core._errors import LocalProtocolError
from kubemoon_core._gate import AuthorityLost

from . import _backend

__all__ = ["ControllerRunner", "Reconcile"]

logger = logging.getLogger("kubemoon.controller")

Reconcile = Callable[[WorkItem], Awaitable[Outcome]]

_OUTCOMES = (Reconciled, Requeue, RequeueAfter, Failed, FailedTerminally)


def _describe(value: object, limit: int = 200) -> str:
    """A bounded repr of what user code returned (whose ``__repr__`` may raise)."""
    try:
        text = repr(value)
    except Exception:  # user code
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else f"{text[:limit]}... ({type(value).__name__})"


class ControllerRunner:
    """Drives ``controller`` in real time, running ``reconcile`` for each work item.

    Feed changes with ``controller.receive(...)`` and then call :meth:`wake`. ``run`` ends
    after :meth:`stop` once every running reconcile has finished. ``name`` is the
    controller's name in log lines; ``on_report(item)`` is called after each outcome is
    reported. A ``cancellable`` runner runs each reconcile in a scope of its own, so
    :meth:`cancel` can stop it (a sharded controller whose Lease passed its renew
    deadline must stop its work at once).
    """

    def __init__(
        self,
        controller: Controller,
        reconcile: Reconcile,
        *,
        name: str = "-",
        on_report: Callable[[WorkItem], object] | None = None,
        cancellable: bool = False,
    ) -> None:
        self.controller = controller
        self.name = name
        self._on_report = on_report
        self._cancellable = cancellable
        self._scopes: dict[int, _backend.TaskGroup] = {}
        self._reconcile = reconcile
        self._wakeup = _backend.Event()

    def __repr__(self) -> str:
        return f"<ControllerRunner {self.name}>"

    def wake(self) -> None:
        """Tell the loop that keys may be ready."""
        self._wakeup.set()

    def stop(self) -> None:
        """Hand out no new work; ``run`` returns when running reconciles are done."""
        self.controller.shutdown()
        self.wake()

    def cancel(self, items: Iterable[WorkItem]) -> int:
        """Cancel these running reconciles (a ``cancellable`` runner only): each ends as a
        ``Requeue``. Returns how many were cancelled."""
        count = 0
        for item in items:
            scope = self._scopes.get(item.reconcile_id)
            if scope is not None:
                scope.cancel()
                count += 1
        return count

    async def _run_one(self, item: WorkItem) -> None:
        if not self._cancellable:
            outcome = await self._outcome(item)
        else:
            box: list[Outcome] = []

            async def attempt() -> None:
                box.append(await self._outcome(item))

            try:
                async with _backend.TaskGroup() as scope:
                    self._scopes[item.reconcile_id] = scope
                    scope.start_soon(attempt)
            except BaseExceptionGroup as group:
                # Cancelled as its range was lost while its writes were refused for the
                # same reason (concurrent writes: a group of AuthorityLost and the
                # cancellation): nothing was sent, so it ends as a cancelled reconcile.
                if group.split(AuthorityLost)[1] is not None:
                    raise
            finally:
                del self._scopes[item.reconcile_id]
            if box:
                outcome = box[0]
            else:
                logger.warning(
                    "controller %s: reconcile of %s cancelled: its range stopped",
                    self.name,
                    item.key,
                    extra={"controller": self.name, "key": str(item.key)},
                )
                outcome = Requeue()
        self.controller.report(item, outcome, _backend.current_time())
        if self._on_report is not None:
            self._on_report(item)
        self.wake()

    async def _outcome(self, item: WorkItem) -> Outcome:
        extra = {"controller": self.name, "key": str(item.key), "reconcile_id": item.reconcile_id}
        try:
            # Typed as any value: user code may return anything (a forgotten return: None).
            outcome: object = await self._reconcile(item)
        except Exception as exc:  # user code: any failure is a retryable outcome
            logger.warning(
                "controller %s: reconcile of %s failed: %r",
                self.name,
                item.key,
                exc,
                extra=extra,
                exc_info=not isinstance(exc, OSError),
            )
            outcome = Failed(exc)
        if not isinstance(outcome, _OUTCOMES):
            hint = "a forgotten return?"
            if inspect.iscoroutine(outcome):
                outcome.close()  # never awaited: closed here, so no warning follows it
                hint = "a forgotten await?"
            error = LocalProtocolError(
                f"controller {self.name}: reconcile of {item.key} returned {_describe(outcome)}, "
                "not an outcome (Reconciled, Requeue, RequeueAfter, Failed or "
                f"FailedTerminally): {hint}"
            )
            logger.error("%s", error, extra=extra)
            outcome = Failed(error)
        return outcome

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
