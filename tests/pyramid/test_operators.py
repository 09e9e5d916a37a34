"""Several operators in one store (issue 50, item 2): a quantity, a class map and a direction
pyramided in one build, each with the operator its meaning asks for; a variable added later
beside built ones, whose level objects stay untouched. Oracles: xarray's `coarsen` (mean), a
brute-force mode (ties to the smallest label) and circular mean, numpy counts."""

from __future__ import annotations

import json
from collections.abc import Callable

import icechunk
import numpy as np
import xarray as xr
import zarr
from typer.testing import CliRunner

from tests.pyramid.test_usage import one_line_error
from toolkit import storage
from toolkit.cli import app
from toolkit.pyramid import records

runner = CliRunner()
H, W = 64, 96
LEVELS = 3
FLAGS = {"flag_values": [1, 2, 3, 4], "flag_meanings": "water forest crop urban"}


def pyramid(*args: str):
    return runner.invoke(app, ["pyramid", *args])


def write_store(path, with_wdir: bool = False) -> None:
    """t2m (float32, CF _FillValue -9999 where NaN), landcover (uint8 classes, CF _FillValue
    255) and, if asked, wdir (a direction in degrees), written by xarray."""
    rng = np.random.default_rng(7)
    t2m = (280 + 10 * rng.standard_normal((H, W))).astype("float32")
    t2m[:20, :24] = np.nan  # a whole 16x16-plus corner without data
    t2m[rng.random((H, W)) < 0.1] = np.nan
    lc = rng.integers(1, 5, (H, W)).astype("uint8")
    lc[30:40, 50:90] = 255
    data = {
        "t2m": (("lat", "lon"), t2m, {"units": "K", "long_name": "2 m temperature"}),
        "landcover": (("lat", "lon"), lc, {"long_name": "land cover", **FLAGS}),
    }
    enc = {
        "t2m": {"chunks": (16, 16), "_FillValue": -9999.0},
        "landcover": {"chunks": (16, 16), "_FillValue": 255},
    }
    if with_wdir:
        wd = (rng.random((H, W)) * 360).astype("float32")
        attrs = {"standard_name": "wind_from_direction", "units": "degree"}
        data["wdir"] = (("lat", "lon"), wd, attrs)
        enc["wdir"] = {"chunks": (16, 16), "_FillValue": -9999.0}
    ds = xr.Dataset(
        data,
        coords={"lat": 89.5 - np.arange(H) * 1.0, "lon": -179.5 + np.arange(W) * 1.0},
    )
    ds.to_zarr(str(path), zarr_format=3, mode="w", encoding=enc, consolidated=False)


def level0(path, name: str) -> np.ndarray:
    return xr.open_zarr(str(path), consolidated=False)[name].values  # xarray's own decoding


def level(path, group: str, name: str) -> np.ndarray:
    return zarr.open_array(str(path / group / name), mode="r")[...]


