"""A wall-clock bound on a simulated run (issue 32).

On trio's ``MockClock(autojump_threshold=0)`` virtual time moves only while every task is
blocked; a task that keeps running -- a loop that checkpoints but never waits, such as a
controller runner whose deadline is already past -- holds virtual time still, and the run
would never end. :func:`~kubemoon_testing.sim.simulate` therefore runs under a
:class:`Watchdog`: a thread raises a flag every ``tick`` wall seconds, and a trio
instrument (``after_io_wait``, once per pass of the loop, which a busy loop still makes)
sees it and checks how far virtual time has gone. The run fails with
:class:`SimulationStalled` when it has taken ``wall_limit`` wall seconds in all, or when
virtual time has stood still for ``stall_limit`` wall seconds while the loop kept stepping
tasks (counted by a second instrument, installed only while virtual time stands still, so
a run that advances pays nothing for it). The error says what was happening: virtual time
reached, requests served, the busiest tasks and where every task was waiting.

Rules: the checks run on the trio thread, inside the loop's own pass, so they read its
state without locks and wake no task: the thread never touches the loop while it runs, so
the seeded scheduling order (:func:`~kubemoon_testing.sim.seed_trio_scheduler`) is the
same with the watchdog as without it. Only a loop that has made no pass for a while (idle
with nothing to wait for: a hang at the end of a run) is woken through its ``TrioToken``.
Failing cancels the run's scope, and :func:`simulate` raises the error once the scope has
exited. A task that never yields to the loop (a ``while True`` without an ``await``)
blocks these checks too: nothing in-process can stop it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import trio

from kubemoon_core import KubeMoonError

__all__ = ["DEFAULT_STALL_LIMIT", "DEFAULT_WALL_LIMIT", "SimulationStalled", "Watchdog"]

DEFAULT_WALL_LIMIT = 60.0
"""Wall seconds one :func:`~kubemoon_testing.sim.simulate` run may take."""

DEFAULT_STALL_LIMIT = 20.0
"""Wall seconds virtual time may stand still while the loop keeps running tasks."""

_BUSY_STEPS = 1000
"""Task steps, while virtual time stands still, that tell a spinning loop from a busy one."""

_TASKS_SHOWN = 25
_TRIO_DIR = str(Path(trio.__file__).parent)


class SimulationStalled(KubeMoonError):
    """A simulated run hit its wall-clock bound (``reason == "wall"``) or virtual time
    stood still while the loop kept running (``reason == "stall"``). ``virtual_time`` is
    the virtual seconds since the run started, ``requests`` how many requests the server
    had answered, ``steps`` the task steps run since virtual time last moved (None when it
    was moving), ``busiest`` those steps per task name, busiest first, and ``tasks`` where
    each of the run's tasks was (grouped, with counts)."""

    def __init__(
        self,
        reason: str,
        *,
        wall_seconds: float,
        virtual_time: float,
        stuck_seconds: float,
        requests: int,
        steps: int | None,
        busiest: tuple[tuple[str, int], ...],
        tasks: tuple[str, ...],
    ) -> None:
        self.reason = reason
        self.wall_seconds = wall_seconds
        self.virtual_time = virtual_time
        self.stuck_seconds = stuck_seconds
        self.requests = requests
        self.steps = steps
        self.busiest = busiest
        self.tasks = tasks
        if reason == "stall":
            head = (
                f"simulated run stalled: virtual time stood at {virtual_time:.3f} s for "
                f"{stuck_seconds:.1f} wall seconds while the loop ran {steps} task steps "
                "(a task that checkpoints but never waits holds a virtual clock still)"
            )
        else:
            head = (
                f"simulated run passed its wall-clock bound ({wall_seconds:.1f} s) at virtual "
                f"time {virtual_time:.3f} s (virtual time last moved {stuck_seconds:.1f} wall "
                "seconds ago)"
            )
        lines = [head, f"requests served: {requests}"]
        if busiest:
            lines.append("busiest tasks since virtual time last moved:")
            lines += [f"  {count} steps: {name}" for name, count in busiest]
        lines.append("running tasks:")
        lines += [f"  {task}" for task in tasks]
        super().__init__("\n".join(lines))


