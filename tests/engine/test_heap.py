"""Full collections while a write loop gathers what it keeps (`toolkit.engine.heap`)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from toolkit.engine.heap import FULL_EVERY, gathering


@contextmanager
def full_collections() -> Iterator[list[int]]:
    """Count CPython's full (oldest-generation) collections inside the block."""
    seen: list[int] = []

    def hear(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(hear)
    try:
        yield seen
    finally:
        gc.callbacks.remove(hear)


def pile_up(n: int) -> list[list[int]]:
    """n tracked objects kept alive, as a batch's refs are."""
    return [[i] for i in range(n)]


def test_full_collections_wait_while_a_batch_piles_up_and_come_back_after() -> None:
    before = gc.get_threshold()
    n = max(600_000, 2 * len(gc.get_objects()))  # twice the process's heap: growth to see
    gc.collect()
    with full_collections() as plain:
        kept = pile_up(n)
    del kept
    gc.collect()
    with full_collections() as gathered, gathering():
        kept = pile_up(n)
    del kept
    assert gc.get_threshold() == before
    assert len(plain) >= 3, plain  # CPython's own: a full collection per quarter of growth
    assert len(gathered) < len(plain), (gathered, plain)


def test_nested_and_concurrent_blocks_share_one_setting_restored_by_the_last() -> None:
    before = gc.get_threshold()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with gathering():
            entered.set()
            release.wait(30)

    t = threading.Thread(target=other)
    with gathering():
        assert gc.get_threshold() == (*before[:2], max(before[2], FULL_EVERY))
        t.start()
        assert entered.wait(30)
        with gathering():
            pass
        assert gc.get_threshold()[2] == max(before[2], FULL_EVERY)  # the nested one kept it
    assert gc.get_threshold()[2] == max(before[2], FULL_EVERY)  # the thread is still inside
    release.set()
    t.join(30)
    assert gc.get_threshold() == before


def test_a_block_that_raises_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), gathering():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
