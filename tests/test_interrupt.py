"""Ctrl-C (SIGINT) and a scheduler's SIGTERM to a real `toolkit` process mid-job.

Each test starts the CLI as a subprocess, waits until the job has visibly started (a level
shard on disk, the dashboard line, worker processes), signals it, and asserts: exit 130 (143
for SIGTERM), stderr ends with the one line `interrupted: rerun to resume`, no traceback,
every child process recorded before the signal gone within a bounded wait. Then the same
command is rerun to completion and its result compared with an uninterrupted run's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest

from toolkit import storage
from toolkit.engine.interrupt import LINE
from toolkit.examples import synthetic

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLKIT_DEBUG": "0"}
SHAPE, SHARDS, MAX_SHARD = (2048, 4096), (256, 256), "256"  # a few seconds of 2x on one core
FINGERPRINTS = ".pyramid/prints/"  # level 0's fingerprints hash each store's own ETags


def toolkit(*args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


class Stderr:
    """The lines a process writes to stderr, collected as they come (a reader thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "\n".join(self.lines)


def until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def interrupt(
    proc: subprocess.Popen[str],
    err: Stderr,
    sig: int = signal.SIGINT,
    group: bool = False,
    want_children: int = 0,
) -> None:
    """Signal `proc` (or its whole process group, as a terminal's Ctrl-C does) and check how it
    ends: the exit code, one last line, no traceback, no process of its left behind."""
    me = psutil.Process(proc.pid)
    until(lambda: len(me.children(recursive=True)) >= want_children, "worker processes")
    children = me.children(recursive=True)
    assert proc.poll() is None, f"the job ended before the signal: {err.text()}"
    (os.killpg if group else os.kill)(proc.pid, sig)
    code = proc.wait(timeout=120)
    text = err.text()
    assert code == 128 + sig, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[-1] == LINE, text
    assert "Traceback" not in text and "Error" not in text, text
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"left behind: {alive}"


def keys_and_bytes(path: Path) -> dict[str, bytes]:
    store = storage.open_store(str(path))
    return {
        k: storage.get(store, k).data
        for k in storage.list_keys(store, "")
        if not k.startswith(FINGERPRINTS)
    }


@pytest.fixture(scope="module")
def level0(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A level-0 store and every object of its uninterrupted pyramid build."""
    root = tmp_path_factory.mktemp("interrupt")
    src = root / "level0.zarr"
    synthetic.write_store(storage.open_store(str(src)), shape=SHAPE, shards=SHARDS)
    clean = root / "clean.zarr"
    shutil.copytree(src, clean)
    done = toolkit("pyramid", "build", str(clean), "--executor", "sync", "--max-shard", MAX_SHARD)
    _, stderr = done.communicate(timeout=600)
    assert done.returncode == 0, stderr
    return src, keys_and_bytes(clean)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("executor", "sig"),
    [("sync", signal.SIGINT), ("dask", signal.SIGINT), ("sync", signal.SIGTERM)],
)
def test_pyramid_build_interrupted_then_rerun_converges(level0, tmp_path, executor, sig):
    src, want = level0
    store = tmp_path / "s.zarr"
    shutil.copytree(src, store)
    build = ("pyramid", "build", str(store), "--executor", executor, "--max-shard", MAX_SHARD)
    proc = toolkit(*build)
    err = Stderr(proc)
    until(lambda: any((store / "2x").rglob("c/*")), "the first 2x shard")
    interrupt(proc, err, sig)
    assert keys_and_bytes(store).keys() != want.keys()  # interrupted for real: levels missing

    rerun = toolkit(*build)
    _, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    got = keys_and_bytes(store)
    assert got.keys() == want.keys()
    assert [k for k in want if got[k] != want[k]] == []


@pytest.mark.slow
def test_virtual_backfill_ctrl_c_on_its_process_workers_then_rerun_converges(tmp_path):
    """Ctrl-C at a terminal reaches the whole process group, the embedded cluster's worker
    processes too: only the toolkit process answers, and it ends them."""
    from tests.virtual.e2e.hooks import fingerprint
    from toolkit import icechunk as R
    from toolkit.examples.datasets import sim_gfs
    from toolkit.examples.simulate import make_archive

    src = tmp_path / "src"
    inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
    make_archive(storage.open_store(str(src)), kind="gfs", inits=inits, leads=[0, 3, 6])

    def backfill(repo: Path, **popen: object) -> subprocess.Popen[str]:
        return toolkit(
            *("virtual", "backfill", "sim-gfs", "--repo", str(repo), "--source", str(src)),
            *("--start", "2025-08-01T00", "--executor", "dask"),
            **popen,
        )

    clean = backfill(tmp_path / "clean")
    _, stderr = clean.communicate(timeout=600)
    assert clean.returncode == 0, stderr

    proc = backfill(tmp_path / "repo", start_new_session=True)  # its own group, as a terminal's
    err = Stderr(proc)
    until(lambda: any(line.startswith("dashboard:") for line in err.lines), "the dashboard line")
    interrupt(proc, err, group=True, want_children=2)  # the resource tracker and a worker

    rerun = backfill(tmp_path / "repo")
    _, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    variables = sim_gfs(storage.open_store(str(src))).template.variables
    got, want = (
        fingerprint(R.RepoRef(storage.open_store(str(tmp_path / name))), variables)
        for name in ("repo", "clean")
    )
    assert got == want


def test_announced_lines_redact_credentials(capsys):
    """The dashboard line (and a report's notes) name URLs: a user:password in one is not
    printed, as in every error line."""
    from toolkit.console import print_report, session
    from toolkit.plan import Report

    announce = session(None, "tcp://scheduler:8786").announce  # type: ignore[arg-type]
    assert announce is not None
    announce("dashboard: http://me:s3cret@h/status")
    report = Report("p", "d", "sync", (), 0.0, notes=("read s3://key:s3cret@bucket/x.zarr",))
    print_report(report)
    printed = capsys.readouterr()
    assert "s3cret" not in printed.err + printed.out
    assert "http://***@h/status" in printed.err and "s3://***@bucket/x.zarr" in printed.out


def test_a_signal_landing_where_an_exception_is_swallowed_is_sent_again():
    """Python swallows an exception raised in a gc callback (distributed has one): the first
    signal landing there is not lost, it is delivered again just after."""
    from toolkit.engine.interrupt import Interrupts

    went: list[str] = []
    try:
        with Interrupts(print) as signals:

            def _gc_callback() -> None:
                signals._handler(signal.SIGINT, sys._getframe())  # must not raise here
                went.append("callback went on")

            _gc_callback()
            went.append("callback returned")
            signal.pause()  # the signal sent again arrives, and raises here
    except KeyboardInterrupt:
        went.append("interrupted")
    assert went == ["callback went on", "callback returned", "interrupted"]
    assert signals.signum == signal.SIGINT
