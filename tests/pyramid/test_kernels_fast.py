"""The factor-2 mean path against the general kernel (bitwise) and the slow numpy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pyramid.oracle import reduce0
from toolkit import kernels

shapes = st.tuples(st.integers(1, 3), st.integers(1, 19), st.integers(1, 19))


def bits(a: np.ndarray) -> np.ndarray:
    """Compare floats by their bit patterns: -0.0 != 0.0, every NaN payload counts."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


@st.composite
def level0(draw):
    """Level-0 blocks: float32/float64/int16, NaN or sentinel nodata, bands invalid apart."""
    nb, h, w = draw(shapes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["f4-nan", "f8-nan", "f4-sentinel", "i2"]))
    values = rng.normal(0, draw(st.sampled_from([1e-3, 1.0, 1e6])), (nb, h, w))
    holes = rng.random((nb, h, w)) < draw(st.floats(0, 1))
    if kind == "i2":
        values = np.clip(values, -30000, 30000).astype(np.int16)
        fill: float | int = -32768
    else:
        values = values.astype(np.float32 if kind.startswith("f4") else np.float64)
        values[rng.random((nb, h, w)) < 0.05] = -0.0  # signed zeros must survive bitwise
        fill = -9999.0 if kind == "f4-sentinel" else float("nan")
    values[holes] = fill
    return values, fill