class _StepCounter(trio.abc.Instrument):
    """Counts task steps per task name."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1


def _where(task: trio.lowlevel.Task) -> str:
    """The innermost frame of ``task`` outside trio, as ``function (file:line)``."""
    found = ""
    for frame, lineno in task.iter_await_frames():
        filename = frame.f_code.co_filename
        if filename.startswith(_TRIO_DIR):
            continue
        found = f"{frame.f_code.co_name} ({Path(filename).name}:{lineno})"
    return found


def _tasks(root: trio.lowlevel.Task) -> tuple[str, ...]:
    """Every task under ``root`` (not itself), grouped by name and place, most first."""
    places: Counter[str] = Counter()
    stack = [child for nursery in root.child_nurseries for child in nursery.child_tasks]
    while stack:
        task = stack.pop()
        where = _where(task)
        places[f"{task.name} at {where}" if where else task.name] += 1
        stack += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    shown = [
        f"{count} x {place}" if count > 1 else place
        for place, count in places.most_common(_TASKS_SHOWN)
    ]
    if len(places) > _TASKS_SHOWN:
        shown.append(f"... and {len(places) - _TASKS_SHOWN} more")
    return tuple(shown)


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


class Watchdog(trio.abc.Instrument):
    """Bounds one run in wall-clock time; see the module's docstring. :meth:`start` it in
    the run's task, :meth:`stop` it before that task ends, then :meth:`raise_if_tripped`
    once the scope it cancels has exited."""

    def __init__(
        self,
        *,
        wall_limit: float | None,
        stall_limit: float | None,
        requests: Callable[[], int],
        tick: float = 0.25,
    ) -> None:
        self.wall_limit = wall_limit
        self.stall_limit = stall_limit
        self.error: SimulationStalled | None = None
        self._requests = requests
        self._tick = tick
        self._stop = threading.Event()
        self._due = False  # raised by the thread, lowered by the loop's next pass
        self._counter: _StepCounter | None = None
        self._thread: threading.Thread | None = None
        self._scope: trio.CancelScope | None = None
        self._root: trio.lowlevel.Task | None = None
        self._started_wall = self._moved_wall = self._checked_wall = self._tripped_wall = 0.0
        self._started_virtual = self._last_virtual = 0.0

    def start(self, scope: trio.CancelScope) -> None:
        """Watch the run of the calling task, cancelling ``scope`` when it trips."""
        if self.wall_limit is None and self.stall_limit is None:
            return
        self._scope = scope
        self._root = trio.lowlevel.current_task()
        self._started_wall = self._moved_wall = self._checked_wall = time.monotonic()
        self._started_virtual = self._last_virtual = trio.current_time()
        token = trio.lowlevel.current_trio_token()
        idle = max(8 * self._tick, 2.0)

        def ticker() -> None:
            woken = 0.0
            told = False
            while not self._stop.wait(self._tick):
                now = time.monotonic()
                if self._due and now - self._checked_wall >= idle and now - woken >= idle:
                    # No pass of the loop for a while: it is idle with nothing to wait for
                    # (or blocked). Wake it; only a run that is stuck is disturbed so.
                    woken = now
                    try:
                        token.run_sync_soon(self._check)
                    except trio.RunFinishedError:
                        return
                self._due = True
                error = self.error
                if error is not None and not told and now - self._tripped_wall >= idle:
                    # Cancelled, yet still running: a task shielded from cancellation is
                    # waiting for something that will not come. Say why, at least.
                    told = True
                    sys.stderr.write(f"the cancelled simulated run has not ended: {error}\n")

        trio.lowlevel.add_instrument(self)
        self._thread = threading.Thread(target=ticker, name="kubemoon-sim-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (in the run's task, before trio's loop ends)."""
        self._stop.set()
        for instrument in (self, self._counter):
            if instrument is not None:
                with contextlib.suppress(KeyError):  # never added, or already removed
                    trio.lowlevel.remove_instrument(instrument)
        self._counter = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def raise_if_tripped(self, cause: BaseException | None = None) -> None:
        """Raise the :class:`SimulationStalled` it tripped with, if it did."""
        if self.error is not None:
            if cause is not None and _only_cancelled(cause):
                raise self.error from None  # the watchdog's own cancellation says nothing
            raise self.error from cause

    def after_io_wait(self, timeout: float) -> None:
        """Trio's hook, once per pass of the loop: check when the thread asked to."""
        if self._due:
            self._due = False
            self._check()

    def _check(self) -> None:
        """On the trio thread: has virtual time moved, and is either bound passed?"""
        if self._stop.is_set() or self.error is not None:
            return
        wall = self._checked_wall = time.monotonic()
        virtual = trio.current_time()
        if virtual != self._last_virtual:
            self._last_virtual = virtual
            self._moved_wall = wall
            if self._counter is not None:
                trio.lowlevel.remove_instrument(self._counter)
                self._counter = None
        elif self._counter is None:
            self._counter = _StepCounter()
            trio.lowlevel.add_instrument(self._counter)
        stuck = wall - self._moved_wall
        steps = None if self._counter is None else sum(self._counter.steps.values())
        if self.wall_limit is not None and wall - self._started_wall >= self.wall_limit:
            self._trip("wall", wall, stuck, steps)
        elif (
            self.stall_limit is not None
            and stuck >= self.stall_limit
            and steps is not None
            and steps >= _BUSY_STEPS
        ):
            self._trip("stall", wall, stuck, steps)

    def _trip(self, reason: str, wall: float, stuck: float, steps: int | None) -> None:
        assert self._root is not None
        assert self._scope is not None
        self._tripped_wall = wall
        busiest = () if self._counter is None else tuple(self._counter.steps.most_common(5))
        self.error = SimulationStalled(
            reason,
            wall_seconds=wall - self._started_wall,
            virtual_time=self._last_virtual - self._started_virtual,
            stuck_seconds=stuck,
            requests=self._requests(),
            steps=steps,
            busiest=busiest,
            tasks=_tasks(self._root),
        )
        self._scope.cancel()
