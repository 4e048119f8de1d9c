"""The controller runner on every adapter, fed whatever user code returns: anything but an
outcome is that key's error (logged with controller and key, counted, retried), never the
end of the runner, whatever the value's repr does."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio
from adapter_driver import call_soon, start_background
from fault_support import Adapter

from kubemoon_core import ObjectKey, Reconciled
from kubemoon_core.lowlevel import Controller, Source, WorkItem

pytestmark = pytest.mark.fault


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr bug")


async def pending() -> Reconciled:
    return Reconciled()


RESULTS: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "bad-repr": BadRepr,
    "huge": lambda: "x" * 1_000_000,
    "dict": lambda: {"requeue": True},
}


async def run_until_reported(
    adapter: Adapter, nursery: trio.Nursery, produce: Callable[[WorkItem], Any], keys: int
) -> Controller:
    controller = Controller([Source.primary()], workers=2)
    finished = threading.Event()
    counted = [0]

    def body(item: WorkItem) -> Any:
        counted[0] += 1
        if counted[0] >= keys:
            finished.set()
        return produce(item)

    if adapter.name == "sync":
        reconcile: Any = body
    else:

        async def reconcile(item: WorkItem) -> Any:
            return body(item)

    runner = adapter.module.ControllerRunner(controller, reconcile, name="widgets")
    run = await start_background(adapter, nursery, runner.run)

    def feed() -> None:
        for i in range(keys):
            controller.enqueue(ObjectKey("ns", f"k{i}"))
        runner.wake()

    call_soon(adapter, feed)
    with trio.fail_after(10):
        while not finished.is_set() or len(controller.running):
            await trio.sleep(0.02)
    call_soon(adapter, runner.stop)
    await run.wait()
    return controller


@pytest.mark.parametrize("kind", sorted(RESULTS))
async def test_a_non_outcome_is_the_keys_error(
    adapter: Adapter, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.ERROR, logger="kubemoon.controller")
    controller = await run_until_reported(adapter, nursery, lambda item: RESULTS[kind](), 3)
    metrics = controller.metrics(0.0)
    lines = [r.getMessage() for r in caplog.records]
    # Each failure is counted and retried with backoff (5 ms first: a few may run again).
    assert metrics.reconcile_errors_total == len(lines) >= 3
    assert metrics.retries >= 3
    keys = set()
    for line in lines:
        assert line.startswith("controller widgets: reconcile of ns/k")
        assert line.endswith("a forgotten return?")
        assert len(line) < 500
        keys.add(line.split()[4])
    assert keys == {"ns/k0", "ns/k1", "ns/k2"}


async def test_a_returned_coroutine_is_closed_and_named(
    adapter: Adapter, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kubemoon.controller")
    controller = await run_until_reported(adapter, nursery, lambda item: pending(), 1)
    lines = [r.getMessage() for r in caplog.records]
    assert controller.metrics(0.0).reconcile_errors_total == len(lines) >= 1
    for line in lines:
        assert "returned <coroutine object pending" in line
        assert line.endswith("a forgotten await?")
