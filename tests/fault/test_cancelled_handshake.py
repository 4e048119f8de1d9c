"""A request cancelled (or timed out) in the middle of its TLS handshake closes its socket at
once, on every adapter: nothing is left for the garbage collector to find later and report
as ``ResourceWarning: unclosed socket`` in an unrelated test (or a user's suite)."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from fault_support import PODS, Adapter

from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_io import TransportTimeout

pytestmark = pytest.mark.fault


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never answers the TLS handshake."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.fixture
def unraisable() -> Iterator[list[str]]:
    """What the garbage collector reports while the test runs (unclosed sockets...)."""
    seen: list[str] = []
    previous = sys.unraisablehook

    def hook(args: Any) -> None:
        seen.append(f"{args.exc_type.__name__}: {args.exc_value} ({args.object!r})")

    sys.unraisablehook = hook
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


async def test_a_request_cancelled_mid_handshake_leaves_no_socket_open(
    adapter: Adapter, silent_server: int, unraisable: list[str]
) -> None:
    config = ClientConfig(server=f"https://127.0.0.1:{silent_server}")
    client = adapter.client(config, timeout=0.3 if adapter.name == "sync" else 30.0)
    try:
        if adapter.name == "trio":

            async def cancelled_trio() -> bool:
                with trio.move_on_after(0.3) as scope:
                    await client.get(PODS, "a", namespace="ns")
                return scope.cancelled_caught

            # A run of its own, over before the collection below: the test's own run keeps
            # the cancellation (and what its traceback holds) alive until the test ends.
            assert await trio.to_thread.run_sync(trio.run, cancelled_trio)
        elif adapter.name == "asyncio":

            async def cancelled() -> None:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(client.get(PODS, "a", namespace="ns"), 0.3)

            await adapter.run(cancelled())
        else:  # no cancellation reaches a blocking handshake: its timeout ends it
            with pytest.raises(TransportTimeout):
                await adapter.call(client.get, PODS, "a", namespace="ns")
    finally:
        await adapter.close(client)
    gc.collect()
    assert unraisable == []
