"""Which level-0 objects a build restricted to some positions covers (`restrict`): key
arithmetic over any leading grid, checked against a brute-force oracle."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.pyramid.plan import ArrayMeta
from toolkit.pyramid.repo import restrict
from toolkit.pyramid.source import Source


@st.composite
def cases(draw):
    lead = draw(st.lists(st.tuples(st.integers(1, 7), st.integers(1, 3)), min_size=1, max_size=3))
    shape = (*tuple(n for n, _ in lead), 8, 8)
    grid = (*tuple(g for _, g in lead), 8, 8)
    dims = (*tuple(f"d{i}" for i in range(len(lead))), "y", "x")
    cells = [range(-(-n // g)) for n, g in lead]
    present = draw(st.sets(st.sampled_from(list(itertools.product(*cells))), min_size=1))
    chosen = {
        dims[i]: draw(st.sets(st.integers(0, lead[i][0] - 1), min_size=1))
        for i in draw(st.sets(st.integers(0, len(lead) - 1)))
    }
    return shape, grid, dims, sorted(present), chosen


@settings(max_examples=200, deadline=None)
@given(cases())
def test_restrict_keeps_exactly_the_objects_holding_a_chosen_position(case):
    shape, grid, dims, present, chosen = case
    meta = ArrayMeta("v", shape, dims, grid, grid, "float32", float("nan"))
    keys = ["c/" + "/".join(map(str, (*idx, 0, 0))) for idx in present]
    src = Source(None, {"v": meta}, {"v": keys}, {}, {})  # type: ignore[arg-type]
    got = restrict(src, chosen).listings["v"]

    def holds(idx):  # brute force: some chosen position of every chosen dim in the object
        for dim, want in chosen.items():
            ax = dims.index(dim)
            span = set(range(idx[ax] * grid[ax], min((idx[ax] + 1) * grid[ax], shape[ax])))
            if not span & want:
                return False
        return True

    assert got == [k for k, idx in zip(keys, present, strict=True) if holds(idx)]
    assert restrict(src, {}).listings["v"] == keys  # nothing chosen: every object
    assert np.all([k in keys for k in got])
