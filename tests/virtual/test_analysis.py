"""An analysis dataset (valid time, no lead dim): instants from lead 0, the accumulation from the
previous hour's lead 1. At the extending edge the lead-1 file waits until its hour's lead 0 has
landed, so main never shows a ragged leading edge, whatever order the source publishes in;
an interior hour (newer hours' lead 0 on main or landing with it) fills in as its files arrive,
even when its own lead 0 never publishes."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.examples.datasets import sim_hrrr_analysis
from toolkit.examples.simulate import SimFile, expected_values, make_archive
from toolkit.virtual import open_dataset
from toolkit.virtual.backfill import backfill
from toolkit.virtual.builtin import DATASETS
from toolkit.virtual.dataset import Analysis, withheld
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.update import update
from toolkit.virtual.write import Job

H = timedelta(hours=1)
T0 = datetime(2025, 8, 1)


def hour(h: int) -> np.datetime64:
    return np.datetime64(T0 + h * H, "ns")


def files_of(h: int) -> tuple[SimFile, SimFile]:
    """The two files of valid hour `h`: lead 0 of its own cycle, lead 1 of the one before."""
    return SimFile(T0 + h * H, 0, None), SimFile(T0 + (h - 1) * H, 1, None)


@pytest.fixture
def world(tmp_path):
    src = storage.open_store(str(tmp_path / "src"))
    archive = make_archive(
        src, kind="hrrr", inits=[T0 + k * H for k in range(-1, 6)], leads=[0, 1], publish=False
    )
    job = Job(sim_hrrr_analysis(src), R.RepoRef(storage.open_store(str(tmp_path / "repo"))))
    return tmp_path, archive, job


def leading_edge_whole(job: Job) -> list[str]:
    """Every update commit on main whose newest position lacks its lead-0 field (should be
    none; a backfill's own commits were on its branch, never main's head)."""
    repo = job.repo.open(fresh=True)
    t = job.template
    bad = []
    for commit in R.history(repo):
        if "writer" not in commit.metadata:
            continue
        session = R.readonly(repo, snapshot=commit.id)
        extent = committed_extent(session, t)
        if not extent:
            continue
        edge = {"time": t.coords["time"][extent - 1]}
        key = chunk_key(t.geometry(extent), "temperature_2m", edge)
        if not R.chunks_present(session, [(key.variable, key.index)])[0]:
            bad.append(commit.message)
    return bad


def test_analysis_values_come_from_lead_0_and_the_previous_hours_lead_1(world):
    _, archive, job = world
    for h in range(3):
        archive.publish(list(files_of(h)))
    backfill(job, start=hour(0), workers=2, executor="sync")
    ds = open_dataset(job.repo.store)
    assert dict(ds.sizes) == {"time": 3, "latitude": 32, "longitude": 48, "level": 3}
    assert "lead_time" not in ds.dims and "init_time" not in ds.dims
    for h in range(3):
        at = ds.sel(time=hour(h))
        want = expected_values("temperature_2m", T0 + h * H, timedelta(0), None)
        np.testing.assert_array_equal(at["temperature_2m"].values, want.astype("float32"))
        want = expected_values("precipitation_surface", T0 + (h - 1) * H, H, None)
        np.testing.assert_array_equal(at["precipitation_surface"].values, want.astype("float32"))


def test_a_statistics_file_waits_for_its_hours_lead_0(world):
    _, archive, job = world
    for h in range(3):
        archive.publish(list(files_of(h)))
    backfill(job, start=hour(0), workers=2, executor="sync")
    zero, stat = files_of(3)
    archive.publish(stat)  # the source publishes hour 3's accumulation first
    fire = hour(3) + np.timedelta64(10, "m")
    result = update(job, fire_time=fire, scheduled_at=time.time(), deadline_seconds=2.5)
    assert result.ingested == [] and archive.data_url(stat) in result.pending  # withheld
    assert committed_extent(R.readonly(job.repo.open(fresh=True)), job.template) == 3
    archive.publish(zero)
    result = update(job, fire_time=fire, scheduled_at=time.time(), deadline_seconds=2.5)
    assert sorted(result.ingested) == sorted(archive.data_url(f) for f in (zero, stat))
    assert len(result.commits) == 1  # together: the position appears whole
    assert leading_edge_whole(job) == []
    # the rule itself: only a statistics file whose hour's lead 0 is pending is held
    coords = {c.key: c for c in job.region(hour(4), hour(5)).files()}
    z4, s4 = (coords[archive.data_url(f)] for f in files_of(4))
    assert withheld(job.dataset, [s4], [z4, s4]) == {s4.key}
    assert withheld(job.dataset, [s4, z4], [z4, s4]) == set()  # both here: one commit
    assert withheld(job.dataset, [s4], [s4]) == set()  # lead 0 already in the store
    # only at the edge: an hour at or before the ingested-through, or before a lead-0 file
    # landing now, is interior and fills in without its lead 0
    assert withheld(job.dataset, [s4], [z4, s4], ingested_through=hour(3)) == {s4.key}
    assert withheld(job.dataset, [s4], [z4, s4], ingested_through=hour(4)) == set()
    assert withheld(job.dataset, [s4], [z4, s4], ingested_through=hour(5)) == set()
    z5 = next(
        c for c in job.region(hour(5), None).files() if c.key == archive.data_url(files_of(5)[0])
    )
    assert withheld(job.dataset, [s4, z5], [z4, s4, z5]) == set()
    with pytest.raises(ValueError, match="stat_lead_hours must be >= 1"):
        Analysis(stat_lead_hours=0)


def test_out_of_order_publication_never_shows_a_ragged_edge(world):
    tmp_path, archive, job = world
    archive.publish(list(files_of(0)))
    backfill(job, start=hour(0), workers=1, executor="sync")
    order = [f for h in (1, 2, 3) for f in reversed(files_of(h))]  # lead 1 first, every hour
    publisher = threading.Thread(target=lambda: [archive.publish(f) for f in order])
    publisher.start()
    try:
        done = update(job, fire_time=hour(3) + np.timedelta64(5, "m"), deadline_seconds=60)
    finally:
        publisher.join()
    assert sorted(done.ingested) == sorted(map(archive.data_url, order))
    assert leading_edge_whole(job) == []
    res = CliRunner().invoke(
        app,
        ["virtual", "update", "sim-hrrr-analysis", "--repo", str(tmp_path / "repo"),
         "--source", str(tmp_path / "src"), "--fire-time", "2025-08-01T03:20"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "completeness: 3 position(s) checked, 6 files expected, 0 missing" in res.output


def test_hrrr_analysis_is_hourly_on_the_hrrr_grid():
    ds = DATASETS["hrrr-analysis"](
        first_time=datetime(2025, 8, 1), append_dim_end=datetime(2025, 8, 2)
    )
    t = ds.template
    assert t.append_dim == "time" and t.coords["time"].size == 24
    assert (t.coords["y"].size, t.coords["x"].size) == (1059, 1799)
    assert "lead_time" not in t.coords
    names = {c.key.rsplit("/", 1)[1]: c.data_vars for c in ds_files(ds, 2)}
    assert set(names) == {"hrrr.t02z.wrfsfcf00.grib2", "hrrr.t01z.wrfsfcf01.grib2"}
    accum = {n for n, v in t.variables.items() if v.dims and v.step_type != "instant"}
    assert accum and set(names["hrrr.t01z.wrfsfcf01.grib2"]) == accum
    assert not accum & set(names["hrrr.t02z.wrfsfcf00.grib2"])


def ds_files(ds, h: int):
    from toolkit.virtual.filetable import file_tasks

    return file_tasks(ds, hour(h), hour(h) + np.timedelta64(1, "ns"))


def test_variables_publishing_on_their_own_files_are_checked_apart(world):
    """The accumulation arrives in its own (lead-1) files: `include_vars` checks exactly those,
    `exclude_vars` the rest, each held to its own tiers."""
    from toolkit.virtual.validate import completeness

    _, archive, job = world
    for h in range(3):
        archive.publish(list(files_of(h)))
    archive.publish(files_of(3)[0])  # hour 3's lead 0, not yet its accumulation
    backfill(job, start=hour(0), workers=2, executor="sync")
    stat = completeness(job, start=hour(0), include_vars=["precipitation_surface"])
    assert stat.expected_files == 4 and stat.missing_files == [archive.data_url(files_of(3)[1])]
    assert not stat.ok  # the newest hour lacks it: 0 of its 1 file, under the 0.5 tier ...
    assert completeness(
        job, start=hour(0), include_vars=["precipitation_surface"], min_present_fraction=(0.0, 1.0)
    ).ok  # ... unless the newest hour may still be filling in
    rest = completeness(job, start=hour(0), exclude_vars=["precipitation_surface"])
    assert rest.expected_files == 4 and rest.missing_files == [] and rest.ok


def test_a_backfill_commits_no_ragged_hour(world):
    """The newest hours' lead-1 files are published before their lead 0: the backfill withholds
    them (named, with why), so no hour on main holds precipitation without its instants."""
    _, archive, job = world
    for h in range(4):
        archive.publish(list(files_of(h)))
    archive.publish([files_of(4)[1], files_of(5)[1]])  # hours 4 and 5: lead 1 only
    report = backfill(job, start=hour(0), workers=2, executor="sync")
    out = report.stage("commit").result
    assert sorted(out.withheld) == sorted(archive.data_url(files_of(h)[1]) for h in (4, 5))
    reasons = dict(report.stage("commit").excused)
    assert all(reasons[k].startswith("withheld: at the extending edge") for k in out.withheld)
    ds = open_dataset(job.repo.store).load()
    for h in range(ds.sizes["time"]):  # every hour on main is whole, or absent
        at = ds.isel(time=h)
        has_instant = bool(np.isfinite(at["temperature_2m"]).any())
        has_accum = bool(np.isfinite(at["precipitation_surface"]).any())
        assert has_instant or not has_accum, f"hour {h} is ragged"


def hour_holds(job: Job) -> dict[int, tuple[bool, bool]]:
    """Per position on main: (has its lead-0 instant, has its lead-1 accumulation)."""
    ds = open_dataset(job.repo.store).load()
    return {
        h: (
            bool(np.isfinite(ds.isel(time=h)["temperature_2m"]).any()),
            bool(np.isfinite(ds.isel(time=h)["precipitation_surface"]).any()),
        )
        for h in range(ds.sizes["time"])
    }


def fire(job: Job, h: int, seconds: float = 2.5):
    at = hour(h) + np.timedelta64(10, "m")
    return update(job, fire_time=at, scheduled_at=time.time(), deadline_seconds=seconds)


def test_an_interior_hour_fills_in_without_its_lead_0_and_the_edge_waits(world):
    """Hour 2's lead 0 never publishes. Its accumulation lands with hour 3's lead 0 (hour 2 is
    then interior); hour 4's accumulation, at the edge, waits until hour 4's lead 0 arrives."""
    _, archive, job = world
    for h in range(2):
        archive.publish(list(files_of(h)))
    backfill(job, start=hour(0), workers=1, executor="sync")
    archive.publish([files_of(2)[1], *files_of(3)])  # hour 2: lead 1 only, for good
    result = fire(job, 3)
    want = [archive.data_url(f) for f in (files_of(2)[1], *files_of(3))]
    assert sorted(result.ingested) == sorted(want)
    assert result.pending == [archive.data_url(files_of(2)[0])]
    assert hour_holds(job) == {0: (True, True), 1: (True, True), 2: (False, True), 3: (True, True)}
    archive.publish(files_of(4)[1])  # the edge: hour 4's accumulation before its lead 0
    result = fire(job, 4)
    assert result.ingested == [] and archive.data_url(files_of(4)[1]) in result.pending
    assert committed_extent(R.readonly(job.repo.open(fresh=True)), job.template) == 4
    archive.publish(files_of(4)[0])
    result = fire(job, 4)
    assert sorted(result.ingested) == sorted(archive.data_url(f) for f in files_of(4))
    assert len(result.commits) == 1
    assert leading_edge_whole(job) == []


def test_an_hour_behind_mains_edge_fills_in_from_what_main_holds(world):
    """Main already holds hour 3's lead 0 (its ingested-through) when hour 2's accumulation is
    published late and hour 2's lead 0 never is: the update reads main and ingests it."""
    _, archive, job = world
    for h in (0, 1, 3):
        archive.publish(list(files_of(h)))
    backfill(job, start=hour(0), workers=1, executor="sync")
    assert hour_holds(job)[2] == (False, False)
    late = files_of(2)[1]
    archive.publish(late)
    result = fire(job, 3)
    assert result.ingested == [archive.data_url(late)]
    assert result.pending == [archive.data_url(files_of(2)[0])]
    assert hour_holds(job)[2] == (False, True)
    assert leading_edge_whole(job) == []


def test_a_backfill_fills_interior_hours_and_withholds_only_its_edge(world):
    """In one backfill, hour 1 lacks its lead 0 (interior: hours 2 and 3 have theirs) and
    hours 4 and 5 have only their accumulation (the edge): hour 1's lands, 4 and 5 wait."""
    _, archive, job = world
    for h in range(4):
        archive.publish([f for f in files_of(h) if not (h == 1 and f.lead == 0)])
    archive.publish([files_of(4)[1], files_of(5)[1]])
    report = backfill(job, start=hour(0), workers=1, executor="sync")
    out = report.stage("commit").result
    assert sorted(out.withheld) == sorted(archive.data_url(files_of(h)[1]) for h in (4, 5))
    holds = hour_holds(job)
    assert holds[1] == (False, True)  # interior: filled in without its lead 0
    assert {h: holds[h] for h in (0, 2, 3)} == {h: (True, True) for h in (0, 2, 3)}
    assert all(holds.get(h, (False, False)) == (False, False) for h in (4, 5))
