"""Pausing the cyclic garbage collector around a burst of acyclic allocations.

Rules: this is the one place in KubeMoon that switches the collector off; the pure core
never does (a decoder that wants a pause is handed :func:`paused_gc`). A pause is
process-wide and counted: overlapping pauses (several threads, or a watch chunk decoded
while a large webhook review is) keep the collector off until the last one ends, and only
then is it switched on again -- and only if it was on when the first one began, so a
collector the application disabled stays disabled. A pause asked with ``collect=True``
runs one full collection when the shared pause ends (outside the lock), reclaiming the
cycles the rest of the process made meanwhile. Nothing else is changed: no thresholds, no
``gc.freeze``. Why pause at all: decoding a large JSON document (a watch chunk, an
admission review) allocates enough fresh containers to trigger collections that walk them
while they are still alive, and a collection holds the GIL for every thread (the event
loop's too); JSON holds no reference cycles, so reference counting frees all of it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["paused_gc", "without_gc"]

T = TypeVar("T")

_lock = threading.Lock()
_pauses = 0
_was_enabled = False
_collect_due = False


@contextlib.contextmanager
def paused_gc(*, collect: bool = False) -> Iterator[None]:
    """Keep the cyclic garbage collector off while the block runs (see the module rules).

    With ``collect``, a full collection runs once the last overlapping pause has ended (if
    the collector was on when the first began).
    """
    global _pauses, _was_enabled, _collect_due
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
        _collect_due = _collect_due or collect
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            resume = _pauses == 0 and _was_enabled
            sweep = False
            if _pauses == 0:
                sweep = resume and _collect_due
                _collect_due = False
            if resume:
                gc.enable()
        if sweep:
            gc.collect()


def without_gc(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` run inside ``paused_gc(collect=True)`` (a callable for a worker thread)."""

    def paused() -> T:
        with paused_gc(collect=True):
            return fn()

    return paused
