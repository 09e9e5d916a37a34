"""The `toolkit` command: version, help, demo, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit.cli import app

runner = CliRunner()


def test_version_and_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("toolkit ")
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "pyramid", "virtual", "grib", "archive", "--cluster"):
        assert command in result.output


def test_bad_usage_exits_2() -> None:
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--no-such-flag"]).exit_code == 2


def test_demo_in_process(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "demo",
            "--workdir",
            str(tmp_path),
            "--executor",
            "sync",
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    reports = json.loads((tmp_path / "r.json").read_text())
    foundation = reports[0]
    assert [s["gate_have"] for s in foundation["stages"]] == [
        s["tasks"] for s in foundation["stages"]
    ]


@pytest.mark.slow
def test_demo_console_script_on_the_embedded_cluster(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "toolkit"
    proc = subprocess.run(
        [str(exe), "demo", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "demo finished" in proc.stdout


def test_unreachable_cluster_exits_2(tmp_path: Path) -> None:
    """A demo pointed at a scheduler that isn't there fails cleanly (no traceback soup)."""
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "toolkit"),
            "--cluster",
            "tcp://127.0.0.1:9",
            "demo",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-1500:])
    assert "127.0.0.1:9" in proc.stderr
