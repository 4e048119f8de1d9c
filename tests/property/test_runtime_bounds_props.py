"""Hypothesis: the event recorder and the failure reporter keep their write and log bounds
for any timing of occurrences."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import Response
from kubemoon_core.errors import Status
from kubemoon_core.lowlevel import (
    EventOutcome,
    EventRecorder,
    EventWrite,
    FailureReporter,
    ReportKind,
    error_from_status,
)

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
START = datetime(2026, 1, 1, tzinfo=UTC)
FLUSH = 60.0

occurrences = st.lists(
    st.tuples(st.floats(0.0, 90.0), st.sampled_from(["A", "B", "C"])), min_size=1, max_size=80
)


@given(occurrences)
def test_event_series_writes_are_spaced_and_counts_converge(
    steps: list[tuple[float, str]],
) -> None:
    recorder = EventRecorder("c", "i", flush_interval=FLUSH, series_window=600.0)
    server: dict[str, int] = {}  # event name -> count the server holds
    last_write: dict[str, float] = {}
    recorded: dict[str, int] = {}  # event name -> occurrences folded into it
    current: dict[str, str] = {}  # reason -> its current event name
    now = 0.0

    def perform(write: EventWrite, at: float) -> None:
        body: dict[str, Any] = json.loads(write.request.body)
        if write.create:
            name = body["metadata"]["name"]
            server[name] = 1
        else:
            name = write.request.path.rsplit("/", 1)[1]
            assert at - last_write[name] >= FLUSH - 1e-9  # one series write per interval
            server[name] = body["series"]["count"]
        last_write[name] = at
        recorder.receive_response(write, Response(200), at)

    def flush_until(limit: float) -> None:
        while (deadline := recorder.next_deadline()) is not None and deadline <= limit:
            for write in recorder.flush(deadline):
                perform(write, deadline)

    for delta, reason in steps:
        flush_until(now + delta)
        now += delta
        plan = recorder.record(
            POD, "Normal", reason, "", action="X", now=now, wall=START + timedelta(seconds=now)
        )
        if plan.outcome is EventOutcome.CREATED:
            current[reason] = json.loads(plan.writes[0].request.body)["metadata"]["name"]
        if plan.outcome is not EventOutcome.SPAM:
            recorded[current[reason]] = recorded.get(current[reason], 0) + 1
        for write in plan.writes:
            perform(write, now)
    flush_until(now + 10 * FLUSH)
    assert recorder.next_deadline() is None
    assert server == recorded  # every counted occurrence reached the server


failures = st.lists(
    st.tuples(st.floats(0.0, 400.0), st.sampled_from(["e1", "e2", "ok"])), max_size=60
)


@given(failures)
def test_failure_logs_are_spaced_per_distinct_error(steps: list[tuple[float, str]]) -> None:
    reporter = FailureReporter(initial_backoff=60.0, max_backoff=1800.0)
    last_logged: dict[str, float] = {}
    logged_since_success = False
    now = 0.0
    for delta, what in steps:
        now += delta
        if what == "ok":
            report = reporter.succeeded("s", now=now)
            assert (report is not None) == logged_since_success
            if report is not None:
                assert report.kind is ReportKind.RECOVERED
            logged_since_success = False
            continue
        error = error_from_status(Status(code=500, reason="InternalError", message=what))
        report = reporter.failed("s", "list", "pods", error, now=now)
        if report is not None:
            assert report.kind is not ReportKind.RECOVERED
            assert now - last_logged.get(what, -1e9) >= 60.0
            last_logged[what] = now
            logged_since_success = True
        assert reporter.current_problems()[0].server_message == what
