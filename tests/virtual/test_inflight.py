"""A backfill whose finalize refused (main's commits since its setup wrote into its region) can
be recovered both ways its message names: rebased onto main's new head, or aborted; inspect
lists it, update names it. One beside main's commits elsewhere lands without either. A repo
path that is wrong is one line, exit 2, and creates nothing."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.virtual.test_backfill import INITS, START, main_ds, sim
from tests.virtual.test_job import assert_exact
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.tasks import Named
from toolkit.virtual.backfill import RegionOverlap, backfill, backfill_plan, temp_branch
from toolkit.virtual.inflight import in_flight, marker
from toolkit.virtual.write import run

runner = CliRunner()
SIX = np.datetime64("2025-08-01T06", "ns") + np.timedelta64(1, "ns")  # end of the first 2 inits
NOON = np.datetime64("2025-08-01T12", "ns")


def refused(tmp_path, main_writes_from):
    """A backfill of the first two inits set up, then main written from `main_writes_from` by
    a write loop (as an operational fire would) into the region, then the backfill run:
    finalize refuses, naming the positions main wrote."""
    files, ds, region = set_up_then_main_written(tmp_path, main_writes_from)
    with pytest.raises(RegionOverlap) as caught:
        backfill(ds, start=START, end=SIX, executor="sync")
    return files, ds, region, str(caught.value)


def set_up_then_main_written(tmp_path, main_writes_from):
    _archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    region = ds.region(START, SIX)
    backfill_plan(region).stages[0].service(Named("setup"))
    run(ds.region(main_writes_from, None))
    return files, ds, region


def cli(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_refused_finalize_names_both_ways_out_and_abort_drops_the_branch(tmp_path) -> None:
    _files, ds, region, message = refused(tmp_path, SIX - np.timedelta64(1, "ns"))
    branch = temp_branch(region)
    assert "wrote into its region, at init_time 2025-08-01T06" in message
    assert f"toolkit virtual abort {ds.repo.url} --branch {branch}" in message
    repo = ds.repo.open(fresh=True)
    (flying,) = in_flight(repo)
    assert (flying.branch, flying.files, flying.main_moved) == (branch, 6, True)
    assert flying.region.startswith("[2025-08-01T00")
    res = cli("virtual", "inspect", tmp_path / "repo")
    assert res.exit_code == 0 and f"{branch}: region [2025-08-01T00" in res.stdout
    assert "6 file(s) on it; main moved since setup" in res.stdout

    common = ["--repo", tmp_path / "repo", "--source", tmp_path / "src"]
    res = cli(
        "virtual", "update", "sim-gfs", *common, "--fire-time", "2025-08-01T18", "--deadline", "1"
    )
    assert res.exit_code == 1 and branch in res.output
    assert "--rebase" in res.output and "toolkit virtual abort" in res.output

    main_before = R.snapshot_of(repo, "main")
    res = cli("virtual", "abort", tmp_path / "repo")
    assert res.exit_code == 0, res.output
    repo = ds.repo.open(fresh=True)
    assert branch not in R.branches(repo) and marker(branch) not in R.branches(repo)
    assert R.snapshot_of(repo, "main") == main_before  # main untouched
    assert cli("virtual", "abort", tmp_path / "repo").exit_code == 2  # nothing left to abort
    res = cli(
        "virtual", "update", "sim-gfs", *common, "--fire-time", "2025-08-01T18", "--deadline", "1"
    )
    assert res.exit_code == 0, res.output


def test_a_backfill_beside_main_s_writes_elsewhere_lands_without_rebase(tmp_path) -> None:
    files, ds, _region = set_up_then_main_written(tmp_path, NOON)
    res = cli(
        "virtual",
        "backfill",
        "sim-gfs",
        "--repo",
        tmp_path / "repo",
        "--source",
        tmp_path / "src",
        "--start",
        "2025-08-01T00",
        "--end",
        "2025-08-01T06:00:00.000000001",
        "--executor",
        "sync",
    )
    assert res.exit_code == 0, res.output
    repo = ds.repo.open(fresh=True)
    assert R.branches(repo) == ["main"]
    x = main_ds(ds)
    assert x.sizes["init_time"] == len(INITS)
    assert_exact(x, files)  # the backfilled inits and the ones main had written since


def test_rebase_refuses_when_main_wrote_into_the_region(tmp_path) -> None:
    _files, ds, region, _ = refused(tmp_path, START)
    with pytest.raises(RegionOverlap, match=r"wrote 6 file\(s\) of its region.*2025-08-01T00"):
        backfill(ds, start=START, end=SIX, executor="sync", rebase=True)
    assert temp_branch(region) in R.branches(ds.repo.open(fresh=True))  # kept, nothing changed


@pytest.mark.parametrize(
    "command",
    [
        ["virtual", "inspect", "{path}"],
        ["virtual", "abort", "{path}"],
        ["virtual", "validate", "sim-gfs", "--repo", "{path}", "--source", "{src}"],
    ],
)
def test_a_missing_or_foreign_repo_is_one_line_and_creates_nothing(tmp_path, command) -> None:
    missing, foreign = tmp_path / "missing", tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a repo")
    for path in (missing, foreign):
        args = [a.format(path=path, src=tmp_path / "src") for a in command]
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and str(path) in lines[0] and "no Icechunk repo" in lines[0]
        assert "Traceback" not in res.output and "context:" not in res.output
    assert not missing.exists()
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_a_backfill_never_creates_a_repo_over_other_objects(tmp_path) -> None:
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    (tmp_path / "repo").mkdir(exist_ok=True)
    (tmp_path / "repo" / "notes.txt").write_text("someone's data")
    with pytest.raises(R.NotARepo, match=r"holds objects.*notes.txt"):
        backfill(ds, start=START, executor="sync")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["notes.txt"]
