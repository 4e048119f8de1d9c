"""A sharded member thawed past its membership Lease waits for fresh informers before it
reconciles the ranges it (re)gains: the replays of ``test_sim_configmirror``'s
``test_a_thawed_shard_member_does_not_write_stale_copies*``, without xfail."""

from __future__ import annotations

from test_sim_configmirror import assert_holds


def test_a_thawed_shard_member_writes_no_stale_copies() -> None:
    assert_holds("sharded", 112, 8, 7)


def test_a_thawed_shard_member_writes_no_stale_copies_shrunk() -> None:
    assert_holds("sharded", 112, 6, 1)
