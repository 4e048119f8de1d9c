"""FailureReporter: loud first, quiet while it persists, a line when it heals."""

from __future__ import annotations

import itertools

import pytest

from kubemoon_core.errors import LocalProtocolError, RemoteProtocolError, Status
from kubemoon_core.lowlevel import (
    FailureClass,
    FailureReporter,
    LogLevel,
    ReportKind,
    error_from_status,
)

FORBIDDEN = error_from_status(
    Status(
        code=403,
        reason="Forbidden",
        message='configmaps is forbidden: User "system:serviceaccount:x:op" cannot list',
    )
)
NOT_FOUND = error_from_status(
    Status(code=404, reason="NotFound", message="the server could not find")
)
UNAUTHORIZED = error_from_status(Status(code=401, reason="Unauthorized", message=""))
GONE = error_from_status(Status(code=410, reason="Expired", message="too old resource version"))
BUSY = error_from_status(Status(code=500, reason="InternalError", message="etcd leader changed"))
NO_REASON = error_from_status(Status(code=502, message="bad gateway"))
THROTTLED = error_from_status(Status(code=429, reason="TooManyRequests", message="slow down"))


def test_first_failure_is_logged_with_a_ready_message() -> None:
    r = FailureReporter()
    report = r.failed(
        "reflector/configmaps", "list", "configmaps", FORBIDDEN, now=0.0, namespace="x"
    )
    assert report is not None
    assert report.kind is ReportKind.FIRST
    assert report.level is LogLevel.ERROR
    assert report.message == (
        'configmaps: list forbidden in namespace "x": configmaps is forbidden: '
        'User "system:serviceaccount:x:op" cannot list'
    )
    assert report.problem.failure_class is FailureClass.PERMANENT
    assert int(report.level) == 40  # logging.ERROR


def test_repeats_back_off_from_one_minute_doubling_to_thirty() -> None:
    r = FailureReporter()
    logged: list[float] = []
    now = 0.0
    while now <= 4 * 3600:
        report = r.failed("lease", "get", "leases", FORBIDDEN, now=now, namespace="kube-system")
        if report is not None:
            logged.append(now)
        now += 1.0
    gaps = [b - a for a, b in itertools.pairwise(logged)]
    assert gaps[:6] == [60.0, 120.0, 240.0, 480.0, 960.0, 1800.0]
    assert set(gaps[6:]) == {1800.0}
    report = r.failed("lease", "get", "leases", FORBIDDEN, now=logged[-1] + 1800.0)
    assert report is not None
    assert report.kind is ReportKind.REPEATED
    assert report.message.endswith(f"({4 * 3600 - logged[-1]:.0f} more since last logged)")
    assert report.problem.occurrences == 4 * 3600 + 2
    assert report.problem.since == 0.0


def test_recovery_is_reported_once_and_only_after_a_logged_failure() -> None:
    r = FailureReporter()
    assert r.succeeded("reflector", now=0.0) is None  # never failed
    assert r.failed("reflector", "watch", "widgets", NOT_FOUND, now=1.0) is not None
    assert r.failed("reflector", "watch", "widgets", NOT_FOUND, now=2.0) is None
    assert [p.source for p in r.current_problems()] == ["reflector"]
    report = r.succeeded("reflector", now=31.0)
    assert report is not None
    assert report.kind is ReportKind.RECOVERED
    assert report.level is LogLevel.INFO
    assert report.message == "widgets: watch recovered after 2 failures over 30s"
    assert r.current_problems() == ()
    assert r.succeeded("reflector", now=32.0) is None


def test_flapping_keeps_its_backoff() -> None:
    r = FailureReporter()
    reports = []
    for second in range(0, 60, 2):
        reports.append(r.failed("watch", "watch", "pods", BUSY, now=float(second)))
        reports.append(r.succeeded("watch", now=second + 1.0))
    # One failure line and one recovery line per minute, however often it flaps.
    assert [x.kind for x in reports if x is not None] == [ReportKind.FIRST, ReportKind.RECOVERED]
    later = r.failed("watch", "watch", "pods", BUSY, now=60.0)
    assert later is not None
    assert later.kind is ReportKind.REPEATED
    # Quiet for longer than max_backoff: the error starts over.
    assert r.succeeded("watch", now=61.0) is not None
    fresh = r.failed("watch", "watch", "pods", BUSY, now=61.0 + 1801.0)
    assert fresh is not None
    assert fresh.kind is ReportKind.FIRST


