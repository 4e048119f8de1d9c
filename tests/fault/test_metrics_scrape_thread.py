"""A scrape of ``manager.registry`` from a thread of its own (prometheus_client's
``start_http_server`` serves from one) works on every adapter, while the manager runs and
reconciles, and reads one consistent set of figures."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from adapter_driver import PODS, call_soon, start_background
from fault_support import Adapter, Collection, pod
from prometheus_client import generate_latest

from kubemoon_core import Reconciled
from kubemoon_testing import ScriptedServer

pytestmark = pytest.mark.fault


def scrape_from_a_thread(
    registry: Any, times: int
) -> tuple[list[bytes | BaseException], threading.Thread]:
    """``generate_latest`` ``times`` times on a plain thread (no event loop on it)."""
    found: list[bytes | BaseException] = []

    def scrape() -> None:
        for _ in range(times):
            try:
                found.append(generate_latest(registry))
            except BaseException as exc:  # reported by the test, not lost in the thread
                found.append(exc)

    thread = threading.Thread(target=scrape, name="prometheus-scraper")
    thread.start()
    return found, thread


async def test_a_scrape_from_another_thread_reads_the_running_managers_figures(
    adapter: Adapter,
) -> None:
    collection = Collection([pod("a", "5"), pod("b", "6")], [], list_rv="10")
    reconciled: list[str] = []

    if adapter.name == "sync":

        def reconcile(context: Any) -> Any:
            reconciled.append(context.key.name)
            return Reconciled()

    else:

        async def reconcile(context: Any) -> Any:  # type: ignore[misc]
            reconciled.append(context.key.name)
            return Reconciled()

    async with ScriptedServer(collection.handler) as server:
        client = adapter.client(server.client_config(token="t"))
        manager = adapter.module.Manager(client, check_permissions=False)
        manager.controller("scraped", PODS).complete(reconcile)
        async with trio.open_nursery() as nursery:
            run = await start_background(adapter, nursery, manager.run)
            try:
                with trio.fail_after(10):
                    while len(reconciled) < 2:
                        await trio.sleep(0.01)
                found, thread = scrape_from_a_thread(manager.registry, 20)
                await trio.to_thread.run_sync(thread.join, 10)
            finally:
                call_soon(adapter, manager.stop)
                await run.wait()
        await adapter.close(client)
    errors = [item for item in found if isinstance(item, BaseException)]
    assert errors == []
    assert len(found) == 20
    last = found[-1]
    assert isinstance(last, bytes)
    text = last.decode()
    assert 'controller_runtime_reconcile_total{controller="scraped",result="success"} 2.0' in text
    assert 'workqueue_depth{name="scraped"} 0.0' in text
    # After the run, too (nothing changes the figures any more).
    after, thread = scrape_from_a_thread(manager.registry, 1)
    await trio.to_thread.run_sync(thread.join, 10)
    assert not isinstance(after[0], BaseException), after[0]
    assert b'controller="scraped",result="success"} 2.0' in after[0]
