"""ECMWF's open data and files without a sidecar, end to end: archives written by ecCodes as
ECMWF writes them (tests/virtual/ecmwf_files.py), ingested through a user's definition with
each `index=` kind, read back with `open_dataset`; every value equals ecCodes' decode of the
same message, rounded to float32, and the kinds build the same dataset."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from tests.virtual import ecmwf_files as E
from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual import open_dataset
from toolkit.virtual.backfill import backfill
from toolkit.virtual.define import grib_forecast
from toolkit.virtual.sources.ecmwf import ecmwf_variable
from toolkit.virtual.write import Job

INITS = [datetime(2025, 3, 1, 0), datetime(2025, 3, 1, 12)]
STEPS = [0, 3, 6]
GRID = E.Grid(16, 9)
FIELDS = [
    E.Field("2t"),
    E.Field("10u"),
    E.Field("msl"),
    E.Field("tp"),
    E.Field("t", 850),
    E.Field("t", 500),
]
KEY = "{init:%Y%m%d}/{init:%H}z/ifs/0p25/oper/{init:%Y%m%d%H}0000-{lead}h-oper-fc.grib2"
NAMES = {
    "2t": "temperature_2m",
    "10u": "wind_u_10m",
    "msl": "pressure_reduced_to_mean_sea_level",
    "tp": "precipitation_surface",
}


def archive(root: Path, *, sidecar: bool = True) -> dict:
    """The archive on local disk, and ecCodes' decode of each of its files."""
    truth = {}
    for init in INITS:
        for step in STEPS:
            path = E.write(
                root, KEY.format(init=init, lead=step), FIELDS, init, step, GRID, sidecar=sidecar
            )
            for (name, level, _), v in E.decoded(path).items():
                truth[(name, level, init, step)] = v
    return truth


def dataset(source: storage.Store, index: str):
    """What a user writes for ECMWF-style files, whichever way their messages are found."""
    return grib_forecast(
        "my-ecmwf",
        source=source,
        key=KEY,
        variables=[
            *(ecmwf_variable(NAMES[s], s) for s in ("2t", "10u", "msl", "tp")),
            ecmwf_variable("temperature", "t", levels=(500, 850)),
        ],
        grid={"latitude": GRID.latitude, "longitude": GRID.longitude},
        first_init=INITS[0],
        end=datetime(2025, 3, 2),
        every_hours=12,
        leads_hours=STEPS,
        index=index,
    )


def ingest(tmp_path: Path, index: str, source: Path) -> object:
    repo = tmp_path / f"repo-{index}"
    ds = dataset(storage.open_store(str(source)), index)
    job = Job(ds, R.RepoRef(storage.open_store(str(repo))))
    report = backfill(
        job,
        start=np.datetime64(INITS[0], "ns"),
        end=np.datetime64(datetime(2025, 3, 2), "ns"),
        executor="sync",
    )
    assert report.stage("ingest").written == len(INITS) * len(STEPS)
    return open_dataset(str(repo))


def check_against_eccodes(ds, truth: dict) -> int:
    compared = 0
    for (name, level, init, step), want in truth.items():
        at = {"init_time": np.datetime64(init, "ns"), "lead_time": np.timedelta64(step, "h")}
        got = ds[NAMES.get(name, "temperature")].sel(at)
        if level is not None:
            got = got.sel(level=float(level))
        np.testing.assert_array_equal(
            got.values, want.astype("float32"), err_msg=f"{name} {level} {init} {step}"
        )
        compared += 1
    return compared


@pytest.mark.parametrize("index", ["ecmwf", "scan"])
def test_each_kind_decodes_every_message_as_eccodes_does(tmp_path, index):
    src = tmp_path / "src"
    truth = archive(src, sidecar=index == "ecmwf")
    ds = ingest(tmp_path, index, src)
    assert check_against_eccodes(ds, truth) == len(INITS) * len(STEPS) * len(FIELDS)
    tp = ds["precipitation_surface"].sel(lead_time=np.timedelta64(0, "h"))
    assert (tp.values == 0).all()  # ECMWF's step-0 accumulation is read as zeros, not absent
    assert (
        ds["temperature_2m"].attrs["short_name"] == "2t"
        and ds["temperature_2m"].attrs["units"] == "K"
    )
    assert ds["precipitation_surface"].attrs["units"] == "m"
    np.testing.assert_array_equal(ds.longitude.values, GRID.longitude)