def brute_mode(lc: np.ndarray, f: int, fill: int = 255) -> tuple[np.ndarray, np.ndarray]:
    """Each f x f window's most frequent valid label (ties: the smallest), and its count."""
    out = np.full((H // f, W // f), fill, dtype=lc.dtype)
    count = np.zeros((H // f, W // f), dtype=np.uint32)
    for y in range(H // f):
        for x in range(W // f):
            win = lc[y * f : y * f + f, x * f : x * f + f].ravel()
            win = win[win != fill]
            count[y, x] = win.size
            if win.size:
                labels, n = np.unique(win, return_counts=True)
                out[y, x] = labels[np.argmax(n)]  # unique sorts: the first max is the smallest
    return out, count


def in_repo(out) -> Callable[[object, str, str], np.ndarray]:
    """`level` of the levels an Icechunk repo's main holds."""
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(out)))
    store = repo.readonly_session("main").store
    return lambda _, group, name: zarr.open_array(store, path=f"{group}/{name}", mode="r")[...]


def check_t2m(path, f: int, read=level) -> None:
    t = xr.open_zarr(str(path), consolidated=False)["t2m"]
    want = t.coarsen(lat=f, lon=f).mean().values  # NaN (the CF nodata) skipped
    got = read(path, f"{f}x", "t2m")
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    valid = (~np.isnan(t.values)).reshape(H // f, f, W // f, f).sum(axis=(1, 3))
    assert np.array_equal(read(path, f"{f}x", "t2m_count"), valid)


def check_landcover(path, f: int, read=level) -> None:
    want, count = brute_mode(zarr.open_array(str(path / "landcover"), mode="r")[...], f)
    assert np.array_equal(read(path, f"{f}x", "landcover"), want)
    assert np.array_equal(read(path, f"{f}x", "landcover_count"), count)


def check_wdir(path, f: int, read=level) -> None:
    rad = np.deg2rad(level0(path, "wdir").reshape(H // f, f, W // f, f))
    want = np.rad2deg(np.arctan2(np.sin(rad).mean(axis=(1, 3)), np.cos(rad).mean(axis=(1, 3))))
    gap = np.abs((read(path, f"{f}x", "wdir") - want % 360 + 180) % 360 - 180)
    assert gap.max() < 1e-3


def recorded(path) -> dict:
    return json.loads(records.get(storage.open_store(str(path)), records.PLAN)[1])


def objects(path, names: tuple[str, ...]) -> dict[str, tuple[int, bytes]]:
    """Every object of these level arrays: (mtime_ns, bytes)."""
    out = {}
    for k in range(1, LEVELS + 1):
        for name in names:
            for p in (path / f"{2**k}x" / name).rglob("*"):
                if p.is_file():
                    out[str(p.relative_to(path))] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


def test_one_build_pyramids_every_variable_with_its_own_operator(tmp_path):
    path = tmp_path / "era.zarr"
    write_store(path, with_wdir=True)
    res = pyramid("plan", str(path), "--levels", str(LEVELS), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    ops = {o["variable"]: o["operator"] for o in doc["operators"]}
    assert ops == {"landcover": "mode", "t2m": "mean", "wdir": "circular_mean"}
    assert (
        "flag_values" in next(o for o in doc["operators"] if o["variable"] == "landcover")["from"]
    )
    assert doc["method"] == "mixed" and doc["variables"] == ["landcover", "t2m", "wdir"]
    assert [lvl["group"] for lvl in doc["levels"]] == ["2x", "4x", "8x"]  # the fields kept
    text = pyramid("plan", str(path), "--levels", str(LEVELS))
    assert text.exit_code == 0, text.output
    assert "landcover: mode (CF flag_values" in text.stdout and "t2m: mean" in text.stdout
    assert "wdir: circular_mean" in text.stdout

    res = pyramid("build", str(path), "--levels", str(LEVELS), "--executor", "sync")
    assert res.exit_code == 0, res.output
    for k in range(1, LEVELS + 1):
        f = 2**k
        check_t2m(path, f)
        check_landcover(path, f)
        check_wdir(path, f)
        attrs = zarr.open_array(str(path / f"{f}x" / "landcover"), mode="r").attrs
        assert "area: mode" in attrs["cell_methods"] and attrs["flag_values"] == [1, 2, 3, 4]
        t_attrs = zarr.open_array(str(path / f"{f}x" / "t2m"), mode="r").attrs
        assert "area: mean" in t_attrs["cell_methods"] and "_FillValue" not in t_attrs
    assert recorded(path)["operators"] == ops
    res = pyramid("verify", str(path), "--executor", "sync")
    assert res.exit_code == 0, res.output
    # xarray reads each level with its own decoding: classes masked by their _FillValue
    lvl = xr.open_zarr(str(path), group="2x", consolidated=False)
    assert np.isnan(lvl["landcover"].values).any() and lvl["t2m"].dtype == np.float32


def test_a_variable_added_later_leaves_the_others_untouched(tmp_path):
    path = tmp_path / "era.zarr"
    write_store(path)
    res = pyramid("build", str(path), "-v", "t2m", "--levels", str(LEVELS), "--executor", "sync")
    assert res.exit_code == 0, res.output
    before = objects(path, ("t2m", "t2m_count"))
    assert before and not (path / "2x" / "landcover").exists()

    res = pyramid("build", str(path), "-v", "landcover", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert "adding landcover beside t2m" in res.output
    assert objects(path, ("t2m", "t2m_count")) == before  # not one object rewritten
    for k in range(1, LEVELS + 1):
        check_t2m(path, 2**k)
        check_landcover(path, 2**k)
    assert recorded(path)["operators"] == {"landcover": "mode", "t2m": "mean"}
    res = pyramid("verify", str(path), "--executor", "sync")
    assert res.exit_code == 0, res.output
    res = pyramid("build", str(path), "--executor", "sync")  # nothing left to do
    assert res.exit_code == 0, res.output
    assert objects(path, ("t2m", "t2m_count")) == before


def test_method_is_for_the_variables_named_and_a_rebuild_keeps_the_others(tmp_path):
    path = tmp_path / "era.zarr"
    write_store(path)
    line = one_line_error(pyramid("build", str(path), "--method", "mean", "--executor", "sync"))
    assert "array 'landcover' has CF flag_values, flag_meanings: it holds classes" in line
    assert "name the arrays it is for (--variable)" in line
    assert not (path / "2x").exists()

    res = pyramid("build", str(path), "-v", "landcover", "--levels", "2", "--executor", "sync")
    assert res.exit_code == 0, res.output
    res = pyramid("build", str(path), "-v", "t2m", "--method", "max", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert recorded(path)["operators"] == {"landcover": "mode", "t2m": "max"}
    t = level0(path, "t2m")
    for f in (2, 4):
        check_landcover(path, f)
        want = xr.DataArray(t, dims=("y", "x")).coarsen(y=f, x=f).max().values
        assert np.array_equal(level(path, f"{f}x", "t2m"), want, equal_nan=True)

    # a rebuild of one variable's levels rebuilds the others with theirs, never drops them
    res = pyramid(
        "build", str(path), "--rebuild-from", "2x", "-v", "landcover", "--levels", "2",
        "--executor", "sync",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert recorded(path)["operators"] == {"landcover": "mode", "t2m": "max"}
    for f in (2, 4):
        check_landcover(path, f)
        assert (path / f"{f}x" / "t2m" / "zarr.json").exists()
    assert pyramid("verify", str(path), "--executor", "sync").exit_code == 0


def test_a_pyramid_recorded_with_one_method_is_still_read(tmp_path):
    """A record from before operators were per variable: one `method`, no `operators`."""
    path = tmp_path / "era.zarr"
    write_store(path)
    res = pyramid("build", str(path), "-v", "t2m", "--levels", "2", "--executor", "sync")
    assert res.exit_code == 0, res.output
    store = storage.open_store(str(path))
    doc = recorded(path)
    for key in ("operators", "operators_from"):
        del doc[key]
    for lp in doc["level_plans"]:
        for v in lp["vars"]:
            del v["method"]
    records.put(store, records.PLAN, json.dumps(doc, indent=1).encode())
    before = objects(path, ("t2m", "t2m_count"))
    assert pyramid("verify", str(path), "--executor", "sync").exit_code == 0
    res = pyramid("build", str(path), "-v", "landcover", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert objects(path, ("t2m", "t2m_count")) == before
    for f in (2, 4):
        check_t2m(path, f)
        check_landcover(path, f)
    assert pyramid("verify", str(path), "--executor", "sync").exit_code == 0


def written(res) -> int:
    assert res.exit_code == 0, res.output
    return sum(s["written"] for s in json.loads(res.stdout)["stages"] if s["stage"].endswith("x"))


def test_an_icechunk_output_holds_every_variable_with_its_own_operator(tmp_path):
    path = tmp_path / "era.zarr"
    write_store(path, with_wdir=True)
    out = tmp_path / "out.icechunk"
    build = ("build", str(path), "--output", str(out), "--levels", str(LEVELS))
    res = pyramid(*build, "--executor", "sync")
    assert res.exit_code == 0, res.output
    read = in_repo(out)
    for k in range(1, LEVELS + 1):
        check_t2m(path, 2**k, read)
        check_landcover(path, 2**k, read)
        check_wdir(path, 2**k, read)
    assert pyramid("verify", str(out), "--executor", "sync").exit_code == 0
    root = zarr.open_group(icechunk.Repository.open(icechunk.local_filesystem_storage(
        str(out))).readonly_session("main").store, mode="r")  # fmt: skip
    ops = root.attrs["pyramid:settings"]["operators"]
    assert ops == {"landcover": "mode", "t2m": "mean", "wdir": "circular_mean"}
    assert written(pyramid(*build, "--executor", "sync", "--json")) == 0  # nothing left to do


def test_a_variable_added_to_a_repo_leaves_the_others_untouched(tmp_path):
    path = tmp_path / "era.zarr"
    write_store(path)
    out = tmp_path / "out.icechunk"
    build = ("build", str(path), "--output", str(out), "--executor", "sync", "--json")
    first = written(pyramid(*build, "-v", "t2m", "--levels", str(LEVELS)))
    chunks = {p: p.read_bytes() for p in (out / "chunks").iterdir()}
    # only landcover's shards are written (t2m's done shards are listed, not rebuilt)
    assert written(pyramid(*build, "-v", "landcover")) == first
    assert all(p.read_bytes() == b for p, b in chunks.items())
    read = in_repo(out)
    for k in range(1, LEVELS + 1):
        check_t2m(path, 2**k, read)
        check_landcover(path, 2**k, read)
    assert pyramid("verify", str(out), "--executor", "sync").exit_code == 0
    line = one_line_error(pyramid(*build, "-v", "t2m", "--method", "max"))
    assert "main's levels were built with t2m's operator='mean', not t2m's operator='max'" in line


def test_a_plain_build_of_a_built_store_keeps_to_its_recorded_variables(tmp_path) -> None:
    """`pyramid build STORE` again (the growth hint's advice) builds what the record names:
    an array the first build left out (an integer array with no CF flags, which would need a
    --method) is neither pyramided nor a reason to refuse; adding it is `--variable NEW`."""
    store = tmp_path / "s.zarr"
    write_store(store)
    g = zarr.open_group(str(store), mode="a")
    counts = g.create_array("counts", shape=(H, W), dtype="int16", chunks=(16, 16),
                            dimension_names=["lat", "lon"])  # fmt: skip
    counts[...] = 1
    res = pyramid("build", str(store), "-v", "t2m", "--levels", "2", "--executor", "sync")
    assert res.exit_code == 0, res.output
    again = pyramid("build", str(store), "--levels", "2", "--executor", "sync", "--json")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert sum(s["written"] for s in doc["stages"]) == 0, doc
    assert not (store / "2x" / "counts").exists()
