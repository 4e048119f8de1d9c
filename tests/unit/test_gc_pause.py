"""kubemoon_io's garbage-collector pause: counted, restoring, process-wide."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kubemoon_io import paused_gc
from kubemoon_io._gc import without_gc


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """The generations collected while the test runs (the collector left as it was)."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    enabled = gc.isenabled()
    gc.enable()
    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        # Exactly as found: a test that disables the collector must not leave it off for
        # the rest of the session (a later test's pause would then keep it off).
        if enabled:
            gc.enable()
        else:
            gc.disable()


def test_overlapping_pauses_keep_the_collector_off_until_the_last_ends(
    full_collections: list[int],
) -> None:
    outer = paused_gc()
    inner = paused_gc()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the first one ends while the second still runs
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()
    assert full_collections == []  # no collect asked for


def test_a_disabled_collector_stays_disabled(full_collections: list[int]) -> None:
    gc.disable()
    with paused_gc(collect=True):
        assert not gc.isenabled()
    assert not gc.isenabled()
    assert full_collections == []  # and nothing is collected behind the application's back


def test_collect_runs_one_full_collection_when_the_shared_pause_ends(
    full_collections: list[int],
) -> None:
    with paused_gc():
        with paused_gc(collect=True):
            pass
        assert full_collections == []  # not while another pause is still on
    assert full_collections == [2]


def test_without_gc_runs_the_callable_paused_and_restores_on_error(
    full_collections: list[int],
) -> None:
    assert without_gc(gc.isenabled)() is False

    def failing() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        without_gc(failing)()
    assert gc.isenabled()
    assert full_collections == [2, 2]
