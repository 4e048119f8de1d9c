"""Loud but bounded failure reporting: when an adapter should log a failing call, and how.

Rules:

- The adapter reports every failed call (``failed``) and every success (``succeeded``) of a
  named *source* (a reflector, the lease loop, a client) with ``now``. The reporter
  answers with a :class:`FailureReport` when a log line is due, else None; the adapter
  logs ``report.message`` at ``report.level`` and nothing else.
- An error is *distinct* by source, HTTP code, reason and message. A distinct error is
  logged the first time it is seen, then, while it persists, again only after a backoff
  that starts at ``initial_backoff`` and doubles to ``max_backoff`` (a repeat says how many
  occurrences it stood for). A source whose failure was logged and then succeeds gets one
  ``RECOVERED`` report. A source flapping between failure and success keeps its backoff,
  so flapping cannot flood the log; that memory is dropped after ``max_backoff`` quiet.
- 401, 403 and 404 on list, watch or any Lease call cannot heal by retrying: they are
  *permanent until fixed* and logged at ERROR (401/403) or WARNING (404, e.g. a CRD not
  installed yet). 410 is expected (a relist follows) and logged at DEBUG. Anything else is
  transient: INFO, raised to WARNING once it has persisted ``escalate_after`` seconds.
- :meth:`FailureReporter.current_problems` lists the sources failing now, for a readiness
  reason. State is bounded: at most ``max_sources`` sources, the least recently heard
  from evicted first.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from ._errors import LocalProtocolError
from ._status import ApiError

__all__ = ["FailureClass", "FailureReport", "FailureReporter", "LogLevel", "Problem", "ReportKind"]


class LogLevel(enum.IntEnum):
    """How loud a report is; the values are the :mod:`logging` levels."""

    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40


class FailureClass(enum.Enum):
    """Whether retrying can make an error go away."""

    PERMANENT = "permanent"  # until someone fixes RBAC, credentials or a missing resource
    TRANSIENT = "transient"  # throttling, server errors, connection trouble
    EXPECTED = "expected"  # part of normal operation (410: relist)


class ReportKind(enum.Enum):
    """Why a report is due."""

    FIRST = "first"  # the first time this distinct error is seen
    REPEATED = "repeated"  # it persists and its backoff has passed
    RECOVERED = "recovered"  # the source succeeded after a logged failure


@dataclass(frozen=True, slots=True)
class Problem:
    """A source that is failing now: what fails, since when, how often."""

    source: str
    verb: str
    resource: str
    namespace: str | None
    code: int | None
    reason: str
    server_message: str
    failure_class: FailureClass
    since: float
    last_seen: float
    occurrences: int

    @property
    def message(self) -> str:
        """One line naming resource, verb, namespace and the server's message.

        For example ``configmaps: list forbidden in namespace "x": <server message>``.
        """
        return (
            f"{self.resource}: {self.verb} {_outcome(self.code, self.reason)}{_where(self)}: "
            + (self.server_message or "no message")
        )


@dataclass(frozen=True, slots=True)
class FailureReport:
    """A log line that is due: log ``message`` at ``level``."""

    kind: ReportKind
    level: LogLevel
    message: str
    problem: Problem


_WORDS = {401: "unauthorized", 403: "forbidden", 404: "not found", 410: "expired", 429: "throttled"}

_PERMANENT_CODES = {401: LogLevel.ERROR, 403: LogLevel.ERROR, 404: LogLevel.WARNING}
_PERMANENT_VERBS = frozenset({"list", "watch"})


def _outcome(code: int | None, reason: str) -> str:
    if code is None:
        return f"failed ({reason})"
    return _WORDS.get(code) or f"failed with {code} {reason}".rstrip()


def _where(problem: Problem) -> str:
    return f' in namespace "{problem.namespace}"' if problem.namespace else ""


def _classify(verb: str, resource: str, code: int | None) -> FailureClass:
    if code in _PERMANENT_CODES and (verb in _PERMANENT_VERBS or resource == "leases"):
        return FailureClass.PERMANENT
    if code == 410:
        return FailureClass.EXPECTED
    return FailureClass.TRANSIENT


def _describe(error: BaseException) -> tuple[int | None, str, str]:
    """(code, reason, message) of an error; ApiError carries the server's own."""
    if isinstance(error, ApiError):
        return error.code, error.reason, error.status.message or error.status.reason
    return None, type(error).__name__, str(error)


_Key = tuple[int | None, str, str]  # code, reason, message


@dataclass(slots=True)
class _Backoff:
    """When a distinct error may be logged again."""

    interval: float
    next_log: float
    last_seen: float
    suppressed: int = 0
    logged: bool = False


@dataclass(slots=True)
class _Source:
    problem: Problem | None = None
    logged: bool = False  # a failure was logged since the last success: recovery is news
    history: OrderedDict[_Key, _Backoff] = field(default_factory=OrderedDict)


