"""`--json` on every virtual command: one JSON object on stdout, what the tables say."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples.simulate import make_archive

runner = CliRunner()


def one(res) -> dict:
    assert res.exit_code in (0, 1), res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def test_every_virtual_command_speaks_json(tmp_path):
    archive = make_archive(
        storage.open_store(str(tmp_path / "src")),
        kind="gfs",
        leads=[0, 3, 6],
        publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(2)],
    )
    archive.publish(archive.files())
    repo = str(tmp_path / "répo t2m")
    common = ["--repo", repo, "--source", str(tmp_path / "src")]

    names = [
        d["name"] for d in one(runner.invoke(app, ["virtual", "datasets", "--json"]))["datasets"]
    ]
    assert {"gfs", "hrrr", "sim-gfs"} <= set(names)

    argv = ["virtual", "backfill", "sim-gfs", *common, "--start", "2025-08-01T00"]
    done = one(runner.invoke(app, [*argv, "--executor", "sync", "--json"]))
    assert done["committed"] == done["on_branch"] == len(archive.files()) == 6
    assert done["refs"] > 0 and done["absent"] == {}
    assert {s["stage"] for s in done["stages"]} >= {"commit"}

    seen = one(runner.invoke(app, ["virtual", "inspect", repo, "--json"]))
    assert seen["branches"] == ["main"] and seen["in_flight"] == []
    assert seen["commits"] and all("." not in c["written"] for c in seen["commits"])  # to the s
    assert seen["manifests"]["refs"] > 0

    argv = ["virtual", "validate", "sim-gfs", *common, "--start", "2025-08-01T00"]
    checked = one(runner.invoke(app, [*argv, "--sample", "2", "--json"]))
    assert checked["ok"] is True and checked["failures"] == []
    assert checked["completeness"]["expected_files"] == 6 and checked["samples"] >= 1

    nothing = runner.invoke(app, ["virtual", "abort", repo, "--json"])
    assert nothing.exit_code == 2  # an error: its line on stderr, and as JSON on stdout
    assert json.loads(nothing.stdout) == {"error": "no backfill in flight", "exit": 2}

    applied = one(runner.invoke(app, ["virtual", "split", "apply", repo, "--split", "1", "--json"]))
    assert applied["split"] == 1 and applied["after"]["refs"] == applied["before"]["refs"]

    gone = one(runner.invoke(app, ["virtual", "expire", repo, "--older-than", "0s", "--json"]))
    assert [e["repo"] for e in gone["expired"]] == [storage.open_store(repo).url]
    assert gone["expired"][0]["snapshots"] >= 1
