"""Key admission of a sharded controller, against a model (Hypothesis).

Primary objects appear, change and leave; the admitted ranges move at any moment; workers
take keys and finish them. Invariants: a key is handed out only while its object's hash is
in an admitted range, and every key whose object stays in the admitted ranges and was
changed is eventually handed out (nothing admitted is lost by a range move: the keys
``ShardedKeys.admit`` newly admits are queued again, as the runtime does).

A deletion is the business of the replica that owns the object's range when it happens:
one seen outside the admitted ranges is not ours, and one whose range moves away before it
was handed out is forgotten with the object (the next owner lists the collection and never
sees it), as a restart forgets it. The model says so; scaling.rst documents it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kubemoon_core import ObjectKey, Reconciled
from kubemoon_core._changes import Change, ChangeType
from kubemoon_core._controller import Controller, Source
from kubemoon_core.sharding import HASH_SPACE, ShardedKeys, ShardRange, assign_ranges, fnv1a_64

UIDS = [f"{n:08x}-5c2e-4b0f-9a1d-{n * 7919:012x}" for n in range(24)]
RANGES = [tuple(assign_ranges([str(i) for i in range(k)]).values()) for k in (1, 2, 3, 4)]
CHOICES = [(ShardRange(0, HASH_SPACE),), *[(r,) for split in RANGES[1:] for r in split], ()]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, len(UIDS) - 1)),
        st.tuples(st.just("delete"), st.integers(0, len(UIDS) - 1)),
        st.tuples(st.just("admit"), st.integers(0, len(CHOICES) - 1)),
        st.tuples(st.just("work"), st.integers(1, 4)),
    ),
    max_size=80,
)


def _key(i: int) -> ObjectKey:
    return ObjectKey("ns", f"o{i}")


def _change(kind: ChangeType, i: int) -> Change:
    obj = {"metadata": {"name": f"o{i}", "namespace": "ns", "uid": UIDS[i]}}
    return Change(kind, _key(i), None if kind is ChangeType.ADDED else obj, obj)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_only_admitted_keys_are_handed_out_and_none_admitted_is_lost(
    plan: list[tuple[str, int]],
) -> None:
    keys = ShardedKeys()
    controller = Controller([Source.primary()], workers=3)
    controller.set_admission(keys.admits)
    ranges: tuple[ShardRange, ...] = ()
    pending: set[int] = set()  # changed since last handed out (the model)
    deleted: set[int] = set()  # objects whose last change was their deletion
    running: list = []
    now = 0.0

    def admitted(i: int) -> bool:
        value = fnv1a_64(UIDS[i].encode())
        return any(r.contains_hash(value) for r in ranges)

    def work(limit: int) -> None:
        nonlocal now
        for _ in range(limit):
            item = controller.next_work(now)
            if item is None:
                break
            i = int(item.key.name[1:])
            assert admitted(i), "a key outside the admitted ranges was handed out"
            pending.discard(i)
            running.append(item)
        while running:
            item = running.pop()
            controller.report(item, Reconciled(), now)
        now += 1.0

    for action, arg in plan:
        if action == "add":
            kind = ChangeType.MODIFIED
            deleted.discard(arg)
            if keys.observe(_change(kind, arg)):
                controller.receive("primary", _change(kind, arg), now)
                pending.add(arg)
        elif action == "delete":
            deleted.add(arg)
            if keys.observe(_change(ChangeType.DELETED, arg)):
                controller.receive("primary", _change(ChangeType.DELETED, arg), now)
                pending.add(arg)
            else:
                pending.discard(arg)  # it left this shard: another replica's to handle
        elif action == "admit":
            ranges = CHOICES[arg]
            # A deletion whose range moves away is forgotten with the object.
            pending -= {i for i in deleted if not admitted(i)}
            for key in keys.admit(ranges):  # what the runtime does with newly admitted keys
                controller.enqueue(key, now)
        else:
            work(arg)
    for _ in range(len(UIDS) + 1):
        work(10)
    lost = {i for i in pending if admitted(i)}
    assert not lost, f"admitted changes never handed out: {sorted(lost)}"
