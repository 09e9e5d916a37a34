"""Stores the way users write them: xarray-written sharded zarr v3 with a leading time dim, an
integer `_FillValue`, a CRS variable; level-0 shards that exist but hold only nodata."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.pyramid.oracle import reduce0
from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, open_datatree, open_level, plan, verify


def xarray_store(path, seed=0):
    """Land cover, 3 months, EPSG-style projected grid written by xarray with a 0 fill."""
    h, w = 90, 130
    rng = np.random.default_rng(seed)
    lab = rng.integers(1, 4, (3, h, w)).astype("uint8")
    lab[:, :30, :] = 0  # nodata band across the top
    lab[1, 40:50, 60:70] = 0  # one month has a hole the others do not
    ds = xr.Dataset(
        {
            "lc": (("time", "y", "x"), lab, {"grid_mapping": "crs", "long_name": "land cover"}),
            "crs": xr.DataArray(
                np.int32(0),
                attrs={"grid_mapping_name": "transverse_mercator", "crs_wkt": 'PROJCS["UTM 33N"]'},
            ),
        },
        coords={
            "time": np.array(["2020-01-01", "2020-02-01", "2020-03-01"], dtype="datetime64[ns]"),
            "y": 5_000_000 - (np.arange(h) + 0.5) * 10.0,
            "x": 500_000 + (np.arange(w) + 0.5) * 10.0,
        },
    )
    ds.to_zarr(
        str(path),
        zarr_format=3,
        mode="w",
        consolidated=False,
        encoding={"lc": {"chunks": (1, 16, 16), "shards": (1, 32, 32), "_FillValue": 0}},
    )
    return lab


@pytest.mark.parametrize("method", ["mode", "max"])
def test_xarray_written_time_series_reads_back_alike_at_every_level(tmp_path, method):
    path = tmp_path / "lc.zarr"
    lab = xarray_store(path)
    build(str(path), method=method, levels=3, executor="sync")
    assert verify(str(path), executor="sync").ok
    base = xr.open_zarr(str(path), consolidated=False)
    assert base["lc"].dtype.kind == "f"  # xarray masks level 0 with its _FillValue ...
    for k in (1, 2, 3):
        f = 2**k
        ds = xr.open_zarr(str(path), group=f"{f}x", consolidated=False)
        da = ds["lc"]
        assert da.dims == ("time", "y", "x") and ds.sizes["time"] == 3
        assert da.dtype.kind == "f", "the level lost _FillValue: xarray shows nodata as class 0"
        np.testing.assert_array_equal(ds["time"].values, base["time"].values)
        assert ds["crs"].attrs["crs_wkt"] == 'PROJCS["UTM 33N"]'
        np.testing.assert_allclose(np.diff(ds["y"].values), -10.0 * f)
        for t in range(3):
            want, want_count = reduce0(lab[t][None], 0, method, f, 0, np.uint8)
            got = np.nan_to_num(da.isel(time=t).values, nan=0).astype(np.uint8)
            np.testing.assert_array_equal(got, want[0])
            np.testing.assert_array_equal(ds["lc_count"].isel(time=t).values, want_count)


def test_float_mean_of_integers_drops_the_integer_fill(tmp_path):
    path = tmp_path / "lc.zarr"
    xarray_store(path)
    build(str(path), method="mean", levels=1, executor="sync")  # an integer: it must say
    attrs = json.loads((path / "2x" / "lc" / "zarr.json").read_text())["attributes"]
    assert "_FillValue" not in attrs  # NaN is the nodata of a float mean, not 0
    da = xr.open_zarr(str(path), group="2x", consolidated=False)["lc"]
    assert da.dtype == np.float32 and np.isnan(da.values[:, :15, :]).all()


def test_present_but_all_nodata_shards_are_still_written(tmp_path):
    """Writers that keep empty chunks leave all-nodata shards: their tasks must write objects."""
    store = storage.open_store(str(tmp_path / "s.zarr"))
    info = synthetic.write_store(store, shape=(64, 96), shards=(16, 16))
    arr = zarr.open_array(
        store.zarr(), path="field", mode="r+", config={"write_empty_chunks": True}
    )
    values = info["values"].copy()
    values[:32, :] = np.nan  # the top half is ocean, but every shard object exists
    arr[...] = values
    p = plan(store, levels=2, max_shard=16)
    present = {k for k in storage.list_keys(store, "field/c/")}
    assert len(present) == 4 * 6  # nothing pruned: the listing says every shard is there
    empty = [t for t in p.level("2x").tasks if t.index[0] == 0]
    assert empty
    build(store, levels=2, max_shard=16, executor="sync")
    keys = set(storage.list_keys(store, "2x/"))
    for t in empty:
        assert t.data_key in keys and t.count_key in keys
        data = zarr.open_array(store.zarr(), path="2x/field", mode="r")[:16, :]
        assert np.isnan(data).all()
    assert verify(store, executor="sync").ok


def test_open_datatree_reads_every_level():
    store = storage.open_store(f"memory://{uuid.uuid4().hex}")
    synthetic.write_store(store, shape=(64, 96), shards=(16, 16))
    build(store, levels=3, executor="sync")
    with pytest.raises(ValueError, match="not aligned"):  # why the helper exists
        xr.open_datatree(store.zarr(read_only=True), engine="zarr", consolidated=False)
    tree = open_datatree(store, chunks=None)  # numpy-backed: memory:// stays in this process
    assert list(tree.children) == ["1x", "2x", "4x", "8x"]
    assert "multiscales" in tree.attrs
    for name, (h, w) in zip(
        ["1x", "2x", "4x", "8x"], [(64, 96), (32, 48), (16, 24), (8, 12)], strict=True
    ):
        assert tree[name]["field"].shape == (h, w)
        assert np.isfinite(tree[name]["field"].values).any()
    assert open_level(store, "4x", chunks=None)["field_count"].dtype == np.uint32
