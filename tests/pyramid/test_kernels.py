"""The numba reducers against the slow numpy oracle, on hypothesis-drawn blocks."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pyramid.oracle import reduce0, valid0
from toolkit import kernels

shapes = st.tuples(st.integers(1, 3), st.integers(1, 23), st.integers(1, 23))


@st.composite
def float_blocks(draw):
    nb, h, w = draw(shapes)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = rng.normal(10, 5, (nb, h, w)).astype(np.float32)
    holes = rng.random((nb, h, w)) < draw(st.floats(0, 1))
    values[holes] = np.nan  # bands invalid at different pixels
    return values


@st.composite
def label_blocks(draw):
    nb, h, w = draw(shapes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.integers(0, 4, (nb, h, w)).astype(np.uint8)  # few labels: many ties
    values[rng.random((nb, h, w)) < draw(st.floats(0, 0.7))] = 255
    return values


@settings(max_examples=60, deadline=None)
@given(float_blocks(), st.sampled_from(["mean", "min", "max", "sum"]), st.sampled_from([2, 3, 4]))
def test_float_reducers_match_oracle(values, method, f):
    valid = kernels.joint_valid(values, np.nan)
    assert np.array_equal(valid.astype(bool), valid0(values, np.nan))
    dtype = np.float64 if method == "sum" else np.float32
    out, count = kernels.pool(values, valid, method, np.nan, f, out_dtype=dtype)
    want, want_count = reduce0(values, np.nan, method, f, np.nan, out_dtype=dtype)
    assert np.array_equal(count, want_count)
    if method in ("min", "max"):
        assert np.array_equal(out, want, equal_nan=True)
    else:
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)
        assert np.array_equal(np.isnan(out), np.isnan(want))


@settings(max_examples=60, deadline=None)
@given(label_blocks(), st.sampled_from([2, 3, 5]))
def test_mode_matches_oracle_ties_to_smallest(values, f):
    valid = kernels.joint_valid(values, 255)
    out, count = kernels.pool_mode(values, valid, f, 255)
    want, want_count = reduce0(values, 255, "mode", f, 255)
    assert np.array_equal(out, want)
    assert np.array_equal(count, want_count)


@settings(max_examples=60, deadline=None)
@given(float_blocks())
def test_mean_cascade_equals_direct(values):
    """pool(pool(level0)) with counts == pool of level 0 by 4 (count-weighted, not mean of means)."""
    valid = kernels.joint_valid(values, np.nan)
    l1, c1 = kernels.pool(values, valid, "mean", np.nan, 2, np.float64)
    l2, c2 = kernels.pool(l1, c1, "mean", np.nan, 2, np.float64)
    d2, dc2 = kernels.pool(values, valid, "mean", np.nan, 4, np.float64)
    assert np.array_equal(c2, dc2)
    np.testing.assert_allclose(l2, d2, rtol=1e-12)
    assert np.array_equal(np.isnan(l2), np.isnan(d2))


def test_mean_of_means_would_be_wrong():
    """The case the count plane exists for: one window with 1 valid pixel, another with 4."""
    v = np.array([[[1, np.nan, 3, 3], [np.nan, np.nan, 3, 3]]], dtype=np.float32)
    valid = kernels.joint_valid(v, np.nan)
    l1, c1 = kernels.pool(v, valid, "mean", np.nan, 2)
    l2, _ = kernels.pool(l1, c1, "mean", np.nan, 2)
    assert l2[0, 0, 0] == pytest.approx((1 + 3 * 4) / 5)  # a plain mean of means gives 2.0


def test_joint_mask_across_bands():
    v = np.ones((2, 2, 2), dtype=np.float32)
    v[0, 0, 0] = np.nan
    v[1, 1, 1] = np.nan
    v[1, 0, 1] = 5
    valid = kernels.joint_valid(v, np.nan)
    out, count = kernels.pool(v, valid, "mean", np.nan, 2)
    assert count[0, 0] == 2
    assert out[1, 0, 0] == 3.0  # band 1 averages the jointly valid pixels (5, 1), not its own 3


def test_integer_fill_and_non_nan_float_fill():
    v = np.array([[[-9999, 2], [4, 6]]], dtype=np.float32)
    valid = kernels.joint_valid(v, -9999)
    out, count = kernels.pool(v, valid, "mean", np.nan, 2)
    assert count[0, 0] == 3 and out[0, 0, 0] == 4


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown method 'nearest'"):
        kernels.pool(np.zeros((1, 2, 2), np.float32), np.ones((2, 2), np.uint32), "nearest", 0)
    with pytest.raises(ValueError, match="mode is for categorical integers"):
        kernels.pool(np.zeros((1, 2, 2), np.float32), np.ones((2, 2), np.uint32), "mode", 0)
    with pytest.raises(ValueError, match="same plane"):
        kernels.pool(np.zeros((1, 2, 2), np.float32), np.ones((3, 2), np.uint32), "mean", 0)


def test_threads_give_identical_results():
    rng = np.random.default_rng(1)
    v = rng.normal(size=(2, 300, 300)).astype(np.float32)
    v[rng.random(v.shape) < 0.3] = np.nan
    valid = kernels.joint_valid(v, np.nan)
    ref = kernels.pool(v, valid, "mean", np.nan, 2)[0]
    results = [None] * 8

    def work(i):
        results[i] = kernels.pool(v, valid, "mean", np.nan, 2)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert np.array_equal(r, ref, equal_nan=True)
