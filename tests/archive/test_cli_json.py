"""`--json` on the archive commands that lacked it: diff, mark, pin add, pin remove."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.cli import app

SCOPE = "cordex/a.zarr"


def one(res) -> dict:
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def test_diff_mark_and_pins_speak_json(tmp_path: Path) -> None:
    data, manifests = tmp_path / "données", tmp_path / "m m"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    run = CliRunner().invoke
    common = ["--manifests", str(manifests)]
    policy = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
    res = run(app, ["archive", "partition", "--data", str(data), *common, *policy])
    assert res.exit_code == 0, res.output

    same = one(
        run(app, ["archive", "diff", SCOPE, "--data", str(data), *common, *policy, "--json"])
    )
    plan = json.loads(run(app, ["archive", "partition", "--data", str(data), *common, *policy,
                                "--dry-run", "--json"]).stdout)  # fmt: skip
    assert same == next(o for o in plan if o["scope"] == SCOPE)  # partition's shape, one scope

    marked = one(run(app, ["archive", "mark", SCOPE, "b_tas_1", "writing", *common, "--json"]))
    assert marked == {"scope": SCOPE, "blob": "b_tas_1", "before": "hot", "state": "writing",
                      "written": True}  # fmt: skip
    again = one(run(app, ["archive", "mark", SCOPE, "b_tas_1", "writing", *common, "--json"]))
    assert again["written"] is False

    argv = [
        "archive",
        "pin",
        "add",
        SCOPE,
        "cordex/a.zarr/tas/c/0",
        "--who",
        "ana",
        "--why",
        "paper",
    ]
    pinned = one(run(app, [*argv, *common, "--json"]))
    assert pinned["epoch"] == pinned["epoch_before"] + 1 and pinned["prefix"] == f"{SCOPE}/tas/c/0"
    unpinned = one(
        run(app, ["archive", "pin", "remove", SCOPE, "cordex/a.zarr/tas/c/0", *common, "--json"])
    )
    assert unpinned["epoch_before"] == pinned["epoch"]
    shown = json.loads(run(app, ["archive", "show", SCOPE, *common, "--json"]).stdout)
    assert shown["epoch"] == unpinned["epoch"] and not shown.get("pins")
