"""`auto`: small plans run in this process, everything else on a cluster.

A cluster's start-up and per-stage round trips cost more than a few seconds of work, so a plan
that says it reads little runs in the calling process (`sync`) when nobody gave or started a
cluster; the report records which executor ran it. Start-up of that path imports no distributed.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import LocalCluster

from tests.engine.test_engine import three_stages
from toolkit import storage
from toolkit.engine import Session, run
from toolkit.engine.runner import IN_PROCESS_BYTES, choose_executor


@pytest.fixture
def store(tmp_path: Path) -> storage.Store:
    return storage.open_store(str(tmp_path / "objects"))


def sized(store: storage.Store, work: int | None):
    return dataclasses.replace(three_stages(store, sizes=(3, 2, 1)), work_bytes=work)


@pytest.mark.parametrize(
    ("work", "want"),
    [(0, "sync"), (IN_PROCESS_BYTES - 1, "sync"), (IN_PROCESS_BYTES, "dask"), (None, "dask")],
)
def test_auto_stays_in_process_only_for_small_plans(store, work, want) -> None:
    plan = sized(store, work)
    assert choose_executor(plan, None, "auto") == want
    with Session(None) as unstarted:
        assert choose_executor(plan, unstarted, "auto") == want
    for explicit in ("sync", "dask"):
        assert choose_executor(plan, None, explicit) == explicit


def test_a_given_or_started_cluster_is_always_used(store) -> None:
    plan = sized(store, 0)
    assert choose_executor(plan, "tcp://127.0.0.1:8786", "auto") == "dask"
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as lc:
        assert choose_executor(plan, lc, "auto") == "dask"
        report = run(plan, cluster=lc, executor="auto")
        assert report.executor == "dask"
        with Session(lc) as given:
            assert choose_executor(plan, given, "auto") == "dask"
    with Session(None) as session:
        session.client(holds_gil=False)  # an earlier plan of the command started one
        assert choose_executor(plan, session, "auto") == "dask"


def test_asking_for_a_performance_report_asks_for_a_cluster(store, tmp_path) -> None:
    report = tmp_path / "perf.html"
    with Session(None, performance_report=report) as session:
        assert run(sized(store, 0), cluster=session, executor="auto").executor == "dask"
    assert report.exists()  # distributed's report, written when the session closed


def test_a_small_plan_runs_here_and_says_so(store) -> None:
    report = run(sized(store, 1024), executor="auto")
    assert report.executor == "sync"
    assert [s.written for s in report.stages] == [3, 2, 1]
    assert len(storage.list_keys(store, "")) == 6


def test_the_in_process_path_does_not_import_distributed(tmp_path) -> None:
    """Half a second of a small build's start-up was importing distributed it never used."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from toolkit.cli import app\n"
        "from toolkit import storage\n"
        "from toolkit.examples import synthetic\n"
        f"path = {str(tmp_path / 's.zarr')!r}\n"
        "synthetic.write_store(storage.open_store(path), shape=(40, 60), shards=(16, 16))\n"
        "r = CliRunner().invoke(app, ['pyramid', 'build', path])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'small build: ran in this process' in r.output, r.output\n"
        "assert 'dashboard:' not in r.output, r.output\n"
        "print(sorted(m for m in ('distributed', 'dask') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
