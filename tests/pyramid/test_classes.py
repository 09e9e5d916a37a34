"""Mode at cascade cost: class counts carried from level to level stay exactly the level-0 mode.

A mode pyramid over declared classes (CF flag_values) writes, per level, how many level-0 pixels
of each class fell in each window; the next level sums them 2x2. These tests hold the cascade to
the direct definition (tests/pyramid/oracle.py, one window at a time), show that levels past the
first no longer read level 0, and that classes outside the declaration are refused, not dropped.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pyramid.oracle import reduce0
from toolkit import kernels, storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, plan, verify
from toolkit.pyramid.geometry import MAX_CLASSES, ArrayMeta, PlanError, declared_classes


def mem() -> storage.Store:
    return storage.open_store(f"memory://{uuid.uuid4().hex}")


@st.composite
def label_planes(draw):
    h = draw(st.integers(1, 37))
    w = draw(st.integers(1, 37))
    dtype = draw(st.sampled_from([np.int16, np.uint8, np.uint16]))  # clamped and whole tables
    lo, hi = {np.int16: (-300, 300), np.uint8: (0, 255), np.uint16: (0, 65535)}[dtype]
    labels = sorted(draw(st.sets(st.integers(lo, hi), min_size=1, max_size=6)))
    fill = draw(st.integers(lo, hi).filter(lambda v: v not in labels))
    pool = [*labels, fill]
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).choice(pool, size=(h, w)).astype(dtype)
    return values, fill, np.asarray(labels, dtype=dtype)


@settings(max_examples=150, deadline=None)
@given(label_planes(), st.integers(1, 6))
def test_cascaded_class_counts_give_the_level0_mode_at_every_level(case, levels):
    values, fill, labels = case
    for k in range(1, levels + 1):
        f = 2**k
        if k == 1:
            mode, counts, valid = kernels.classes_level0(values, fill, labels, 2, "uint32")
        else:
            mode, counts, valid = kernels.pool_classes(counts, labels, fill, values.dtype)
        want, want_count = reduce0(values[None], fill, "mode", f, fill, values.dtype)
        np.testing.assert_array_equal(valid, want_count)
        np.testing.assert_array_equal(mode, want[0])
        # each class's count is the number of its pixels in the window
        for i, label in enumerate(labels):
            ones = np.where(values == label, 1, 0)[None].astype(np.int16)
            np.testing.assert_array_equal(counts[i], reduce0(ones, 0, "sum", f, 0)[1])
        # any factor straight from level 0 (the general kernel) agrees with the cascade
        direct, direct_counts, _ = kernels.classes_level0(values, fill, labels, f, "uint32")
        np.testing.assert_array_equal(direct, mode)
        np.testing.assert_array_equal(direct_counts, counts)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
@pytest.mark.parametrize("factor", [2, 4])
def test_a_value_outside_the_declared_classes_is_refused_where_it_is(dtype, factor):
    values = np.array([[1, 2, 0], [7, 1, 7]], dtype=dtype)
    with pytest.raises(kernels.StrayLabel) as err:
        kernels.classes_level0(values, 0, np.array([1, 2], dtype), factor)
    assert (err.value.value, err.value.n, err.value.at) == (7, 2, (1, 0))


def test_classes_come_from_flag_values_without_nodata():
    def meta(dtype, fill):
        return ArrayMeta("lc", (8, 8), ("y", "x"), (4, 4), (4, 4), dtype, fill)

    arrays = {"lc": meta("uint8", 0), "t": meta("float32", float("nan"))}
    attrs = {"lc": {"flag_values": [0, 3, 1, 2]}, "t": {"flag_values": [1, 2]}}
    assert declared_classes(arrays, attrs) == {"lc": (1, 2, 3)}  # floats are no classes
    beyond = {"lc": {"flag_values": [0, 1, 2, 300]}}  # 300 cannot occur in uint8 data
    assert declared_classes(arrays, beyond) == {"lc": (1, 2)}
    many = {"lc": {"flag_values": list(range(MAX_CLASSES + 2))}}
    assert declared_classes(arrays, many) == {}  # too many to carry: the level-0 re-read path


def _classes_store(store: storage.Store, shape=(83, 117), shards=(16, 16), seed=5) -> np.ndarray:
    info = synthetic.write_store(store, kind="categorical", shape=shape, shards=shards, seed=seed)
    return info["values"]


def test_a_class_pyramid_is_the_level0_mode_and_counts_every_class():
    store = mem()
    values = _classes_store(store)
    p = plan(store, levels=4)
    assert p.method == "mode" and all(
        v.classes == (1, 2, 3, 4) for lvl in p.levels for v in lvl.vars
    )
    build(store, levels=4, executor="sync")
    result = verify(store, sample=50, executor="sync")
    assert result.ok, [str(f) for f in result.failures]
    z = store.zarr(read_only=True)
    for k in range(1, 5):
        f = 2**k
        want, want_count = reduce0(values[None], 0, "mode", f, 0, np.uint8)
        np.testing.assert_array_equal(zarr.open_array(z, path=f"{f}x/field")[...], want[0])
        counts = zarr.open_array(z, path=f"{f}x/field_class_count")[...]
        assert counts.shape == (4, *want[0].shape)
        np.testing.assert_array_equal(counts.sum(axis=0), want_count)
        np.testing.assert_array_equal(
            counts[2], reduce0((values == 3)[None].astype(np.uint8), 0, "sum", f, 0)[1]
        )
    ds = xr.open_zarr(store.zarr(read_only=True), group="4x", consolidated=False)
    assert ds["field_class_count"].dims == ("field_class", "lat", "lon")
    assert ds["field_class"].values.tolist() == [1, 2, 3, 4]
    assert ds["field_class"].attrs["flag_meanings"] == "water forest cropland urban"


def test_levels_past_the_first_never_read_level_0(tmp_path):
    """Scramble level 0's values after 2x is built (same objects, so the plan still holds):
    rebuilding 4x onwards gives the same levels, because they come from 2x's class counts."""
    path = tmp_path / "lc.zarr"
    store = storage.open_store(str(path))
    values = _classes_store(store, shape=(64, 96), shards=(16, 16))
    build(store, levels=3, executor="sync")
    before = {g: zarr.open_array(str(path), path=f"{g}/field")[...] for g in ("4x", "8x")}
    field = zarr.open_array(str(path), path="field", mode="r+")
    field[...] = np.where(values == 0, 0, 5 - values).astype(np.uint8)  # relabel every class
    build(store, levels=3, rebuild_from="4x", executor="sync")
    for g, old in before.items():
        np.testing.assert_array_equal(zarr.open_array(str(path), path=f"{g}/field")[...], old)
    # and the verifier, which pools level 0 itself, sees that the levels no longer match it
    assert not verify(store, sample=20, executor="sync").ok


