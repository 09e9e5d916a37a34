"""`--json` keeps its promise when a command fails: one JSON object on stdout,
`{"error": LINE, "exit": CODE}`, the same line as stderr's `error:` and the process's exit code,
from the one error renderer, for every job's commands; never a second object after the
command's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit import console
from toolkit.cli import app

runner = CliRunner()


def cases(w: Path) -> list[list[str]]:
    missing = str(w / "no such store")
    return [
        ["pyramid", "build", missing, "--json"],
        ["pyramid", "verify", missing, "--json"],
        ["virtual", "status", missing, "--json"],
        ["virtual", "backfill", "nope", "--repo", str(w / "r"), "--start", "2025-08-01", "--json"],
        ["virtual", "update", "sim-gfs", "--repo", str(w / "r"), "--json"],
        ["archive", "show", "no-scope", "--manifests", missing, "--json"],
        # refused while the line is parsed, before any --json option is
        ["pyramid", "build", missing, "--json", "--no-such-flag"],
        ["pyramid", "verify", missing, "--json", "--retry-seconds", "-1"],
        ["virtual", "status", missing, "--json", "--quiet", "--verbose"],
    ]


@pytest.mark.parametrize("which", range(9))
def test_a_failure_under_json_is_one_json_object_on_stdout(tmp_path, which):
    argv = cases(tmp_path)[which]
    res = runner.invoke(app, argv)
    assert res.exit_code in (1, 2), res.output
    (line,) = res.stdout.splitlines()  # one object, nothing else
    doc = json.loads(line)
    assert set(doc) == {"error", "exit"} and doc["exit"] == res.exit_code
    said = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert said == [f"error: {doc['error']}"], res.stderr
    assert "\n" not in doc["error"]


@pytest.mark.parametrize("which", [0, 6])
def test_without_json_stdout_stays_empty(tmp_path, which):
    argv = [a for a in cases(tmp_path)[which] if a != "--json"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2 and res.stdout == ""


def test_no_second_object_after_the_commands_own(capsys):
    console.flags.json, console.flags.json_written = True, False
    try:
        console.emit_json({"ok": False})
        console.fail(1, "a check failed")
    finally:
        console.flags.json = console.flags.json_written = False
    assert capsys.readouterr().out.splitlines() == ['{"ok": false}']


def test_the_installed_command_prints_it_too(tmp_path):
    toolkit = Path(sys.executable).parent / "toolkit"
    done = subprocess.run(
        [str(toolkit), "pyramid", "build", str(tmp_path / "MISSING"), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert json.loads(done.stdout) == {
        "error": f"store {tmp_path / 'MISSING'}: does not exist (want a zarr v3 store)",
        "exit": 2,
    }
