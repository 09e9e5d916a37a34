"""Validation: completeness names each (position, variable) gap; decode health decodes a
sample, one graph node per sample, through xarray and gribberish's codec."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.virtual.test_backfill import START, sim
from toolkit import storage
from toolkit.cli import app
from toolkit.virtual.backfill import backfill
from toolkit.virtual.validate import Cell, completeness, pick_samples, validate
from toolkit.virtual.write import ensure_repo


@pytest.fixture
def world(tmp_path):
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=0,
    )
    return tmp_path, archive, files, ds


def test_complete_archive_validates_and_each_sample_is_a_node(world):
    _, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    report = validate(ds, sample=14)
    assert report.ok, report.failures
    comp = report.completeness
    assert len(comp.positions) == 4 and not comp.missing
    # 4 cycles x 3 leads x (4 instant + 3 temperature levels) + precipitation at leads 3, 6
    assert sum(comp.expected.values()) == len(comp.present) == 4 * 3 * 7 + 4 * 2
    assert comp.expected[(comp.positions[0], "temperature")] == 9
    assert len(report.samples) == 12  # 14 // 6 variables = 2 per variable: first and last
    assert report.decode_report.stage("decode").tasks == 12
    assert report.decode_report.stage("decode").written == 12  # one node per sample
    assert all(s.ok and s.finite == 1.0 for s in report.samples)


def test_gaps_are_named_and_the_newest_position_may_be_partial(world):
    _, archive, files, ds = world
    archive.publish(files[:11])  # the newest cycle lacks its last lead
    archive.truncate(files[4])  # an interior file the backfill will skip
    backfill(ds, start=START, workers=2, executor="sync")
    comp = completeness(ds)
    assert not comp.ok
    gaps = "\n".join(comp.failures)
    assert "init_time=2025-08-01T06:00:00 temperature_2m: 2/3 cells" in gaps
    assert "temperature_2m@init_time=2025-08-01T06:00:00,lead_time=3h" in gaps
    assert "init_time=2025-08-01T18:00:00 temperature: 6/9 cells" in gaps
    assert "2025-08-01T00" not in gaps and "2025-08-01T12" not in gaps
    loose = completeness(ds, min_present_fraction=(0.5, 1.0))
    assert all("T06" in line for line in loose.failures)  # only the interior gap remains
    archive.publish(files[4])
    backfill(ds, start=START, workers=2, executor="sync")
    assert completeness(ds, min_present_fraction=(0.5, 1.0)).ok
    with pytest.raises(ValueError, match=r"must end with 1\.0"):
        completeness(ds, min_present_fraction=(1.0, 0.5))


def test_a_corrupted_source_fails_decode_health_and_the_cli_exits_1(world):
    tmp_path, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    key = archive.data_key(files[-1])  # the newest file: every variable's last sample
    size = storage.head(archive.store, key).size
    storage.put(archive.store, key, np.random.default_rng(0).bytes(size))
    report = validate(ds, sample=12)
    assert report.completeness.ok  # the refs are all there ...
    bad = [s for s in report.samples if not s.ok]
    assert len(bad) == 6 and all("lead_time=6h" in s.cell for s in bad)  # ... but do not decode
    res = CliRunner().invoke(
        app,
        [
            "virtual",
            "validate",
            "sim-gfs",
            "--repo",
            str(tmp_path / "repo"),
            "--source",
            str(tmp_path / "src"),
            "--sample",
            "12",
        ],
    )
    assert res.exit_code == 1, res.output
    assert "FAIL decode temperature_2m@init_time=2025-08-01T18:00:00,lead_time=6h" in res.output
    assert "decode health: 12 sample(s), 6 failed" in res.output


def test_empty_store_never_passes(world):
    _, _, _, ds = world
    ensure_repo(ds)
    report = validate(ds)
    assert not report.ok and "nothing to validate" in report.failures[0]


def test_pick_samples_takes_first_and_last_of_each_variable():
    cells = [Cell(v, (("t", i),)) for v in ("a", "b") for i in range(10)]
    got = pick_samples(cells, 6)
    assert [(c.variable, c.loc[0][1]) for c in got] == [
        ("a", 0),
        ("a", 4),
        ("a", 9),
        ("b", 0),
        ("b", 4),
        ("b", 9),
    ]
    assert pick_samples(cells, 1)[0].loc[0][1] == 0 and pick_samples([], 5) == []
