"""The verifier's checklist complete (issue 50, item 6): coverage (a window with valid level-0
data is never empty at the level, one without is nodata), value range (each value within its
level-0 window: min..max for a mean, on the arc for a circular mean, one of its labels for
mode), and, for a repo build, the first, middle and last task of every worker stripe sampled.
Each check is shown failing on a defect planted in one level shard, through the real CLI: exit 1
and a line naming the check, the level and the shard."""

from __future__ import annotations

import re

import numpy as np
import xarray as xr
import zarr
from typer.testing import CliRunner

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.cli import app
from toolkit.examples import synthetic

SYNC = ("--executor", "sync")


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def built(path, kind: str) -> None:
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16), kind=kind)
    code, out = cli("pyramid", "build", path, "--levels", "2", *SYNC)
    assert code == 0, out
    code, out = cli("pyramid", "verify", path, *SYNC)
    assert code == 0, out


def plant(path, group: str, name: str, where, value) -> str:
    """Write `value` at level cell `where` of `group/name`; the shard's key."""
    arr = zarr.open_array(str(path), path=f"{group}/{name}", mode="r+")
    arr[where] = value
    shard = arr.shards or arr.chunks
    return f"{group}/{name}/c/" + "/".join(str(i // s) for i, s in zip(where, shard, strict=True))


def failing(path, check: str, group: str, shard: str) -> str:
    code, out = cli("pyramid", "verify", path, *SYNC)
    assert code == 1, out
    line = next(
        (ln for ln in out.splitlines() if ln.startswith(f"FAIL [{check}] level {group} {shard}:")),
        None,
    )
    assert line is not None, out
    return line


def cell(path, group: str, name: str, valid: bool) -> tuple[int, int]:
    count = zarr.open_array(str(path), path=f"{group}/{name}_count", mode="r")[...]
    ys, xs = np.nonzero(count > 0 if valid else count == 0)
    return int(ys[len(ys) // 2]), int(xs[len(xs) // 2])


def test_checks_run_cheapest_first(tmp_path):
    built(tmp_path / "s.zarr", "sparse")
    _, out = cli("pyramid", "verify", tmp_path / "s.zarr", *SYNC)
    rows = [m.group(1) for m in re.finditer(r"│ (\w+)\s+│\s+\d+ │", out)]
    assert rows == ["counts", "metadata", "coverage", "range", "samples", "client"], out


def test_a_mean_outside_its_window_fails_the_range_check(tmp_path):
    store = tmp_path / "s.zarr"
    built(store, "sparse")
    where = cell(store, "2x", "field", valid=True)
    shard = plant(store, "2x", "field", where, 1e6)
    line = failing(store, "range", "2x", shard)
    assert "outside its level-0 window's min..max" in line and "1000000.0" in line


def test_an_empty_window_where_level_0_has_data_fails_coverage(tmp_path):
    store = tmp_path / "s.zarr"
    built(store, "sparse")
    shard = plant(store, "4x", "field", cell(store, "4x", "field", valid=True), np.nan)
    line = failing(store, "coverage", "4x", shard)
    assert "with valid level-0 data are empty at the level" in line


def test_a_value_where_level_0_has_none_fails_coverage(tmp_path):
    store = tmp_path / "s.zarr"
    built(store, "sparse")
    shard = plant(store, "2x", "field", cell(store, "2x", "field", valid=False), 20.0)
    assert "without level-0 data hold a value" in failing(store, "coverage", "2x", shard)


def test_a_mode_label_its_window_lacks_fails_the_range_check(tmp_path):
    store = tmp_path / "c.zarr"
    built(store, "categorical")
    level = zarr.open_array(str(store), path="2x/field", mode="r")[...]
    base = zarr.open_array(str(store), path="field", mode="r")[...]
    y, x = next(
        (y, x) for y, x in zip(*np.nonzero(level), strict=True)
        if 4 not in base[2 * y : 2 * y + 2, 2 * x : 2 * x + 2]
    )  # fmt: skip
    shard = plant(store, "2x", "field", (int(y), int(x)), 4)
    assert "not among its level-0 window's labels" in failing(store, "range", "2x", shard)


def test_a_direction_off_its_windows_arc_fails_the_range_check(tmp_path):
    store = tmp_path / "wind.zarr"
    rng = np.random.default_rng(1)
    wd = (rng.uniform(-20, 20, (32, 48)) % 360).astype("float32")  # around north: wraps 0
    ds = xr.Dataset(
        {"wd": (("y", "x"), wd, {"units": "degree", "standard_name": "wind_from_direction"})},
        coords={"y": 50 - 0.25 * np.arange(32), "x": 250 + 0.25 * np.arange(48)},
    )
    ds["wd"].encoding["chunks"] = (16, 16)
    ds.to_zarr(store, zarr_format=3, mode="w", consolidated=False)
    code, out = cli("pyramid", "build", store, "--levels", "2", *SYNC)
    assert code == 0, out
    code, out = cli("pyramid", "verify", store, *SYNC)
    assert code == 0, out  # means across 0/360 lie on their arcs
    shard = plant(store, "4x", "wd", (3, 5), 180.0)
    assert "off the arc of its level-0 window's directions" in failing(store, "range", "4x", shard)


def test_a_repo_build_is_sampled_at_the_edges_of_every_stripe(gfs_repo):
    """9 shards a level, `--sample 2`: spread samples are tasks 0 and 8; the two contiguous
    stripes (0-4, 5-8) add 2, 4, 5 and 6. A defect in task 4 (where a worker stopped) is
    found only by following the stripes."""
    code, out = cli("pyramid", "build", gfs_repo, "-v", "temperature_2m", "--levels", "1", *SYNC)
    assert code == 0, out
    ref = R.RepoRef(storage.open_store(str(gfs_repo)), "anonymous")
    keys = sorted(k for k in storage.list_keys(R.BranchView(ref, "main"), "2x/temperature_2m/c/"))
    assert len(keys) == 9
    target = keys[4]
    index = tuple(int(i) for i in target.split("/c/")[1].split("/"))

    def spoil(ref, session) -> None:
        view = R.SessionView(ref.url, session)
        arr = zarr.open_array(view.zarr(), path="2x/temperature_2m", mode="r+")
        shard = arr.shards or arr.chunks
        where = tuple(i * s for i, s in zip(index, shard, strict=True))
        arr[where] = 1e6

    T.commit_on([ref], "main", spoil, "a defect in one level shard", fresh=True)
    code, out = cli("pyramid", "verify", gfs_repo, "--sample", "2", *SYNC)
    assert code == 1, out
    assert f"[range] level 2x {target}:" in out, out
    assert f"[samples] level 2x {target}:" in out or f"[reference] level 2x {target}:" in out