@st.composite
def cascade(draw):
    """A parent level: values with a count plane (0..4, or large), NaN wherever the count is 0."""
    nb, h, w = draw(shapes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    top = draw(st.sampled_from([4, 16, 1 << 20]))
    weights = rng.integers(0, top + 1, (h, w)).astype(np.uint32)
    weights[rng.random((h, w)) < draw(st.floats(0, 1))] = 0
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    values = rng.normal(5, 3, (nb, h, w)).astype(dtype)
    if draw(st.booleans()):
        values[:, weights == 0] = np.nan  # what a built level holds; else junk the kernel ignores
    return values, weights


@settings(max_examples=150, deadline=None)
@given(cascade(), st.sampled_from([np.float32, np.float64]))
def test_factor2_weighted_is_bitwise_the_general_kernel(block, out_dtype):
    values, weights = block
    fast, fast_count = kernels.pool(values, weights, "mean", np.nan, 2, out_dtype)
    slow, slow_count = kernels.pool(values, weights, "mean", np.nan, 2, out_dtype, fast=False)
    assert np.array_equal(fast_count, slow_count)
    assert np.array_equal(bits(fast), bits(slow))


@settings(max_examples=150, deadline=None)
@given(level0(), st.sampled_from([np.float32, np.float64]))
def test_factor2_level0_is_bitwise_the_general_kernel_and_matches_the_oracle(block, out_dtype):
    values, fill = block
    fused, fused_count = kernels.pool_level0(values, fill, "mean", np.nan, 2, out_dtype)
    valid = kernels.joint_valid(values, fill)
    weighted, weighted_count = kernels.pool(values, valid, "mean", np.nan, 2, out_dtype)
    slow, slow_count = kernels.pool(values, valid, "mean", np.nan, 2, out_dtype, fast=False)
    assert np.array_equal(fused_count, slow_count)
    assert np.array_equal(weighted_count, slow_count)
    assert np.array_equal(bits(fused), bits(slow))
    assert np.array_equal(bits(weighted), bits(slow))
    want, want_count = reduce0(values, fill, "mean", 2, np.nan, out_dtype=out_dtype)
    assert np.array_equal(fused_count, want_count)
    assert np.array_equal(np.isnan(fused), np.isnan(want))
    np.testing.assert_allclose(fused, want, rtol=1e-6 if out_dtype is np.float32 else 1e-12, atol=0)


@settings(max_examples=60, deadline=None)
@given(level0())
def test_factor2_cascade_equals_the_oracle_from_level0(block):
    """Two fast levels (2x from level 0, 4x from 2x by counts) == the level-0 4x4 window mean."""
    values, fill = block
    l1, c1 = kernels.pool_level0(values, fill, "mean", np.nan, 2, np.float64)
    l2, c2 = kernels.pool(l1, c1, "mean", np.nan, 2, np.float64)
    want, want_count = reduce0(values, fill, "mean", 4, np.nan, out_dtype=np.float64)
    assert np.array_equal(c2, want_count)
    assert np.array_equal(np.isnan(l2), np.isnan(want))
    np.testing.assert_allclose(l2, want, rtol=1e-12, atol=0)


def test_partial_edges_kept_and_signed_zero_as_general():
    """3x5: a bottom row and a right column of partial windows; an all -0.0 window gives +0.0."""
    v = np.array(
        [[[-0.0, -0.0, 1, 2, 7], [-0.0, -0.0, np.nan, 4, np.nan], [5, np.nan, 6, 6, 8]]],
        dtype=np.float32,
    )
    out, count = kernels.pool_level0(v, np.nan, "mean", np.nan, 2)
    assert count.tolist() == [[4, 3, 1], [1, 2, 1]]
    assert out[0].tolist() == [[0.0, pytest.approx(7 / 3), 7.0], [5.0, 6.0, 8.0]]
    slow, _ = kernels.pool(v, kernels.joint_valid(v, np.nan), "mean", np.nan, 2, fast=False)
    assert np.array_equal(bits(out), bits(slow))
    assert not np.signbit(out[0, 0, 0])


def test_joint_mask_fused_across_bands():
    v = np.ones((2, 2, 2), dtype=np.float32)
    v[0, 0, 0] = np.nan
    v[1, 1, 1] = np.nan
    v[1, 0, 1] = 5
    out, count = kernels.pool_level0(v, np.nan, "mean", np.nan, 2)
    assert count[0, 0] == 2
    assert out[1, 0, 0] == 3.0  # (5 + 1) / 2 over the jointly valid pixels, not band 1's own 3


def test_pool_level0_other_methods_and_bad_input():
    v = np.array([[[1, 2], [255, 4]]], dtype=np.uint8)
    out, count = kernels.pool_level0(v, 255, "max", 255, 2)
    assert out[0, 0, 0] == 4 and count[0, 0] == 3
    with pytest.raises(ValueError, match=r"pool_level0 wants \[band, y, x\]"):
        kernels.pool_level0(v[0], 255, "mean", np.nan)
    with pytest.raises(ValueError, match="mean needs a float output dtype"):
        kernels.pool_level0(v, 255, "mean", 0)
    with pytest.raises(ValueError, match="unknown method 'nearest'"):
        kernels.pool_level0(v, 255, "nearest", 0)


def test_fused_path_threads_share_nothing():
    """nogil kernels from 8 threads at once give the single-thread answer (no shared scratch)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    v = rng.normal(size=(2, 301, 257)).astype(np.float32)
    v[rng.random(v.shape) < 0.3] = np.nan
    ref, ref_count = kernels.pool_level0(v, np.nan, "mean", np.nan)
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda _: kernels.pool_level0(v, np.nan, "mean", np.nan), range(16))
        )
    for out, count in results:
        assert np.array_equal(bits(out), bits(ref))
        assert np.array_equal(count, ref_count)


@settings(max_examples=200, deadline=None)
@given(
    shapes,
    st.sampled_from([np.uint8, np.uint16]),
    st.integers(2, 300),
    st.sampled_from([2, 3, 4, 8]),
    st.integers(0, 2**32 - 1),
)
def test_the_counting_mode_kernels_equal_the_sorting_one(shape, dtype, labels, factor, seed):
    """uint8/uint16 mode: factor 2 ranks its four candidates, other factors count in a table;
    ties, nodata and partial windows as the sort does."""
    rng = np.random.default_rng(seed)
    top = min(labels, np.iinfo(dtype).max)
    values = rng.integers(0, top + 1, shape).astype(dtype)
    values[rng.random(shape) < 0.2] = top  # crowd one label in: ties and near-ties
    weights = kernels.joint_valid(values, 0)
    fast = kernels.pool(values, weights, "mode", 0, factor)
    slow = kernels.pool(values, weights, "mode", 0, factor, fast=False)
    np.testing.assert_array_equal(fast[1], slow[1])
    np.testing.assert_array_equal(fast[0], slow[0])
