"""Checks shared by the operators' simulation suites (test_sim_configmirror.py,
test_sim_widgets.py): when a run converged, what was written after it, and whether every
failed reconcile was reported.

- convergence: a predicate on the server's objects (its failures, empty when it holds),
  first holding strictly after the last fault ended (a pause ends when its time is up; a
  pause armed for a write, ``PauseOnWrite``, starts when that write goes out, so its end is
  read from ``SimulatedCluster.pauses`` as the run goes), within a stated bound;
- quiescence: once converged, no replica writes (Lease renewals aside), except, within
  ``EVENT_FLUSH`` seconds, the series count of an Event repeated before convergence (the
  event recorder writes counts at most once per flush interval, so up to one interval
  late, by design); the run goes on ``QUIET`` seconds past that;
- reported: every failed reconcile is logged by the runtime (``kubemoon.controller``) and
  counted in its controller's ``reconcile_errors_total``, one for one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kubemoon_testing.sim import FaultSchedule, Pause, PauseOnWrite, SimulationResult

EVENTS_PATH = "/apis/events.k8s.io/v1/"
EVENT_FLUSH = 60.0
"""The event recorder's ``flush_interval`` (``kubemoon_core``'s default): a repeated Event's
series count is written at most this long after the repeat."""
QUIET = 30.0
"""Virtual seconds after ``EVENT_FLUSH`` in which no replica may write at all (Lease
renewals aside)."""


def faults_end(schedule: FaultSchedule) -> float:
    """When the schedule's last step is over: a pause ends when its time is up."""
    ends = [
        step.at + step.seconds if isinstance(step, Pause | PauseOnWrite) else step.at
        for step in schedule.steps
    ]
    return max(ends, default=0.0)


@dataclass
class Convergence:
    """Watches a run (as ``simulate``'s ``until``) for the first virtual second, after the
    faults ended, at which ``failures(result)`` is empty; records when (seconds from
    ``start``) and the trace's length then, and ends the run ``EVENT_FLUSH + QUIET``
    seconds later."""

    failures: Callable[[SimulationResult], list[str]]
    faults_end: float
    start: float = 0.0
    at: float | None = None
    seq: int = 0

    def until(self, result: SimulationResult) -> bool:
        now = result.cluster.now() - self.start
        # A pause armed for a write starts when that write goes out: its end is known only
        # then (from the cluster's record of pauses), and the faults end no earlier.
        for _, _, until in result.cluster.pauses:
            self.faults_end = max(self.faults_end, until - self.start)
        if self.at is None:
            if now > self.faults_end and not self.failures(result):
                self.at, self.seq = now, len(result.trace)
            return False
        return now - self.at >= EVENT_FLUSH + QUIET

    def check(self, result: SimulationResult, identities: Sequence[str], bound: float) -> list[str]:
        """Convergence within ``bound`` seconds of the faults' end, then quiescence."""
        if self.at is None or self.at > self.faults_end + bound:
            return [
                f"not converged {bound} s after the faults ended at {self.faults_end:.3f} s: "
                f"{failure}"
                for failure in self.failures(result) or ["(converged too late)"]
            ]
        flushed_by = self.start + self.at + EVENT_FLUSH
        return [
            f"{e.identity} sent {e.method} {e.path} ({e.code}) at {e.time:.3f} s, after "
            f"convergence at {self.at:.3f} s"
            for e in result.trace[self.seq :]
            if e.identity in identities
            and e.is_write
            and not e.is_lease
            and not (e.method == "PATCH" and EVENTS_PATH in e.path and e.time <= flushed_by)
        ]


class FailureLog(logging.Handler):
    """Records the runtime's reports of failed reconciles."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reports: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " failed: " in message or "not an outcome" in message:
            self.reports.append(record)


@contextmanager
def failure_log() -> Iterator[FailureLog]:
    """Collect the ``kubemoon.controller`` reports of failed reconciles while in the block."""
    handler = FailureLog()
    logger = logging.getLogger("kubemoon.controller")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def unreported_errors(result: SimulationResult, log: FailureLog) -> list[str]:
    """Failed reconciles not reported one for one: logged versus counted."""
    counted = sum(
        controller.controller.metrics(0.0).errors
        for managers in result.managers.values()
        for manager in managers
        for controller in manager.controllers
    )
    logged = len(log.reports)
    if counted == logged:
        return []
    return [f"{logged} failed reconciles logged, {counted} counted in reconcile_errors_total"]
