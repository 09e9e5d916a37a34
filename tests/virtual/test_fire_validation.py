"""The update's contract: a fire commits, then validates its own window within its own bound,
and exits 0 only when completeness, data currency, replicas and decode health all pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.virtual.test_backfill import START, sim
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.examples.datasets import sim_gfs
from toolkit.virtual import skips
from toolkit.virtual.backfill import backfill
from toolkit.virtual.update import update
from toolkit.virtual.validate import decode_health, pick_samples, validate
from toolkit.virtual.write import Job, Skipped

runner = CliRunner()


def fire(tmp_path, at: str, *extra: str):
    return runner.invoke(
        app,
        ["virtual", "update", "sim-gfs", "--repo", str(tmp_path / "repo"),
         "--source", str(tmp_path / "src"), "--fire-time", at, *extra],
    )  # fmt: skip


def test_a_fire_passes_only_when_its_window_validates(world):
    tmp_path, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    res = fire(tmp_path, "2025-08-01T18:20")
    assert res.exit_code == 0, res.output
    assert "completeness: 3 position(s) checked, 9 files expected, 0 missing" in res.output
    assert "validation passed" in res.output
    # the newest file's bytes go bad at the source: the next fire commits nothing new and fails
    key = archive.data_key(files[-1])
    size = storage.head(archive.store, key).size
    storage.put(archive.store, key, np.random.default_rng(0).bytes(size))
    res = fire(tmp_path, "2025-08-01T18:40")
    assert res.exit_code == 1, res.output
    failed = [ln for ln in res.output.splitlines() if ln.startswith("FAIL decode ")]
    assert failed and all("init_time=2025-08-01T18:00:00,lead_time=6h" in ln for ln in failed)
    assert "Traceback" not in res.output
    # --no-validate: the write alone, exit 0 (the operator asked for no check)
    assert fire(tmp_path, "2025-08-01T18:50", "--no-validate").exit_code == 0


def test_validation_runs_once_past_the_deadline_and_names_what_its_bound_stopped(world):
    tmp_path, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    res = fire(tmp_path, "2025-08-01T18:20", "--validation-seconds", "0")
    assert res.exit_code == 1, res.output
    assert "has passed: one sweep only" in res.output  # the poll deadline is long gone ...
    assert "after the scheduled 2025-08-01T18:20:00," in res.output  # ISO to the second
    assert ".000000000" not in res.output
    assert "completeness: 3 position(s) checked" in res.output  # ... completeness still ran
    assert "FAIL decode: not run, the validation time bound passed" in res.output
    # a sample whose node starts after the bound decodes nothing and says so
    comp = validate(ds, start=START, sample=0).completeness
    cells = pick_samples(comp.present, 0)
    _, results = decode_health(ds, cells, deadline=0.0)
    assert cells and all(not r.finished and not r.ok for r in results)
    late = dataclasses.replace(validate(ds, start=START, sample=0), samples=results)
    assert f"decode health unfinished: {len(cells)} of {len(cells)} sample(s)" in late.failures[0]


def test_data_currency_fails_a_fire_whose_source_stopped_publishing(tmp_path):
    src, repo = storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "r"))
    sim(src, repo)  # four cycles of 2025-08-01 published
    ds = Job(sim_gfs(src, inits=8), R.RepoRef(repo))  # the template runs a day further
    backfill(ds, start=START, end=np.datetime64("2025-08-02T00", "ns"), workers=2, executor="sync")
    on_time = validate(ds, fire_time=np.datetime64("2025-08-01T19", "ns"), sample=0)
    assert on_time.ok, on_time.failures
    stale = validate(ds, fire_time=np.datetime64("2025-08-02T06", "ns"), sample=0)
    assert not stale.currency and stale.ok  # 12 h old: within the default, 3 cycles of 6 h
    strict = dataclasses.replace(
        ds, dataset=dataclasses.replace(ds.dataset, expected_latency=np.timedelta64(9, "h"))
    )
    (line,) = validate(strict, fire_time=np.datetime64("2025-08-02T06", "ns"), sample=0).currency
    assert line.startswith("data currency: the newest init_time with data, 2025-08-01T18:00:00")
    assert "is 12 h old at the fire 2025-08-02T06:00:00, more than the expected 9 h" in line
    gone = validate(ds, fire_time=np.datetime64("2025-08-02T18", "ns"), sample=0)
    assert any("no init_time in the window has data" in f for f in gone.failures)
    assert not gone.ok


def test_a_file_skipped_fire_after_fire_is_given_up_until_its_object_changes(world):
    tmp_path, archive, files, ds = world
    archive.publish(files)
    archive.truncate(files[4])  # 06z, lead 3 h: unreadable
    backfill(ds, start=START, workers=2, executor="sync")
    url = archive.data_url(files[4])
    first = fire(tmp_path, "2025-08-01T18:10", "--give-up-after", "2")
    assert first.exit_code == 1 and f"skipped {url}" in first.output
    assert "missing for good" not in first.output
    assert f"init_time=2025-08-01T06:00:00: 2/3 files have refs (need 100%); missing {url}" in (
        first.output.replace("\n", "")
    )
    again = fire(tmp_path, "2025-08-01T18:10", "--give-up-after", "2")  # the same fire, rerun
    assert "missing for good" not in again.output  # one fire counts once
    second = fire(tmp_path, "2025-08-01T18:20", "--give-up-after", "2")
    assert second.exit_code == 1 and f"FAIL {url}: missing for good, skipped in 2 fires" in (
        second.output.replace("\n", "")
    )
    third = fire(tmp_path, "2025-08-01T18:30", "--give-up-after", "2")
    assert third.exit_code == 1 and "missing for good" in third.output
    assert f"skipped {url}" not in third.output  # not fetched again
    archive.publish(files[4])  # the provider re-uploads it, whole
    fixed = fire(tmp_path, "2025-08-01T18:40", "--give-up-after", "2")
    assert fixed.exit_code == 0, fixed.output
    assert not storage.exists(ds.repo.store, skips.SKIPS_KEY)  # ingested: its strikes cleared
    with pytest.raises(ValueError, match="give_up_after must be >= 0"):
        update(ds, fire_time=np.datetime64("2025-08-01T18", "ns"), give_up_after=-1)


def test_replicas_are_checked_against_the_primary_one_commit_of_slack(world):
    tmp_path, archive, files, _ = world
    archive.publish(files[:9])
    repos = [str(tmp_path / n) for n in ("repo", "copy")]
    common = ["--repo", repos[0], "--source", str(tmp_path / "src"), "--replica", repos[1]]
    res = runner.invoke(
        app, ["virtual", "backfill", "sim-gfs", *common, "--start", "2025-08-01T00",
              "--executor", "sync"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    check = ["virtual", "validate", "sim-gfs", *common, "--fire-time", "2025-08-01T18:30"]
    res = runner.invoke(app, check)
    assert res.exit_code == 0, res.output
    # the replica alone takes the next file (as when the primary's commit fails after it)
    archive.publish(files[9])
    alone = ["--repo", repos[1], "--source", str(tmp_path / "src"), "--no-validate"]
    res = runner.invoke(
        app, ["virtual", "update", "sim-gfs", *alone, "--fire-time", "2025-08-01T18:30",
              "--deadline", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, check).exit_code == 0  # one commit ahead: in step
    archive.publish(files[10])
    runner.invoke(
        app, ["virtual", "update", "sim-gfs", *alone, "--fire-time", "2025-08-01T18:30",
              "--deadline", "1"],
    )  # fmt: skip
    res = runner.invoke(app, check)
    assert res.exit_code == 1, res.output
    said = res.output.replace("\n", "")
    assert (
        f"FAIL replica file://{repos[1]}: 15 chunk ref(s) of the window differ" in said
        and "differ from the primary" in said
    )
    assert "primary no ref, replica file://" in said
    res = runner.invoke(app, [*check[:-2], "--replica", str(tmp_path / "nowhere")])
    assert res.exit_code == 2 and "no Icechunk repo at" in res.output


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["skip", "ingest", "none"])),
        max_size=12,
    ),
    st.integers(1, 4),
)
def test_strikes_count_distinct_fires_in_a_row_and_an_ingest_clears_them(events, after):
    strikes: dict[str, skips.Strike] = {}
    runs: dict[str, int] = {}
    for i, (url, what) in enumerate(events):
        for label in (f"fire-{i}", f"fire-{i}"):  # each fire runs twice (a replacement pod)
            skipped = [Skipped(url, "bad")] if what == "skip" else []
            strikes = skips.tally(strikes, label, skipped, [url] if what == "ingest" else [])
        runs[url] = (
            runs.get(url, 0) + 1 if what == "skip" else 0 if what == "ingest" else runs.get(url, 0)
        )
    assert {u: len(s.fires) for u, s in strikes.items()} == {u: n for u, n in runs.items() if n}
    assert set(skips.given_up(strikes, after)) == {u for u, n in runs.items() if n >= after}
    assert skips.given_up(strikes, 0) == {}