def test_tampered_class_counts_fail_the_verifier():
    store = mem()
    _classes_store(store, shape=(40, 60))
    build(store, levels=2, executor="sync")
    arr = zarr.open_array(store.zarr(), path="2x/field_class_count", mode="r+")
    block = arr[...]
    block[1, 0, 0] += 1
    arr[...] = block
    result = verify(store, sample=100, executor="sync")
    assert ("2x", "classes") in {(f.level, f.check) for f in result.failures}


def test_mode_without_declared_classes_still_reads_level_0_and_is_exact():
    store = mem()
    values = _classes_store(store, shape=(50, 70))
    root = zarr.open_array(store.zarr(), path="field", mode="r+")
    attrs = dict(root.attrs)
    for k in ("flag_values", "flag_meanings"):
        attrs.pop(k)
    root.attrs.clear()
    root.attrs.update(attrs)
    p = plan(store, method="mode", levels=3)
    assert not any(v.classes for lvl in p.levels for v in lvl.vars)
    build(store, method="mode", levels=3, executor="sync")
    assert not storage.list_keys(store, "2x/field_class_count/")
    want, _ = reduce0(values[None], 0, "mode", 8, 0, np.uint8)
    np.testing.assert_array_equal(zarr.open_array(store.zarr(), path="8x/field")[...], want[0])


def test_rebuilding_upper_levels_after_the_classes_changed_is_refused(tmp_path):
    path = tmp_path / "lc.zarr"
    store = storage.open_store(str(path))
    _classes_store(store, shape=(64, 96))
    build(store, levels=3, executor="sync")
    arr = zarr.open_array(str(path), path="field", mode="r+")
    arr.attrs["flag_values"] = [0, 1, 2, 3, 4, 5]
    arr.attrs["flag_meanings"] = "nodata water forest cropland urban ice"
    with pytest.raises(PlanError, match=r"count the classes .*rebuild with --rebuild-from 2x"):
        build(store, levels=3, rebuild_from="4x", executor="sync")
    assert zarr.open_array(str(path), path="4x/field_class_count").shape[0] == 4  # kept


def test_the_verifier_checks_the_class_arrays_metadata():
    store = mem()
    _classes_store(store, shape=(40, 60))
    build(store, levels=2, executor="sync")
    assert verify(store, executor="sync").ok
    coord = zarr.open_array(store.zarr(), path="4x/field_class", mode="r+")
    coord[...] = np.array([1, 2, 4, 3], np.uint8)  # the labels no longer name the counts' order
    result = verify(store, executor="sync")
    assert ("4x", "metadata") in {(f.level, f.check) for f in result.failures}
    assert any(
        "field_class" in f.shard and "want [1, 2, 3, 4]" in f.detail for f in result.failures
    )
