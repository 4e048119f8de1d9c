"""The freshness barrier (kubemoon_core.sharding.FreshnessBarrier): a range regained after a
lapse of the membership Lease is not worked on until every cache reached the server's
resourceVersion as of the gain; virtual time, no I/O."""

from __future__ import annotations

import pytest

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.sharding import (
    BarrierState,
    CacheProgress,
    FreshnessBarrier,
    ShardMember,
    ShardRange,
)

MIRRORS = GroupVersionResource("kubemoon.dev", "v1beta1", "configmirrors")
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
CACHES = {"primary": (MIRRORS, None), "copies": (CONFIGMAPS, None), "sources": (CONFIGMAPS, "apps")}


def progress(**rvs: tuple[str, int]) -> dict[str, CacheProgress]:
    return {name: CacheProgress(rv, syncs) for name, (rv, syncs) in rvs.items()}


def answer(rv: object) -> dict[str, object]:
    return {"kind": "List", "metadata": {"resourceVersion": rv}, "items": []}


def armed(now: float = 100.0, grace: float = 2.0) -> FreshnessBarrier:
    barrier = FreshnessBarrier(CACHES, grace=grace)
    assert barrier.open and barrier.state is BarrierState.OPEN
    barrier.arm(now)
    assert not barrier.open and barrier.state is BarrierState.CLOSED
    return barrier


def test_unarmed_it_is_open_and_asks_for_nothing() -> None:
    barrier = FreshnessBarrier(CACHES)
    assert barrier.open and barrier.reads() == [] and barrier.next_deadline() is None
    assert barrier.relists_due(0.0, {}) == []
    assert barrier.update({})


def test_one_limit_1_consistent_read_per_resource_and_namespace() -> None:
    barrier = armed()
    reads = barrier.reads()
    assert [(key[1], key[2]) for key, _ in reads] == [
        (CONFIGMAPS, None),
        (CONFIGMAPS, "apps"),
        (MIRRORS, None),
    ]
    for _, request in reads:
        assert request.method == "GET"
        assert ("limit", "1") in request.query
        assert not any(name == "resourceVersion" for name, _ in request.query)
    assert barrier.reads() == []  # each sent once


def test_it_opens_once_every_cache_reached_its_floor() -> None:
    barrier = armed()
    for key, _ in barrier.reads():
        barrier.read_finished(key, answer("500"))
    stale = progress(primary=("498", 1), copies=("500", 1), sources=("499", 1))
    assert not barrier.update(stale)
    assert barrier.relists_due(101.0, stale) == []  # within the grace: the watches may catch up
    assert barrier.next_deadline() == 102.0
    fresh = progress(primary=("501", 1), copies=("500", 1), sources=("1000", 1))
    assert barrier.update(fresh) and barrier.open
    assert barrier.relists == 0 and barrier.next_deadline() is None


def test_a_cache_still_behind_after_the_grace_is_relisted_and_passes_on_its_next_list() -> None:
    barrier = armed()
    for key, _ in barrier.reads():
        barrier.read_finished(key, answer("500"))
    quiet = progress(primary=("450", 1), copies=("500", 1), sources=("450", 1))
    assert barrier.relists_due(102.0, quiet) == ["primary", "sources"]
    assert barrier.relists_due(103.0, quiet) == []  # asked once per arm
    assert barrier.next_deadline() is None
    # The relist's list is applied: a consistent read begun after the arm.
    assert not barrier.update(progress(primary=("450", 2), copies=("500", 1), sources=("450", 1)))
    assert barrier.update(progress(primary=("450", 2), copies=("500", 1), sources=("450", 2)))


def test_a_failed_or_incomparable_floor_read_means_relist_at_once() -> None:
    barrier = armed()
    answers = {CONFIGMAPS: None, MIRRORS: answer("0")}  # "0" is no comparable version
    for key, _ in barrier.reads():
        barrier.read_finished(
            key, answers.get(key[1], answer("500")) if key[2] is None else answer("7")
        )
    now = progress(primary=("9", 1), copies=("9", 1), sources=("9", 1))
    assert barrier.relists_due(100.0, now) == ["copies", "primary"]  # within the grace
    assert barrier.update(progress(primary=("9", 2), copies=("9", 2), sources=("9", 1)))


def test_a_resume_point_that_cannot_be_compared_is_relisted() -> None:
    barrier = armed()
    for key, _ in barrier.reads():
        barrier.read_finished(key, answer("500"))
    odd = progress(primary=("opaque", 1), copies=("500", 1), sources=("500", 1))
    assert not barrier.update(odd)
    assert barrier.relists_due(100.0, odd) == ["primary"]


def test_an_answer_to_a_read_sent_before_the_last_arm_is_ignored() -> None:
    barrier = armed()
    early = barrier.reads()
    barrier.arm(110.0)  # lapsed and regained again while the reads were in flight
    for key, _ in early:
        barrier.read_finished(key, answer("500"))
    assert not barrier.update(progress(primary=("600", 1), copies=("600", 1), sources=("600", 1)))
    for key, _ in barrier.reads():
        barrier.read_finished(key, answer("700"))
        barrier.read_finished(key, answer("100"))  # a second answer changes nothing
    assert not barrier.update(progress(primary=("600", 1), copies=("600", 1), sources=("600", 1)))
    assert barrier.update(progress(primary=("700", 1), copies=("700", 1), sources=("700", 1)))
    assert barrier.arms == 2


def test_without_caches_arming_leaves_it_open() -> None:
    barrier = FreshnessBarrier({})
    barrier.arm(0.0)
    assert barrier.open


@pytest.mark.parametrize("grace", [-1, True, "2", float("nan")])
def test_bad_grace_is_refused(grace: object) -> None:
    with pytest.raises(LocalProtocolError):
        FreshnessBarrier(CACHES, grace=grace)  # type: ignore[arg-type]


def test_bad_caches_are_refused() -> None:
    with pytest.raises(LocalProtocolError):
        FreshnessBarrier({"x": ("configmaps", None)})  # type: ignore[dict-item]
    with pytest.raises(LocalProtocolError):
        FreshnessBarrier({"x": (CONFIGMAPS, 3)})  # type: ignore[dict-item]


def test_the_member_counts_its_lapses() -> None:
    # The rule's trigger: a range gained after the own Lease passed its renew deadline.
    member = ShardMember("a", lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
    assert member.write_due(0.0) == ()
    member.write_finished(0.1, True)
    assert member.lapses == 0
    member.tick(9.0)
    assert member.lapses == 0
    member.tick(10.5)  # paused past the renew deadline
    assert member.lapses == 1
    member.tick(30.0)  # still LOST: one lapse
    assert member.lapses == 1
    assert isinstance(ShardRange(0, 1), ShardRange)
