"""A live dataset beside a backfill: update fires keep committing to main while a backfill of a
disjoint region is in flight, and finalize lands both once `catch_up` has replayed main's new
commits on the branch; a fire over the region is refused, and main's commits into the region
make catch-up refuse. Real simulated archives and Icechunk repos throughout."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.virtual.test_backfill import main_ds, sim
from tests.virtual.test_job import assert_exact
from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.cli import app
from toolkit.engine import runner_of
from toolkit.plan import Plan
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan, claim, temp_branch
from toolkit.virtual.inflight import RegionOverlap, in_flight, marker
from toolkit.virtual.landing import catch_up
from toolkit.virtual.status import status
from toolkit.virtual.update import BackfillInFlight, update
from toolkit.virtual.write import Job, ensure_repo, run

ONE_NS = np.timedelta64(1, "ns")


def at(hour: int) -> np.datetime64:
    return np.datetime64(f"2025-08-01T{hour:02d}", "ns")


def through(hour: int) -> np.datetime64:
    """The end of a region that holds the init at `hour`."""
    return at(hour) + ONE_NS


def worlds(tmp_path):
    """One simulated archive (4 inits of 3 leads, all published), the repo under test and a
    clean repo of the same dataset to compare with."""
    _archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    clean = Job(ds.dataset, R.RepoRef(storage.open_store(str(tmp_path / "clean"))))
    for job in (ds, clean):
        ensure_repo(job)
    return files, ds, clean


def in_flight_backfill(ds: Job, start, end):
    """A backfill of [start, end) set up (its guard records the region), the plan to run."""
    region = ds.region(start, end)
    guard = claim(region)
    plan = backfill_plan(region)
    plan.stages[0].service(Named("setup"))
    return region, guard, plan


def up_to_finalize(plan: Plan) -> None:
    """Every stage of the backfill but finalize: the branch holds the whole region."""
    stages = tuple(s for s in plan.stages if s.name != "finalize")
    runner_of(None, "dask", executor="sync").run(Plan(plan.name, stages))


def data_refs(job: Job) -> dict[str, dict]:
    """Every ref of every data variable on main."""
    t = job.template
    session = R.readonly(job.repo.open(fresh=True))
    return {
        name: R.chunk_refs(session, name)
        for name, v in t.variables.items()
        if t.append_dim in v.dims
    }


def finalize(region: Job) -> str:
    txn = T.Txn(region.repos, temp_branch(region))
    return T.finalize(txn, lambda url: f"{url}: main moved")


def same_main(ds: Job, clean: Job) -> None:
    """Main of both repos holds the same refs, coordinates and attributes."""
    assert data_refs(ds) == data_refs(clean)
    x, y = main_ds(ds), main_ds(clean)
    assert dict(x.sizes) == dict(y.sizes)
    for name in (*x.coords, *x.data_vars):
        assert x[name].attrs == y[name].attrs, name
    for name in x.coords:
        np.testing.assert_array_equal(x[name].values, y[name].values)
    assert x.attrs == y.attrs


def test_an_update_fire_beside_a_backfill_lands_with_it(tmp_path) -> None:
    files, ds, clean = worlds(tmp_path)
    for job in (ds, clean):  # the live dataset so far: the 06 and 12 inits, 00 empty
        run(job.region(at(6), through(12)))
    region, guard, plan = in_flight_backfill(ds, at(0), through(0))
    branch = temp_branch(region)

    fire = update(ds, fire_time=at(18), deadline_seconds=60)  # window 06..18: disjoint
    assert len(fire.ingested) == 3 and not fire.pending
    fired = data_refs(ds)
    up_to_finalize(plan)

    found = status(ds.repo)
    assert found["last_fire"]["fire"].startswith("2025-08-01T18")
    assert found["latest"] == {"init_time": "2025-08-01T18:00:00"}
    (flying,) = found["in_flight"]
    assert (flying["branch"], flying["main_moved"], flying["finalize"]) == (
        branch,
        True,
        "catches up",
    )
    res = CliRunner().invoke(app, ["virtual", "status", str(tmp_path / "repo")])
    assert res.exit_code == 0 and "finalize catches up" in res.stdout, res.output

    assert catch_up(region, branch) == 1
    repo = ds.repo.open(fresh=True)
    (replay,) = [c for c in R.history(repo, branch, limit=3) if "caught_up_to" in c.metadata]
    assert replay.metadata["replayed_files"] == 3  # the fire's files, never the region's
    assert R.snapshot_of(repo, marker(branch)) == R.snapshot_of(repo, "main")
    finalize(region)
    guard.release()
    assert R.branches(ds.repo.open(fresh=True)) == ["main"]

    backfill(clean, start=at(0), end=through(0), executor="sync")
    update(clean, fire_time=at(18), deadline_seconds=60)
    same_main(ds, clean)
    landed = data_refs(ds)
    for name, refs in fired.items():  # nothing the fire wrote was overwritten
        assert {k: v for k, v in landed[name].items() if k in refs} == refs
    assert_exact(main_ds(ds), files)


def test_main_grown_past_the_region_wins_the_extent(tmp_path) -> None:
    """A backfill at main's edge pre-sizes its branch to its region; main then grows past it:
    the branch grows to main's extent (coordinates from the template) and holds both."""
    files, ds, clean = worlds(tmp_path)
    run(ds.region(at(0), through(0)))
    region, guard, plan = in_flight_backfill(ds, at(6), through(12))
    branch = temp_branch(region)
    run(ds.region(at(18), None))  # main written past the region (4 inits; the branch has 3)
    up_to_finalize(plan)
    assert catch_up(region, branch) == 1
    finalize(region)
    guard.release()

    run(clean.region(at(0), through(0)))
    backfill(clean, start=at(6), end=through(12), executor="sync")
    run(clean.region(at(18), None))
    same_main(ds, clean)
    assert main_ds(ds).sizes["init_time"] == 4
    assert_exact(main_ds(ds), files)
    assert catch_up(region, branch) == 0  # landed: nothing in flight, nothing to do


