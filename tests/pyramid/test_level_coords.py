"""Every level keeps level 0's non-spatial coordinates (issue 50, item 4): a forecast's 2-D
`valid_time` over init_time x lead_time, a `forecast_period` over lead_time, a scalar `height`,
a `level` axis. Built by the real CLI for a store xarray wrote and for a virtual GRIB repo; the
oracle is xarray's own decoding of level 0: each level's coordinate equals it (values, attrs)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app

SYNC = ("--executor", "sync")
SPATIAL = {"y", "x", "latitude", "longitude"}


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def forecast_store(path) -> xr.Dataset:
    """t(init_time, lead_time, y, x) with the coordinates a forecast carries."""
    init = np.array(["2025-08-01T00", "2025-08-01T06", "2025-08-01T12"], dtype="datetime64[ns]")
    lead = np.array([0, 3, 6], dtype="timedelta64[h]").astype("timedelta64[ns]")
    y, x = 50 - 0.25 * np.arange(40), 250 + 0.25 * np.arange(56)
    rng = np.random.default_rng(0)
    t = rng.normal(280, 3, (3, 3, 40, 56)).astype("float32")
    t[..., :5, :7] = np.nan
    ds = xr.Dataset(
        {"t": (("init_time", "lead_time", "y", "x"), t, {"units": "K"})},
        coords={
            "init_time": init,
            "lead_time": lead,
            "y": y,
            "x": x,
            "valid_time": (
                ("init_time", "lead_time"),
                init[:, None] + lead[None, :],
                {"long_name": "valid time"},
            ),
            "forecast_period": ("lead_time", [0.0, 3.0, 6.0], {"units": "hours"}),
            "height": ((), 2.0, {"units": "m", "standard_name": "height"}),
        },
    )
    ds["t"].encoding["chunks"] = (1, 1, 16, 16)
    ds.to_zarr(path, zarr_format=3, mode="w", consolidated=False)
    return ds


def nonspatial(ds: xr.Dataset) -> list[str]:
    return [
        str(n) for n, c in ds.coords.items() if not SPATIAL & set(c.dims) and n != "spatial_ref"
    ]


def same_coords(level0: xr.Dataset, level: xr.Dataset, group: str) -> None:
    names = nonspatial(level0)
    assert names, "level 0 has no non-spatial coordinate to carry"
    for name in names:
        assert name in level.coords, f"{group} lost {name}"
        assert level[name].variable.equals(level0[name].variable), (group, name)
        assert level[name].attrs == level0[name].attrs, (group, name)


def test_a_store_written_by_xarray_keeps_every_coordinate_at_every_level(tmp_path):
    store = tmp_path / "fc.zarr"
    forecast_store(store)
    code, out = cli("pyramid", "build", store, "--levels", "3", *SYNC)
    assert code == 0, out
    level0 = xr.open_zarr(store)
    assert {"valid_time", "forecast_period", "height"} <= set(nonspatial(level0))
    for group in ("2x", "4x", "8x"):
        same_coords(level0, xr.open_zarr(store, group=group), group)
    code, out = cli("pyramid", "verify", store, *SYNC)
    assert code == 0, out


def test_verify_names_a_level_without_level_0s_coordinate_and_build_restores_it(tmp_path):
    store = tmp_path / "fc.zarr"
    forecast_store(store)
    assert cli("pyramid", "build", store, "--levels", "2", *SYNC)[0] == 0
    shutil.rmtree(store / "4x" / "valid_time")
    code, out = cli("pyramid", "verify", store, *SYNC)
    assert code == 1, out
    assert "[metadata] level 4x valid_time: level 0's coordinate 'valid_time' is missing" in out
    code, out = cli("pyramid", "build", store, "--levels", "2", *SYNC)
    assert code == 0, out
    same_coords(xr.open_zarr(store), xr.open_zarr(store, group="4x"), "4x")
    assert cli("pyramid", "verify", store, *SYNC)[0] == 0


def test_the_levels_of_a_virtual_repo_keep_valid_time(gfs_repo):
    code, out = cli("pyramid", "build", gfs_repo, "-v", "temperature_2m", "--levels", "3", *SYNC)
    assert code == 0, out
    handle = R.open_repo(storage.open_store(str(gfs_repo)), fresh=True)
    main = R.readonly(handle).store
    level0 = xr.open_zarr(main, consolidated=False)
    assert "valid_time" in nonspatial(level0)
    for group in ("2x", "4x", "8x"):
        same_coords(level0, xr.open_zarr(main, group=group, consolidated=False), group)
    code, out = cli("pyramid", "verify", gfs_repo, *SYNC)
    assert code == 0, out
    # built again with nothing to do: the carried coordinates are not rewritten (no commit)
    head = R.snapshot_of(R.open_repo(storage.open_store(str(gfs_repo)), fresh=True))
    assert cli("pyramid", "build", gfs_repo, "-v", "temperature_2m", "--levels", "3", *SYNC)[0] == 0
    assert R.snapshot_of(R.open_repo(storage.open_store(str(gfs_repo)), fresh=True)) == head


def test_the_virtual_reader_gives_the_crs_variable_as_a_coordinate(gfs_repo):
    """`toolkit.virtual.open_dataset` (issue 50, item 1): rioxarray finds the CRS."""
    import rioxarray  # noqa: F401 - registers the .rio accessor

    from toolkit.virtual.reader import open_dataset

    ds = open_dataset(str(gfs_repo))
    assert "spatial_ref" in ds.coords and "spatial_ref" not in ds.data_vars
    assert ds["temperature_2m"].rio.crs is not None
    assert ds["temperature_2m"].rio.transform().a == pytest.approx(0.25)
