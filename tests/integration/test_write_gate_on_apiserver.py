"""The send guard on the real kube-apiserver, on every adapter (issue 31, defect 3): a
write gated by a lapsed Lease is never sent, reads are never gated, and the check runs
after the connection is open (TLS handshake done), right before the request's bytes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from adapter_driver import ADAPTERS, Adapter

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import AuthorityLost, NotFound
from kubemoon_core.lowlevel import WriteGate
from kubemoon_io import gate_guard, gated_writes
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "1"}}


async def gated(
    adapter: Adapter, guard: Any, function: Callable[..., Any], *args: Any, **kw: Any
) -> Any:
    """Call a client method with ``guard`` set in the adapter's own context (its loop's
    task for asyncio, its thread for the blocking adapter)."""
    if adapter.name == "trio":
        with gated_writes(guard):
            return await function(*args, **kw)
    if adapter.name == "asyncio":

        async def inner() -> Any:
            with gated_writes(guard):
                return await function(*args, **kw)

        return await adapter.run(inner())

    def blocking() -> Any:
        with gated_writes(guard):
            return function(*args, **kw)

    return await trio.to_thread.run_sync(functools.partial(blocking))


async def test_a_lapsed_gate_sends_nothing_and_reads_pass(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        states: list[list[str]] = []

        def valid(what: str) -> None:
            # Called when the request is framed and again right before each socket write
            # (trio sends head and body in one write): by then the connection is open
            # (httpcore reports CONNECTING until its TLS handshake is done).
            states.append([c.info() for c in client._pool.connections])

        created = await gated(adapter, valid, client.create, CM, cm("allowed"), namespace=ns)
        assert created["metadata"]["name"] == "allowed"
        assert len(states) >= 2, states
        for infos in states:
            assert infos and not any("CONNECTING" in info for info in infos), infos

        lapsed = WriteGate([("leadership of the Lease ns/demo", lambda now: now - 3.0)])
        guard = gate_guard(lapsed, lambda: 100.0)
        with pytest.raises(
            AuthorityLost, match=r"not sending POST .*configmaps.*ended 3\.000 s ago"
        ):
            await gated(adapter, guard, client.create, CM, cm("refused"), namespace=ns)
        with pytest.raises(AuthorityLost, match="not sending DELETE"):
            await gated(adapter, guard, client.delete, CM, "allowed", namespace=ns)
        # Reads are not gated; nothing of the refused writes reached the server.
        got = await gated(adapter, guard, client.get, CM, "allowed", namespace=ns)
        assert got["data"] == {"k": "1"}
        with pytest.raises(NotFound):
            await adapter.call(client.get, CM, "refused", namespace=ns)
        # Outside the guarded context the same client writes as before.
        await adapter.call(client.create, CM, cm("later"), namespace=ns)
    finally:
        await adapter.close(client)


EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")


async def test_an_event_recorded_in_gated_work_is_written_only_while_the_gate_holds(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    """The Event writer is a task of its own: the gate of the reconcile that recorded an
    Event goes with it (issue 31, defect 3: a paused leader wrote Events after its Lease
    lapsed). A series update is gated like the record that started it."""
    from kubemoon_core.lowlevel import EventRecorder as EventMachine
    from kubemoon_trio import Client, EventRecorder

    ns = kube_namespace
    valid_until = [trio.current_time() + 3600.0]
    lease = WriteGate([("leadership of the Lease ns/demo", lambda now: valid_until[0])])
    guard = gate_guard(lease, trio.current_time)
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        regarding = await client.create(CM, cm("regarding"), namespace=ns)
        machine = EventMachine("example.com/gate-test", "r-0", flush_interval=0.2)
        recorder = EventRecorder(client, "example.com/gate-test", "r-0", machine=machine)

        async def settled(writes: int) -> None:
            with trio.fail_after(20):
                while recorder.writes < writes or recorder._pending:
                    await trio.sleep(0.02)
            await trio.sleep(0.5)  # a write queued behind the last would be sent by now

        async with trio.open_nursery() as nursery:
            nursery.start_soon(recorder.run)
            with gated_writes(guard):
                recorder.record(regarding, "Normal", "Valid", "while leading")
            await settled(1)
            valid_until[0] = trio.current_time() - 1.0  # the Lease lapsed (a pause)
            with gated_writes(guard):
                recorder.record(regarding, "Normal", "Late", "after the lease")
                recorder.record(regarding, "Normal", "Valid", "a repeat: a series update")
            await settled(1)
            await trio.sleep(1.0)  # past the flush interval: the series update is due
            nursery.cancel_scope.cancel()
        listed = [e async for e in client.list(EVENTS, namespace=ns)]
    got = [(e["reason"], e.get("series")) for e in listed]
    assert got == [("Valid", None)], got
    assert recorder.writes == 1


async def test_a_write_whose_authority_lapses_inside_its_send_is_reported(
    kube_apiserver: ApiServer, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The window no check closes: a process frozen inside the ``send`` of a gated write
    finishes that send when it resumes, after its authority ended (seen on the real
    apiserver with SIGSTOP). The write goes out, so it must not go out silently: once its
    bytes are handed to the socket the guard is asked again, and a lapse is a WARNING and
    a count in ``kubemoon_io.LATE_SENDS``. Here the authority lapses right after trio's
    last check before the socket (the framing check, the stream's, the TLS transport's)."""
    from kubemoon_io import LATE_SENDS
    from kubemoon_trio import Client

    calls: list[str] = []

    def lapses_inside_the_send(what: str) -> None:
        calls.append(what)
        if len(calls) > 3:
            raise AuthorityLost(f"not sending {what}: the leadership of the Lease ns/demo ended")

    before = LATE_SENDS.count
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        with (
            caplog.at_level("WARNING", logger="kubemoon.gate"),
            gated_writes(lapses_inside_the_send),
        ):
            created = await client.create(CM, cm("late"), namespace=kube_namespace)
        stored = await client.get(CM, "late", namespace=kube_namespace)
    assert created["metadata"]["uid"] == stored["metadata"]["uid"]  # it was sent
    assert len(calls) == 4, calls  # three checks before the bytes, one after
    assert LATE_SENDS.count == before + 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "kubemoon.gate"]
    assert len(warnings) == 1, warnings
    assert "may reach the API server after another replica took the work over" in warnings[0]
    assert f"POST /api/v1/namespaces/{kube_namespace}/configmaps" in warnings[0]


