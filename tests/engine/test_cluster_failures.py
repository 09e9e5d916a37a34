"""Failures read the same on every executor: a service's exception keeps its class, its task and
its worker's traceback across the cluster, a lost scheduler ends in one line, and a lost worker
is named once (issue 52, item 2). Real `dask scheduler` and `dask worker` processes."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.engine.services import Item, SlowWrite
from toolkit import console, storage
from toolkit.cli import app
from toolkit.engine import Each, Gate, ListedKeys, Plan, Stage, run, task_context
from toolkit.examples import synthetic
from toolkit.tasks import stable

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
GARBAGE = b"\x8b garbage \x00" * 30
ROOT = Path(__file__).resolve().parents[2]


def corrupt_store(path: Path) -> str:
    store = storage.open_store(str(path))
    synthetic.write_store(store, shape=(64, 96), shards=(16, 16))
    storage.put(store, "field/c/2/1", GARBAGE)
    return str(path)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_corrupt_shard_reads_the_same_in_process_and_on_a_cluster(
    cluster_address: str, tmp_path: Path
) -> None:
    url = corrupt_store(tmp_path / "in place.zarr")
    runner = CliRunner()
    here = runner.invoke(app, ["pyramid", "build", url, "--executor", "sync"])
    there = runner.invoke(app, ["--cluster", cluster_address, "pyramid", "build", url])
    assert here.exit_code == there.exit_code == 1, there.output
    assert error_lines(here.stderr) == error_lines(there.stderr), there.stderr
    (line,) = error_lines(there.stderr)
    # the task and the object, never a node number or a bookkeeping key
    assert re.search(r"stage '2x' task '2x/field/c/\d+/\d+'", line), line
    assert f"{url}/field/c/2/1" in line and "restore the object" in line
    assert not re.search(r"node \d|-gate-|-done-|-combine-", line)

    debug = runner.invoke(app, ["--debug", "--cluster", cluster_address, "pyramid", "build", url])
    assert debug.exit_code == 1
    assert "on the worker:" in debug.stderr and "toolkit/storage.py" in debug.stderr


def test_from_python_the_error_keeps_its_class_and_its_task(
    cluster_address: str, tmp_path: Path
) -> None:
    import toolkit.pyramid

    url = corrupt_store(tmp_path / "s.zarr")
    with pytest.raises(storage.CorruptObject) as caught:
        toolkit.pyramid.build(url, cluster=cluster_address, executor="dask")
    assert isinstance(caught.value, storage.StorageError)
    context = task_context(caught.value)
    assert context is not None and context.stage == "2x"
    assert context.task.startswith("2x/field/c/")
    assert "storage.py" in context.traceback


class Denied:
    """A service whose store refuses it: what a revoked credential does mid-run."""

    def __init__(self, store: storage.Store) -> None:
        self.store = store

    def __call__(self, task: Item) -> None:
        raise storage.AccessDenied(self.store.url, task.key, "403 Forbidden")


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_a_store_out_of_reach_exits_2_on_every_executor(
    executor: str, cluster_address: str, tmp_path: Path
) -> None:
    store = storage.open_store(str(tmp_path / "objects"))
    tasks = stable(Item("a", i) for i in range(3))
    plan = Plan("denied", (Stage("a", tasks, Denied(store), retries=0),))
    with pytest.raises(storage.AccessDenied) as caught:
        run(plan, cluster=cluster_address, executor=executor)
    assert task_context(caught.value) is not None
    with pytest.raises(typer.Exit) as exited, console.exit_codes():
        raise caught.value
    assert exited.value.exit_code == 2  # as docs/operations.md's alert table says


def test_a_lost_worker_is_named_once(
    external, cluster_address: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from distributed import Client

    store = storage.open_store(str(tmp_path / "objects"))
    tasks = stable(Item("a", i) for i in range(40))
    service = Each(SlowWrite(store, 0.1))
    plan = Plan(
        "lost",
        (
            Stage(
                "a", tasks, service, Gate(ListedKeys(store, "a"), want=tuple(tasks.keys)), workers=2
            ),
        ),
    )
    victim = next(iter(external.worker_pids().values()))
    killed: list[int] = []

    def kill(stage: str, done: int, total: int) -> None:
        if not killed and 0 < done < total:
            os.kill(victim, signal.SIGKILL)
            killed.append(done)

    with caplog.at_level(logging.WARNING, logger="toolkit.engine"), Client(cluster_address) as c:
        report = run(plan, cluster=c, progress=kill)
    assert killed and report.stage("a").gate_have == 40
    said = [r.getMessage() for r in caplog.records if "left while running" in r.getMessage()]
    assert len(said) == 1, said
    assert re.search(r"worker tcp://127\.0\.0\.1:\d+ left while running 1 node", said[0])


def test_a_lost_scheduler_ends_in_one_line_naming_it(tmp_path: Path) -> None:
    from tests.external import _await_line, _start, start

    cluster = start(tmp_path / "doomed", workers=1)
    try:
        url = tmp_path / "big.zarr"
        synthetic.write_store(storage.open_store(str(url)), shape=(3072, 2048), shards=(32, 32))
        cmd = [sys.executable, "-c", "from toolkit.cli import main; main()"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        args = ["--cluster", cluster.address, "pyramid", "build", str(url), "--levels", "4"]
        proc, lines = _start([*cmd, *args], tmp_path, env)
        _await_line(lines, r"dashboard:", "the build")
        time.sleep(1.0)  # into the first level
        assert proc.poll() is None, "the build ended before the scheduler was lost"
        cluster.procs[0].send_signal(signal.SIGKILL)  # the scheduler
        assert proc.wait(timeout=120) == 2
        time.sleep(0.5)
        said = []
        while not lines.empty():
            said.append(lines.get())
        errors = [line for line in said if line.startswith("error:")]
        assert len(errors) == 1, "".join(said)
        assert cluster.address in errors[0] and "rerun" in errors[0], errors[0]
        assert not re.search(r"-gate-|-done-|Cancelled|Traceback", "".join(said))
    finally:
        cluster.stop()
