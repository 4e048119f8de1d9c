"""The webhook server's documented limits, counted in sockets, on every adapter.

``max_connections`` (64) and ``max_handshakes`` (64) must bound what an anonymous client
on the webhook port costs the server in open sockets, not only in the server's own slot
bookkeeping: the asyncio server once kept every evicted connection's socket open for the
30 s TLS shutdown timeout, so 2,000 idle connections held 2,007 sockets and 632 MiB while
``open_connections`` said 64. Each scenario runs the generated server of each adapter
with its default limits and counts the sockets it holds (this process's sockets bound to
the server's port) while blocking clients on worker threads attack it over 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from fault_support import Adapter
from test_webhook_hostile import (
    Handlers,
    Target,
    closed_by_server,
    in_thread,
    read_responses,
    request,
    review_body,
    serving,
)

pytestmark = pytest.mark.fault

# The defaults the server documents.
CONNECTIONS = 64
HANDSHAKES = 64
# Well past both, kept small so the test takes seconds.
ATTACKERS = 300
# The most the server may hold while an attack runs: what the caps allow, and as many
# again whose closing is under way (sockets evicted a moment ago; how long that takes
# depends on the loop and the machine's load). Far fewer than the attack opens.
PEAK = 2 * (CONNECTIONS + HANDSHAKES + 1)


def _socket_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets whose local port is ``port`` (listener and accepted)."""
    suffix = f":{port:04X}"
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if table.endswith("6") and not os.path.exists(table):
            continue  # IPv6 is off; the server listens on 127.0.0.1 anyway
        with open(table, encoding="ascii") as lines:
            next(lines)  # the header
            for line in lines:
                fields = line.split(None, 10)
                if fields[1].endswith(suffix) and fields[9] != "0":
                    inodes.add(fields[9])
    return inodes


def server_sockets(port: int) -> int:
    """How many of this process's file descriptors are the server's sockets on ``port``:
    its listener and every connection it still holds (the clients' ends have other local
    ports, so they are not counted)."""
    inodes = _socket_inodes(port)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:[") and link[len("socket:[") : -1] in inodes:
            count += 1
    return count


class Attack:
    """Opens sockets one after another, recording the most the server held meanwhile
    (counted after every tenth: counting reads this host's whole TCP table)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.sockets: list[socket.socket] = []
        self.peak = 0

    def open(self, count: int, connect: Callable[[], socket.socket]) -> None:
        for _ in range(count):
            self.sockets.append(connect())
            if len(self.sockets) % 10 == 0:
                self.peak = max(self.peak, server_sockets(self.target.port))

    def silent(self) -> socket.socket:
        """A TCP connection that never starts TLS."""
        return socket.create_connection(("127.0.0.1", self.target.port), timeout=10)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


async def settled(port: int, most: int) -> int:
    """The server's socket count once it is at most ``most`` (given 10 s to get there:
    the closing of evicted connections is not instant on any loop)."""
    with trio.move_on_after(10):
        while server_sockets(port) > most:
            await trio.sleep(0.05)
    return server_sockets(port)


def answered(target: Target) -> int:
    """The status of a review posted on a new connection."""
    status, body = target.post("/validate", review_body())
    assert status != 200 or json.loads(body)["response"]["allowed"] is True
    return status


async def test_idle_tls_connections_cost_at_most_the_connection_cap(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with serving(adapter, tmp_path, Handlers()) as target:
        assert target.server.max_connections == CONNECTIONS
        attack = Attack(target)
        try:
            await in_thread(attack.open, ATTACKERS, target.tls)
            # Each TLS connection past the cap closed the idlest one, socket and all: once
            # the last evicted ones are closed, the server holds the cap and its listener.
            assert await settled(target.port, CONNECTIONS + 1) <= CONNECTIONS + 1
            assert attack.peak <= PEAK, attack.peak
            assert target.server.open_connections <= CONNECTIONS
            assert target.server.evicted_connections >= ATTACKERS - CONNECTIONS
            assert target.server.refused_connections == 0
            # Idle ones went first: the oldest is closed, and a real review is answered.
            assert await in_thread(closed_by_server, attack.sockets[0])
            assert await in_thread(answered, target) == 200
            # On a kept-alive connection too: the newest idle one is still served.
            newest = attack.sockets[-1]
            newest.sendall(request("/validate", review_body()))
            assert [s for s, _ in await in_thread(read_responses, newest, 1)] == [200]
        finally:
            attack.close()


async def test_silent_sockets_cost_at_most_the_handshake_cap(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with serving(adapter, tmp_path, Handlers()) as target:
        assert target.server.max_handshakes == HANDSHAKES
        attack = Attack(target)
        try:
            # TCP connections that never send a byte of TLS: each one past the cap on
            # handshakes under way abandons the oldest handshake and closes its socket.
            await in_thread(attack.open, ATTACKERS, attack.silent)
            assert await settled(target.port, HANDSHAKES + 1) <= HANDSHAKES + 1
            assert attack.peak <= PEAK, attack.peak
            assert target.server.open_connections == 0
            assert await in_thread(closed_by_server, attack.sockets[0])
            # A real client still gets its handshake and its answer.
            assert await in_thread(answered, target) == 200
        finally:
            attack.close()


async def test_idle_and_silent_sockets_together_stay_within_both_caps(
    adapter: Adapter, tmp_path: Path
) -> None:
    async with serving(adapter, tmp_path, Handlers()) as target:
        attack = Attack(target)
        try:
            for _ in range(2):  # interleaved: handshaken idle ones and silent ones
                await in_thread(attack.open, ATTACKERS // 3, target.tls)
                await in_thread(attack.open, ATTACKERS // 3, attack.silent)
            most = CONNECTIONS + HANDSHAKES + 1
            assert await settled(target.port, most) <= most
            assert attack.peak <= PEAK, attack.peak
            assert target.server.open_connections <= CONNECTIONS
            assert await in_thread(answered, target) == 200
        finally:
            attack.close()
