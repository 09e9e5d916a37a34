"""Real GRIB2 bytes end to end: NOAA's GFS-Wave file and its own `.idx`, laid out as the bucket
lays them out, ingested through a user dataset definition, read back with `open_dataset`; every
decoded array equals ecCodes' decode of the same message (an independent decoder), rounded to
the dataset's float32 as any float32 store of ecCodes' float64 values would be."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual import open_dataset
from toolkit.virtual.backfill import backfill
from toolkit.virtual.define import grib_forecast, variable
from toolkit.virtual.validate import validate
from toolkit.virtual.write import Job

eccodes = pytest.importorskip("eccodes")

DATA = Path(__file__).parents[1] / "data" / "grib"
NAME = "gfswave.t18z.atlocn.0p16.f001.grib2"
KEY = "gfs.{init:%Y%m%d}/{init:%H}/wave/gridded/gfswave.t{init:%H}z.atlocn.0p16.f{lead:03d}.grib2"
INIT = datetime(2023, 8, 23, 18)
SURFACE = {
    "wind_speed": "WIND",
    "wind_direction": "WDIR",
    "wind_u": "UGRD",
    "wind_v": "VGRD",
    "significant_height_combined": "HTSGW",
    "primary_wave_period": "PERPW",
    "primary_wave_direction": "DIRPW",
    "wind_wave_height": "WVHGT",
    "wind_wave_period": "WVPER",
    "wind_wave_direction": "WVDIR",
}
SWELL = {"swell_height": "SWELL", "swell_period": "SWPER", "swell_direction": "SWDIR"}


def ecc_fields() -> dict[tuple[str, str], tuple[np.ndarray, dict]]:
    """(element, level) -> (values with NaN where the bitmap masks, grid keys), by ecCodes."""
    index = (DATA / f"{NAME}.idx").read_text().splitlines()
    out = {}
    with open(DATA / NAME, "rb") as f:
        for line in index:
            _, _, _, element, level, *_ = line.split(":")
            h = eccodes.codes_grib_new_from_file(f)
            try:
                keys = {
                    k: eccodes.codes_get(h, k)
                    for k in ("Ni", "Nj", "latitudeOfFirstGridPointInDegrees",
                              "longitudeOfFirstGridPointInDegrees",
                              "latitudeOfLastGridPointInDegrees",
                              "longitudeOfLastGridPointInDegrees")
                }  # fmt: skip
                values = eccodes.codes_get_values(h).astype("float64")
                if eccodes.codes_get(h, "bitmapPresent"):
                    values[values == eccodes.codes_get(h, "missingValue")] = np.nan
                out[(element, level)] = (values.reshape(keys["Nj"], keys["Ni"]), keys)
            finally:
                eccodes.codes_release(h)
    return out


def wave_dataset(source: storage.Store, grid: dict):
    """What a user writes for NOAA's GFS-Wave Atlantic grid (`toolkit.virtual.define`)."""
    return grib_forecast(
        "gfswave-atlocn",
        source=source,
        key=KEY,
        variables=[
            *(variable(n, e, "surface") for n, e in SURFACE.items()),
            *(variable(n, e, "{level:g} in sequence", levels=[1, 2, 3]) for n, e in SWELL.items()),
        ],
        grid=grid,
        first_init=INIT,
        end=datetime(2023, 8, 24),
        every_hours=6,
        leads_hours=[1],
    )


def wave_job(tmp_path: Path) -> tuple[Job, dict]:
    """The GFS-Wave file and its .idx laid out as the bucket lays them out, the user's dataset
    over it, and ecCodes' decode of every message."""
    fields = ecc_fields()
    _, g = next(iter(fields.values()))
    grid = {  # as the messages scan: north to south, west to east
        "latitude": np.linspace(
            g["latitudeOfFirstGridPointInDegrees"], g["latitudeOfLastGridPointInDegrees"], g["Nj"]
        ),
        "longitude": np.linspace(
            g["longitudeOfFirstGridPointInDegrees"], g["longitudeOfLastGridPointInDegrees"], g["Ni"]
        ),
    }
    key = KEY.format(init=INIT, lead=1)
    (tmp_path / "src" / key).parent.mkdir(parents=True)
    shutil.copy(DATA / NAME, tmp_path / "src" / key)
    shutil.copy(DATA / f"{NAME}.idx", tmp_path / "src" / f"{key}.idx")
    src = storage.open_store(str(tmp_path / "src"))
    job = Job(wave_dataset(src, grid), R.RepoRef(storage.open_store(str(tmp_path / "repo"))))
    return job, fields


def test_the_gfs_wave_file_ingests_and_decodes_as_eccodes_does(tmp_path):
    job, fields = wave_job(tmp_path)
    report = backfill(job, start=np.datetime64(INIT, "ns"), workers=1, executor="sync")
    assert report.stage("commit").gate_have == 1
    checked = validate(job, start=np.datetime64(INIT, "ns"), sample=0)
    assert checked.ok, checked.failures

    ds = open_dataset(str(tmp_path / "repo")).isel(init_time=0, lead_time=0)
    compared = 0
    for name, element in SURFACE.items():
        want, _ = fields[(element, "surface")]
        np.testing.assert_array_equal(ds[name].values, want.astype("float32"), err_msg=name)
        compared += 1
    for name, element in SWELL.items():
        for level in (1, 2, 3):
            want, _ = fields[(element, f"{level} in sequence")]
            got = ds[name].sel(level=float(level)).values
            np.testing.assert_array_equal(got, want.astype("float32"), err_msg=f"{name} {level}")
            compared += 1
    assert compared == len(fields) == 19  # every message of the file
    assert np.isnan(want).any() and np.isfinite(want).any()  # land masked, sea decoded
