"""STAC entries (toolkit.stac) of a real pyramid and a real virtual repo: read back by pystac,
extents equal the data's (computed here with numpy), datacube names match, the asset opens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pystac
import pytest
import xarray as xr
from pystac.validation.stac_validator import GetSchemaError
from typer.testing import CliRunner

import toolkit.pyramid
import toolkit.virtual
from tests.virtual.test_backfill import START, sim
from toolkit import storage
from toolkit.cli import app
from toolkit.examples.synthetic import write_store
from toolkit.virtual.backfill import backfill

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pyramid(tmp_path: Path) -> Path:
    path = tmp_path / "données t2m.zarr"
    write_store(storage.open_store(str(path)), shape=(60, 100), shards=(32, 32))
    toolkit.pyramid.build(str(path), levels=2, executor="sync")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A simulated GFS archive, six files backfilled into a virtual repo."""
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    backfill(ds, start=START, workers=1, executor="sync")
    return tmp_path / "repo"


def _validated(obj: pystac.STACObject) -> None:
    """pystac's validation, offline when it must be: the extension schemas are fetched from
    the network, which tests do not have; the core schemas ship with pystac, so the entry is
    validated against those, and the extensions' required fields are checked by hand."""
    try:
        obj.validate()
        return
    except GetSchemaError:
        pass
    d = obj.to_dict()
    d["stac_extensions"] = []
    pystac.validation.validate_dict(d)  # core schema: local, raises on an invalid entry
    cube = obj.to_dict()
    assert any("datacube" in s for s in cube["stac_extensions"])
    assert any("xarray-assets" in s for s in cube["stac_extensions"])
    for dim in cube["cube:dimensions"].values():
        assert dim["type"] in ("spatial", "temporal", "other")
        if dim["type"] == "spatial":
            assert dim["axis"] in ("x", "y") and len(dim["extent"]) == 2
        if dim["type"] == "temporal":
            assert all(e.endswith("Z") for e in dim["extent"])
        if dim["type"] == "other":
            assert "values" in dim or "extent" in dim
    for var in cube["cube:variables"].values():
        assert var["type"] in ("data", "auxiliary") and isinstance(var["dimensions"], list)
    for asset in cube["assets"].values():
        assert isinstance(asset["xarray:open_kwargs"], dict)


def _edges(c: np.ndarray) -> tuple[float, float]:
    """Outer cell edges of centre coordinates, half a step out."""
    step = np.abs(np.diff(c)).mean()
    return float(c.min() - step / 2), float(c.max() + step / 2)


def _read(out: Path) -> tuple[pystac.Collection, pystac.Item]:
    collection = pystac.Collection.from_file(str(out / "collection.json"))
    items = list(collection.get_items())
    assert len(items) == 1
    _validated(collection)
    _validated(items[0])
    return collection, items[0]


def test_pyramid_entry(pyramid: Path, tmp_path: Path) -> None:
    entry = toolkit.pyramid.stac(str(pyramid), tmp_path / "stac")
    collection, item = _read(tmp_path / "stac")
    assert entry.collection == tmp_path / "stac" / "collection.json"
    data = xr.open_zarr(pyramid)  # the reader's view, independent of the entry
    lat, lon = data["lat"].values, data["lon"].values
    (west, east), (south, north) = _edges(lon), _edges(lat)
    want = [west, max(south, -90), east, min(north, 90)]
    assert collection.extent.spatial.bboxes[0] == pytest.approx(want, abs=1e-9)
    assert item.bbox == pytest.approx(want, abs=1e-9)
    assert collection.extent.temporal.intervals == [[None, None]]  # no time dim: open
    cube = collection.extra_fields
    assert set(cube["cube:dimensions"]) == set(data.dims)
    assert cube["cube:dimensions"]["lon"]["reference_system"] == 4326
    assert set(cube["cube:variables"]) == set(data.data_vars) - {"spatial_ref"}
    assert cube["cube:variables"]["field"]["unit"] == data["field"].attrs["units"]
    assert collection.summaries.to_dict()["multiscales:levels"] == [".", "2x", "4x"]
    asset = collection.assets["data"]
    assert asset.media_type == "application/vnd+zarr" and asset.roles == ["data"]
    opened = xr.open_dataset(asset.href, **asset.extra_fields["xarray:open_kwargs"])
    assert set(opened.variables) == set(data.variables)
    assert opened.sizes == data.sizes
    for level, factor in (("2x", 2), ("4x", 4)):
        a = collection.assets[f"level-{level}"]
        ds = xr.open_dataset(a.href, **a.extra_fields["xarray:open_kwargs"])
        want_level = toolkit.pyramid.open_level(str(pyramid), level)
        assert set(ds.variables) == set(want_level.variables)
        assert ds.sizes["lat"] == data.sizes["lat"] // factor


