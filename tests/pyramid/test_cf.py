"""Stores as xarray writes them (CF `_FillValue`, packing, flags with a fill, inf, valid range):
every level is held to xarray's own decoding of level 0 (plus the CF valid-range and
non-finite mask, which xarray leaves to its user), pooled by numpy in this file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from toolkit import cf
from toolkit.cli import app
from toolkit.pyramid import build, open_level, plan, verify
from toolkit.pyramid.reference import decoded_level0

H, W = 96, 80


def _coords():
    return {"y": np.linspace(50.0, 40.0, H), "x": np.linspace(0.0, 10.0, W)}


def _field(seed=0):
    rng = np.random.default_rng(seed)
    t = (280 + 10 * rng.standard_normal((H, W))).astype("float32")
    t[10:30, 5:40] = np.nan  # a hole that xarray encodes as the fill
    t[60:64, 60:64] = np.nan
    return t


def _write(path, name, data, attrs, encoding):
    ds = xr.Dataset({name: (("y", "x"), data, attrs)}, coords=_coords())
    enc = {name: {"chunks": (32, 32), **encoding}}
    ds.to_zarr(path, zarr_format=3, mode="w", encoding=enc, consolidated=False)
    return path


def window_mean(values: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware window mean and valid count, written for this test (float64)."""
    h, w = values.shape
    oh, ow = -(-h // f), -(-w // f)
    pad = np.full((oh * f, ow * f), np.nan)
    pad[:h, :w] = values
    win = pad.reshape(oh, f, ow, f)
    ok = np.isfinite(win)
    count = ok.sum(axis=(1, 3))
    total = np.where(ok, win, 0.0).sum(axis=(1, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count, count


def window_mode(values: np.ndarray, valid: np.ndarray, f: int) -> np.ndarray:
    h, w = values.shape
    out = np.full((-(-h // f), -(-w // f)), -1, dtype=np.int64)
    for oy in range(out.shape[0]):
        for ox in range(out.shape[1]):
            win = values[oy * f : oy * f + f, ox * f : ox * f + f]
            ok = valid[oy * f : oy * f + f, ox * f : ox * f + f]
            if ok.any():
                labels, counts = np.unique(win[ok], return_counts=True)
                out[oy, ox] = labels[np.argmax(counts)]
    return out


def _levels(path):
    return [g for g in ("2x", "4x", "8x") if (path / g / "zarr.json").exists()]


def _assert_mean_levels(path, name, oracle0: np.ndarray):
    """Every level's values and counts against the oracle pooled straight from level 0."""
    groups = _levels(path)
    assert groups
    for g in groups:
        f = int(g[:-1])
        want, want_count = window_mean(oracle0, f)
        ds = open_level(str(path), g)
        got = ds[name].values
        assert got.dtype == np.float32
        np.testing.assert_array_equal(ds[f"{name}_count"].values, want_count)
        np.testing.assert_array_equal(np.isnan(got), want_count == 0)
        ok = want_count > 0
        np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6 * f)


def test_float_with_cf_fill_is_averaged_without_the_fill(tmp_path):
    path = _write(
        tmp_path / "t2m.zarr", "t2m", _field(), {"units": "K", "standard_name": "air_temperature"},
        {"_FillValue": -9999.0},
    )  # fmt: skip
    raw = json.loads((path / "t2m" / "zarr.json").read_text())
    assert raw["attributes"]["_FillValue"] == "AAAAAICHw8A="  # base64, as xarray writes v3
    build(str(path), levels=3, executor="sync")
    oracle0 = xr.open_zarr(path, consolidated=False)["t2m"].values.astype(np.float64)
    _assert_mean_levels(path, "t2m", oracle0)
    lvl = open_level(str(path), "2x")["t2m"]
    assert float(lvl.min()) > 200  # the -9999 cells are nodata, not averaged in
    assert lvl.attrs["units"] == "K" and lvl.attrs["standard_name"] == "air_temperature"
    assert "_FillValue" not in lvl.attrs and lvl.encoding.get("_FillValue") is None
    assert lvl.attrs["cell_methods"] == "area: mean (window 2x2, nodata excluded)"
    assert verify(str(path), executor="sync").ok


def test_packed_integer_is_a_quantity_decoded_to_float32(tmp_path):
    t = _field(1)
    path = _write(
        tmp_path / "packed.zarr", "t2m", t, {"units": "K", "long_name": "2 m temperature"},
        {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32767},
    )  # fmt: skip
    p = plan(str(path))
    assert p.method == "mean" and "scale_factor" in p.method_from
    shown = CliRunner().invoke(app, ["pyramid", "plan", str(path)]).output
    assert "level 0 t2m: nodata -32767; valid" not in shown  # no range declared
    assert "level 0 t2m: nodata -32767; x 0.01 + 280" in shown
    build(str(path), levels=3, executor="sync")
    oracle0 = xr.open_zarr(path, consolidated=False)["t2m"].values.astype(np.float64)
    assert np.isnan(oracle0).sum() == np.isnan(t).sum()
    _assert_mean_levels(path, "t2m", oracle0)
    lvl = open_level(str(path), "4x")["t2m"]
    for gone in ("scale_factor", "add_offset", "_FillValue", "missing_value"):
        assert gone not in lvl.attrs and gone not in lvl.encoding
    assert lvl.attrs["units"] == "K" and lvl.attrs["long_name"] == "2 m temperature"
    assert verify(str(path), executor="sync").ok


def test_class_map_with_cf_fill_is_a_mode_with_that_fill_as_nodata(tmp_path):
    rng = np.random.default_rng(3)
    lc = rng.integers(0, 3, (H, W)).astype("uint8")
    lc[:20, :20] = 255
    lc[50:54, 30:34] = 0  # class 0 is a class, not nodata (zarr's fill_value is 0)
    attrs = {"flag_values": [0, 1, 2], "flag_meanings": "water crop forest"}
    path = _write(tmp_path / "lc.zarr", "lc", lc, attrs, {"_FillValue": 255})
    assert json.loads((path / "lc" / "zarr.json").read_text())["fill_value"] == 0
    p = plan(str(path))
    assert p.method == "mode" and p.levels[0].var("lc").classes == (0, 1, 2)
    build(str(path), levels=3, executor="sync")
    for g in _levels(path):
        f = int(g[:-1])
        want = window_mode(lc, lc != 255, f)
        raw = open_level(str(path), g, mask_and_scale=False)["lc"]
        assert raw.dtype == np.uint8
        got = raw.values.astype(np.int64)
        np.testing.assert_array_equal(np.where(want < 0, 255, want), got)
        decoded = open_level(str(path), g)["lc"]  # xarray masks the level's own _FillValue
        assert np.isnan(decoded.values).sum() == (want < 0).sum()
        assert decoded.attrs["cell_methods"].startswith("area: mode")
    assert verify(str(path), executor="sync").ok


@pytest.mark.filterwarnings("ignore:variable 't' has multiple fill values")  # the oracle's read
def test_non_finite_and_out_of_range_values_are_nodata(tmp_path):
    t = _field(2)
    t[5, 5], t[70, 7], t[40, 41] = np.inf, -np.inf, 1000.0
    attrs = {"units": "K", "valid_range": [-5.0, 400.0], "missing_value": [-1.0, -2.0]}
    t[41, 41], t[42, 42] = -1.0, -2.0  # inside the valid range: nodata by missing_value alone
    path = _write(tmp_path / "inf.zarr", "t", t, attrs, {"_FillValue": -9999.0})
    build(str(path), levels=3, executor="sync")
    oracle0 = xr.open_zarr(path, consolidated=False)["t"].values.astype(np.float64)
    oracle0[~np.isfinite(oracle0) | (oracle0 < -5) | (oracle0 > 400)] = np.nan  # CF range
    _assert_mean_levels(path, "t", oracle0)
    assert np.isfinite(open_level(str(path), "2x")["t"].values[~np.isnan(
        open_level(str(path), "2x")["t"].values)]).all()  # fmt: skip
    assert verify(str(path), executor="sync").ok


def test_verify_fails_when_a_level_averages_the_fill_in(tmp_path):
    """verify's reference decodes level 0 with xarray: a level built the old way (the CF fill
    averaged in) is caught, so verify cannot agree with a wrong build."""
    import zarr

    path = _write(tmp_path / "t.zarr", "t", _field(4), {"units": "K"}, {"_FillValue": -9999.0})
    build(str(path), levels=3, executor="sync")
    arr = zarr.open_array(str(path / "2x" / "t"), mode="r+")
    vals = arr[...]
    vals[5:15, 2:20] = (vals[5:15, 2:20] * 3 - 9999.0) / 4  # one fill cell in each window
    arr[...] = vals
    res = verify(str(path), executor="sync")
    assert not res.ok and any(f.check == "reference" for f in res.failures)


BAD_ATTRS = [
    ({"_FillValue": "not-base64!"}, "_FillValue"),
    ({"valid_range": [10.0]}, "valid_range"),
    ({"valid_min": 5.0, "valid_max": 1.0}, "valid range"),
    ({"scale_factor": "x"}, "scale_factor"),
]


@pytest.mark.parametrize(("attrs", "needle"), BAD_ATTRS)
def test_unusable_cf_attribute_is_one_line_and_nothing_written(tmp_path, attrs, needle):
    import zarr

    path = tmp_path / "bad.zarr"
    g = zarr.open_group(str(path), mode="w")
    for d, v in _coords().items():
        g.create_array(d, shape=v.shape, dtype="f8", dimension_names=[d])[...] = v
    a = g.create_array(
        "t", shape=(H, W), dtype="f4", chunks=(32, 32), dimension_names=["y", "x"],
        attributes=attrs,
    )  # fmt: skip
    a[...] = _field()
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    r = CliRunner().invoke(
        app, ["pyramid", "build", str(path), "--levels", "3", "--executor", "sync"]
    )
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "array 't'" in lines[0] and needle in lines[0]
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before


# ------------------------------------------------------------------- the decoding, by property

ENCODINGS = st.fixed_dictionaries(
    {},
    optional={
        "_FillValue": st.sampled_from([-9999, -32767, 0, 7]),
        "missing_value": st.lists(st.integers(-100, 100), min_size=1, max_size=3),
        "scale_factor": st.sampled_from([0.5, 0.01, 2.0]),
        "add_offset": st.sampled_from([0.0, 280.0, -3.5]),
        "valid_min": st.integers(-200, 0),
        "valid_max": st.integers(0, 200),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    attrs=ENCODINGS,
    data=st.lists(st.integers(-300, 300), min_size=4, max_size=40),
    zarr_fill=st.sampled_from([None, 0, -9999]),
)
def test_decoding_matches_xarray_on_packed_and_masked_integers(attrs, data, zarr_fill):
    raw = np.asarray(data, dtype="int16")
    dec = cf.decoding("v", "int16", zarr_fill, attrs)
    want = decoded_level0(raw, attrs, zarr_fill)
    got = dec.decode(raw).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-6)
    classes = dec.classes(raw)
    assert np.array_equal(classes == dec.fill, ~dec.valid(raw)) or dec.fill in raw[dec.valid(raw)]


@given(st.floats(allow_nan=True, allow_infinity=True, width=64))
def test_float_fill_attribute_round_trips_as_xarray_writes_it(value):
    from xarray.backends.zarr import FillValueCoder

    encoded = FillValueCoder.encode(value, np.dtype("float32"))
    assert cf.fill_attr(value, "float32") == encoded
    dec = cf.decoding("v", "float32", float("nan"), {"_FillValue": encoded})
    if np.isfinite(value):
        assert dec.nodata == (value,)
    else:
        assert dec.nodata == () or not np.isfinite(dec.nodata[0])


def test_zarr_fill_that_names_a_class_is_not_nodata():
    dec = cf.decoding("lc", "uint8", 0, {"flag_values": [0, 1, 2], "flag_meanings": "a b c"})
    assert dec.nodata == () and dec.fill == 255
    assert cf.decoding("lc", "uint8", 0, {}).nodata == (0,)  # zarr's convention
    assert cf.decoding("lc", "uint8", 0, {"_FillValue": 9}).nodata == (9,)  # CF wins


# ------------------------------------------------------------------- directions are circular


def window_direction(deg: np.ndarray, f: int) -> np.ndarray:
    """Each window's mean direction (degrees, [0, 360)), from the mean of its sines and cosines;
    NaN where nothing is valid or the vectors cancel."""
    h, w = deg.shape
    out = np.full((-(-h // f), -(-w // f)), np.nan)
    for oy in range(out.shape[0]):
        for ox in range(out.shape[1]):
            win = deg[oy * f : oy * f + f, ox * f : ox * f + f]
            win = win[np.isfinite(win)]
            if win.size == 0:
                continue
            s, c = np.sin(np.radians(win)).sum(), np.cos(np.radians(win)).sum()
            if np.hypot(s, c) > 1e-6 * win.size:
                out[oy, ox] = np.degrees(np.arctan2(s, c)) % 360
    return out


def test_circular_kernel_averages_across_north_and_drops_cancelling_windows():
    from toolkit.kernels import pool_circular

    deg = np.array([[[350.0, 10.0, 90.0, 270.0]]], dtype="float32")  # [B, H, W]
    out, count = pool_circular(deg, np.nan, (np.pi / 180, 0.0, 360.0), np.nan, 2)
    assert count.tolist() == [[2, 2]]
    assert abs(out[0, 0, 0]) < 1e-4 or abs(out[0, 0, 0] - 360) < 1e-4  # not 180
    assert np.isnan(out[0, 0, 1])  # east and west cancel: no direction
    rad = np.array([[[3.0, -3.0]]])  # radians either side of pi, in [-pi, pi)
    out, _ = pool_circular(rad, np.nan, (1.0, -np.pi, 2 * np.pi), np.nan, 2)
    assert abs(abs(out[0, 0, 0]) - np.pi) < 1e-5


def test_a_direction_gets_a_circular_mean_and_a_slope_does_not(tmp_path):
    rng = np.random.default_rng(7)
    deg = (rng.normal(0, 25, (H, W)) % 360).astype("float32")  # around north: 350 and 10
    deg[:8, :8] = np.nan
    deg[40, 40:42] = [90.0, 270.0]
    attrs = {"units": "degree", "standard_name": "wind_from_direction"}
    path = _write(tmp_path / "wd.zarr", "wdir", deg, attrs, {"_FillValue": -9999.0})
    p = plan(str(path))
    assert p.method == "mean" and p.circular == ("wdir",) and "wind_from_direction" in p.method_from
    build(str(path), levels=3, executor="sync")
    oracle0 = xr.open_zarr(path, consolidated=False)["wdir"].values.astype(np.float64)
    for g in _levels(path):
        f = int(g[:-1])
        want = window_direction(oracle0, f)
        da = open_level(str(path), g)["wdir"]
        got = da.values.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        gap = np.abs((got - want + 180) % 360 - 180)
        assert np.nanmax(gap) < 1e-3, g
        assert ((got[~np.isnan(got)] >= 0) & (got[~np.isnan(got)] < 360)).all()  # its range
        assert da.attrs["cell_methods"].startswith("area: mean (circular, window")
    two = open_level(str(path), "2x")["wdir"].values
    assert np.nanmin(np.abs((two + 180) % 360 - 180)) < 90  # near north, not near 180
    assert verify(str(path), executor="sync").ok
    slope = _write(tmp_path / "slope.zarr", "slope", deg, {"units": "degree"}, {})
    assert plan(str(slope)).circular == ()  # degrees alone are no direction
    assert plan(str(slope), method="circular_mean").circular == ("slope",)  # unless asked
    assert plan(str(path), method="mean").circular == ()  # an arithmetic mean, when asked


def test_directions_and_quantities_pyramid_together(tmp_path):
    """A wave dataset's direction beside its heights: one build, each variable its own mean."""
    rng = np.random.default_rng(8)
    deg = (rng.normal(0, 30, (H, W)) % 360).astype("float32")
    hs = rng.uniform(0.5, 3, (H, W)).astype("float32")
    ds = xr.Dataset(
        {
            "dirpw": (("y", "x"), deg, {"units": "degree",
                                        "standard_name": "sea_surface_wave_from_direction"}),
            "htsgw": (("y", "x"), hs, {"units": "m",
                                       "standard_name": "sea_surface_wave_significant_height"}),
        },
        coords=_coords(),
    )  # fmt: skip
    path = tmp_path / "wave.zarr"
    ds.to_zarr(path, zarr_format=3, mode="w", consolidated=False)
    p = plan(str(path))
    assert p.method == "mean" and p.circular == ("dirpw",)
    build(str(path), levels=2, executor="sync")
    for g in ("2x", "4x"):
        f = int(g[:-1])
        lvl = open_level(str(path), g)
        gap = np.abs(
            (lvl["dirpw"].values - window_direction(deg.astype(float), f) + 180) % 360 - 180
        )
        assert np.nanmax(gap) < 1e-3
        np.testing.assert_allclose(
            lvl["htsgw"].values, window_mean(hs.astype(float), f)[0], rtol=1e-5
        )
    assert verify(str(path), executor="sync").ok


# ------------------------------------------------------------------- joint masks


def _probabilities(tmp_path, dim):
    rng = np.random.default_rng(5)
    p = rng.dirichlet([1, 1, 1], size=(H, W)).transpose(2, 0, 1).astype("float32")
    for b in range(3):  # each band invalid at its own pixels
        p[b][rng.random((H, W)) < 0.2] = np.nan
    ds = xr.Dataset({"prob": ((dim, "y", "x"), p)}, coords={**_coords(), dim: [0, 1, 2]})
    path = tmp_path / f"{dim}.zarr"
    enc = {"prob": {"chunks": (3, 32, 32)}}
    ds.to_zarr(path, zarr_format=3, mode="w", encoding=enc, consolidated=False)
    return path, p


def test_a_band_dim_is_joint_without_being_told(tmp_path):
    path, _ = _probabilities(tmp_path, "band")
    assert plan(str(path)).band_dim == "band"
    build(str(path), levels=2, executor="sync")
    two = open_level(str(path), "2x")["prob"].values
    ok = ~np.isnan(two).any(axis=0)
    np.testing.assert_allclose(two[:, ok].sum(axis=0), 1.0, rtol=1e-5)  # still on the simplex
    assert (np.isnan(two).any(axis=0) == np.isnan(two).all(axis=0)).all()


def test_another_leading_dim_of_a_mean_is_named_with_the_way_to_make_it_joint(tmp_path):
    path, _ = _probabilities(tmp_path, "category")
    r = CliRunner().invoke(
        app, ["pyramid", "build", str(path), "--levels", "2", "--executor", "sync"]
    )
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "'category'" in notes[0] and "--band-dim category" in notes[0]
    assert (
        "note:"
        not in CliRunner()
        .invoke(app, ["pyramid", "plan", str(path), "--band-dim", "category"])
        .output
    )


# ------------------------------------------------------------------- content, not just keys


def _sharded(tmp_path, name="edit.zarr"):
    """A 256x320 float field in 64x64 shards, written with xarray (so it has a CF fill)."""
    rng = np.random.default_rng(11)
    t = (280 + rng.standard_normal((256, 320))).astype("float32")
    ds = xr.Dataset(
        {"t": (("y", "x"), t, {"units": "K"})},
        coords={"y": np.linspace(50, 40, 256), "x": np.linspace(0, 10, 320)},
    )
    path = tmp_path / name
    enc = {"t": {"chunks": (64, 64), "_FillValue": -9999.0}}
    ds.to_zarr(path, zarr_format=3, mode="w", encoding=enc, consolidated=False)
    return path


def _level0(path):
    return xr.open_zarr(path, consolidated=False)["t"].values.astype(np.float64)


def test_an_in_place_edit_rebuilds_exactly_the_shards_that_depend_on_it(tmp_path):
    import zarr

    path = _sharded(tmp_path)
    build(str(path), levels=3, max_shard=32, executor="sync")
    assert verify(str(path), executor="sync").ok
    a = zarr.open_array(str(path / "t"), mode="r+")
    a[70:100, 200:250] = 1000.0  # same object, new bytes: level-0 shard (1, 3)
    res = verify(str(path), executor="sync")
    assert not res.ok and any("changed in place" in f.detail for f in res.failures)
    r = CliRunner().invoke(
        app, ["pyramid", "build", str(path), "--levels", "3", "--max-shard", "32",
              "--executor", "sync"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    note = next(ln for ln in r.output.splitlines() if "changed in place" in ln)
    assert "(1 object(s))" in note
    # a 64 px level-0 shard pools into one 32 px shard at 2x, and one shard at 4x and 8x
    assert "rebuilding the 3 of 28" in note, note
    _assert_mean_levels(path, "t", _level0(path))
    assert verify(str(path), executor="sync").ok


def test_rebuild_from_after_an_append_refreshes_the_backup_and_runs_twice(tmp_path):
    path = _sharded(tmp_path)
    build(str(path), levels=2, executor="sync")
    more = xr.Dataset(
        {"t": (("y", "x"), np.full((64, 320), 290, "float32"), {"units": "K"})},
        coords={"y": np.linspace(39.96, 37.5, 64), "x": np.linspace(0, 10, 320)},
    )
    more.to_zarr(path, append_dim="y", consolidated=False)
    r = CliRunner().invoke(app, ["pyramid", "build", str(path), "--executor", "sync"])
    assert r.exit_code == 2 and "--rebuild-from 2x" in r.output
    for _ in range(2):  # a rebuilt level leaves no empty directory behind to trip the next
        r = CliRunner().invoke(
            app, ["pyramid", "build", str(path), "--rebuild-from", "2x", "--executor", "sync"]
        )
        assert r.exit_code == 0, r.output
        res = verify(str(path), executor="sync")
        assert res.ok, res.failures
    _assert_mean_levels(path, "t", _level0(path))


def test_a_store_built_before_the_record_layout_reads_without_warnings_after_a_build(tmp_path):
    """An older build kept `.pyramid/plan.json` and `backup.json`: the toolkit reads it without
    a warning, and the next build moves both into the record layout (no stray objects left)."""
    import warnings

    path = _write(tmp_path / "old.zarr", "t", _field(), {"units": "K"}, {})
    build(str(path), levels=2, executor="sync")
    for name in ("plan", "backup"):  # what an earlier toolkit wrote
        body = (path / ".pyramid" / name / "c" / "0").read_bytes()
        shutil.rmtree(path / ".pyramid" / name)
        (path / ".pyramid" / f"{name}.json").write_bytes(body)
    (path / ".pyramid" / "zarr.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan(str(path)).method == "mean"
    build(str(path), levels=2, executor="sync")
    records = sorted(p.name for p in (path / ".pyramid").iterdir())
    assert records == ["backup", "plan", "prints", "zarr.json"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for group in (None, "2x"):
            xr.open_zarr(path, group=group, consolidated=False).load()
            xr.open_zarr(path, group=group, consolidated=True).load()
    assert verify(str(path), executor="sync").ok


def test_a_grid_mapping_written_as_a_coordinate_reaches_every_level(tmp_path):
    """rioxarray keeps `spatial_ref` as a coordinate: xarray lists it in the variable's
    `coordinates`; it is still the levels' CRS variable, and no variable of its own."""
    ds = xr.Dataset(
        {"t": (("y", "x"), _field(), {"units": "K", "grid_mapping": "spatial_ref"})},
        coords={**_coords(), "spatial_ref": ((), 0, {"grid_mapping_name": "latitude_longitude"})},
    )
    path = tmp_path / "rio.zarr"
    ds.to_zarr(path, zarr_format=3, mode="w", consolidated=False)
    assert (
        "spatial_ref"
        in json.loads((path / "t" / "zarr.json").read_text())["attributes"]["coordinates"]
    )
    p = plan(str(path))
    assert p.variables == ("t",)
    build(str(path), levels=2, executor="sync")
    lvl = open_level(str(path), "2x")
    assert lvl["spatial_ref"].attrs["grid_mapping_name"] == "latitude_longitude"
    assert lvl["t"].attrs["grid_mapping"] == "spatial_ref"
    assert verify(str(path), executor="sync").ok
