"""Pyramids of a virtual GRIB dataset, inside its Icechunk repo: real GRIB2 (encoded by ecCodes),
refs backfilled into a real repo, level 0 decoded by gribberish's codec on the workers, levels
written through forks and landed on main in one move."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.virtual.test_backfill import START, sim
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.simulate import expected_values
from toolkit.pyramid import build, plan, verify
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.repo import PREFIX
from toolkit.virtual.backfill import backfill

VARS = ["temperature", "temperature_2m"]
TOOLKIT = str(Path(sys.executable).with_name("toolkit"))  # the console script users run


def window_reference(a: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the valid (non-NaN) level-0 pixels of every f x f window (edge windows partial),
    and how many there are: numpy only, straight from level 0."""
    *lead, h, w = a.shape
    ny, nx = -(-h // f), -(-w // f)
    pad = np.full((*lead, ny * f, nx * f), np.nan, a.dtype)
    pad[..., :h, :w] = a
    win = pad.reshape(*lead, ny, f, nx, f)
    count = np.sum(~np.isnan(win), axis=(-3, -1))
    total = np.nansum(win.astype(np.float64), axis=(-3, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return mean, count


def circular_reference(deg: np.ndarray, f: int) -> np.ndarray:
    """Each window's mean direction in degrees [0, 360): the angle of the summed unit vectors
    of its valid pixels (numpy only); NaN where none is valid or they cancel."""
    h, w = deg.shape
    ny, nx = -(-h // f), -(-w // f)
    pad = np.full((ny * f, nx * f), np.nan)
    pad[:h, :w] = deg
    win = pad.reshape(ny, f, nx, f)
    ok = ~np.isnan(win)
    rad = np.radians(np.where(ok, win, 0.0))
    s = np.where(ok, np.sin(rad), 0).sum(axis=(1, 3))
    c = np.where(ok, np.cos(rad), 0).sum(axis=(1, 3))
    n = ok.sum(axis=(1, 3))
    out = np.degrees(np.arctan2(s, c)) % 360
    out[(n == 0) | (np.hypot(s, c) <= 1e-6 * n)] = np.nan
    return out


def level0(files, name: str) -> np.ndarray:
    """The simulator's encoded values (what ecCodes wrote), as [init, lead, (level,) y, x]."""
    inits = sorted({f.init for f in files})
    leads = sorted({f.lead for f in files})
    levels = [0.4, 500.0, 1000.0] if name == "temperature" else [None]
    out = []
    for i in inits:
        row = []
        for lead in leads:
            planes = [expected_values(name, i, lead, level=lv) for lv in levels]
            row.append(np.stack(planes) if name == "temperature" else planes[0])
        out.append(np.stack(row))
    return np.stack(out).astype(np.float32)


@pytest.fixture
def repo(tmp_path):
    _archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    backfill(ds, start=START, workers=2, executor="sync")
    return tmp_path / "repo", files, ds


def main_level(path, group: str | None) -> xr.Dataset:
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    return xr.open_zarr(R.readonly(handle).store, group=group, consolidated=False)


def test_every_level_equals_numpy_of_the_encoded_fields(repo):
    path, files, _ = repo
    report = build(str(path), VARS, levels=3, executor="sync")
    assert [s.name for s in report.stages] == [
        "setup", "2x", "2x-commit", "4x", "4x-commit", "8x", "8x-commit", "finalize",
    ]  # fmt: skip
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    assert R.branches(handle) == ["main"]  # the temp branch and its marker are gone
    for name in VARS:
        a = level0(files, name)
        for k in (1, 2, 3):
            ds = main_level(path, f"{2**k}x")
            want, count = window_reference(a, 2**k)
            got = ds[name].values
            np.testing.assert_array_equal(ds[f"{name}_count"].values, count)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
            assert np.array_equal(np.isnan(got), count == 0)
    # the levels and level 0 are one snapshot: the level commits are on main's history
    messages = [c.message for c in R.history(handle)]
    assert messages[0].startswith("pyramid 8x") and any("setup" in m for m in messages)
    root = main_level(path, None)
    assert [x["asset"] for x in root.attrs["multiscales"]["layout"]] == [".", "2x", "4x", "8x"]
    assert verify(str(path), executor="sync").ok
    # built again with nothing to do: not a shard written, not a commit made
    head = R.snapshot_of(R.open_repo(storage.open_store(str(path)), fresh=True))
    again = build(str(path), VARS, levels=3, executor="sync")
    assert sum(again.stage(g).written for g in ("2x", "4x", "8x")) == 0
    assert R.snapshot_of(R.open_repo(storage.open_store(str(path)), fresh=True)) == head


def test_chunks_rewritten_in_place_rebuild_the_levels_they_feed(tmp_path):
    """`virtual backfill --overwrite-chunks` re-emits a republished file's refs over the same
    cells: the next build rebuilds the levels of exactly that position from the new values."""
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    backfill(ds, start=START, executor="sync")
    path = tmp_path / "repo"
    build(str(path), ["temperature_2m"], levels=2, executor="sync")
    f = files[3]
    data, index = archive.encode(f, generation=1)  # republished with new values
    storage.put(archive.store, archive.data_key(f), data)
    storage.put(archive.store, archive.index_key(f), index.encode())
    backfill(ds, start=START, executor="sync", overwrite_chunks=True)
    other = files[0]  # a build of another position (as an update fire does) rebuilds it too
    sel0 = {
        "init_time": np.datetime64(other.init, "ns"),
        "lead_time": np.timedelta64(other.lead, "h").astype("timedelta64[ns]"),
    }
    build(
        str(path), ["temperature_2m"], levels=2, executor="sync",
        select={k: [v] for k, v in sel0.items()},
    )  # fmt: skip
    sel = {
        "init_time": np.datetime64(f.init, "ns"),
        "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]"),
    }
    new = expected_values("temperature_2m", f.init, f.lead, generation=1).astype(np.float32)
    for k in (1, 2):
        got = main_level(path, f"{2**k}x")["temperature_2m"].sel(sel).values
        want, _ = window_reference(new, 2**k)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    # the position whose file did not change keeps its levels
    old, _ = window_reference(
        expected_values("temperature_2m", other.init, other.lead).astype(np.float32), 2
    )
    got0 = main_level(path, "2x")["temperature_2m"].sel(sel0).values
    np.testing.assert_allclose(got0, old, rtol=2e-6, atol=0)
    assert verify(str(path), executor="sync").ok


def test_select_and_latest_build_only_those_positions_then_extend(repo):
    path, _files, _ = repo
    r = build(
        str(path), ["temperature_2m"], levels=2, executor="sync",
        select={"init_time": ["2025-08-01T06"], "lead_time": ["3h"]},
    )  # fmt: skip
    assert r.stage("2x").written == 1
    sel = {"init_time": ["2025-08-01T06"], "lead_time": ["3h"]}
    assert verify(str(path), executor="sync", select=sel).ok  # what was built checks out
    assert not verify(str(path), executor="sync").ok  # the other positions have no levels
    got = main_level(path, "2x")["temperature_2m_count"].values
    assert (got[1, 1] > 0).all() and got.sum() == got[1, 1].sum()  # one (init, lead) only
    latest = build(str(path), ["temperature_2m"], levels=2, executor="sync", latest=True)
    assert latest.stage("2x").written == 3  # the newest init's three leads
    whole = build(str(path), ["temperature_2m"], levels=2, executor="sync")
    # the positions built before are on main: not rebuilt
    assert whole.stage("2x").skipped == 4 and whole.stage("2x").written == 12 - 4
    assert verify(str(path), executor="sync").ok


def test_verify_fails_a_tampered_level_and_a_missing_one(repo):
    path, _, _ = repo
    build(str(path), ["temperature_2m"], levels=2, executor="sync")
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    s = R.writable(handle)
    arr = zarr.open_array(s.store, path="4x/temperature_2m", mode="r+")
    arr[2, 1, 0, 0] = arr[2, 1, 0, 0] + 1.0
    R.commit(s, "tamper")
    result = verify(str(path), sample=12, executor="sync")
    assert not result.ok and any(f.level == "4x" for f in result.failures)
    s = R.writable(handle)
    storage.delete(R.SessionView("x", s), "2x/temperature_2m/c/3/2/0/0")
    R.commit(s, "drop a shard")
    missing = verify(str(path), executor="sync")
    assert any(f.check == "count" and "3/2/0/0" in f.shard for f in missing.failures)


def test_the_build_runs_on_process_workers(repo, local_cluster):
    path, files, _ = repo
    report = build(str(path), ["temperature"], levels=2, cluster=local_cluster)
    assert report.executor == "dask" and report.stage("4x-commit").gate_have == 72
    want, _ = window_reference(level0(files, "temperature"), 4)
    np.testing.assert_allclose(main_level(path, "4x")["temperature"].values, want, rtol=2e-6)


def test_a_build_interrupted_after_a_level_resumes_on_its_branch(repo):
    path, _, _ = repo
    from toolkit.engine import run
    from toolkit.pyramid.levels import plan_source
    from toolkit.pyramid.repo import repo_plan, repo_source

    ref = R.RepoRef(storage.open_store(str(path)))
    src, _ = repo_source(ref, ["temperature_2m"])
    p = plan_source(src, None, None, 2)
    full = repo_plan(ref, src, p)
    partial = type(full)(full.name, full.stages[:3], full.holds_gil)  # setup, 2x, 2x-commit
    run(partial, executor="sync")
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    flying = [b for b in R.branches(handle) if b.startswith(PREFIX)]
    assert len(flying) == 2  # the build's branch and its marker; main has no level yet
    assert "2x" not in dict(zarr.open_group(R.readonly(handle).store, mode="r").groups())
    again = build(str(path), ["temperature_2m"], levels=2, executor="sync")
    assert again.stage("2x").skipped == 12 and again.stage("4x").written == 12
    assert R.branches(R.open_repo(storage.open_store(str(path)), fresh=True)) == ["main"]


def test_a_retried_level_commit_does_not_commit_again(repo):
    """The level-commit nodes are the transaction's: a node retried after its commit landed
    finds its group on the branch and returns that commit."""
    path, _, _ = repo
    from toolkit.pyramid.levels import plan_source
    from toolkit.pyramid.repo import branch_name, repo_plan, repo_source
    from toolkit.tasks import Named

    ref = R.RepoRef(storage.open_store(str(path)))
    src, _ = repo_source(ref, ["temperature_2m"])
    p = plan_source(src, None, None, 1)
    setup, work, commit, _ = repo_plan(ref, src, p).stages
    setup.service(Named("setup"))
    (group,) = commit.tasks_from((work.service(list(work.tasks)),))
    first, again = commit.service(group), commit.service(group)
    assert first.snapshot is not None and again.snapshot == first.snapshot
    history = R.history(ref.open(fresh=True), branch_name(p))
    assert [c.metadata.get("group") for c in history].count(group.token) == 1


def test_main_moved_during_a_build_is_refused_then_the_rerun_lands(repo):
    path, _, _ = repo
    from toolkit.engine import run
    from toolkit.pyramid.levels import plan_source
    from toolkit.pyramid.repo import repo_plan, repo_source

    ref = R.RepoRef(storage.open_store(str(path)))
    src, _ = repo_source(ref, ["temperature_2m"])
    full = repo_plan(ref, src, plan_source(src, None, None, 1))
    run(type(full)(full.name, full.stages[:3], full.holds_gil), executor="sync")
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    s = R.writable(handle)  # a fire lands on main meanwhile
    zarr.open_group(s.store).attrs["fire"] = "landed"
    R.commit(s, "a fire")
    with pytest.raises(R.BranchMoved, match="main moved while the pyramid was built"):
        run(type(full)(full.name, full.stages[3:], full.holds_gil), executor="sync")
    assert "2x" not in dict(zarr.open_group(R.readonly(handle).store, mode="r").groups())
    build(str(path), ["temperature_2m"], levels=1, executor="sync")
    root = main_level(path, None)
    assert root.attrs["fire"] == "landed" and "multiscales" in root.attrs


def test_plan_of_a_repo_reads_its_manifests(repo):
    path, _, _ = repo
    p = plan(str(path), ["temperature"], levels=2, latest=True)
    assert [len(lvl.tasks) for lvl in p.levels] == [9, 9]  # 3 leads x 3 levels of one init


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--select", "init_time"], "want DIM=VALUE"),
        (["--select", "init_time=1999-01-01"], "--select init_time=1999-01-01: no such init_time"),
        (["--select", "latitude=50"], "not a leading dim"),
        (["--variable", "nope"], "variable 'nope': no such array"),
    ],
)
def test_bad_positions_are_one_line_and_exit_2(repo, args, says):
    path, _, _ = repo
    r = subprocess.run(
        [TOOLKIT, "pyramid", "build", str(path), "--levels", "1", *args],
        capture_output=True,
        text=True,
    )
    lines = [x for x in r.stderr.splitlines() if x.strip() and "WARN" not in x and "at " not in x]
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([x for x in lines if "error" in x.lower()]) <= 1
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    assert R.branches(handle) == ["main"]  # nothing was started


def test_select_on_a_zarr_store_is_refused(tmp_path):
    from toolkit.examples.synthetic import write_store

    store = storage.open_store(str(tmp_path / "z"))
    write_store(store, (64, 64))
    with pytest.raises(PlanError, match="positions are chosen only in an Icechunk repo"):
        build(store, latest=True, executor="sync")


def test_settings_record_refuses_other_settings(repo):
    path, _, _ = repo
    build(str(path), ["temperature_2m"], levels=1, executor="sync")
    with pytest.raises(PlanError, match="main's levels were built with levels=1"):
        build(str(path), ["temperature_2m"], levels=2, executor="sync")
    doc = main_level(path, None).attrs["pyramid:settings"]
    assert json.loads(json.dumps(doc))["variables"] == ["temperature_2m"]


def test_update_builds_the_fires_levels_and_validation_covers_them(tmp_path):
    """`toolkit virtual update ... --pyramid V`: the levels of what the fire committed land on
    main in the fire; the fire's validation checks every level, and fails on a bad one."""
    from typer.testing import CliRunner

    from tests.virtual.test_cli_virtual import four_cycles
    from toolkit.cli import app

    runner = CliRunner()
    archive = four_cycles(tmp_path)
    files = archive.files()
    archive.publish(files[:6])
    path = tmp_path / "repo"
    common = ["--repo", str(path), "--source", str(tmp_path / "src")]
    res = runner.invoke(
        app, ["virtual", "backfill", "sim-gfs", *common, "--start", "2025-08-01T00",
              "--executor", "sync"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    build(str(path), ["temperature_2m"], levels=2, executor="sync")
    archive.publish(files[6:])
    fire = ["virtual", "update", "sim-gfs", *common, "--fire-time", "2025-08-01T18:00"]
    res = runner.invoke(app, [*fire, "--pyramid", "temperature_2m"])
    assert res.exit_code == 0, res.output
    assert "levels: " in res.output and "validation passed" in res.output
    a = level0(files, "temperature_2m")
    for k in (1, 2):
        want, count = window_reference(a, 2**k)
        ds = main_level(path, f"{2**k}x")
        assert ds.sizes["init_time"] == 4  # grown with level 0
        np.testing.assert_array_equal(ds["temperature_2m_count"].values, count)
        np.testing.assert_allclose(ds["temperature_2m"].values, want, rtol=2e-6)
    handle = R.open_repo(storage.open_store(str(path)), fresh=True)
    assert R.branches(handle) == ["main"]
    # a bad level on main fails the next fire's validation, naming it
    s = R.writable(handle)
    zarr.open_array(s.store, path="2x/temperature_2m", mode="r+")[0, 0, 0, 0] = 1e9
    R.commit(s, "tamper")
    res = runner.invoke(app, [*fire, "--pyramid", "temperature_2m", "--sample", "4"])
    assert res.exit_code == 1 and "pyramid [" in res.output, res.output


def test_real_grib_levels_equal_numpy_of_eccodes_decode(tmp_path):
    """NOAA's GFS-Wave file (land masked by its bitmap) as refs; every level of every message
    equals a numpy pyramid of ecCodes' decode of the same message (an independent decoder)."""
    from tests.virtual.test_real_bytes import INIT, wave_job

    job, fields = wave_job(tmp_path)
    backfill(job, start=np.datetime64(INIT, "ns"), workers=1, executor="sync")
    build(str(tmp_path / "repo"), levels=3, executor="sync")
    compared = 0
    for k in (1, 2, 3):
        ds = main_level(tmp_path / "repo", f"{2**k}x").isel(init_time=0, lead_time=0)
        for name, element in {"wind_speed": "WIND", "significant_height_combined": "HTSGW"}.items():
            want, count = window_reference(fields[(element, "surface")][0].astype("float32"), 2**k)
            np.testing.assert_array_equal(ds[f"{name}_count"].values, count)
            np.testing.assert_allclose(ds[name].values, want, rtol=2e-6, atol=1e-6)
            compared += 1
        # the wave direction (CF sea_surface_wave_from_direction) is a circular mean
        want = circular_reference(fields[("DIRPW", "surface")][0].astype("float64"), 2**k)
        got = ds["primary_wave_direction"].values.astype("float64")
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.nanmax(np.abs((got - want + 180) % 360 - 180)) < 1e-3
        assert "circular" in ds["primary_wave_direction"].attrs["cell_methods"]
        compared += 1
        for level in (1, 2, 3):
            want, _ = window_reference(
                fields[("SWELL", f"{level} in sequence")][0].astype("float32"), 2**k
            )
            got = ds["swell_height"].sel(level=float(level)).values
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
            compared += 1
    assert compared == 18
    assert verify(str(tmp_path / "repo"), executor="sync").ok


@pytest.mark.parametrize("server", ["s3_endpoint", "seaweed_endpoint"])
def test_a_repo_on_s3_gets_its_levels_on_process_workers(server, request, local_cluster):
    """The repo and its GRIB sources on an S3 server on loopback (moto; SeaweedFS, a real S3
    server), the levels built by two worker processes and read back anonymously."""
    from tests.conftest import make_bucket, s3_options
    from tests.virtual.test_repo import public_bucket

    endpoint = request.getfixturevalue(server)
    opts = s3_options(endpoint)
    _, files, ds = sim(
        storage.open_store(f"s3://{public_bucket(endpoint)}/src", **opts),
        storage.open_store(f"s3://{make_bucket(endpoint)}/repo", **opts),
    )
    backfill(ds, start=START, workers=2, cluster=local_cluster)
    url = ds.repo.url
    report = build(
        url, ["temperature_2m"], levels=2, cluster=local_cluster, options=storage.Options(**opts)
    )
    assert report.stage("4x-commit").gate_have == 24
    handle = R.open_repo(storage.open_store(url, **opts), fresh=True)
    got = xr.open_zarr(R.readonly(handle).store, group="2x", consolidated=False)
    want, count = window_reference(level0(files, "temperature_2m"), 2)
    np.testing.assert_array_equal(got["temperature_2m_count"].values, count)
    np.testing.assert_allclose(got["temperature_2m"].values, want, rtol=2e-6)
    assert verify(url, executor="sync", private=True, options=storage.Options(**opts)).ok
