"""Both informers (the core Reflector in real time) against the scripted server over TLS."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import trio
from fault_support import Adapter, Collection, pod, run_informer, summary

from kubemoon_core._backoff import Backoff
from kubemoon_core.errors import DecodeError
from kubemoon_testing._scripted import Reply, ScriptedServer, watch_lines

pytestmark = pytest.mark.fault

INITIAL = [pod("a", "9"), pod("b", "10")]
EVENTS = [
    ("MODIFIED", pod("a", "11")),
    ("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "12"}}),
    ("ADDED", pod("c", "13")),
    ("DELETED", pod("b", "14")),
    ("MODIFIED", pod("c", "15")),
    ("ADDED", pod("d", "16")),
]
EXPECTED = [
    ("ADDED", "a", "9"),
    ("ADDED", "b", "10"),
    ("MODIFIED", "a", "11"),
    ("ADDED", "c", "13"),
    ("DELETED", "b", "14"),
    ("MODIFIED", "c", "15"),
    ("ADDED", "d", "16"),
]
STREAM_LENGTH = sum(len(line) for line in watch_lines(EVENTS))


def fast_backoff(initial: float = 0.01, cap: float = 0.05) -> Backoff:
    return Backoff(random.Random(1), initial=initial, cap=cap, jitter=0.0)


async def _run(
    adapter: Adapter, collection: Collection, expected: int = len(EXPECTED), **options: Any
) -> tuple[Any, list[Any], ScriptedServer]:
    changes: list[Any] = []
    options.setdefault("backoff", fast_backoff())
    async with ScriptedServer(collection.handler) as server:
        client = adapter.client(server.client_config(token="t"))
        try:
            informer = adapter.informer(
                client, on_change=changes.append, rng=random.Random(7), **options
            )
            await run_informer(adapter, informer, lambda: len(changes) >= expected)
            # The informer stopped mid-watch: that connection is closed, only the CRUD one
            # may stay alive.
            assert client.connection_count <= 1
            await server.wait(lambda: server.open_connections <= 1)
        finally:
            await adapter.close(client)
        await server.wait(lambda: server.open_connections == 0)
    return informer, changes, server


async def test_drops_mid_chunk_resume_without_duplicates_or_losses(adapter: Adapter) -> None:
    offsets = [1, 7, 40, 64, 65, 90, 131, 150, 200, STREAM_LENGTH - 1]
    collection = Collection(INITIAL, EVENTS, plan=[{"drop_after": n} for n in offsets])
    informer, changes, _ = await _run(adapter, collection)
    assert summary(changes) == EXPECTED
    assert len(collection.lists) == 1  # drops never relist
    # Each watch resumed from the last resourceVersion delivered before the cut.
    versions = [int(w.query["resourceVersion"]) for w in collection.watches]
    assert versions == sorted(versions)
    assert versions[0] == 10
    assert all(w.query["allowWatchBookmarks"] == "true" for w in collection.watches)
    assert len(collection.watches) >= len(offsets)
    assert {k.name: o["metadata"]["resourceVersion"] for k, o in informer.store.items()} == {
        "a": "11",
        "c": "15",
        "d": "16",
    }
    assert informer.has_synced


@pytest.mark.parametrize("close_notify", [True, False])
async def test_a_clean_end_inside_an_event_is_a_break_not_a_loss(
    adapter: Adapter, close_notify: bool
) -> None:
    lines = watch_lines(EVENTS)
    cut = b"".join(lines[:3]) + lines[3][:20]  # ends inside the 4th line
    truncated = Reply(200, chunks=(cut[:50], cut[50:]), close_notify=close_notify)
    collection = Collection(INITIAL, EVENTS, plan=[truncated])
    informer, changes, _ = await _run(adapter, collection)
    assert summary(changes) == EXPECTED
    assert isinstance(informer.reflector.last_error, DecodeError)
    assert [w.query["resourceVersion"] for w in collection.watches][:2] == ["10", "13"]


async def test_a_malformed_line_is_a_typed_error_and_the_watch_resumes(adapter: Adapter) -> None:
    lines = watch_lines(EVENTS[:1])
    malformed = Reply(200, chunks=(lines[0], b'{"type": "ADDED", "object": [1]}\n'), stall=True)
    collection = Collection(INITIAL, EVENTS, plan=[malformed])
    informer, changes, _ = await _run(adapter, collection)
    assert summary(changes) == EXPECTED
    assert isinstance(informer.reflector.last_error, DecodeError)
    assert [w.query["resourceVersion"] for w in collection.watches][:2] == ["10", "11"]


async def test_a_stalled_watch_is_abandoned_and_resumed(adapter: Adapter) -> None:
    # The stall deadline is timeoutSeconds + stall_margin after the last byte: make both
    # tiny for the test.
    # The first watch delivers one event, then goes silent without closing.
    silent_after_one = Reply.watch(EVENTS[:1], stall=True)
    collection = Collection(INITIAL, EVENTS, plan=[silent_after_one])
    informer, changes, _ = await _run(adapter, collection, stall_margin=0.5, watch_timeout=(0, 0))
    assert summary(changes) == EXPECTED
    assert informer.reflector.stats.stalls >= 1
    first_watch, second_watch = collection.watches[:2]
    assert first_watch.query["timeoutSeconds"] == "0"
    assert second_watch.query["resourceVersion"] == "11"
    assert second_watch.at - first_watch.at >= 0.45
    assert len(collection.lists) == 1


async def test_retry_after_on_a_watch_is_honoured_without_relisting(adapter: Adapter) -> None:
    throttled = Reply.status_error(429, "TooManyRequests", retry_after=1)
    collection = Collection(INITIAL, EVENTS, plan=[throttled])
    _, changes, _ = await _run(adapter, collection)
    assert summary(changes) == EXPECTED
    first, second = collection.watches[:2]
    assert second.at - first.at >= 0.95
    assert second.query["resourceVersion"] == "10"
    assert len(collection.lists) == 1


async def test_5xx_backs_off_and_never_relists(adapter: Adapter) -> None:
    collection = Collection(
        INITIAL,
        EVENTS,
        list_plan=[Reply.status_error(500, "InternalError"), Reply(503, b"unavailable")],
        plan=[Reply.status_error(503, "ServiceUnavailable"), Reply(502, b"bad gateway")],
    )
    backoff = fast_backoff(initial=0.05, cap=1.0)
    informer, changes, _ = await _run(adapter, collection, backoff=backoff)
    assert summary(changes) == EXPECTED
    list_times = [r.at for r in collection.lists]
    watch_times = [r.at for r in collection.watches]
    assert len(list_times) == 3 and len(watch_times) >= 3
    gaps = [b - a for a, b in itertools.pairwise(list_times)]
    gaps += [b - a for a, b in itertools.pairwise(watch_times[:3])]
    # 0.05 s doubling: 0.05, 0.1, 0.2, 0.4 (no jitter), each waited in full.
    for gap, nominal in zip(gaps, [0.05, 0.1, 0.2, 0.4], strict=True):
        assert gap >= nominal * 0.9
    assert informer.reflector.stats.relists == 0
    assert all(w.query["resourceVersion"] == "10" for w in collection.watches)


async def test_a_410_relists_at_the_last_resource_version(adapter: Adapter) -> None:
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    gone = Reply.watch([EVENTS[0], ("ERROR", expired)])

    def page(rv: str, *items: dict[str, Any]) -> Reply:
        return Reply.json({"kind": "PodList", "metadata": {"resourceVersion": rv}, "items": items})

    collection = Collection(
        INITIAL,
        EVENTS,
        plan=[gone],
        list_plan=[page("10", *INITIAL), page("11", pod("a", "11"), pod("b", "10"))],
    )
    informer, changes, _ = await _run(adapter, collection)
    assert summary(changes) == EXPECTED  # the relist changed nothing: no duplicates
    relist = collection.lists[1]
    assert relist.query["resourceVersion"] == "11"
    assert relist.query["resourceVersionMatch"] == "NotOlderThan"
    assert informer.reflector.stats.relists == 1
    assert [w.query["resourceVersion"] for w in collection.watches][:2] == ["10", "11"]


async def test_cancelling_a_trio_informer_closes_its_watch() -> None:
    import kubemoon_trio

    collection = Collection(INITIAL, EVENTS)
    async with ScriptedServer(collection.handler) as server:
        async with kubemoon_trio.Client(server.client_config()) as client:
            informer = kubemoon_trio.Informer(client, fault_pods(), namespace="ns")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(informer.run)
                with trio.fail_after(5):
                    await informer.wait_synced()
                    await server.wait(lambda: len(collection.watches) == 1)
                    await server.wait(lambda: len(informer.store) == 3)
                nursery.cancel_scope.cancel()
            assert len(informer.store) == 3
            assert client.connection_count <= 1
            await server.wait(lambda: server.open_connections <= 1)
            # The reflector was told: it can run again and resumes where it was.
            assert informer.reflector.next_deadline() is not None
        await server.wait(lambda: server.open_connections == 0)


def fault_pods() -> Any:
    from fault_support import PODS

    return PODS
