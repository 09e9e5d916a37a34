"""What the map is tested on: a global 0.25-degree store as xarray writes it (CF packing and
_FillValue, a class variable with flag_meanings), with its pyramid built by the toolkit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import toolkit.pyramid

RES = 0.25
H, W = int(180 / RES), int(360 / RES)
TIMES = np.array(["2025-08-01T00", "2025-08-02T00"], dtype="datetime64[ns]")
CLASSES = {1: "water", 2: "forest", 3: "grass", 4: "desert"}


def cf_dataset() -> xr.Dataset:
    lat = 90 - (np.arange(H) + 0.5) * RES
    lon = -180 + (np.arange(W) + 0.5) * RES
    la, lo = np.meshgrid(np.radians(lat), np.radians(lon), indexing="ij")
    base = 273.15 + 30 * np.cos(la) + 5 * np.sin(3 * lo)
    temp = np.stack([base + 4 * i for i in range(len(TIMES))]).astype("float32")
    temp[:, 280:360, 720:880] = np.nan  # a hole: nodata, transparent on the map
    temp[:, -40:, :] = np.nan  # no data south of 80S
    cls = (1 + (np.floor(lo * 2) % 4)).astype("uint8")
    cls[:120, :] = 0  # unclassified in the north: the fill
    t_attrs = {"units": "K", "long_name": "air temperature", "standard_name": "air_temperature"}
    c_attrs = {
        "long_name": "land cover",
        "flag_values": np.array(list(CLASSES), "uint8"),
        "flag_meanings": " ".join(CLASSES.values()),
    }
    ds = xr.Dataset(
        {
            "temperature": (("time", "lat", "lon"), temp, t_attrs),
            "cover": (("lat", "lon"), cls, c_attrs),
        },
        coords={
            "time": TIMES,
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
        attrs={"title": "a global test field"},
    )
    return ds


ENCODING = {
    "temperature": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15,
                    "_FillValue": -32768, "chunks": (1, 360, 360)},
    "cover": {"_FillValue": 0, "chunks": (360, 360)},
}  # fmt: skip


@pytest.fixture(scope="session")
def cf_pyramid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store (a path with a space and a non-ASCII letter) and its levels 2x, 4x, 8x."""
    path = tmp_path_factory.mktemp("serve") / "champ global.zarr"
    cf_dataset()[["temperature"]].to_zarr(
        path, zarr_format=3, mode="w", encoding={"temperature": ENCODING["temperature"]},
        consolidated=False,
    )  # fmt: skip
    toolkit.pyramid.build(str(path), levels=3, executor="sync")
    return path


@pytest.fixture(scope="session")
def classes_pyramid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The class variable alone (its levels are modes), levels 2x and 4x."""
    path = tmp_path_factory.mktemp("serve") / "cover.zarr"
    cf_dataset()[["cover"]].to_zarr(
        path, zarr_format=3, mode="w", encoding={"cover": ENCODING["cover"]}, consolidated=False
    )
    toolkit.pyramid.build(str(path), levels=2, executor="sync")
    return path


FIRE = np.datetime64("2025-08-01T18", "ns")


def forecast_repo(root: Path):
    """A simulated GFS archive (real GRIB2 by ecCodes): its first two init times backfilled
    into a virtual repo with temperature_2m levels 2x and 4x built inside; returns the
    archive, its files and the job, so a test can publish the rest and run the fire."""
    from tests.virtual.test_backfill import START, sim
    from toolkit import storage
    from toolkit.virtual.backfill import backfill

    archive, files, job = sim(
        storage.open_store(str(root / "src")), storage.open_store(str(root / "repo")), publish=6
    )
    backfill(job, start=START, workers=1, executor="sync")
    toolkit.pyramid.build(str(root / "repo"), ["temperature_2m"], levels=2, executor="sync")
    return archive, files, job


@pytest.fixture(scope="session")
def forecast(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo of `forecast_repo`, read-only for the tests that share it."""
    root = tmp_path_factory.mktemp("forecast")
    forecast_repo(root)
    return root / "repo"
