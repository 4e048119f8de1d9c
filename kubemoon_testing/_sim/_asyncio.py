"""Virtual time for asyncio: an event loop whose clock jumps to the next timer.

Rules: :class:`VirtualTimeEventLoop` is a ``SelectorEventLoop`` whose ``time()`` is a
virtual clock starting at 0. When the loop would block waiting for I/O with a timeout (the
next timer), its selector polls without blocking and, with nothing ready, advances the
clock by that timeout instead of sleeping: trio's ``MockClock(autojump_threshold=0)`` for
asyncio. Work in threads does not hold the clock back (as with trio's autojump). A loop
with no timer and nothing ready would wait for ever: it raises :class:`NotModelled`
naming the deadlock instead. :func:`run_virtual` runs a coroutine function on a fresh one.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ._errors import NotModelled

__all__ = ["VirtualTimeEventLoop", "run_virtual"]

T = TypeVar("T")


class _JumpingSelector(selectors.BaseSelector):
    """The default selector, polled; a wait with a timeout advances the loop's clock."""

    def __init__(self, loop: VirtualTimeEventLoop) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            # Threads may still call back through the loop's self-pipe: wait for them.
            if self._loop.threads_may_call_back:
                return self._inner.select(None)
            raise NotModelled(
                "a simulation with no timer left and nothing ready (every task waits for ever)"
            )
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()


class VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time (see the module rules); ``loop.time()`` starts at 0."""

    def __init__(self) -> None:
        self._virtual = 0.0
        super().__init__(selector=_JumpingSelector(self))
        self.threads_may_call_back = True

    def time(self) -> float:
        """The virtual clock."""
        return self._virtual

    def advance(self, seconds: float) -> None:
        """Move the virtual clock forward by ``seconds``."""
        self._virtual += max(0.0, seconds)


def run_virtual(main: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``main(*args)`` on a fresh :class:`VirtualTimeEventLoop` and return its result."""

    async def wrapped() -> T:
        return await main(*args)

    with asyncio.Runner(loop_factory=VirtualTimeEventLoop) as runner:
        return runner.run(wrapped())