def test_virtual_entry(repo: Path, tmp_path: Path) -> None:
    entry = toolkit.virtual.stac(str(repo), tmp_path / "stac")
    collection, item = _read(tmp_path / "stac")
    data = toolkit.virtual.open_dataset(str(repo))
    lat, lon = data["latitude"].values, data["longitude"].values
    (west, east), (south, north) = _edges(lon), _edges(lat)
    if west >= 180:  # 0..360 longitudes, as STAC wants them: -180..180
        west, east = west - 360, east - 360
    want = [west, south, east, north]
    assert collection.extent.spatial.bboxes[0] == pytest.approx(want, abs=1e-9)
    assert entry.bbox == pytest.approx(want, abs=1e-9)
    times = np.concatenate([data["init_time"].values, data["valid_time"].values.ravel()])
    start, end = collection.extent.temporal.intervals[0]
    assert np.datetime64(start.replace(tzinfo=None), "ns") == times.min()
    assert np.datetime64(end.replace(tzinfo=None), "ns") == times.max()
    assert item.common_metadata.start_datetime == start
    assert item.common_metadata.end_datetime == end
    dims = collection.extra_fields["cube:dimensions"]
    assert set(dims) == set(data.dims)
    assert dims["init_time"]["type"] == "temporal"
    assert dims["latitude"]["axis"] == "y" and dims["longitude"]["axis"] == "x"
    assert dims["lead_time"]["values"] == ["PT0H", "PT3H", "PT6H"]
    assert dims["level"]["values"] == pytest.approx(list(data["level"].values))
    variables = collection.extra_fields["cube:variables"]
    datavars = {k for k, v in variables.items() if v["type"] == "data"}
    assert datavars == set(data.data_vars) - {"spatial_ref"}
    t2m = variables["temperature_2m"]
    assert t2m["unit"] == "K" and t2m["description"] == data["temperature_2m"].attrs["long_name"]
    assert variables["valid_time"]["type"] == "auxiliary"
    asset = collection.assets["data"]
    assert asset.media_type == "application/vnd.zarr+icechunk"
    assert asset.extra_fields["toolkit:opener"] == "toolkit.virtual.open_dataset"
    kwargs = asset.extra_fields["xarray:open_kwargs"]
    assert kwargs == {"engine": "toolkit"}  # xarray alone opens it, through toolkit's engine
    opened = xr.open_dataset(asset.href, **kwargs)
    assert set(opened.variables) == set(data.variables)
    # the engine makes the CRS variable a coordinate (rioxarray reads it from there)
    want = data.set_coords("spatial_ref")["temperature_2m"]
    xr.testing.assert_identical(opened["temperature_2m"].load(), want.load())


def test_cli_writes_entries_and_json(pyramid: Path, repo: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["pyramid", "stac", str(pyramid), "--output", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p" / "collection.json").is_file()
    res = runner.invoke(
        app, ["virtual", "stac", str(repo), "--output", str(tmp_path / "v"), "--json"]
    )
    assert res.exit_code == 0, res.output
    said = json.loads(res.stdout)
    assert Path(said["collection"]) == tmp_path / "v" / "collection.json"
    assert Path(said["item"]).is_file() and said["interval"][0] == "2025-08-01T00:00:00Z"
    pystac.Collection.from_file(said["collection"])


def _toolkit(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console script's entry (toolkit.cli.main: it joins the command's threads
    and exits), run from this checkout."""
    code = "import sys; from toolkit.cli import main; sys.argv[0] = 'toolkit'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_cli_process_exits_and_bad_paths_exit_2(repo: Path, tmp_path: Path) -> None:
    proc = _toolkit("virtual", "stac", str(repo), "--output", str(tmp_path / "v"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"] == "repo"
    for argv, says in (
        (("pyramid", "stac", str(tmp_path / "typo.zarr")), "does not exist"),
        (("virtual", "stac", str(tmp_path / "nope")), "no Icechunk repo"),
        (("pyramid", "stac", str(repo)), "toolkit virtual stac"),
    ):
        proc = _toolkit(*argv, "--output", str(tmp_path / "out"))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0]
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "nope").exists()


def test_update_refreshes_the_entry(tmp_path: Path) -> None:
    """`virtual update --stac DIR`: the entry follows main's new extent after the fire."""
    archive, files, _ = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=3,
    )
    common = ["--repo", str(tmp_path / "repo"), "--source", str(tmp_path / "src")]
    argv = ["virtual", "backfill", "sim-gfs", *common, "--start", "2025-08-01T00"]
    res = runner.invoke(app, [*argv, "--executor", "sync"])
    assert res.exit_code == 0, res.output
    toolkit.virtual.stac(str(tmp_path / "repo"), tmp_path / "stac")
    before = pystac.Collection.from_file(str(tmp_path / "stac" / "collection.json"))
    archive.publish(files[3:6])
    res = runner.invoke(
        app,
        [
            "virtual",
            "update",
            "sim-gfs",
            *common,
            "--fire-time",
            "2025-08-01T12:00",
            "--no-validate",
            "--stac",
            str(tmp_path / "stac"),
        ],
    )
    assert res.exit_code == 0, res.output
    after = pystac.Collection.from_file(str(tmp_path / "stac" / "collection.json"))
    assert after.extent.temporal.intervals[0][1] > before.extent.temporal.intervals[0][1]
    assert after.extra_fields["cube:dimensions"]["init_time"]["extent"][1] == (
        "2025-08-01T06:00:00Z"
    )