async def test_a_series_update_goes_under_the_gate_of_its_own_events_record(
    kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    """A series update is gated like the record of its own Event, not like the latest
    gated record of any object (found by the simulator: a shard member sent a series update
    for a mirror outside its range under another mirror's gate). Here A's gate holds and
    B's has lapsed when A's series update is due: A's update is written, B's Event never."""
    from kubemoon_core.lowlevel import EventRecorder as EventMachine
    from kubemoon_trio import Client, EventRecorder

    ns = kube_namespace
    a_until, b_until = [trio.current_time() + 3600.0], [trio.current_time() + 3600.0]
    guard_a = gate_guard(WriteGate([("range of A", lambda now: a_until[0])]), trio.current_time)
    guard_b = gate_guard(WriteGate([("range of B", lambda now: b_until[0])]), trio.current_time)
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        a = await client.create(CM, cm("object-a"), namespace=ns)
        b = await client.create(CM, cm("object-b"), namespace=ns)
        machine = EventMachine("example.com/gate-test", "r-0", flush_interval=0.2)
        recorder = EventRecorder(client, "example.com/gate-test", "r-0", machine=machine)

        async def settled(writes: int) -> None:
            with trio.fail_after(20):
                while recorder.writes < writes or recorder._pending:
                    await trio.sleep(0.02)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(recorder.run)
            with gated_writes(guard_a):
                recorder.record(a, "Normal", "Synced", "a")
            await settled(1)
            b_until[0] = trio.current_time() - 1.0  # B's range was handed over
            with gated_writes(guard_a):
                recorder.record(a, "Normal", "Synced", "a again: a series update")
            with gated_writes(guard_b):
                recorder.record(b, "Normal", "Synced", "b, outside the range now")
            await trio.sleep(1.0)  # past the flush interval: A's series update is due
            await settled(2)
            nursery.cancel_scope.cancel()
        listed = [e async for e in client.list(EVENTS, namespace=ns)]
    got = sorted((e["regarding"]["name"], (e.get("series") or {}).get("count")) for e in listed)
    assert got == [("object-a", 2)], got