def test_a_different_error_is_logged_at_once() -> None:
    r = FailureReporter()
    assert r.failed("s", "list", "configmaps", BUSY, now=0.0) is not None
    switched = r.failed("s", "list", "configmaps", FORBIDDEN, now=1.0)
    assert switched is not None
    assert switched.kind is ReportKind.FIRST
    assert switched.problem.since == 1.0
    back = r.failed("s", "list", "configmaps", BUSY, now=2.0)
    assert back is None  # its own backoff still runs
    assert r.current_problems()[0].reason == "InternalError"
    recovered = r.succeeded("s", now=3.0)
    assert recovered is not None  # the episode had logged lines


@pytest.mark.parametrize(
    ("verb", "resource", "error", "cls", "level", "words"),
    [
        ("list", "configmaps", UNAUTHORIZED, FailureClass.PERMANENT, LogLevel.ERROR, "unauthorized"),
        ("watch", "widgets", NOT_FOUND, FailureClass.PERMANENT, LogLevel.WARNING, "not found"),
        ("update", "leases", FORBIDDEN, FailureClass.PERMANENT, LogLevel.ERROR, "forbidden"),
        ("get", "configmaps", NOT_FOUND, FailureClass.TRANSIENT, LogLevel.INFO, "not found"),
        ("watch", "configmaps", GONE, FailureClass.EXPECTED, LogLevel.DEBUG, "expired"),
        ("list", "configmaps", BUSY, FailureClass.TRANSIENT, LogLevel.INFO, "failed with 500 InternalError"),
        ("list", "configmaps", NO_REASON, FailureClass.TRANSIENT, LogLevel.INFO, "failed with 502"),
        ("list", "configmaps", THROTTLED, FailureClass.TRANSIENT, LogLevel.INFO, "throttled"),
        ("watch", "configmaps", RemoteProtocolError("bad chunk"), FailureClass.TRANSIENT, LogLevel.INFO, "failed (RemoteProtocolError)"),
        ("list", "configmaps", ConnectionRefusedError(111, "refused"), FailureClass.TRANSIENT, LogLevel.INFO, "failed (ConnectionRefusedError)"),
    ],
)  # fmt: skip
def test_classification(
    verb: str, resource: str, error: BaseException, cls: FailureClass, level: LogLevel, words: str
) -> None:
    report = FailureReporter().failed("s", verb, resource, error, now=0.0)
    assert report is not None
    assert report.problem.failure_class is cls
    assert report.level is level
    assert report.message.startswith(f"{resource}: {verb} {words}: ")


def test_unauthorized_without_message_says_so() -> None:
    report = FailureReporter().failed("s", "list", "pods", UNAUTHORIZED, now=0.0)
    assert report is not None
    assert report.message == "pods: list unauthorized: Unauthorized"
    empty = error_from_status(Status(code=401))
    report = FailureReporter().failed("s", "list", "pods", empty, now=0.0)
    assert report is not None
    assert report.message == "pods: list unauthorized: no message"


def test_transient_errors_escalate_when_they_persist() -> None:
    r = FailureReporter(initial_backoff=100.0, escalate_after=300.0)
    levels = []
    for now in range(0, 1000, 10):
        report = r.failed("s", "list", "pods", BUSY, now=float(now))
        if report is not None:
            levels.append((now, report.level))
    assert levels == [
        (0, LogLevel.INFO),
        (100, LogLevel.INFO),
        (300, LogLevel.WARNING),
        (700, LogLevel.WARNING),
    ]


def test_state_is_bounded() -> None:
    r = FailureReporter(max_sources=3)
    for i in range(5):
        r.failed(f"s{i}", "list", "pods", BUSY, now=float(i))
    assert [p.source for p in r.current_problems()] == ["s2", "s3", "s4"]
    r.failed("s2", "list", "pods", BUSY, now=10.0)  # heard from again: kept
    r.failed("s5", "list", "pods", BUSY, now=11.0)
    assert [p.source for p in r.current_problems()] == ["s2", "s4", "s5"]
    one = FailureReporter()
    for i in range(20):  # many distinct messages from one source
        error = error_from_status(Status(code=500, reason="InternalError", message=f"m{i}"))
        assert one.failed("s", "list", "pods", error, now=float(i)) is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_backoff": -1.0}, "initial_backoff"),
        ({"max_backoff": float("inf")}, "max_backoff"),
        ({"escalate_after": "x"}, "escalate_after"),
        ({"initial_backoff": 10.0, "max_backoff": 5.0}, "at least"),
        ({"max_sources": 0}, "max_sources"),
        ({"max_sources": True}, "max_sources"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        FailureReporter(**kwargs)  # type: ignore[arg-type]
