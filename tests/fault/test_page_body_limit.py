"""A LIST page of several objects is held to ``PAGE_BODY_LIMIT`` bytes, below the client's
own cap: a tenant's large objects make ``Client.list`` ask for smaller pages, never hold a
page of many megabytes at once (the attacker's pass of round four)."""

from __future__ import annotations

import json

import trio

from kubemoon_core import GroupVersionResource
from kubemoon_core.lowlevel import PAGE_BODY_LIMIT
from kubemoon_testing import RecordedRequest, Reply, ScriptedServer
from kubemoon_trio import Client

CM = GroupVersionResource("", "v1", "configmaps")
COUNT = 20
ITEM_BYTES = 1024 * 1024  # each object about 1 MiB: 20 of them weigh past the page limit


def item(i: int) -> dict[str, object]:
    meta = {"name": f"cm-{i:02d}", "namespace": "ns", "resourceVersion": "7"}
    return {"metadata": meta, "data": {"blob": "x" * ITEM_BYTES}}


def pages(request: RecordedRequest) -> Reply:
    query = request.query
    start = int(query.get("continue") or 0)
    limit = int(query["limit"])
    end = min(start + limit, COUNT)
    metadata = {"resourceVersion": "7"} | ({"continue": str(end)} if end < COUNT else {})
    body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata}
    body["items"] = [item(i) for i in range(start, end)]
    return Reply.json(body)


async def test_a_heavy_page_is_asked_for_again_in_halves_within_the_page_limit() -> None:
    async with ScriptedServer(pages) as server:
        async with Client(server.client_config()) as client:
            assert client._max_body_size > PAGE_BODY_LIMIT  # the page limit is the lower cap
            listed = client.list(CM, namespace="ns")
            with trio.fail_after(60):
                names = [obj["metadata"]["name"] async for obj in listed]
        limits = [int(r.query["limit"]) for r in server.requests]
    assert names == [f"cm-{i:02d}" for i in range(COUNT)]
    # 500 ... 31 objects (20 MiB) are refused; 15 (15 MiB) fit, for the rest of the list.
    assert limits == [500, 250, 125, 62, 31, 15, 15]
    assert listed.page_shrinks == 5
    assert 15 * ITEM_BYTES < PAGE_BODY_LIMIT < 20 * ITEM_BYTES


async def test_one_object_alone_gets_the_clients_own_cap() -> None:
    big = {"metadata": {"name": "huge", "namespace": "ns", "resourceVersion": "7"}}
    big["data"] = {"blob": "x" * (PAGE_BODY_LIMIT + 1024)}  # type: ignore[assignment]

    def one(request: RecordedRequest) -> Reply:
        limit = int(request.query["limit"])
        items = [big, big] if limit > 1 else [big]  # several: too heavy; one: fits
        body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {}, "items": items}
        return Reply(200, json.dumps(body).encode(), (("Content-Type", "application/json"),))

    async with ScriptedServer(one) as server, Client(server.client_config()) as client:
        with trio.fail_after(60):
            names = [obj["metadata"]["name"] async for obj in client.list(CM, namespace="ns")]
        assert names == ["huge"]
        assert int(server.requests[-1].query["limit"]) == 1
