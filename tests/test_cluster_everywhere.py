"""`--cluster` / TOOLKIT_CLUSTER is honoured by every command that computes (issue 52, item 3).

Each command runs through the real CLI against the session's external `dask scheduler` + two
`dask worker` processes; the scheduler's own task stream shows its stage's keys ran there, and
`--performance-report` writes distributed's report. A step that runs in this process by design
(an update fire's commits, `archive partition`, `--executor sync`) says so in one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from distributed import Client, get_task_stream
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.examples.simulate import make_archive

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

runner = CliRunner()


def cli(*args: object, env: dict[str, str] | None = None, code: int = 0) -> object:
    res = runner.invoke(app, [str(a) for a in args], env=env)
    assert res.exit_code == code, res.output
    return res


@contextmanager
def stages_on(address: str) -> Iterator[set[str]]:
    """The stage names (`decode`, `2x`, ...) of every work node the scheduler ran in the block:
    a node's key is `<stage>-<plan hash>-<run id>` (and an index); bookkeeping is left out."""
    ran: set[str] = set()
    with Client(address) as client, get_task_stream(client) as stream:
        yield ran
    for record in stream.data:
        key = record["key"]
        name = str(key[0] if isinstance(key, tuple) else key)
        if not any(mark in name for mark in ("-done-", "-gate-", "-combine-", "-shared")):
            ran.add(name.removeprefix("verify-").split("-")[0])


def written_report(html: Path) -> None:
    assert html.stat().st_size > 0 and "Dask Performance Report" in html.read_text()


@pytest.fixture
def sim(tmp_path: Path, cluster_address: str) -> tuple[list[str], object, list]:
    """The simulated GFS archive, its first six files backfilled by `virtual backfill` on the
    cluster: (the commands' common arguments, the archive, its files)."""
    src, repo = tmp_path / "src", tmp_path / "repo"
    archive = make_archive(
        storage.open_store(str(src)),
        kind="gfs",
        leads=[0, 3, 6],
        publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
    )
    files = archive.files()
    archive.publish(files[:6])
    common = ["sim-gfs", "--repo", repo, "--source", src]
    with stages_on(cluster_address) as ran:
        cli(
            "--cluster", cluster_address, "virtual", "backfill", *common, "--start", "2025-08-01T00"
        )
    assert "ingest" in ran
    return common, archive, files


def test_virtual_validate_runs_its_samples_on_the_cluster(
    sim: tuple, cluster_address: str, tmp_path: Path
) -> None:
    common, _, _ = sim
    window = ["--start", "2025-08-01T00", "--end", "2025-08-01T12"]
    with stages_on(cluster_address) as ran:
        res = cli("--cluster", cluster_address, "virtual", "validate", *common, *window, "--json")
    assert "decode" in ran  # the samples' nodes ran on the scheduler given
    doc = json.loads(res.stdout)
    assert doc["ok"] and doc["samples"] > 0 and doc["executor"] == "dask"
    html = tmp_path / "validate.html"  # TOOLKIT_CLUSTER, the report: no flag about executors
    env = {"TOOLKIT_CLUSTER": cluster_address}
    cli("virtual", "validate", *common, *window, "--performance-report", html, env=env)
    written_report(html)
    # --executor sync is obeyed, and said: the cluster given is not used
    res = cli("--cluster", cluster_address, "virtual", "validate", *common, *window,
              "--json", "--executor", "sync")  # fmt: skip
    assert json.loads(res.stdout)["executor"] == "sync"
    assert f"the cluster {cluster_address} is not used" in res.stderr
    # without a cluster the report's error names the flag the user gave
    res = cli("virtual", "validate", *common, *window, "--executor", "sync",
              "--performance-report", html, code=2)  # fmt: skip
    assert "--executor sync" in res.stderr.splitlines()[-1]


def test_virtual_update_runs_its_samples_on_the_cluster_and_says_what_stays_here(
    sim: tuple, cluster_address: str, tmp_path: Path
) -> None:
    common, archive, files = sim
    archive.publish(files[6:])
    html = tmp_path / "update.html"
    fire = ["--fire-time", "2025-08-01T18", "--scheduled-at", "now", "--deadline", "120"]
    with stages_on(cluster_address) as ran:
        res = cli("virtual", "update", *common, *fire, "--cluster", cluster_address,
                  "--performance-report", html)  # fmt: skip
    assert "decode" in ran
    written_report(html)
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note: the fire's commits")]
    assert len(notes) == 1 and "decode samples run on the cluster" in notes[0], res.stderr


def test_pyramid_build_and_verify_run_on_the_cluster(cluster_address: str, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    synthetic.write_store(storage.open_store(str(store)), shape=(96, 128), shards=(32, 32))
    env = {"TOOLKIT_CLUSTER": cluster_address}
    with stages_on(cluster_address) as ran:
        res = cli("pyramid", "build", store, "--levels", "2", "--json", env=env)
    assert json.loads(res.stdout)["executor"] == "dask" and "2x" in ran
    html = tmp_path / "verify.html"
    with stages_on(cluster_address) as ran:
        res = cli("--cluster", cluster_address, "pyramid", "verify", store, "--json",
                  "--performance-report", html)  # fmt: skip
    doc = json.loads(res.stdout)
    assert doc["ok"] and doc["executor"] == "dask" and "samples" in ran
    written_report(html)


def test_archive_scan_runs_on_the_cluster_and_partition_says_it_does_not(
    cluster_address: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    policy = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
    html = tmp_path / "scan.html"
    env = {"TOOLKIT_CLUSTER": cluster_address}
    with stages_on(cluster_address) as ran:
        cli("archive", "scan", "--data", data, "--manifests", tmp_path / "m1", *policy,
            "--performance-report", html, env=env)  # fmt: skip
    assert "partition" in ran
    written_report(html)
    res = cli("archive", "partition", "--data", data, "--manifests", tmp_path / "m2", *policy,
              env=env)  # fmt: skip
    (note,) = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert "runs in this process" in note and "archive scan" in note
