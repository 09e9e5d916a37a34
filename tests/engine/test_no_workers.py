"""A scheduler with no workers (an address given with --cluster / TOOLKIT_CLUSTER): the run
waits up to --wait-for-workers with one line saying so, then exits 2 naming the scheduler,
having written nothing; a worker that joins inside the wait lets the run go on."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.external import External, start
from toolkit import storage
from toolkit.examples import synthetic

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def empty(tmp_path: Path) -> Iterator[External]:
    """A `dask scheduler` with no worker at all."""
    cluster = start(tmp_path / "cluster", workers=0)
    yield cluster
    cluster.stop()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "field.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(64, 96), shards=(16, 16))
    return path


def _build(path: Path, address: str, wait: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", "pyramid", "build", str(path), "--cluster", address,
         "--wait-for-workers", wait],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_no_worker_within_the_wait_is_exit_2_naming_the_scheduler(
    empty: External, tmp_path: Path
) -> None:
    path = _store(tmp_path)
    before = _files(path)
    proc = _build(path, empty.address, "2")
    _out, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 2, err
    assert lines[0] == f"waiting up to 2 s for a worker to join the scheduler at {empty.address}"
    assert len(lines) == 2 and "Traceback" not in err, err
    assert lines[1].startswith("error: no worker joined the scheduler at " + empty.address)
    assert "--wait-for-workers" in lines[1]
    assert _files(path) == before  # nothing written: no plan record, no level metadata


def test_a_worker_that_joins_inside_the_wait_runs_the_build(
    empty: External, tmp_path: Path
) -> None:
    path = _store(tmp_path)
    proc = _build(path, empty.address, "120")
    said: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [said.put(line) for line in proc.stderr or ()])
    reader.start()
    first = said.get(timeout=60)
    assert first.startswith("waiting up to 120 s for a worker"), first
    empty.add_worker()
    _out = proc.stdout.read() if proc.stdout else ""
    assert proc.wait(timeout=300) == 0, _out
    reader.join()
    assert (path / "2x" / "field" / "zarr.json").exists()
