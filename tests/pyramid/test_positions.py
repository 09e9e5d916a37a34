"""Which level-0 objects a build restricted to some positions probes (`position_cells`): key
arithmetic over any leading grid, checked against a brute-force oracle."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.pyramid.geometry import ArrayMeta, position_cells


@st.composite
def cases(draw):
    lead = draw(st.lists(st.tuples(st.integers(1, 7), st.integers(1, 3)), min_size=1, max_size=3))
    shape = (*(n for n, _ in lead), 8, 8)
    grid = (*(g for _, g in lead), 8, 8)
    dims = (*(f"d{i}" for i in range(len(lead))), "y", "x")
    chosen = {
        dims[i]: draw(st.sets(st.integers(0, lead[i][0] + 2), min_size=1))  # some past the end
        for i in draw(st.sets(st.integers(0, len(lead) - 1)))
    }
    return shape, grid, dims, chosen


@settings(max_examples=300, deadline=None)
@given(cases())
def test_cells_are_exactly_those_holding_a_chosen_position(case):
    shape, grid, dims, chosen = case
    meta = ArrayMeta("v", shape, dims, grid, grid, "float32", float("nan"))
    every = itertools.product(*(range(-(-n // g)) for n, g in zip(shape, grid, strict=True)))

    def holds(idx):  # brute force: some chosen position of every chosen dim in the cell
        for dim, want in chosen.items():
            ax = dims.index(dim)
            span = set(range(idx[ax] * grid[ax], min((idx[ax] + 1) * grid[ax], shape[ax])))
            if not span & want:
                return False
        return True

    assert position_cells(meta, chosen) == [idx for idx in every if holds(idx)]
    assert len(position_cells(meta, {})) == len(list(itertools.product(
        *(range(-(-n // g)) for n, g in zip(shape, grid, strict=True))
    )))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(0, 1)), min_size=1),
    st.integers(1, 5),
)
def test_runs_cover_every_shard_once_in_regions_of_neighbours(indices, limit):
    """A worker's shards grouped into runs: each task once, a run consecutive along one leading
    axis and equal elsewhere, never longer than the limit."""
    from toolkit.pyramid.geometry import ShardTask
    from toolkit.pyramid.shards import runs

    tasks = [ShardTask("2x", "v", (*i, 0, 0), f"k{i}", f"c{i}") for i in sorted(indices)]
    got = runs(tasks, limit)
    flat = [t for _, run in got for t in run]
    assert sorted(t.key for t in flat) == sorted(t.key for t in tasks)
    for ax, run in got:
        assert 1 <= len(run) <= limit
        if ax is None:
            continue
        along = [t.index[ax] for t in run]
        assert along == list(range(along[0], along[0] + len(run)))
        rest = {(*t.index[:ax], *t.index[ax + 1 :]) for t in run}
        assert len(rest) == 1
