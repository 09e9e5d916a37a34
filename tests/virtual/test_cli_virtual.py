"""`toolkit virtual backfill|update|inspect` exit codes and output on a simulated archive."""

from __future__ import annotations

from datetime import datetime, timedelta

from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.virtual.simulate import make_archive

runner = CliRunner()


def test_backfill_update_inspect(tmp_path):
    src = storage.open_store(str(tmp_path / "src"))
    archive = make_archive(
        src,
        kind="gfs",
        leads=[0, 3, 6],
        publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
    )
    archive.publish(archive.files()[:6])
    common = ["--repo", str(tmp_path / "repo"), "--source", str(tmp_path / "src")]
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            *common,
            "--start",
            "2025-08-01T00",
            "--executor",
            "sync",
            "--workers",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ingest" in res.output and "6/6" in res.output
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            *common,
            "--start",
            "2025-08-01T00",
            "--end",
            "2025-08-02T00",
            "--executor",
            "sync",
        ],
    )
    assert res.exit_code == 2 and "--allow-empty-positions" in res.output
    res = runner.invoke(
        app,
        [
            "virtual",
            "update",
            "sim-gfs",
            *common,
            "--fire-time",
            "2025-08-01T18",
            "--deadline",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "roll to the next fire" in res.output
    res = runner.invoke(app, ["virtual", "inspect", str(tmp_path / "repo")])
    assert res.exit_code == 0, res.output
    assert "rebase attempts" in res.output and "temperature_2m" in res.output
    res = runner.invoke(app, ["virtual", "backfill", "nope", *common, "--start", "2025-08-01"])
    assert res.exit_code == 2 and "unknown dataset 'nope'" in res.output


def test_demo_backfills_then_updates_while_files_publish(tmp_path):
    from toolkit.virtual.demo import demo

    reports = demo(tmp_path, executor="sync")
    assert [r.plan.split("-")[1] for r in reports] == ["backfill", "update"]
    assert reports[0].stage("ingest").written == 6
    result = reports[1].stage("update").result
    assert len(result.ingested) == 6 and result.pending == [] and not result.skipped
