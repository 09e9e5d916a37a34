"""End to end: every level equals the reducer applied directly to its level-0 window."""

from __future__ import annotations

import json
import pickle
import uuid

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.pyramid.oracle import reduce0
from toolkit import storage
from toolkit.examples import synthetic
from toolkit.plan import IncompleteStageError
from toolkit.pyramid import build, plan
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.source import read_source
from toolkit.pyramid.store_build import pyramid_stages


def mem() -> storage.Store:
    return storage.open_store(f"memory://{uuid.uuid4().hex}")


def level(store: storage.Store, group: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    z = store.zarr(read_only=True)
    data = zarr.open_array(z, path=f"{group}/{name}", mode="r")[...]
    count = zarr.open_array(z, path=f"{group}/{name}_count", mode="r")[...]
    return data, count


def check_levels(store, info, method, n_levels, band=False):
    values = info["values"] if band else info["values"][np.newaxis]
    for k in range(1, n_levels + 1):
        data, count = level(store, f"{2**k}x", info["name"])
        data = data if band else data[np.newaxis]
        nodata = np.nan if data.dtype.kind == "f" else info["fill"]
        want, want_count = reduce0(values, info["fill"], method, 2**k, nodata, data.dtype)
        assert data.shape == want.shape  # ceil-halved, edges kept
        assert np.array_equal(count, want_count), f"count differs at {2**k}x"
        if method == "mean":
            np.testing.assert_allclose(data, want, rtol=2e-6, err_msg=f"{2**k}x")
            assert np.array_equal(np.isnan(data), np.isnan(want))
        else:
            assert np.array_equal(data, want, equal_nan=data.dtype.kind == "f"), f"{2**k}x"


def test_sparse_mean_matches_oracle_at_every_level():
    store = mem()
    info = synthetic.write_store(store, shape=(301, 517), shards=(32, 32), chunks=(16, 16))
    p = plan(store, levels=4)
    listed = {k for k in storage.list_keys(store, "field/") if not k.endswith("zarr.json")}
    grid = 10 * 17
    assert 0.4 <= 1 - len(listed) / grid <= 0.6  # 40-60% of the shards are absent
    assert len(p.levels[0].tasks) < p.naive[0]  # pruned from the listing, not read
    report = build(store, levels=4, executor="sync")
    for lvl in p.levels:
        s = report.stage(lvl.group)
        assert s.gate_have == s.gate_want == 2 * len(lvl.tasks)
    check_levels(store, info, "mean", 4)
    # pruned shards are absent, every planned shard exists even where all-nodata
    keys = set(storage.list_keys(store, "2x/field/"))
    assert {t.data_key for t in p.levels[0].tasks} <= keys
    assert len([k for k in keys if not k.endswith("zarr.json")]) == len(p.levels[0].tasks)


@pytest.mark.parametrize("method", ["min", "max", "sum"])
def test_min_max_sum_exact(method):
    store = mem()
    info = synthetic.write_store(store, shape=(97, 131), shards=(16, 16), seed=3)
    build(store, method=method, levels=3, executor="sync")
    if method == "sum":  # the oracle sums in float64 too; compare within rounding
        for k in (1, 2, 3):
            data, count = level(store, f"{2**k}x", "field")
            want, wc = reduce0(info["values"][None], np.nan, "sum", 2**k, np.nan, np.float64)
            np.testing.assert_allclose(data, want[0], rtol=1e-12)
            assert np.array_equal(count, wc)
    else:
        check_levels(store, info, method, 3)


def test_multiband_joint_mask():
    store = mem()
    info = synthetic.write_store(store, kind="bands", shape=(75, 99), shards=(16, 16), seed=1)
    build(store, band_dim="band", levels=3, executor="sync")
    check_levels(store, info, "mean", 3, band=True)
    data, count = level(store, "2x", "field")
    assert data.shape[0] == 3 and count.shape == data.shape[1:]
    # joint mask: every band is nodata exactly where the count is 0
    for b in range(3):
        assert np.array_equal(np.isnan(data[b]), count == 0)
    # sums to one survives (the simplex invariant the joint mask protects)
    ok = count > 0
    np.testing.assert_allclose(data[:, ok].sum(axis=0), 1.0, rtol=1e-5)


def test_categorical_mode_is_mode_of_level0_not_of_modes():
    store = mem()
    info = synthetic.write_store(store, kind="categorical", shape=(67, 93), shards=(16, 16), seed=2)
    build(store, method="mode", levels=3, executor="sync")
    check_levels(store, info, "mode", 3)
    assert zarr.open_array(store.zarr(), path="4x/field").dtype == np.uint8


def test_odd_shapes_ceil_halved_and_dot_encoding():
    store = mem()
    synthetic.write_store(store, shape=(33, 65), shards=(8, 8), key_separator=".")
    p = plan(store, levels=5)
    assert [lvl.shape for lvl in p.levels] == [(17, 33), (9, 17), (5, 9), (3, 5), (2, 3)]
    build(store, levels=5, executor="sync")
    assert any(k.startswith("2x/field/c.") for k in storage.list_keys(store, "2x/"))


def test_consolidated_refreshed_and_levels_open_standalone(tmp_path):
    store = storage.open_store(str(tmp_path / "s"))
    synthetic.write_store(store, shape=(64, 96), shards=(16, 16), consolidated=True)
    build(store, levels=2, executor="sync")
    root = json.loads(storage.get(store, "zarr.json").data)
    meta = root["consolidated_metadata"]["metadata"]
    assert "2x/field" in meta and "4x/field_count" in meta
    # level 0 is the root, so datatree's parent/child alignment rule refuses the layout;
    # open_groups reads every level as its own dataset
    groups = xr.open_groups(str(tmp_path / "s"), engine="zarr")
    assert groups["/4x"]["field"].shape == (16, 24)
    assert groups["/"]["field"].shape == (64, 96)
    ds = xr.open_zarr(str(tmp_path / "s"), group="2x")
    assert ds["field"].attrs["grid_mapping"] == "spatial_ref"
    assert "spatial_ref" in ds.variables
    np.testing.assert_allclose(np.diff(ds["lat"].values), -180 / 32)


def test_the_root_is_consolidated_and_registers_both_conventions(tmp_path):
    store = mem()
    synthetic.write_store(store, shape=(40, 40), shards=(16, 16))
    build(store, levels=1, executor="sync")
    root = json.loads(storage.get(store, "zarr.json").data)
    meta = root["consolidated_metadata"]["metadata"]
    assert {"2x", "2x/field", "2x/field_count", "field"} <= set(meta)  # one request: all
    ms = root["attributes"]["multiscales"]
    assert [x["asset"] for x in ms["layout"]] == [".", "2x"]
    assert [c["uuid"] for c in root["attributes"]["zarr_conventions"]] == [
        "d35379db-88df-4056-af3a-620245f8e347",  # multiscales
        "689b58e2-cf7b-45e0-9fff-9cfc0883d6b4",  # spatial (the layout's spatial:* keys)
    ]


def test_every_level_opens_with_xarray_in_one_line_without_a_warning(tmp_path):
    import warnings

    import xarray as xr

    path = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    build(str(path), levels=2, executor="sync")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        base = xr.open_zarr(str(path))
        for group in ("2x", "4x"):
            level = xr.open_zarr(str(path), group=group)
            assert list(level.data_vars) == ["field"]
            assert "field_count" in level.coords  # the count plane: a coordinate
            assert "spatial_ref" in level["field"].coords  # the CRS too: rioxarray reads it
            assert level["field_count"].dims == ("lat", "lon")
    assert list(base.data_vars) == ["field", "spatial_ref"]


def test_layout_scale_is_relative_to_derived_from():
    """The convention defines `transform.scale` from the `derived_from` level to this one."""
    store = mem()
    synthetic.write_store(store, shape=(64, 64), shards=(16, 16))
    build(store, levels=3, executor="sync")
    layout = json.loads(storage.get(store, "zarr.json").data)["attributes"]["multiscales"]["layout"]
    chain = [(x["asset"], x.get("derived_from"), x["transform"]["scale"]) for x in layout]
    assert chain == [
        (".", None, [1.0, 1.0]),
        ("2x", ".", [2.0, 2.0]),
        ("4x", "2x", [2.0, 2.0]),
        ("8x", "4x", [2.0, 2.0]),
    ]


def test_resume_skips_existing_and_rebuild_from_replaces():
    store = mem()
    synthetic.write_store(store, shape=(64, 64), shards=(16, 16))
    first = build(store, levels=2, executor="sync")
    again = build(store, levels=2, executor="sync")
    assert again.stage("2x").written == 0 and again.stage("2x").skipped == first.stage("2x").written
    victim = sorted(k for k in storage.list_keys(store, "2x/field/") if "/c/" in k)[0]
    storage.delete(store, victim)
    resumed = build(store, levels=2, executor="sync")
    assert resumed.stage("2x").written == 1
    rebuilt = build(store, levels=2, executor="sync", rebuild_from="4x")
    assert rebuilt.stage("4x").written == first.stage("4x").written
    with pytest.raises(KeyError):
        rebuilt.stage("2x")


def test_rebuild_on_partial_parent_refused_with_have_want():
    store = mem()
    synthetic.write_store(store, shape=(64, 64), shards=(16, 16))
    build(store, levels=2, executor="sync")
    victim = sorted(k for k in storage.list_keys(store, "2x/field/") if "/c/" in k)[0]
    storage.delete(store, victim)
    with pytest.raises(IncompleteStageError, match=r"have \d+/\d+"):
        build(store, levels=2, executor="sync", rebuild_from="4x")


def test_changed_settings_refused():
    store = mem()
    synthetic.write_store(store, shape=(40, 40), shards=(16, 16))
    build(store, levels=1, executor="sync")
    with pytest.raises(PlanError, match="--rebuild-from 2x"):
        build(store, levels=1, method="max", executor="sync")


def test_bad_inputs_named():
    store = mem()
    synthetic.write_store(store, shape=(40, 40), shards=(16, 16))
    with pytest.raises(PlanError, match="variable 'nope'"):
        plan(store, variables=["nope"])
    with pytest.raises(PlanError, match="mode is for categorical integers"):
        plan(store, method="mode")
    with pytest.raises(PlanError, match="nearest is not offered"):
        plan(store, method="nearest")
    with pytest.raises(PlanError, match="--band-dim 'band'"):
        plan(store, band_dim="band")


def test_a_level_service_opens_each_array_once_and_travels_without_them(tmp_path):
    """The shard writer keeps the arrays it opened for its next shard (each open is a metadata
    GET and zarr's parsing), and a copy sent to a worker carries none: they are one run's."""
    store = storage.open_store(str(tmp_path / "a store"))
    info = synthetic.write_store(store, shape=(64, 96), shards=(16, 16))
    build(store, levels=2, executor="sync")
    stage = pyramid_stages(read_source(store), plan(store, levels=2)).stages[0]
    service = stage.service
    service(stage.tasks[0])
    kept = dict(service.arrays)
    assert set(kept) == {("field", False), ("2x/field", True), ("2x/field_count", True)}
    service(stage.tasks[1])
    assert service.arrays.keys() == kept.keys()
    assert all(service.arrays[k] is kept[k] for k in kept)  # not opened again
    travelled = pickle.loads(pickle.dumps(service))
    assert travelled.arrays == {}
    travelled(stage.tasks[0])  # opens its own
    assert set(travelled.arrays) == set(kept)
    check_levels(store, info, "mean", 2)  # the shards written again are the same
