"""Every level georeferenced as itself, for every reader: a store written by xarray + rioxarray,
its pyramid built by the real CLI, read back by rioxarray (plain `xr.open_zarr`, no
`decode_coords`), by toolkit's xarray engine and by GDAL (rasterio's `ZARR:` driver). The
oracle is level 0's transform as its writer stated it, scaled: a level of factor f has pixels
f times larger and the same outer corner (GDAL's origin), whatever its cell centres."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import rasterio
import rioxarray  # noqa: F401 - registers the .rio accessor
import xarray as xr
from affine import Affine
from typer.testing import CliRunner

from toolkit.cli import app

LEVEL0 = Affine(0.5, 0.0, -180.0, 0.0, -0.5, 90.0)  # 0.5 degree pixels from the corner
LEVELS = {"2x": 2, "4x": 4, "8x": 8}


def rio_store(path, ny: int = 70, nx: int = 130) -> None:
    """t(time, y, x) on a 0.5 degree grid, its CRS and transform written by rioxarray; the
    sizes leave partial windows at the far edges of every level."""
    y = LEVEL0.f + LEVEL0.e * (np.arange(ny) + 0.5)
    x = LEVEL0.c + LEVEL0.a * (np.arange(nx) + 0.5)
    values = np.random.default_rng(0).normal(280, 5, (2, ny, nx)).astype("float32")
    time = np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[ns]")
    da = xr.DataArray(values, dims=("time", "y", "x"), coords={"time": time, "y": y, "x": x})
    da = da.rename("t").rio.write_crs("EPSG:4326").rio.write_transform(LEVEL0)
    da.encoding["chunks"] = (1, 16, 16)
    da.to_dataset().to_zarr(path, zarr_format=3, mode="w")


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def scaled(f: int) -> Affine:
    return Affine(LEVEL0.a * f, 0.0, LEVEL0.c, 0.0, LEVEL0.e * f, LEVEL0.f)


def same(got, want: Affine) -> bool:
    return np.allclose(tuple(got)[:6], tuple(want)[:6], rtol=0, atol=1e-9)


@pytest.fixture
def built(tmp_path):
    path = tmp_path / "rio.zarr"
    rio_store(path)
    level0 = {p.relative_to(path): p.read_bytes() for p in path.rglob("zarr.json")}
    code, out = cli("pyramid", "build", path, "--executor", "sync", "--levels", "3")
    assert code == 0, out
    for key, body in level0.items():  # the writer's metadata, byte for byte
        if key.parts != ("zarr.json",):
            assert (path / key).read_bytes() == body, key
    return path


def test_every_level_is_georeferenced_as_itself_by_rioxarray_and_gdal(built):
    for group, f in LEVELS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a level opens as xarray writes: no warning
            ds = xr.open_zarr(built, group=group)  # no decode_coords: rioxarray's plain path
        assert ds["t"].rio.crs == "EPSG:4326", group
        assert same(ds["t"].rio.transform(), scaled(f)), (group, ds["t"].rio.transform())
        assert same(ds.rio.transform(), scaled(f)), group  # the Dataset's too
        gt = [float(x) for x in ds["spatial_ref"].attrs["GeoTransform"].split()]
        assert same(Affine.from_gdal(*gt), scaled(f)), (group, gt)
        # the CF grid mapping is level 0's: only the GeoTransform is the level's own
        base = xr.open_zarr(built)["spatial_ref"].attrs
        assert {k: v for k, v in ds["spatial_ref"].attrs.items() if k != "GeoTransform"} == {
            k: v for k, v in base.items() if k != "GeoTransform"
        }
        with rasterio.open(f'ZARR:"{built}":/{group}/t') as r:  # GDAL's Zarr driver
            assert r.crs == "EPSG:4326", group
            assert same(r.transform, scaled(f)), (group, r.transform)
            assert r.shape == ds["t"].shape[-2:]
        # the layout GDAL and tile servers read states the same transform and shape
        layout = json.loads((built / "zarr.json").read_text())["attributes"]["multiscales"]
        item = next(x for x in layout["layout"] if x["asset"] == group)
        a, b, c, d, e, g = item["spatial:transform"]
        assert same(Affine(a, b, c, d, e, g), scaled(f))
        assert item["spatial:shape"] == list(ds["t"].shape[-2:])
    with rasterio.open(f'ZARR:"{built}":/t') as r:  # level 0, as the writer stated it
        assert same(r.transform, LEVEL0)
    code, out = cli("pyramid", "verify", built, "--executor", "sync")
    assert code == 0, out


def test_toolkit_engine_gives_rioxarray_a_crs_at_every_level_dataset_and_datatree(built):
    for group, f in {"1x": 1, **LEVELS}.items():
        ds = xr.open_dataset(built, engine="toolkit", group=group)
        assert ds["t"].rio.crs == "EPSG:4326", group
        assert same(ds["t"].rio.transform(), scaled(f)), group
    tree = xr.open_datatree(built, engine="toolkit")
    for group, f in {"1x": 1, **LEVELS}.items():
        da = tree[group].to_dataset()["t"]
        assert da.rio.crs == "EPSG:4326" and same(da.rio.transform(), scaled(f)), group
    # decode_coords=False is the file's own view: the CRS stays a variable
    raw = xr.open_dataset(built, engine="toolkit", group="2x", decode_coords=False)
    assert "spatial_ref" in raw.data_vars


def test_verify_fails_a_level_georeferenced_as_level_0_and_build_rewrites_it(built):
    """What an earlier toolkit wrote: level 0's GeoTransform at every level, the CRS no
    coordinate of the data. verify exits 1 naming it; a build rewrites only that metadata."""
    gt0 = json.loads((built / "spatial_ref" / "zarr.json").read_text())["attributes"]
    for group in LEVELS:
        crs = built / group / "spatial_ref" / "zarr.json"
        doc = json.loads(crs.read_text())
        doc["attributes"]["GeoTransform"] = gt0["GeoTransform"]
        crs.write_text(json.dumps(doc))
        t = built / group / "t" / "zarr.json"
        doc = json.loads(t.read_text())
        doc["attributes"]["coordinates"] = "t_count"
        t.write_text(json.dumps(doc))
    chunks = {p: p.stat().st_mtime_ns for p in built.glob("[248]x/t/c/**/*") if p.is_file()}
    code, out = cli("pyramid", "verify", built, "--executor", "sync")
    assert code == 1, out
    for group in LEVELS:
        assert f"level {group} spatial_ref: GeoTransform '{gt0['GeoTransform']}' is level 0's" in (
            " ".join(out.split())
        ), out
        assert f"level {group} t: CRS variable 'spatial_ref' is no coordinate" in out, out
    code, out = cli("pyramid", "build", built, "--executor", "sync", "--levels", "3")
    assert code == 0, out
    assert {p: p.stat().st_mtime_ns for p in chunks} == chunks  # no shard rewritten
    code, out = cli("pyramid", "verify", built, "--executor", "sync")
    assert code == 0, out
    ds = xr.open_zarr(built, group="4x")
    assert ds["t"].rio.crs == "EPSG:4326" and same(ds["t"].rio.transform(), scaled(4))


def test_an_irregular_axis_gets_no_geotransform_at_the_levels(tmp_path):
    """No affine transform holds on an irregular grid: level 0's GeoTransform is not carried
    to the levels (readers take the coordinates), and verify accepts that."""
    path = tmp_path / "irr.zarr"
    y = np.cumsum(np.linspace(0.4, 0.6, 40))[::-1]  # steps grow: not uniform
    x = np.arange(64) * 0.5 + 0.25
    da = xr.DataArray(np.ones((40, 64), "float32"), dims=("y", "x"), coords={"y": y, "x": x})
    da = da.rename("t").rio.write_crs("EPSG:4326").rio.write_transform(LEVEL0)
    da.to_dataset().to_zarr(path, zarr_format=3, mode="w")
    code, out = cli("pyramid", "build", path, "--executor", "sync", "--levels", "1")
    assert code == 0, out
    level = xr.open_zarr(path, group="2x")
    assert "GeoTransform" not in level["spatial_ref"].attrs
    assert "GeoTransform" in xr.open_zarr(path)["spatial_ref"].attrs  # level 0 untouched
    assert level["t"].rio.crs == "EPSG:4326"
    code, out = cli("pyramid", "verify", path, "--executor", "sync")
    assert code == 0, out


def test_a_virtual_datasets_levels_give_rioxarray_its_crs_and_their_transform(tmp_path):
    """A virtual GRIB dataset (an Icechunk repo) and its levels through the toolkit engine:
    the CRS at every level and in the DataTree, each level's transform level 0's scaled."""
    from tests.virtual.test_backfill import START, sim
    from toolkit import icechunk as R
    from toolkit import storage
    from toolkit.virtual.backfill import backfill

    repo = tmp_path / "repo"
    _archive, _files, job = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(repo))
    )
    backfill(job, start=START, workers=1, executor="sync")
    var = "temperature_2m"
    code, out = cli("pyramid", "build", repo, "-v", var, "--executor", "sync", "--levels", "2")
    assert code == 0, out
    base = xr.open_dataset(repo, engine="toolkit")
    assert base[var].rio.crs is not None  # no decode_coords
    t0 = base[var].rio.transform()
    tree = xr.open_datatree(repo, engine="toolkit")
    main = R.readonly(R.open_repo(storage.open_store(str(repo)), fresh=True)).store
    for group, f in {"2x": 2, "4x": 4}.items():
        # the level's own metadata names its CRS as a coordinate: any zarr reader sees it
        assert "spatial_ref" in xr.open_zarr(main, group=group, consolidated=False)[var].coords
        want = Affine(t0.a * f, 0.0, t0.c, 0.0, t0.e * f, t0.f)
        for da in (xr.open_dataset(repo, engine="toolkit", group=group)[var], tree[group][var]):
            assert da.rio.crs == base[var].rio.crs, group
            assert same(da.rio.transform(), want), (group, da.rio.transform(), want)
