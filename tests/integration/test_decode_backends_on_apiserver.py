"""The JSON backends on what a real kube-apiserver sends: watch bytes and LIST pages.

The bytes of one watch response and one LIST page of ConfigMaps holding text a tenant may
write (every escape JSON has, control characters, U+2028, astral characters, a 200 KB
value) are decoded with the standard library, orjson and msgspec, with and without
``keep_raw``: the events and items are equal, and every kept ``raw`` is a piece of the
received bytes that decodes to its object. The apiserver writes every watch line and page
in the compact shape the standard library's raw path recognises, so both the stdlib and
msgspec hand out the raw bytes of every event and item.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from kubemoon_core import GroupVersionResource, ListOptions, list_request, watch_request
from kubemoon_core._reflector import Reflector
from kubemoon_core._watch import WatchDecoder
from kubemoon_core.json_backends import use_fast_json, use_msgspec_json, use_standard_json
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
BACKENDS: dict[str, Callable[[], object]] = {
    "json": use_standard_json,
    "orjson": use_fast_json,
    "msgspec": use_msgspec_json,
}
TRICKY = {
    "escapes": '"\\/\b\f\n\r\t',
    "controls": "".join(chr(c) for c in range(32)),
    "separators": "\u2028\u2029\u0085",
    "astral": "🙂漢é\U0010ffff",
    "big": "x" * 200_000,
    "numberish": "1e999999",
}


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


def each_backend(decode: Callable[[], Any]) -> list[Any]:
    results = []
    for select in BACKENDS.values():
        assert select() is not False
        try:
            results.append(decode())
        finally:
            use_standard_json()
    return results


async def test_watch_bytes_and_list_pages_decode_alike_on_every_backend(
    client: Client, kube_namespace: str
) -> None:
    first = await client.create(
        CM,
        {"metadata": {"name": "start"}, "data": {"k": "v"}},
        namespace=kube_namespace,
    )
    options = ListOptions(resource_version=first["metadata"]["resourceVersion"], timeout_seconds=30)
    received = bytearray()
    with trio.fail_after(60):
        stream = await client.open_stream(
            watch_request(CM, namespace=kube_namespace, options=options), check=True
        )
        try:
            for name, value in TRICKY.items():
                await client.create(
                    CM,
                    {"metadata": {"name": name, "annotations": {"a": value}}, "data": {"v": value}},
                    namespace=kube_namespace,
                )
            await client.delete(CM, "numberish", namespace=kube_namespace)
            while received.count(b"\n") < len(TRICKY) + 1:
                chunk = await stream.receive()
                assert chunk, "the watch ended early"
                received += chunk
        finally:
            await stream.aclose()
    body = bytes(received[: received.rfind(b"\n") + 1])

    def watch(keep_raw: bool) -> list[tuple[str, Any, bytes | None]]:
        decoder = WatchDecoder(keep_raw=keep_raw)
        events = decoder.events(body)  # the pull side
        return [(e.type, e.object, e.raw) for e in events]

    plain = each_backend(lambda: watch(False))
    assert plain[0] == plain[1] == plain[2]
    assert [kind for kind, _, _ in plain[0]] == ["ADDED"] * len(TRICKY) + ["DELETED"]
    assert plain[0][3][1]["data"]["v"] == TRICKY["astral"]
    assert all(raw is None for _, _, raw in plain[0])
    json_raw, orjson_raw, msgspec_raw = each_backend(lambda: watch(True))
    assert [e[:2] for e in json_raw] == [e[:2] for e in plain[0]]
    assert all(raw is None for _, _, raw in orjson_raw)
    assert [raw for _, _, raw in json_raw] == [raw for _, _, raw in msgspec_raw]
    for _, obj, raw in json_raw:
        assert raw is not None and raw in body
        assert json.loads(raw) == obj

    page = (await client.send(list_request(CM, namespace=kube_namespace))).body
    reflector = Reflector(CM, rng=random.Random(0))
    pages = each_backend(lambda: reflector._page(page, True))
    assert [p[0] for p in pages] == [pages[0][0]] * 3
    assert {item["metadata"]["name"] for item in pages[0][0]} == (set(TRICKY) - {"numberish"}) | {
        "start"
    }
    assert all(item["kind"] == "ConfigMap" for item in pages[0][0])  # filled in from the list
    assert pages[1][1] is None  # orjson keeps no raw
    assert pages[0][1] == pages[2][1]
    items, raws = pages[0][0], pages[0][1]
    assert raws is not None and len(raws) == len(items)
    for item, raw in zip(items, raws, strict=True):
        assert json.loads(raw) == item
        assert raw.startswith(b'{"apiVersion":"v1","kind":"ConfigMap",')
        assert raw[len(b'{"apiVersion":"v1","kind":"ConfigMap",') :] in page
