"""The verifier's numpy reference and the builder's numba kernels are separate code: on random
blocks they agree bitwise on counts, mode, min and max, and within the stated tolerance on the
mean. A mutation of either side shows up here and in `verify`."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit import kernels
from toolkit.pyramid.reference import mean_tolerance, reduce_level0


@st.composite
def blocks(draw):
    bands = draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 37)), draw(st.integers(1, 37))
    factor = draw(st.sampled_from([2, 4, 8]))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed), bands, h, w, factor


@settings(max_examples=150, deadline=None)
@given(blocks(), st.sampled_from(["mode", "min", "max"]))
def test_labels_agree_bitwise(block, method):
    rng, bands, h, w, f = block
    vals = rng.integers(0, 4, (bands, h, w)).astype(np.uint8)  # 0 is nodata, ties common
    weights = kernels.joint_valid(vals, 0)
    if method == "mode":
        got, count = kernels.pool_mode(vals, weights, f, 0)
    else:
        got, count = kernels.pool(vals, weights, method, 0, f)
    want, want_count = reduce_level0(vals[None], 0, method, f)
    np.testing.assert_array_equal(count, want_count[0])
    valid = np.broadcast_to(count > 0, got.shape)
    np.testing.assert_array_equal(got[valid], want[0][valid].astype(got.dtype))


@settings(max_examples=150, deadline=None)
@given(blocks())
def test_the_mean_agrees_within_the_stated_tolerance(block):
    rng, bands, h, w, f = block
    vals = (rng.normal(0, 1, (bands, h, w)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
    vals[rng.random(vals.shape) < 0.2] = np.nan  # each band loses its own pixels
    weights = kernels.joint_valid(vals, float("nan"))
    got, count = kernels.pool(vals, weights, "mean", float("nan"), f)
    want, want_count = reduce_level0(vals[None], float("nan"), "mean", f)
    np.testing.assert_array_equal(count, want_count[0])
    top, _ = reduce_level0(np.abs(vals)[None], float("nan"), "max", f)
    tol = mean_tolerance(1, top[0], np.float32)
    valid = np.broadcast_to(count > 0, got.shape)
    assert np.all(np.abs(got[valid] - want[0][valid]) <= tol[valid])
    assert np.isnan(got[~valid]).all()