def test_a_fire_over_the_region_is_refused_as_before(tmp_path) -> None:
    _files, ds, _clean = worlds(tmp_path)
    run(ds.region(at(12), through(12)))
    region, guard, _plan = in_flight_backfill(ds, at(0), through(6))
    before = R.snapshot_of(ds.repo.open(fresh=True), "main")
    with pytest.raises(BackfillInFlight) as caught:
        update(ds, fire_time=at(18), deadline_seconds=60)  # window 06..18 meets [00, 06]
    said = str(caught.value)
    assert temp_branch(region) in said and "in flight over this fire's init_time" in said
    assert "--rebase" in said and "toolkit virtual abort" in said
    assert R.snapshot_of(ds.repo.open(fresh=True), "main") == before
    guard.release(keep=True)


def test_main_written_into_the_region_makes_catch_up_refuse(tmp_path) -> None:
    _files, ds, _clean = worlds(tmp_path)
    region, guard, plan = in_flight_backfill(ds, at(0), through(6))
    branch = temp_branch(region)
    run(ds.region(at(6), through(6)))  # main writes an init of the region
    up_to_finalize(plan)
    repo = ds.repo.open(fresh=True)
    heads = (R.snapshot_of(repo, branch), R.snapshot_of(repo, marker(branch)))

    (flying,) = status(ds.repo)["in_flight"]
    assert flying["blocked"] and flying["finalize"].startswith(
        "refuses: main wrote into its region, at init_time 2025-08-01T06"
    )
    res = CliRunner().invoke(app, ["virtual", "status", str(tmp_path / "repo")])
    assert res.exit_code == 1 and "finalize refuses: main wrote into its region" in res.stdout

    with pytest.raises(RegionOverlap) as caught:
        catch_up(region, branch)
    said = str(caught.value)
    assert said.startswith(f"{ds.repo.url}: main's commits since its setup wrote into its region")
    assert "init_time 2025-08-01T06" in said and f"--branch {branch}" in said
    repo = ds.repo.open(fresh=True)
    assert (R.snapshot_of(repo, branch), R.snapshot_of(repo, marker(branch))) == heads
    (still,) = in_flight(repo)
    assert still.main_moved
    guard.release(keep=True)
