"""xarray appends, built incrementally (issue 50, item 3).

After `ds.to_zarr(store, append_dim="time")` the same `pyramid build STORE` builds only the new
positions' shards, leaves the existing chunk objects as they were (bytes and mtime) and puts
back the root metadata xarray's append replaced; in between, readers and `verify` say what
happened in one line. Oracles: xarray's `coarsen` of level 0, file bytes and mtimes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.metadata import MULTISCALES_UUID, SPATIAL_UUID

ARGS = ["--levels", "2", "--executor", "sync"]


def _days(first: int, n: int) -> xr.Dataset:
    """`n` daily 64x96 fields from day `first` on, NaN holes included."""
    rng = np.random.default_rng(first)
    t = (280 + rng.standard_normal((n, 64, 96))).astype("float32")
    t[:, 5:9, 10:20] = np.nan
    days = np.datetime64("2026-01-01", "ns") + np.arange(first, first + n) * np.timedelta64(1, "D")
    return xr.Dataset(
        {"t": (("time", "y", "x"), t, {"units": "K"})},
        coords={"time": days, "y": np.linspace(50, 40, 64), "x": np.linspace(0, 12, 96)},
        attrs={"title": "daily t"},
    )


def _store(path: Path, n: int, per_shard: int) -> Path:
    enc = {"t": {"chunks": (per_shard, 32, 32)}}
    _days(0, n).to_zarr(path, zarr_format=3, mode="w", encoding=enc)
    return path


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["pyramid", *args])
    return r.exit_code, r.output


def _build_json(path: Path) -> dict:
    code, out = _cli("build", str(path), *ARGS, "--json")
    assert code == 0, out
    return json.loads(out[out.index("{") :])


def _level_chunks(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every chunk object of the levels' data and count arrays: bytes and mtime (ns)."""
    out = {}
    for level in ("2x", "4x"):
        for p in sorted((path / level).rglob("*")):
            if p.is_file() and re.search(r"/t(_count)?/c/", p.as_posix()):
                out[p.relative_to(path).as_posix()] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


def _time_index(key: str) -> int:
    return int(re.search(r"/c/(\d+)/", key).group(1))


def _assert_levels_are_window_means(path: Path) -> None:
    base = xr.open_zarr(path)["t"].astype("float64")
    for f in (2, 4):
        want = base.coarsen(y=f, x=f, boundary="pad").mean()  # NaN-skipping window mean
        level = xr.open_zarr(path, group=f"{f}x")
        np.testing.assert_array_equal(level["time"].values, base["time"].values)
        np.testing.assert_allclose(level["t"].values, want.values, rtol=2e-6, equal_nan=True)


@pytest.mark.parametrize(
    ("n", "per_shard", "kept"),
    [(12, 1, 12), (11, 2, 5)],  # one day a shard; two a shard, the last one filled by the append
    ids=["a-shard-a-day", "fills-the-last-shard"],
)
def test_an_append_builds_only_its_positions_and_restores_the_root(tmp_path, n, per_shard, kept):
    path = _store(tmp_path / "daily.zarr", n, per_shard)
    _build_json(path)
    before = _level_chunks(path)
    _days(n, 1).to_zarr(path, append_dim="time")
    attrs = json.loads((path / "zarr.json").read_text())["attributes"]
    assert "multiscales" not in attrs  # what xarray's append does to the root

    # between the append and the build: one line saying what happened
    with pytest.raises(PlanError) as err:
        xr.open_datatree(path, engine="toolkit")
    said = str(err.value)
    assert f"level 0 grew along time ({n} -> {n + 1}) since the build: run" in said
    assert "pyramid build" in said and "\n" not in said
    code, out = _cli("verify", str(path), "--executor", "sync")
    assert code == 1 and f"level 0 grew along time ({n} -> {n + 1})" in out, out
    assert "FAIL" not in out or out.count("FAIL") == 1, out

    report = _build_json(path)  # the same command, no --rebuild-from
    assert any("grew along time" in note for note in report["notes"]), report
    after = _level_chunks(path)
    for key, held in before.items():  # the shards of the positions built before: untouched
        if _time_index(key) < kept:
            assert after[key] == held, key
    shards = -(-(n + 1) // per_shard)  # along time, after the append
    touched = {k for k in after if before.get(k) != after[k]}
    assert {_time_index(k) for k in touched} == set(range(kept, shards))
    for stage in report["stages"]:  # only the shards holding the appended day are written
        assert stage["written"] == stage["tasks"] // shards * (shards - kept)

    attrs = json.loads((path / "zarr.json").read_text())["attributes"]
    assert attrs["title"] == "daily t"
    assert [x["asset"] for x in attrs["multiscales"]["layout"]] == [".", "2x", "4x"]
    assert {MULTISCALES_UUID, SPATIAL_UUID} <= {c["uuid"] for c in attrs["zarr_conventions"]}
    tree = xr.open_datatree(path, engine="toolkit")
    assert tree["2x"].sizes["time"] == n + 1
    _assert_levels_are_window_means(path)
    code, out = _cli("verify", str(path), "--executor", "sync")
    assert code == 0, out


def test_a_region_rewrite_goes_through_the_in_place_edit_path(tmp_path):
    """`to_zarr(region=...)` rewrites day 3: the shards of day 3 are rebuilt, no other."""
    path = _store(tmp_path / "daily.zarr", 6, 1)
    _build_json(path)
    before = _level_chunks(path)
    patch = _days(3, 1).drop_vars(["y", "x"])
    patch["t"][:] = 300.0
    patch.to_zarr(path, region={"time": slice(3, 4)})
    report = _build_json(path)
    assert any("changed in place" in note for note in report["notes"]), report
    assert not any("grew" in note for note in report["notes"])
    after = _level_chunks(path)
    changed = {k for k in before if after[k] != before[k]}
    assert changed and {_time_index(k) for k in changed} == {3}
    _assert_levels_are_window_means(path)
    assert _cli("verify", str(path), "--executor", "sync")[0] == 0


def test_an_edit_at_the_old_positions_beside_an_append_is_never_left_stale(
    tmp_path: Path,
) -> None:
    """The digest cannot vouch for the old positions once level 0 grew, so their prints must.
    A region write that empties a chunk (zarr deletes an all-nodata chunk) leaves nothing to
    compare: refused, nothing rebuilt on a guess. A chunk written where there was none (the
    hole filled) is an edit, not an append: its shards are rebuilt with the new ones."""
    store = _store(tmp_path / "emptied.zarr", 3, 1)
    _build_json(store)
    blank = _days(0, 1).isel(time=slice(0, 1))
    blank["t"][:] = np.nan
    blank.drop_vars(["y", "x"]).to_zarr(store, region={"time": slice(1, 2)})
    _days(3, 1).to_zarr(store, append_dim="time")
    code, out = _cli("build", str(store), *ARGS)
    assert code != 0 and "is gone since the last build" in out and "--rebuild-from 2x" in out

    store = tmp_path / "filled.zarr"
    first = _days(0, 3)
    first["t"][1] = np.nan  # day 1 all nodata: no chunk objects at all
    first.to_zarr(store, zarr_format=3, mode="w", encoding={"t": {"chunks": (1, 32, 32)}})
    _build_json(store)
    _days(1, 1).drop_vars(["y", "x"]).assign_coords(time=first.time[1:2]).to_zarr(
        store, region={"time": slice(1, 2)}
    )
    _days(3, 1).to_zarr(store, append_dim="time")
    doc = _build_json(store)
    assert any("changed in place" in n for n in doc["notes"]), doc["notes"]
    _assert_levels_are_window_means(store)