_HISTORY_LIMIT = 8  # distinct errors remembered per source


class FailureReporter:
    """Decides which failures to log, when, how loudly; see the module rules."""

    __slots__ = ("_escalate_after", "_initial", "_max", "_max_sources", "_sources")

    def __init__(
        self,
        *,
        initial_backoff: float = 60.0,
        max_backoff: float = 1800.0,
        escalate_after: float = 300.0,
        max_sources: int = 1024,
    ) -> None:
        for name, value in (
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
            ("escalate_after", escalate_after),
        ):
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise LocalProtocolError(f"{name} must be a non-negative number, got {value!r}")
        if max_backoff < initial_backoff:
            raise LocalProtocolError("max_backoff must be at least initial_backoff")
        if isinstance(max_sources, bool) or not isinstance(max_sources, int) or max_sources < 1:
            raise LocalProtocolError(f"max_sources must be a positive integer, got {max_sources!r}")
        self._initial = float(initial_backoff)
        self._max = float(max_backoff)
        self._escalate_after = float(escalate_after)
        self._max_sources = max_sources
        self._sources: OrderedDict[str, _Source] = OrderedDict()

    def failed(
        self,
        source: str,
        verb: str,
        resource: str,
        error: BaseException,
        *,
        now: float,
        namespace: str | None = None,
    ) -> FailureReport | None:
        """Take one failure of ``source``; return the report to log, or None to stay quiet.

        ``verb`` is the API verb (``list``, ``watch``, ``get``, ``update``...), ``resource``
        the plural resource name, ``namespace`` None for cluster-wide calls.
        """
        code, reason, text = _describe(error)
        state = self._touch(source)
        key = (code, reason, text)
        current = state.problem
        if current is not None and (current.code, current.reason, current.server_message) == key:
            problem = Problem(  # the same error again: keep its class and start
                source,
                verb,
                resource,
                namespace,
                code,
                reason,
                text,
                current.failure_class,
                current.since,
                now,
                current.occurrences + 1,
            )
        else:
            failure_class = _classify(verb, resource, code)
            problem = Problem(
                source, verb, resource, namespace, code, reason, text, failure_class, now, now, 1
            )
        state.problem = problem
        history = state.history
        self._expire(history, now)
        backoff = history.get(key)
        history[key] = backoff = backoff or _Backoff(self._initial, now, now)
        history.move_to_end(key)
        if len(history) > _HISTORY_LIMIT:
            history.popitem(last=False)
        backoff.last_seen = now
        if now < backoff.next_log:
            backoff.suppressed += 1
            return None
        kind = ReportKind.REPEATED if backoff.logged else ReportKind.FIRST
        message = problem.message
        if backoff.suppressed:
            message += f" ({backoff.suppressed} more since last logged)"
        backoff.suppressed = 0
        backoff.logged = True
        backoff.next_log = now + backoff.interval
        backoff.interval = min(backoff.interval * 2, self._max)
        state.logged = True
        return FailureReport(kind, self._level(problem, now), message, problem)

    def succeeded(self, source: str, *, now: float) -> FailureReport | None:
        """Take one success of ``source``; return a RECOVERED report if its failure was logged."""
        state = self._sources.get(source)
        if state is None or state.problem is None:
            return None
        problem, logged = state.problem, state.logged
        state.problem, state.logged = None, False
        if not logged:
            return None
        duration = now - problem.since
        message = (
            f"{problem.resource}: {problem.verb}{_where(problem)} recovered after "
            f"{problem.occurrences} failures over {duration:.0f}s"
        )
        return FailureReport(ReportKind.RECOVERED, LogLevel.INFO, message, problem)

    def current_problems(self) -> tuple[Problem, ...]:
        """The sources failing now, oldest problem first."""
        found = [s.problem for s in self._sources.values() if s.problem is not None]
        return tuple(sorted(found, key=lambda p: (p.since, p.source)))

    def _level(self, problem: Problem, now: float) -> LogLevel:
        if problem.failure_class is FailureClass.PERMANENT:
            return _PERMANENT_CODES[problem.code or 0]
        if problem.failure_class is FailureClass.EXPECTED:
            return LogLevel.DEBUG
        if now - problem.since >= self._escalate_after:
            return LogLevel.WARNING
        return LogLevel.INFO

    def _touch(self, source: str) -> _Source:
        sources = self._sources
        state = sources.get(source)
        if state is None:
            state = sources[source] = _Source()
            if len(sources) > self._max_sources:
                sources.popitem(last=False)
        else:
            sources.move_to_end(source)
        return state

    def _expire(self, history: OrderedDict[_Key, _Backoff], now: float) -> None:
        # Errors unseen for max_backoff start over with the initial backoff.
        for key in [k for k, b in history.items() if now - b.last_seen > self._max]:
            del history[key]
