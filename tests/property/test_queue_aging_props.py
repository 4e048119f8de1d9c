"""No queued key starves (issue 31, defect 6), under any arrival pattern.

The bound (``kubemoon_core._queue``'s module docstring): a key that becomes queued while
``Q`` other keys are queued is among the next ``(N + 1) * (Q + 1)`` keys handed out, where
``N`` is the queue's ``max_overtakes``. Adds at arbitrary priorities (any int), raises,
floods of re-adds, several workers, dones in any order and a shutdown are interleaved
freely; after every hand-out no queued key may be past its bound, and the queue's depth
must agree with the model of which keys are queued. At teardown the queue is drained under
a flood of the highest priority seen, and the bound still holds.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kubemoon_core._queue import DEFAULT_MAX_OVERTAKES, LOW_PRIORITY, NORMAL_PRIORITY, WorkQueue

KEYS = [f"k{i}" for i in range(8)]
keys = st.sampled_from(KEYS)
priorities = st.sampled_from([LOW_PRIORITY, NORMAL_PRIORITY, 1, 10**9]) | st.integers(
    -(2**63), 2**63
)


class AgingMachine(RuleBasedStateMachine):
    """A queue and the model of which keys are queued and by when each must be handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: WorkQueue[str] = WorkQueue()
        self.overtakes = DEFAULT_MAX_OVERTAKES
        self.workers = 1
        self.handouts = 0  # keys handed out so far
        self.due: dict[str, int] = {}  # queued key -> the hand-out count it must be out by
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.shut = False
        self.top = NORMAL_PRIORITY

    @initialize(overtakes=st.one_of(st.none(), st.integers(0, 5)), workers=st.integers(1, 3))
    def start(self, overtakes: int | None, workers: int) -> None:
        if overtakes is not None:
            self.queue = WorkQueue(max_overtakes=overtakes)
            self.overtakes = overtakes
        self.workers = workers

    # --- the model ----------------------------------------------------------------------

    def queued(self, key: str) -> None:
        ahead = len(self.due)
        self.due[key] = self.handouts + (self.overtakes + 1) * (ahead + 1)

    def add(self, key: str, priority: int) -> None:
        self.queue.add(key, priority=priority)
        if self.shut:
            return
        self.top = max(self.top, priority)
        if key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.queued(key)

    def get(self) -> str | None:
        key = self.queue.get(0.0)
        if key is None:
            assert not self.due, f"get returned None while {sorted(self.due)} were queued"
            return None
        assert key in self.due, f"{key} handed out while not queued"
        self.handouts += 1
        del self.due[key]
        self.dirty.remove(key)
        self.processing.add(key)
        late = {k: due for k, due in self.due.items() if due <= self.handouts}
        assert not late, f"after {self.handouts} hand-outs {late} are still queued"
        return key

    def done(self, key: str) -> None:
        self.queue.done(key)
        self.processing.remove(key)
        if key in self.dirty:
            self.queued(key)

    # --- rules --------------------------------------------------------------------------

    @rule(key=keys, priority=priorities)
    def add_one(self, key: str, priority: int) -> None:
        self.add(key, priority)

    @rule(hot=st.lists(keys, min_size=1, max_size=len(KEYS)), priority=priorities)
    def flood(self, hot: list[str], priority: int) -> None:
        for key in hot:
            self.add(key, priority)

    @precondition(lambda self: len(self.processing) < self.workers)
    @rule()
    def worker_gets(self) -> None:
        self.get()

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data(), priority=priorities, again=st.booleans())
    def worker_done(self, data: st.DataObject, priority: int, again: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        if again:  # changed while it was being reconciled
            self.add(key, priority)
        self.done(key)

    @rule()
    def shutdown(self) -> None:
        self.queue.shutdown()
        self.shut = True

    @invariant()
    def depth_agrees(self) -> None:
        assert len(self.queue) == len(self.due)
        assert self.queue.processing == len(self.processing)

    def teardown(self) -> None:
        """Drain with one worker while every hand-out is followed by a flood above all."""
        hot = [key for key in KEYS if key not in self.due][:2]
        while True:
            for key in sorted(self.processing):
                self.done(key)
            if not set(self.due) - set(hot):
                break  # only the flood is left, which would go on for ever
            assert self.get() is not None
            for key in hot:
                self.add(key, self.top)


TestQueueAging = AgingMachine.TestCase
