"""What a Dask user looks for first: the dashboard link (one that answers), a performance
report, arguments checked before a cluster starts, and a failed task in one line."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

pytestmark = pytest.mark.slow

runner = CliRunner()


def small(path: Path) -> Path:
    synthetic.write_store(storage.open_store(str(path)), shape=(96, 128), shards=(32, 32))
    return path


def dashboard_links(stderr: str) -> list[str]:
    return re.findall(r"^dashboard: (http://\S+)$", stderr, flags=re.M)


def answers(link: str) -> bool:
    with urllib.request.urlopen(link, timeout=10) as response:
        return response.status == 200


@pytest.mark.cluster
def test_external_dashboard_and_performance_report(cluster_address: str, tmp_path: Path) -> None:
    store, html = small(tmp_path / "s.zarr"), tmp_path / "report.html"
    res = runner.invoke(
        app,
        [
            "--cluster",
            cluster_address,
            "pyramid",
            "build",
            str(store),
            "--levels",
            "2",
            "--performance-report",
            str(html),
        ],
    )
    assert res.exit_code == 0, res.output
    (link,) = dashboard_links(res.stderr)
    assert link.startswith("http://127.0.0.1:") and answers(link)
    assert "dashboard" not in res.stdout
    assert "Dask Performance Report" in html.read_text()
    assert "2x" in res.stdout  # the report table


def test_embedded_dashboard_answers_while_the_run_is_on(tmp_path: Path) -> None:
    store = small(tmp_path / "s.zarr")
    heard: list[bool] = []

    from toolkit.engine import Session
    from toolkit.pyramid import build

    def announce(line: str) -> None:
        heard.append(answers(line.removeprefix("dashboard: ")))  # the cluster is up now

    with Session(announce=announce) as session:
        report = build(storage.open_store(str(store)), levels=2, cluster=session, executor="dask")
    assert heard == [True]
    assert report.stage("2x").gate_have == report.stage("2x").gate_want


@pytest.mark.cluster
def test_json_output_carries_no_dashboard_line(cluster_address: str, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    res = runner.invoke(
        app,
        [
            "--cluster",
            cluster_address,
            "demo",
            "--workdir",
            str(tmp_path / "demo"),
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert dashboard_links(res.stderr)  # announced, on stderr
    assert "dashboard" not in out.read_text() and "dashboard" not in res.stdout
    json.loads(out.read_text())


def test_bad_arguments_fail_before_any_cluster_starts(tmp_path: Path) -> None:
    store = small(tmp_path / "s.zarr")
    for args in (
        ["pyramid", "build", str(store), "--method", "nearest"],
        ["pyramid", "build", str(tmp_path / "missing.zarr")],
        [
            "virtual",
            "backfill",
            "sim-gfs",
            "--repo",
            str(tmp_path / "r"),
            "--source",
            str(tmp_path / "src"),
            "--start",
            "2025-08-01",
            "--workers",
            "0",
        ],
        ["--cluster", "tcp://127.0.0.1:1", "pyramid", "build", str(store), "--method", "nearest"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert not dashboard_links(res.stderr), args
        assert "Traceback" not in res.output


def corrupt_one_shard(path: Path) -> str:
    store = storage.open_store(str(small(path)))
    key = storage.list_keys(store, "field/c/")[1]
    storage.put(store, key, b"garbage" * 10)
    return key


@pytest.mark.parametrize("engine", [["--executor", "sync"], []], ids=["sync", "embedded"])
def test_a_failed_task_is_one_line_and_debug_shows_the_worker(engine, tmp_path) -> None:
    store = tmp_path / "s.zarr"
    key = corrupt_one_shard(store)
    res = runner.invoke(app, ["pyramid", "build", str(store), "--levels", "2", *engine])
    assert res.exit_code == 1
    lines = [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("dashboard: ")]
    assert len(lines) == 1, res.stderr
    assert re.match(  # the corrupt object named, from whichever task read it, with the fix
        rf"error: stage '2x' task '2x/field/c/\d+/\d+': CorruptObject: \S+/{key}: "
        r"ValueError: .*checksum.*; restore the object",
        lines[0],
    ), lines[0]
    res = runner.invoke(app, ["--debug", "pyramid", "build", str(store), "--levels", "2", *engine])
    assert res.exit_code == 1
    assert "Traceback" in res.stderr and "on the worker:" in res.stderr
    assert "toolkit/pyramid/shards.py" in res.stderr  # where the service broke
    res = runner.invoke(app, ["pyramid", "build", str(store), "--levels", "2", *engine])
    assert "Traceback" not in res.stderr  # --debug did not stick to the next invocation
