"""A cap on a server's open connections, making room by closing the idlest one first.

Rules: every accepted connection takes a slot for its lifetime and says what it is doing
(``IDLE``: waiting for the first byte of a request; ``READING``: a request is arriving;
``BUSY``: a request is being handled; ``SENDING``: an answer is being sent -- evictable,
since a peer that stops reading would otherwise hold its slot). When the cap is reached,
a new connection makes room by cancelling the connection that has been idle longest,
provided it has been idle for more than ``IDLE_GRACE`` seconds; else the one that has been
idle, reading a request or sending an answer longest. So idle sockets go first, yet a
connection that was just opened (idle only until its request arrives) is never the one
closed while slow peers are older. Busy connections are never closed; if every slot is
busy the new connection is refused. Slots are kept under a ``threading.Lock`` because the
blocking twin serves each connection on a thread of its own (no await happens under it).
"""

from __future__ import annotations

import enum
import threading

from kubemoon_core.errors import LocalProtocolError

from ._backend import TaskGroup, current_time

__all__ = ["IDLE_GRACE", "ConnectionSlot", "ConnectionState", "Connections"]

#: Seconds a connection may be idle before idleness alone puts it first in line to close.
IDLE_GRACE = 1.0


class ConnectionState(enum.Enum):
    """What a connection is doing, in eviction order (idle ones go first)."""

    IDLE = 0
    READING = 1
    BUSY = 2
    SENDING = 3


class ConnectionSlot:
    """One connection's place: its task group (cancelled to evict it) and its state."""

    __slots__ = ("_group", "since", "state")

    def __init__(self, group: TaskGroup, now: float) -> None:
        self._group = group
        self.state = ConnectionState.IDLE
        self.since = now

    def set(self, state: ConnectionState) -> None:
        """Enter ``state`` (the time it was entered orders eviction)."""
        self.state = state
        self.since = current_time()


class Connections:
    """At most ``limit`` connections; see the module's rules for who makes room."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise LocalProtocolError(f"max_connections must be at least 1, not {limit}")
        self.limit = limit
        self.evicted = 0
        self.refused = 0
        self._slots: set[ConnectionSlot] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    def admit(self, group: TaskGroup) -> ConnectionSlot | None:
        """A slot for a new connection whose body runs in ``group``, or None: refuse it."""
        with self._lock:
            victim = None
            if len(self._slots) >= self.limit:
                candidates = [s for s in self._slots if s.state is not ConnectionState.BUSY]
                if not candidates:
                    self.refused += 1
                    return None
                now = current_time()
                victim = min(
                    candidates,
                    key=lambda s: (
                        not (s.state is ConnectionState.IDLE and now - s.since > IDLE_GRACE),
                        s.since,
                    ),
                )
                self._slots.discard(victim)
                self.evicted += 1
            slot = ConnectionSlot(group, current_time())
            self._slots.add(slot)
        if victim is not None:
            victim._group.cancel()
        return slot

    def release(self, slot: ConnectionSlot) -> None:
        """Give the slot back (the connection ended, or was evicted)."""
        with self._lock:
            self._slots.discard(slot)
