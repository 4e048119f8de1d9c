"""Waiting keys age (issue 31, defect 6): a flood of ordinary adds cannot starve the keys of
an informer's first list, and a new object behind a large first list still goes first.

The bound under test (the module docstring of ``kubemoon_core._queue``): a key queued while
``Q`` other keys are queued is among the next ``(max_overtakes + 1) * (Q + 1)`` keys handed
out, whatever is added meanwhile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubemoon_core._queue import DEFAULT_MAX_OVERTAKES, WorkQueue
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import LOW_PRIORITY, NORMAL_PRIORITY

INITIAL = 300
HOT = [f"hot-{n}" for n in range(10)]


def flood(queue: WorkQueue[str], gets: int) -> list[str]:
    """One worker; between every hand-out each hot key is updated twice (a tenant editing 10
    objects 20 times a second against a 60 ms reconcile makes ~12 events per reconcile)."""
    handed: list[str] = []
    for _ in range(gets):
        for _ in range(2):
            for key in HOT:
                queue.add(key, priority=NORMAL_PRIORITY)
        key = queue.get(0.0)
        assert key is not None
        handed.append(key)
        queue.done(key)
    return handed


def test_a_flood_of_events_does_not_starve_the_first_list() -> None:
    queue: WorkQueue[str] = WorkQueue()
    initial = [f"cached-{n:03d}" for n in range(INITIAL)]
    for key in initial:
        queue.add(key, priority=LOW_PRIORITY)
    # The last first-list key was queued behind INITIAL - 1 others: the bound for it.
    bound = (DEFAULT_MAX_OVERTAKES + 1) * INITIAL
    handed = flood(queue, bound)
    served = [key for key in handed if key.startswith("cached-")]
    assert served == initial  # all of them, in the order they were listed
    # ...and the flood was still worked on: priorities matter while the first list ages.
    assert len(handed) - len(served) == DEFAULT_MAX_OVERTAKES * INITIAL


def test_every_first_list_key_is_handed_out_within_its_own_bound() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for n in range(INITIAL):
        queue.add(f"cached-{n:03d}", priority=LOW_PRIORITY)
    handed = flood(queue, (DEFAULT_MAX_OVERTAKES + 1) * INITIAL)
    for n in range(INITIAL):  # queued behind n others
        rank = handed.index(f"cached-{n:03d}") + 1
        assert rank <= (DEFAULT_MAX_OVERTAKES + 1) * (n + 1)


@pytest.mark.parametrize("overtakes", [0, 1, 2, 7])
def test_the_bound_holds_for_every_setting(overtakes: int) -> None:
    queue: WorkQueue[str] = WorkQueue(max_overtakes=overtakes)
    for n in range(50):
        queue.add(f"cached-{n:02d}", priority=LOW_PRIORITY)
    handed = flood(queue, (overtakes + 1) * 50)
    assert sorted(k for k in handed if k.startswith("cached-")) == [
        f"cached-{n:02d}" for n in range(50)
    ]
    assert handed[overtakes] == "cached-00"  # exactly max_overtakes hot keys went first


def test_a_new_object_behind_a_large_first_list_is_handed_out_in_the_first_percent() -> None:
    backlog = 10_000
    queue: WorkQueue[str] = WorkQueue()
    for n in range(backlog):
        queue.add(f"cached-{n:05d}", priority=LOW_PRIORITY)
    handed = []
    for _ in range(backlog // 200):  # the first half of the first list is being worked on
        key = queue.get(0.0)
        assert key is not None
        handed.append(key)
        queue.done(key)
    queue.add("just-created")
    for _ in range(backlog // 100):
        key = queue.get(0.0)
        assert key is not None
        handed.append(key)
        queue.done(key)
    rank = handed.index("just-created") + 1 - backlog // 200
    assert 1 <= rank <= backlog // 100
    assert rank <= DEFAULT_MAX_OVERTAKES + 1  # in fact at once, or after one aged key


def test_a_raised_key_keeps_its_age() -> None:
    """Raising a queued key's priority does not make it younger (it would wait longer)."""
    queue: WorkQueue[str] = WorkQueue(max_overtakes=1)
    queue.add("old", priority=LOW_PRIORITY)
    queue.add("mid", priority=LOW_PRIORITY)
    queue.add("new", priority=5)
    queue.add("newer", priority=5)
    queue.add("old", priority=1)  # raised, but below "new"
    assert queue.get_with_priority(0.0) == ("new", 5)  # overtakes "old", the oldest
    assert queue.get_with_priority(0.0) == ("old", 1)  # still the oldest: served by age
    assert queue.get_with_priority(0.0) == ("newer", 5)
    assert queue.get_with_priority(0.0) == ("mid", LOW_PRIORITY)


def test_a_requeue_after_done_starts_a_new_wait() -> None:
    queue: WorkQueue[str] = WorkQueue(max_overtakes=1)
    queue.add("a")
    queue.add("low", priority=LOW_PRIORITY)
    assert queue.get(0.0) == "a"  # the oldest, by priority too: nothing overtaken
    queue.add("a")  # dirty while processing
    queue.done("a")  # queued again, now younger than "low"
    queue.add("b")
    assert queue.get(0.0) == "a"  # overtakes "low" once
    assert queue.get(0.0) == "low"  # then the oldest goes
    assert queue.get(0.0) == "b"


def test_max_overtakes_zero_is_first_in_first_out() -> None:
    queue: WorkQueue[str] = WorkQueue(max_overtakes=0)
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("b", priority=10)
    queue.add("c")
    assert [queue.get(0.0) for _ in range(4)] == ["a", "b", "c", None]


@pytest.mark.parametrize("bad", [-1, 1.5, True, None, "3"])
def test_a_bad_max_overtakes_is_refused(bad: Any) -> None:
    with pytest.raises(LocalProtocolError, match="max_overtakes must be a non-negative int"):
        WorkQueue(max_overtakes=bad)


def test_many_distinct_priorities_leave_no_state_behind() -> None:
    queue: WorkQueue[int] = WorkQueue()
    for n in range(1000):
        queue.add(n, priority=n)
        assert queue.get(0.0) == n
        queue.done(n)
    assert len(queue) == 0
    assert not queue._queues  # an emptied priority leaves nothing behind (bounded state)


def test_the_docs_state_the_default_bound() -> None:
    """The pages that quote the default say what the code does."""
    import kubemoon_core._queue as module

    root = Path(__file__).resolve().parents[2]
    factor = DEFAULT_MAX_OVERTAKES + 1
    assert f"DEFAULT_MAX_OVERTAKES`, {DEFAULT_MAX_OVERTAKES})" in (
        root / "docs" / "scaling.rst"
    ).read_text(encoding="utf-8")
    assert f"({factor} (Q + 1) by\ndefault)" in (root / "docs" / "pipeline.rst").read_text(
        encoding="utf-8"
    )
    assert f"default :data:`DEFAULT_MAX_OVERTAKES`, {DEFAULT_MAX_OVERTAKES})" in (
        module.__doc__ or ""
    )
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert f"is among the next {factor} * (Q + 1)." in source  # the constant's docstring
