"""The simulated cluster's two client transports answer alike (issue 32): unframed (the
default: httpcore's request object handed to the simulator, its answer handed back) and
framed (``framing=True``: HTTP/1.1 bytes through h11 on both ends, which checks the
framing). One request mix, with errors, refusals, injected faults, a paged LIST, watches
that end, are cut and expire, and a paused client, is run on each; every answer's status,
headers and body, every watch chunk's events and the server's trace must be the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from kubemoon_core import GroupVersionResource, KubeMoonError, ListOptions, Request
from kubemoon_testing.sim import RequestFault, SimulatedCluster

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
BASE = "/api/v1/namespaces/default/configmaps"
JSON = (("Accept", "application/json"), ("Content-Type", "application/json"))
MERGE = (("Accept", "application/json"), ("Content-Type", "application/merge-patch+json"))


def cm(name: str, value: str) -> bytes:
    document = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    return json.dumps({**document, "data": {"k": value}}).encode()


def requests() -> list[Request]:
    mix: list[Request] = []
    for index in range(4):
        name = f"m{index}"
        mix += [
            Request("POST", BASE, headers=JSON, body=cm(name, "v")),
            Request("POST", BASE, headers=JSON, body=cm(name, "again")),  # 409
            Request("GET", f"{BASE}/{name}", headers=JSON),
            Request("PATCH", f"{BASE}/{name}", headers=MERGE, body=b'{"data":{"p":"1"}}'),
            Request("PUT", f"{BASE}/{name}", headers=JSON, body=cm(name, "x")),
        ]
    mix += [
        Request("GET", BASE, (("limit", "3"),), headers=JSON),
        Request("GET", BASE, (("labelSelector", "a in (b,c)"), ("limit", "2")), headers=JSON),
        Request("GET", f"{BASE}/missing", headers=JSON),  # 404
        Request("GET", BASE, (("unknown", "1"),), headers=JSON),  # 501 NotModelled
        Request("POST", BASE, headers=JSON, body=b"not json"),  # 501
        Request("GET", "/version", headers=JSON),  # 501: not a resource path
        Request("DELETE", f"{BASE}/m0", headers=JSON),
        Request("DELETE", f"{BASE}/m1", (("propagationPolicy", "Orphan"),), headers=JSON),
        Request("PUT", f"{BASE}/m2", headers=JSON, body=b"{}"),  # 501: no apiVersion/kind
    ]
    return mix


async def exchange(cluster: SimulatedCluster, framing: bool) -> list[Any]:
    seen: list[Any] = []
    cluster.fail_requests(RequestFault(429, count=1, method="PATCH", retry_after=2))
    cluster.fail_requests(RequestFault(503, count=1, method="GET", path="/m3"))
    cluster.fail_requests(RequestFault(409, count=1, method="PUT", path="/m1"))
    async with cluster.client("one", framing=framing) as client:
        for request in requests():
            response = await client.send(request)
            seen.append((response.status_code, response.headers, response.body))
        # A watch that ends on time, with bookmarks and events made meanwhile.
        options = ListOptions(resource_version="0", allow_watch_bookmarks=True, timeout_seconds=5)
        async with (
            client.watch(CONFIGMAPS, namespace="default", options=options) as events,
            trio.open_nursery() as nursery,
        ):

            async def writes() -> None:
                for index in range(3):
                    # Never at a bookmark's instant: which of two tasks due at one
                    # virtual instant runs first is the loop's choice, not the server's.
                    await trio.sleep(0.7)
                    await client.send(
                        Request("POST", BASE, headers=JSON, body=cm(f"w{index}", "w"))
                    )

            nursery.start_soon(writes)
            seen += [(event.type, event.object) async for event in events]
        # A watch cut mid-stream, and one ended by an expired history.
        for fault in (cluster.drop_watches, cluster.expire_watches):
            rv = str(cluster.server.resource_version)
            options = ListOptions(resource_version=rv, timeout_seconds=60)
            async with (
                client.watch(CONFIGMAPS, namespace="default", options=options) as ws,
                trio.open_nursery() as nursery,
            ):

                async def strike(fault: Any = fault, rv: str = rv) -> None:
                    await trio.sleep(2)
                    await client.send(Request("POST", BASE, headers=JSON, body=cm(f"s{rv}", "s")))
                    await trio.sleep(1)
                    fault()

                nursery.start_soon(strike)
                try:
                    async for event in ws:
                        seen.append((event.type, event.object))
                except KubeMoonError as exc:
                    seen.append((type(exc).__name__, str(exc)))
        # A paused client: its request waits out the pause, then is answered.
        cluster.pause("one", 7.0)
        response = await client.send(Request("GET", f"{BASE}/m3", headers=JSON))
        seen.append((trio.current_time(), response.status_code, response.body))
        # A pause that starts as a write goes out.
        cluster.pause_on_write("one", 3.0)
        response = await client.send(Request("DELETE", f"{BASE}/m3", headers=JSON))
        seen.append((trio.current_time(), response.status_code, response.body))
    assert cluster.open_connections == 0
    seen.append([(e.time, e.identity, e.method, e.path, e.code, e.name) for e in cluster.trace])
    seen.append([str(refusal) for refusal in cluster.refusals])
    seen.append(cluster.pauses)
    return seen


def run(framing: bool) -> list[Any]:
    async def main() -> list[Any]:
        return await exchange(SimulatedCluster(seed=7), framing)

    answers: list[Any] = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return answers


@pytest.mark.filterwarnings("ignore::trio.TrioDeprecationWarning")
def test_framed_and_unframed_transports_answer_alike() -> None:
    framed, unframed = run(True), run(False)
    assert len(framed) == len(unframed)
    for index, (a, b) in enumerate(zip(framed, unframed, strict=True)):
        assert a == b, f"answer {index} differs"
    codes = {entry[0] for entry in framed if isinstance(entry, tuple) and len(entry) == 3}
    assert {200, 201, 404, 409, 429, 501, 503} <= codes  # the mix reached every kind of answer
    kinds = {entry[0] for entry in framed if isinstance(entry, tuple) and len(entry) == 2}
    assert {"ADDED", "BOOKMARK", "TransportError", "Expired"} <= kinds
