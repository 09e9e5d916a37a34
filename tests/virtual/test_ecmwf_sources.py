"""ECMWF's open data and files without a sidecar, end to end: archives written by ecCodes as
ECMWF writes them (tests/virtual/ecmwf_files.py), ingested through a user's definition with
each `index=` kind, read back with `open_dataset`; every value equals ecCodes' decode of the
same message, rounded to float32, and the kinds build the same dataset."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.virtual import ecmwf_files as E
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
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
runner = CliRunner()
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


SINGLE = "{init:%Y%m%d%H}/{file_type}/{lead:03d}.grib2"  # one object per field


def single_fields(root: Path, shorts: tuple[str, ...]) -> dict:
    """One object per field at `SINGLE`, and ecCodes' decode of each."""
    truth = {}
    for init in INITS:
        for step in STEPS:
            for s in shorts:
                key = SINGLE.format(init=init, file_type=s, lead=step)
                path = E.write(root, key, [E.Field(s)], init, step, GRID, sidecar=False)
                (((name, level, _), v),) = E.decoded(path).items()
                truth[(name, level, init, step)] = v
    return truth


def dataset(source: storage.Store, index: str, discovery: str = "list"):
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
        discovery=discovery,
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


def test_an_http_source_that_cannot_be_listed_is_probed_and_read_over_http(tmp_path):
    """A provider's web server (no listing, ranged GETs): `discovery="probe"` finds the files
    with HEAD requests, the refs point at https-style URLs, and readers decode them through
    Icechunk's HTTP container, as ecCodes decodes the same messages."""
    from tests.httpfiles import FileSite

    truth = archive(tmp_path / "site" / "ecmwf")
    repo = tmp_path / "repo"
    with FileSite(tmp_path / "site") as site:
        source = storage.open_store(f"{site.url}/ecmwf")
        job = Job(dataset(source, "ecmwf", "probe"), R.RepoRef(storage.open_store(str(repo))))
        report = backfill(job, start=np.datetime64(INITS[0], "ns"), executor="sync")
        assert report.stage("ingest").written == len(INITS) * len(STEPS)
        files = len(INITS) * len(STEPS)
        assert site.seen["HEAD"] >= 2 * files  # each file and its sidecar, asked for by name
        ds = open_dataset(str(repo))
        assert check_against_eccodes(ds, truth) == len(truth)
        locations = R.virtual_locations(
            R.readonly(R.open_repo(storage.open_store(str(repo))), "main")
        )
        assert locations and all(u.startswith(f"{site.url}/ecmwf/") for u in locations)
    assert set(site.seen) <= {"HEAD", "GET"}  # nothing but reads: no listing was asked for


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
    truth = single_fields(src, shorts)
    ds = grib_forecast(
        "my-single-fields",
        source=storage.open_store(str(src)),
        key=SINGLE,
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


DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-dataset.md"
BY_NAME = {  # the docs' variable names -> the shortName ecCodes reads
    "temperature_2m": "2t", "wind_u_10m": "10u", "pressure_reduced_to_mean_sea_level": "msl",
    "precipitation_surface": "tp", "temperature": "t", "field_2t": "2t", "field_10u": "10u",
    "field_msl": "msl",
}  # fmt: skip


def doc_examples() -> list[str]:
    """The Python blocks of the doc's "Sources beyond NOAA's sidecars" section, as written."""
    section = DOC.read_text().split("## Sources beyond NOAA's sidecars", 1)[1]
    section = section.split("### ECMWF open data", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_docs_dataset_for_a_web_source_probes_and_reads_over_http(tmp_path):
    """The docs' probing example, its `source` pointed at a local web server (`--source`)."""
    code = doc_examples()[3]
    assert 'discovery="probe"' in code and 'source="https://' in code
    truth = {k: v for k, v in archive(tmp_path / "site" / "f").items() if k[0] in ("2t", "10u")}
    with backfilled_from_a_site(tmp_path, code, "f") as (repo, site):
        assert check_against_eccodes(open_dataset(str(repo)), truth) == len(truth) == 12
    assert set(site.seen) <= {"HEAD", "GET"}


@contextmanager
def backfilled_from_a_site(tmp_path: Path, code: str, folder: str) -> Iterator[tuple[Path, Any]]:
    """`virtual backfill` of a doc's dataset module with `--source` a local web server (GET and
    HEAD only) serving tmp_path/site/folder; yields the repo and the server, still serving its
    chunks to readers."""
    from tests.httpfiles import FileSite

    module = tmp_path / "doc_module.py"
    module.write_text(code)
    repo = tmp_path / "repo"
    with FileSite(tmp_path / "site") as site:
        res = runner.invoke(
            app,
            ["virtual", "backfill", f"{module}:DATASET", "--repo", str(repo), "--source",
             f"{site.url}/{folder}", "--start", "2025-03-01T00", "--executor", "sync", "--json"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        yield repo, site


@pytest.mark.parametrize("which", range(3), ids=["ecmwf", "scan", "whole"])
def test_the_docs_dataset_for_each_index_kind_runs_from_the_cli(tmp_path, which):
    code = doc_examples()[which]
    kind = re.search(r'index="(\w+)"', code).group(1)
    assert kind == ["ecmwf", "scan", "whole"][which]
    module = tmp_path / f"doc_{kind}.py"
    module.write_text(code)
    src = tmp_path / "src"
    truth = {}
    if kind == "whole":  # one object per field, keyed by its file type
        truth = single_fields(src, ("2t", "10u", "msl"))
    else:
        truth = archive(src, sidecar=kind == "ecmwf")
    repo = tmp_path / "repo"
    res = runner.invoke(
        app,
        ["virtual", "backfill", f"{module}:DATASET", "--repo", str(repo), "--source", str(src),
         "--start", "2025-03-01T00", "--executor", "sync", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    ds = open_dataset(str(repo))
    compared = 0
    for var in ds.data_vars:
        if not ds[var].dims:
            continue
        short = BY_NAME[var]
        for (name, level, init, step), want in truth.items():
            if name != short:
                continue
            got = ds[var].sel(
                init_time=np.datetime64(init, "ns"), lead_time=np.timedelta64(step, "h")
            )
            if level is not None:
                got = got.sel(level=float(level))
            np.testing.assert_array_equal(
                got.values, want.astype("float32"), err_msg=f"{var} {step}"
            )
            compared += 1
    assert compared == len(truth), (compared, len(truth))


def test_ecmwf_ifs_oper_reads_a_mirror_holding_some_steps(tmp_path):
    """The built-in dataset over a mirror with ECMWF's layout, at ECMWF's full grid, holding
    steps 0 and 3 of one cycle: `--allow-empty-positions` takes what is there; every value,
    and the grid ecCodes' point iterator gives, as ecCodes reads them."""
    from toolkit.virtual.sources.ecmwf import PRESSURE_LEVELS, IfsOper

    init, grid, src = datetime(2025, 1, 1, 12), E.Grid(1440, 721), tmp_path / "mirror"
    fields = [E.Field(s) for s in ("2t", "10u", "10v", "msl", "tp")]
    fields += [E.Field("t", lv) for lv in PRESSURE_LEVELS]
    truth = {}
    for step in (0, 3):
        path = E.write(src, IfsOper().data_key(init, step, "oper-fc"), fields, init, step, grid)
        truth.update({(n, lv, step): v for (n, lv, _), v in E.decoded(path).items()})
    lons, lats = E.lonlat(path)
    repo = tmp_path / "repo"
    res = runner.invoke(
        app,
        ["virtual", "backfill", "ecmwf-ifs-oper", "--repo", str(repo), "--source", str(src),
         "--start", "2025-01-01T12", "--end", "2025-01-02T00", "--allow-empty-positions",
         "--executor", "sync", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    ds = open_dataset(str(repo)).sel(init_time=np.datetime64(init, "ns"))
    np.testing.assert_array_equal(ds.longitude.values, lons)  # -180 .. 179.75
    np.testing.assert_array_equal(ds.latitude.values, lats)  # 90 .. -90
    names = {"2t": "temperature_2m", "10u": "wind_u_10m", "10v": "wind_v_10m",
             "msl": "pressure_reduced_to_mean_sea_level", "tp": "precipitation_surface"}  # fmt: skip
    for (name, level, step), want in truth.items():
        got = ds[names.get(name, "temperature")].sel(lead_time=np.timedelta64(step, "h"))
        if level is not None:
            got = got.sel(level=float(level))
        np.testing.assert_array_equal(
            got.values, want.astype("float32"), err_msg=f"{name} {level} {step}"
        )
    assert (ds["precipitation_surface"].sel(lead_time=np.timedelta64(0, "h")).values == 0).all()
    assert np.isnan(ds["temperature_2m"].sel(lead_time=np.timedelta64(6, "h")).values).all()
    assert len(truth) == 2 * 18


def test_source_https_on_the_command_line_probes_whatever_the_dataset_says(tmp_path):
    """`--source http(s)://...` for the docs' ECMWF dataset (which lists by default): a web
    server is probed, never listed, and the repo reads back as ecCodes decodes the files."""
    truth = archive(tmp_path / "site" / "mirror")
    with backfilled_from_a_site(tmp_path, doc_examples()[0], "mirror") as (repo, site):
        assert check_against_eccodes(open_dataset(str(repo)), truth) == len(truth)
    assert set(site.seen) <= {"HEAD", "GET"} and site.seen["HEAD"] > 0


def test_an_ecmwf_dataset_updates_validates_builds_levels_and_a_stac_entry(tmp_path):
    """The docs' ECMWF dataset lives as NOAA's do: a backfill of the first cycle, an update
    fire for the next once its files land, validation of both, map levels and a STAC entry."""
    module = tmp_path / "doc_ecmwf.py"
    module.write_text(doc_examples()[0])
    src, repo = tmp_path / "src", str(tmp_path / "repo")
    for step in STEPS:
        E.write(src, KEY.format(init=INITS[0], lead=step), FIELDS, INITS[0], step, GRID)
    common = [f"{module}:DATASET", "--repo", repo, "--source", str(src)]
    res = runner.invoke(app, ["virtual", "backfill", *common, "--start", "2025-03-01T00",
                              "--end", "2025-03-01T12", "--executor", "sync"])  # fmt: skip
    assert res.exit_code == 0, res.output
    for step in STEPS:  # the 12z cycle lands
        E.write(src, KEY.format(init=INITS[1], lead=step), FIELDS, INITS[1], step, GRID)
    res = runner.invoke(app, ["virtual", "update", *common, "--fire-time", "2025-03-01T20",
                              "--deadline", "60"])  # fmt: skip
    assert res.exit_code == 0, res.output
    ds = open_dataset(repo)
    assert ds.sizes["init_time"] == 2 and not np.isnan(ds["temperature_2m"].values).any()
    res = runner.invoke(app, ["virtual", "validate", *common, "--start", "2025-03-01T00"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pyramid", "build", repo, "-v", "temperature_2m", "--levels", "1",
                              "--executor", "sync"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["virtual", "stac", repo, "--output", str(tmp_path / "stac")])
    assert res.exit_code == 0, res.output
    # the web map over it: a point west of Greenwich, on a grid that starts at -180
    from starlette.testclient import TestClient

    from toolkit.webmap.app import Served, create_app
    from toolkit.webmap.view import Source as MapSource

    c = TestClient(create_app(Served(MapSource(repo), variable="temperature_2m")))
    meta = c.get("/meta").json()
    assert meta["variables"]["temperature_2m"]["units"] == "K"
    truth = E.decoded(src / KEY.format(init=INITS[1], lead=3))[("2t", None, 3)]
    lat, lon = 45.0, -90.0  # the cell at 45 N, 90 W (row 2, column 4 of the 22.5-degree grid)
    p = c.get("/point", params={"variable": "temperature_2m", "lat": lat, "lon": lon, "zoom": 6,
                                "lead_time": "PT3H"}).json()  # fmt: skip
    assert p["level"] == "0" and p["value"] == pytest.approx(float(truth[2, 4]), rel=1e-6)
    assert c.get("/tiles/0/0/0.png", params={"variable": "temperature_2m"}).status_code == 200
