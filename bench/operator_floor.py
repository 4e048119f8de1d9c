"""The floor under an operator's CPU per write: bare ``httpcore`` creating ConfigMaps.

The smallest client that can write: one keep-alive connection, the headers and bearer
token built once, the body encoded with ``json.dumps``, the answer read whole, its status
checked and its JSON decoded. ConfigMaps the size of a ConfigMirror copy (the source's five
keys, the managed-by label and the owner annotation) are created one after another in a
scratch namespace, first with ``httpcore.ConnectionPool`` (blocking), then with
``httpcore.AsyncConnectionPool`` on trio (the loop the ConfigMirror operator runs on) and
on asyncio.
Measured: CPU time of this process (``time.process_time``) per create, after a warm-up;
the ConfigMaps are deleted after each round.
On a shared machine one round varies by tens of percent with the neighbours' load, so
the operator benchmark measures several rounds around its run and takes the median of
each pool (:func:`median_floor`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import statistics
import time
from dataclasses import dataclass
from typing import Any

WRITES = 400
WARMUP = 20


@dataclass(frozen=True)
class Floor:
    """CPU seconds per write of the two bare pools."""

    blocking: float
    trio: float
    asyncio: float


def _body(namespace: str, name: str, data: dict[str, str]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "bench-floor"},
                "annotations": {"kubemoon.dev/owner-uid": "0" * 36},
            },
            "data": data,
        },
        separators=(",", ":"),
    ).encode()


def median_floor(floors: list[Floor]) -> Floor:
    """The median of each pool's CPU per write over several rounds."""
    return Floor(
        blocking=statistics.median(f.blocking for f in floors),
        trio=statistics.median(f.trio for f in floors),
        asyncio=statistics.median(f.asyncio for f in floors),
    )


def measure_floor(admin: Any, namespace: str, data: dict[str, str], tag: str = "") -> Floor:
    """Create ``WARMUP + WRITES`` ConfigMaps with each pool; CPU per timed create.

    ``tag`` keeps the names of one round apart from another's in the same namespace.
    """
    import httpcore
    import trio

    context = ssl.create_default_context(cafile=admin.context_cafile)
    url = f"https://127.0.0.1:{admin.port}/api/v1/namespaces/{namespace}/configmaps"
    base = [
        (b"Host", f"127.0.0.1:{admin.port}".encode()),
        (b"Accept", b"application/json"),
        (b"Content-Type", b"application/json"),
        (b"Authorization", f"Bearer {admin.token}".encode()),
    ]

    def request_args(i: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        body = _body(namespace, f"floor-{tag}{i:06d}", data)
        return body, [*base, (b"Content-Length", str(len(body)).encode())]

    numbers = iter(range(100_000, 1_000_000))

    def check(status: int, content: bytes) -> None:
        if status != 201:
            raise RuntimeError(f"bare create answered {status}: {content[:200]!r}")
        json.loads(content)

    def blocking() -> float:
        with httpcore.ConnectionPool(ssl_context=context, max_connections=1) as pool:
            for i in range(WARMUP + WRITES):
                if i == WARMUP:
                    began = time.process_time()
                body, headers = request_args(i)
                response = pool.request("POST", url, headers=headers, content=body)
                check(response.status, response.content)
            return (time.process_time() - began) / WRITES

    async def on_a_loop() -> float:
        async with httpcore.AsyncConnectionPool(ssl_context=context, max_connections=1) as pool:
            for i in range(WARMUP + WRITES):
                if i == WARMUP:
                    began = time.process_time()
                body, headers = request_args(next(numbers))
                response = await pool.request("POST", url, headers=headers, content=body)
                check(response.status, response.content)
            return (time.process_time() - began) / WRITES

    first = blocking()
    on_trio = trio.run(on_a_loop)
    floor = Floor(blocking=first, trio=on_trio, asyncio=asyncio.run(on_a_loop()))
    # Gone before the operator starts: its cluster-wide ConfigMap informer would otherwise
    # list, decode and cache every one of them (a DELETE of the collection needs no
    # controller).
    admin.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps")
    return floor
