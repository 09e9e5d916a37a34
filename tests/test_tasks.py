"""Stable task lists and striping: exact partitions, and the anti-rot test for the wrong order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.tasks import block_bounds, remaining, stable, stripe


@dataclass(frozen=True)
class T:
    n: int

    @property
    def key(self) -> str:
        return f"t/{self.n:06d}"


def test_stable_sorts_and_hashes_by_content() -> None:
    a = stable([T(3), T(1), T(2)])
    b = stable([T(2), T(3), T(1)])
    assert a.keys == ["t/000001", "t/000002", "t/000003"]
    assert a.digest == b.digest
    assert stable([T(1), T(2)]).digest != a.digest


def test_stable_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="duplicate task key 't/000001'"):
        stable([T(1), T(2), T(1)])


def test_block_bounds_rejects_bad_stripes() -> None:
    with pytest.raises(ValueError):
        block_bounds(10, 3, 3)
    with pytest.raises(ValueError):
        block_bounds(10, 0, 0)


task_lists = st.lists(st.integers(0, 10_000), unique=True, max_size=300).map(
    lambda ns: stable(T(n) for n in ns)
)


@settings(max_examples=200, deadline=None)
@given(tasks=task_lists, count=st.integers(1, 40), mode=st.sampled_from(["strided", "contiguous"]))
def test_stripes_partition_exactly(tasks, count, mode) -> None:
    stripes = [stripe(tasks, i, count, mode) for i in range(count)]
    flat = [t for s in stripes for t in s]
    assert sorted(flat, key=lambda t: t.key) == list(tasks)
    assert len(flat) == len(set(flat))
    sizes = [len(s) for s in stripes]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    tasks=task_lists,
    count=st.integers(1, 12),
    mode=st.sampled_from(["strided", "contiguous"]),
)
def test_stripe_then_filter_is_exact_whatever_each_worker_sees(data, tasks, count, mode) -> None:
    """Workers observe different done-sets; stripe-then-filter still covers every undone task once."""
    truly_done = data.draw(st.sets(st.sampled_from(tasks.keys))) if len(tasks) else set()
    claimed: list[str] = []
    for i in range(count):
        # each worker sees the true done-set plus some tasks that finished just before it looked
        extra = data.draw(st.sets(st.sampled_from(tasks.keys))) if len(tasks) else set()
        seen = truly_done | extra
        mine = remaining(stripe(tasks, i, count, mode), seen)
        claimed.extend(t.key for t in mine)
        # the extra ones were claimed (and finished) by their owner; record them as such
        claimed.extend(
            k for k in extra - truly_done if k in {t.key for t in stripe(tasks, i, count, mode)}
        )
    undone = set(tasks.keys) - truly_done
    assert undone <= set(claimed)
    assert len([k for k in claimed if k in undone]) == len(undone)


def _filter_then_stripe(tasks, index, count, done):
    kept = [t for t in tasks if t.key not in done]
    return kept[index::count]


def test_filter_before_stripe_really_loses_and_duplicates_tasks() -> None:
    """Anti-rot: the wrong order is not a partition once workers see different done-sets."""
    tasks = stable(T(n) for n in range(12))
    # worker 0 lists before t/0 finishes; worker 1 lists just after
    views = [set(), {"t/000000"}]
    wrong = [k.key for i, done in enumerate(views) for k in _filter_then_stripe(tasks, i, 2, done)]
    right = [k.key for i, done in enumerate(views) for k in remaining(stripe(tasks, i, 2), done)]
    undone = set(tasks.keys) - {"t/000000"}
    lost = undone - set(wrong)
    duplicated = {k for k in wrong if wrong.count(k) > 1}
    assert lost, "filtering first must lose tasks here, or this test has rotted"
    assert duplicated, "filtering first must duplicate tasks here, or this test has rotted"
    assert undone <= set(right) and len(right) == len(set(right))
