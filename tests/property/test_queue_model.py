"""Model-based test of the WorkQueue: many workers on a virtual clock.

The model keeps, per key, what the queue owes: a *dirty* flag (an add not yet served by a
hand-out) and at most one delayed deadline (the earliest). A deadline that has passed by the
``now`` of a call becomes dirty at that call. Checked at every step:

- no key is handed out while it is processing (no concurrent processing);
- a key is handed out only when it is dirty, so never twice for one add (no duplicate
  hand-outs) and never before its delay (delays respected);
- ``get`` returns None only when no dirty key is idle (work conserving);
- depth, processing, waiting, next deadline and drained state agree with the model.

At teardown everything is drained: every key is handed out at least once after its last
add (by step number, so equal times cannot hide an ordering bug), and a shut-down queue
ends drained.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kubemoon_core._queue import WorkQueue
from kubemoon_core._ratelimit import ExponentialRateLimiter

KEYS = [f"k{i}" for i in range(6)]
WORKERS = 4
keys = st.sampled_from(KEYS)
delays = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.5]) | st.floats(0.0, 5.0)


class QueueMachine(RuleBasedStateMachine):
    """Drives a WorkQueue and a model side by side; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: WorkQueue[str] = WorkQueue(ExponentialRateLimiter(base=0.25, cap=4.0))
        self.now = 0.0
        self.step = 0
        self.dirty: set[str] = set()
        self.waiting: dict[str, float] = {}
        self.processing: set[str] = set()
        self.shut = False
        self.last_add: dict[str, int] = {}  # key -> step of its last (effective) add
        self.last_handout: dict[str, int] = {}

    # --- the model ----------------------------------------------------------------------

    def tick(self) -> None:
        self.step += 1

    def mark_dirty(self, key: str) -> None:
        self.dirty.add(key)
        self.last_add[key] = self.step

    def promote(self) -> None:
        for key, deadline in list(self.waiting.items()):
            if deadline <= self.now:
                del self.waiting[key]
                self.mark_dirty(key)

    def delayed(self, key: str, delay: float) -> None:
        if self.shut:
            return
        self.promote()
        if delay <= 0:
            self.mark_dirty(key)
            return
        deadline = self.now + delay
        if key not in self.waiting or deadline < self.waiting[key]:
            self.waiting[key] = deadline

    def get(self) -> str | None:
        self.tick()
        self.promote()  # deadlines passed by now are adds made before this hand-out
        self.tick()
        key = self.queue.get(self.now)
        idle_dirty = self.dirty - self.processing
        if key is None:
            assert not idle_dirty, f"get returned None while {idle_dirty} were ready"
            return None
        assert key not in self.processing, f"{key} handed out while processing"
        assert key in self.dirty, f"{key} handed out without an add owed (or before its delay)"
        self.dirty.discard(key)
        self.processing.add(key)
        self.last_handout[key] = self.step
        return key

    def done(self, key: str) -> None:
        self.tick()
        self.queue.done(key)
        self.processing.remove(key)

    # --- rules --------------------------------------------------------------------------

    @rule(key=keys)
    def add(self, key: str) -> None:
        self.tick()
        self.queue.add(key)
        if not self.shut:
            self.mark_dirty(key)

    @rule(key=keys, delay=delays)
    def add_after(self, key: str, delay: float) -> None:
        self.tick()
        self.queue.add_after(key, delay, self.now)
        self.delayed(key, delay)

    @rule(key=keys)
    def add_rate_limited(self, key: str) -> None:
        self.tick()
        delay = self.queue.add_rate_limited(key, self.now)
        assert delay >= 0
        self.delayed(key, delay)

    @rule(key=keys)
    def forget(self, key: str) -> None:
        self.queue.forget(key)
        assert self.queue.num_requeues(key) == 0

    @precondition(lambda self: len(self.processing) < WORKERS)
    @rule()
    def worker_gets(self) -> None:
        self.get()

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def worker_done(self, data: st.DataObject) -> None:
        self.done(data.draw(st.sampled_from(sorted(self.processing))))

    @rule(dt=st.sampled_from([0.0, 0.1, 0.25, 1.0, 3.0]) | st.floats(0.0, 6.0))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def shutdown(self) -> None:
        self.tick()
        self.queue.shutdown()
        self.shut = True
        self.waiting.clear()

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.queue) == len(self.dirty - self.processing)
        assert self.queue.processing == len(self.processing)
        assert self.queue.waiting == len(self.waiting)
        assert self.queue.next_deadline() == min(self.waiting.values(), default=None)
        drained = self.shut and not (self.dirty - self.processing) and not self.processing
        assert self.queue.is_drained == drained
        assert self.queue.is_shutdown == self.shut

    def teardown(self) -> None:
        for _ in range(4 * len(KEYS) + 4):
            for key in sorted(self.processing):
                self.done(key)
            if self.waiting:
                self.now = max(self.now, *self.waiting.values())
            while (ready := self.get()) is not None:
                self.done(ready)
            if not (self.dirty or self.waiting or self.processing):
                break
        assert not self.dirty
        assert not self.waiting
        assert not self.processing
        for key, added in self.last_add.items():
            assert self.last_handout.get(key, -1) > added, f"{key} not processed after its add"
        if self.shut:
            assert self.queue.is_drained
            assert self.queue.next_deadline() is None


TestQueueModel = QueueMachine.TestCase
