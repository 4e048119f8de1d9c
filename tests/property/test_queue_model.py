"""Model-based test of the WorkQueue: many workers on a virtual clock.

The model keeps, per key, what the queue owes: a *dirty* flag (an add not yet served by a
hand-out) and at most one delayed deadline (the earliest). A deadline that has passed by the
``now`` of a call becomes dirty at that call. Checked at every step:

- no key is handed out while it is processing (no concurrent processing);
- a key is handed out only when it is dirty, so never twice for one add (no duplicate
  hand-outs) and never before its delay (delays respected);
- ``get`` returns None only when no dirty key is idle (work conserving);
- priorities: ``get`` hands out the idle dirty key of the highest priority (the highest any
  of its adds gave), and within it the one queued first (a raise re-queues at the end);
- aging: after ``max_overtakes`` hand-outs in a row that passed over the oldest queued key
  (queued first; a raise keeps its age, a re-queue after ``done`` starts anew), ``get``
  hands out that key instead; and no key waits past the stated bound, (max_overtakes + 1)
  * (Q + 1) hand-outs when queued behind Q others;
- a key handed out reports the priority it was handed out at;
- depth, processing, waiting, next deadline and drained state agree with the model.

At teardown everything is drained: every key is handed out at least once after its last
add (by step number, so equal times cannot hide an ordering bug), and a shut-down queue
ends drained.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kubemoon_core._queue import DEFAULT_MAX_OVERTAKES, LOW_PRIORITY, NORMAL_PRIORITY, WorkQueue
from kubemoon_core._ratelimit import ExponentialRateLimiter

KEYS = [f"k{i}" for i in range(6)]
WORKERS = 4
keys = st.sampled_from(KEYS)
delays = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.5]) | st.floats(0.0, 5.0)
priorities = st.sampled_from([LOW_PRIORITY, NORMAL_PRIORITY, 10])


class QueueMachine(RuleBasedStateMachine):
    """Drives a WorkQueue and a model side by side; see the module docstring."""

    OVERTAKES = DEFAULT_MAX_OVERTAKES

    def __init__(self) -> None:
        super().__init__()
        self.queue: WorkQueue[str] = WorkQueue(
            ExponentialRateLimiter(base=0.25, cap=4.0), max_overtakes=self.OVERTAKES
        )
        self.now = 0.0
        self.step = 0
        self.dirty: set[str] = set()
        self.waiting: dict[str, float] = {}
        self.waiting_order: dict[str, int] = {}  # key -> when its live deadline was set
        self.waiting_priority: dict[str, int] = {}
        self.priority: dict[str, int] = {}  # dirty key -> its highest priority
        self.position: dict[str, int] = {}  # queued (dirty, idle) key -> queue position
        self.age: dict[str, int] = {}  # queued key -> position when it was queued (no raise)
        self.overtaken = 0  # hand-outs in a row that passed over the oldest queued key
        self.handouts = 0
        self.due: dict[str, int] = {}  # queued key -> hand-out count it must be out by
        self.counter = 0
        self.processing: set[str] = set()
        self.shut = False
        self.last_add: dict[str, int] = {}  # key -> step of its last (effective) add
        self.last_handout: dict[str, int] = {}

    # --- the model ----------------------------------------------------------------------

    def tick(self) -> None:
        self.step += 1

    def next_position(self) -> int:
        self.counter += 1
        return self.counter

    def queued(self, key: str) -> None:
        self.position[key] = self.age[key] = self.next_position()
        self.due[key] = self.handouts + (self.OVERTAKES + 1) * len(self.age)

    def mark_dirty(self, key: str, priority: int = NORMAL_PRIORITY) -> None:
        if key in self.dirty:
            if priority > self.priority[key]:
                self.priority[key] = priority
                if key not in self.processing:
                    self.position[key] = self.next_position()
            return
        self.dirty.add(key)
        self.priority[key] = priority
        self.last_add[key] = self.step
        if key not in self.processing:
            self.queued(key)

    def promote(self) -> None:
        due = [k for k, deadline in self.waiting.items() if deadline <= self.now]
        for key in sorted(due, key=lambda k: (self.waiting[k], self.waiting_order[k])):
            del self.waiting[key]
            del self.waiting_order[key]
            self.mark_dirty(key, self.waiting_priority.pop(key))

    def delayed(self, key: str, delay: float, priority: int = NORMAL_PRIORITY) -> None:
        if self.shut:
            return
        self.promote()
        if delay <= 0:
            self.mark_dirty(key, priority)
            return
        deadline = self.now + delay
        if key in self.waiting:
            self.waiting_priority[key] = max(self.waiting_priority[key], priority)
        else:
            self.waiting_priority[key] = priority
        if key not in self.waiting or deadline < self.waiting[key]:
            self.waiting[key] = deadline
            self.waiting_order[key] = self.next_position()

    def get(self) -> str | None:
        self.tick()
        self.promote()  # deadlines passed by now are adds made before this hand-out
        self.tick()
        found = self.queue.get_with_priority(self.now)
        idle_dirty = self.dirty - self.processing
        if found is None:
            assert not idle_dirty, f"get returned None while {idle_dirty} were ready"
            return None
        key, priority = found
        assert key not in self.processing, f"{key} handed out while processing"
        assert key in self.dirty, f"{key} handed out without an add owed (or before its delay)"
        oldest = min(idle_dirty, key=lambda k: self.age[k])
        if self.overtaken >= self.OVERTAKES:
            expected = oldest
        else:
            expected = min(idle_dirty, key=lambda k: (-self.priority[k], self.position[k]))
        assert key == expected, f"{key} handed out before {expected} (priority, order or age)"
        self.overtaken = 0 if key == oldest else self.overtaken + 1
        assert priority == self.priority.pop(key)
        del self.position[key]
        del self.age[key]
        del self.due[key]
        self.handouts += 1
        late = {k: due for k, due in self.due.items() if due <= self.handouts}
        assert not late, f"after {self.handouts} hand-outs {late} are still queued"
        self.dirty.discard(key)
        self.processing.add(key)
        self.last_handout[key] = self.step
        assert self.queue.priority_of(key) == priority
        return key

    def done(self, key: str) -> None:
        self.tick()
        self.queue.done(key)
        self.processing.remove(key)
        assert self.queue.priority_of(key) is None
        if key in self.dirty:
            self.queued(key)

    # --- rules --------------------------------------------------------------------------

    @rule(key=keys, priority=priorities)
    def add(self, key: str, priority: int) -> None:
        self.tick()
        self.queue.add(key, priority=priority)
        if not self.shut:
            self.mark_dirty(key, priority)

    @rule(key=keys, delay=delays, priority=priorities)
    def add_after(self, key: str, delay: float, priority: int) -> None:
        self.tick()
        self.queue.add_after(key, delay, self.now, priority=priority)
        self.delayed(key, delay, priority)

    @rule(key=keys, priority=priorities)
    def add_rate_limited(self, key: str, priority: int) -> None:
        self.tick()
        delay = self.queue.add_rate_limited(key, self.now, priority=priority)
        assert delay >= 0
        self.delayed(key, delay, priority)

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
        self.waiting_order.clear()
        self.waiting_priority.clear()

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


class EagerAgingMachine(QueueMachine):
    """The same with one overtake allowed: aging decides about every other hand-out."""

    OVERTAKES = 1


TestQueueModel = QueueMachine.TestCase
TestQueueModelEagerAging = EagerAgingMachine.TestCase