def test_the_same_files_with_and_without_their_sidecar_make_the_same_dataset(tmp_path):
    src = tmp_path / "src"
    archive(src)
    with_index = ingest(tmp_path, "ecmwf", src)
    for index_file in src.rglob("*.index"):
        index_file.unlink()
    scanned = ingest(tmp_path, "scan", src)
    for name in with_index.data_vars:
        np.testing.assert_array_equal(with_index[name].values, scanned[name].values, err_msg=name)


def test_single_message_objects_through_whole(tmp_path):
    """One field per object, as ECCC and DWD publish theirs: `index="whole"`."""
    src, shorts = tmp_path / "src", ("2t", "10u", "msl", "tp")
    key = "{init:%Y%m%d%H}/{file_type}/{lead:03d}.grib2"
    truth = {}
    for init in INITS:
        for step in STEPS:
            for s in shorts:
                path = E.write(
                    src,
                    key.format(init=init, file_type=s, lead=step),
                    [E.Field(s)],
                    init,
                    step,
                    GRID,
                    sidecar=False,
                )
                (((name, level, _), v),) = E.decoded(path).items()
                truth[(name, level, init, step)] = v
    ds = grib_forecast(
        "my-single-fields",
        source=storage.open_store(str(src)),
        key=key,
        variables=[ecmwf_variable(NAMES[s], s, file_type=s) for s in shorts],
        grid={"latitude": GRID.latitude, "longitude": GRID.longitude},
        first_init=INITS[0], end=datetime(2025, 3, 2), every_hours=12, leads_hours=STEPS,
        file_types=shorts, index="whole",
    )  # fmt: skip
    job = Job(ds, R.RepoRef(storage.open_store(str(tmp_path / "repo"))))
    report = backfill(job, start=np.datetime64(INITS[0], "ns"), executor="sync")
    assert report.stage("ingest").written == len(INITS) * len(STEPS) * len(shorts)
    assert check_against_eccodes(open_dataset(str(tmp_path / "repo")), truth) == len(truth) == 24


@pytest.mark.parametrize("change", ["a message removed", "the last message re-encoded"])
def test_a_sidecar_that_no_longer_describes_its_file_drops_the_file(tmp_path, change):
    """A file re-uploaded with other contents under its old `.index`: refused whole, named."""
    src = tmp_path / "src"
    archive(src)
    key = KEY.format(init=INITS[1], lead=3)
    path = src / key
    if change == "a message removed":  # every later offset moves
        E.write(
            src, key, [f for f in FIELDS if f.short_name != "10u"], INITS[1], 3, GRID, sidecar=False
        )
    else:  # the same offsets, the last message's length not the one the sidecar lists
        body = b"".join(E.message(f, INITS[1], 3, GRID) for f in FIELDS[:-1])
        path.write_bytes(body + E.message(FIELDS[-1], INITS[1], 3, GRID, packing="grid_simple"))
    repo = tmp_path / "repo"
    job = Job(
        dataset(storage.open_store(str(src)), "ecmwf"), R.RepoRef(storage.open_store(str(repo)))
    )
    report = backfill(job, start=np.datetime64(INITS[0], "ns"), executor="sync")
    assert report.stage("ingest").written == len(INITS) * len(STEPS) - 1
    ((url, reason),) = report.stage("commit").excused
    assert url.endswith(key) and "StaleIndexError" in reason, reason
    ds = open_dataset(str(repo))
    at = {"init_time": np.datetime64(INITS[1], "ns"), "lead_time": np.timedelta64(3, "h")}
    assert np.isnan(ds["temperature_2m"].sel(at)).all()
