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

from kubemoon_core import AuthorityLost, GroupVersionResource, NotFound, WriteGate
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
