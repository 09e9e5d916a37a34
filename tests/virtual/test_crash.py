"""Crash at every step of a commit, then rerun: the manifest converges to a clean run's.

Each crash is a real process death (a subprocess that `os._exit`s at a hook the job exposes,
or a Dask worker SIGKILLed mid-backfill); nothing in Icechunk is mocked. "Converges" means the
primary's and the replica's manifests hold exactly the refs of one uninterrupted run: the same
(variable, chunk, length, referenced bytes), the same source locations and the same live ref
count (so nothing duplicated, nothing missing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from tests.virtual.e2e.hooks import (
    CRASH_EXIT,
    INITS,
    KillOnceAt,
    SleepAt,
    StepPlugin,
    fingerprint,
    sim_job,
)
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.simulate import make_archive
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan, temp_branch
from toolkit.virtual.inflight import RegionOverlap
from toolkit.virtual.write import ensure_repo, run

ROOT = Path(__file__).resolve().parents[2]
START = np.datetime64("2025-08-01T00", "ns")
SECOND_CYCLE = np.datetime64("2025-08-01T06", "ns")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One published archive and the fingerprint of a clean, uninterrupted write loop over it."""
    root = tmp_path_factory.mktemp("crash")
    make_archive(storage.open_store(str(root / "src")), kind="gfs", inits=INITS, leads=[0, 3, 6])
    clean = sim_job(str(root / "src"), str(root / "clean"))
    ensure_repo(clean)
    assert len(run(clean).ingested) == 12
    return str(root / "src"), fingerprint(clean.repo, clean.template.variables)


def crash(mode: str, src: str, repo: Path, replica: Path, point: str, *nth: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.virtual.e2e.crash_run",
            mode,
            src,
            str(repo),
            str(replica),
            point,
            *nth,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == CRASH_EXIT, proc.stderr[-3000:]


@pytest.mark.parametrize("point", ["before_set_refs", "after_set_refs", "after_replica_commit"])
def test_write_loop_crash_then_rerun_converges(world, tmp_path, point):
    src, want = world
    job = sim_job(src, str(tmp_path / "repo"), str(tmp_path / "replica"))
    ensure_repo(job)
    run(job.region(START, SECOND_CYCLE))  # one cycle durable before the crash
    variables = job.template.variables
    before = fingerprint(job.repo, variables)
    assert len(before["refs"]) == len(want["refs"]) // 4

    crash("run", src, tmp_path / "repo", tmp_path / "replica", point)

    # Nothing of the dying batch is visible on the primary (which defines "committed").
    assert fingerprint(job.repo, variables) == before
    replica = fingerprint(job.replicas[0], variables)
    # Replicas commit first: a crash after the replica's commit leaves it one commit ahead.
    assert replica == (want if point == "after_replica_commit" else before)

    again = run(job)  # the rerun: the filter (on the primary) finds the 9 files still missing
    assert len(again.ingested) == 9 and len(again.commits) == 1
    assert fingerprint(job.repo, variables) == want
    assert fingerprint(job.replicas[0], variables) == want
    assert run(job).ingested == []  # and a third run has nothing left to do


@pytest.mark.parametrize(
    "point", ["before_set_refs", "after_replica_commit", "finalize_after_replica"]
)
def test_backfill_crash_then_rerun_converges(world, tmp_path, point):
    src, want = world
    job = sim_job(src, str(tmp_path / "repo"), str(tmp_path / "replica"))
    variables = job.template.variables

    crash("backfill", src, tmp_path / "repo", tmp_path / "replica", point)

    primary, replica = job.repo.open(fresh=True), job.replicas[0].open(fresh=True)
    branch = [b for b in R.branches(primary) if b.startswith("backfill-") and "main" not in b]
    assert len(branch) == 1  # the primary never finalized: its temp branch is kept
    assert fingerprint(job.repo, variables)["refs"] == set()  # main untouched
    if point == "finalize_after_replica":
        assert fingerprint(job.replicas[0], variables) == want  # the replica already finalized
        assert R.branches(replica) == ["main"]
    else:
        assert fingerprint(job.replicas[0], variables)["refs"] == set()

    report = backfill(job, start=START, workers=3, executor="sync")
    expect_written = 0 if point == "finalize_after_replica" else 12
    assert report.stage("ingest").written == expect_written
    for ref in (job.repo, job.replicas[0]):
        assert fingerprint(ref, variables) == want
        assert R.branches(ref.open(fresh=True)) == ["main"]


def on_branch(job) -> int:
    """Files of the region the primary's temp branch holds (its manifests probed)."""
    from toolkit.virtual.backfill import PresentOnBranch

    region = job.region(START, np.datetime64("2025-08-01T18", "ns") + np.timedelta64(1, "ns"))
    return len(PresentOnBranch(region, temp_branch(region))())


@pytest.mark.parametrize(
    ("point", "nth", "committed"),
    [
        ("round_committed", 1, 3),  # at the first round boundary
        ("round_committed", 3, 9),  # at the last boundary before finalize
        ("worker_forked", 5, 6),  # inside round 3: its first fork written, nothing committed
        ("after_replica_commit", 2, 3),  # inside round 2: the replica committed it, not main
    ],
)
def test_backfill_killed_in_rounds_resumes_after_the_last_committed_round(
    world, tmp_path, point, nth, committed
):
    """Rounds of 3 files (4 rounds): a process killed at a round boundary or inside a round
    keeps every round committed before it on the branch; the rerun skips exactly those files,
    ingests the rest (at most the round in flight is done twice) and equals a clean run."""
    src, want = world
    job = sim_job(src, str(tmp_path / "repo"), str(tmp_path / "replica"))
    variables = job.template.variables

    crash("rounds", src, tmp_path / "repo", tmp_path / "replica", point, str(nth))

    assert on_branch(job) == committed
    assert fingerprint(job.repo, variables)["refs"] == set()  # main untouched
    report = backfill(job, start=START, workers=2, executor="sync", round_files=3)
    ingest = report.stage("ingest")
    assert (ingest.skipped, ingest.written) == (committed, 12 - committed)
    assert report.stage("commit").tasks == 4
    for ref in (job.repo, job.replicas[0]):
        assert fingerprint(ref, variables) == want
        assert R.branches(ref.open(fresh=True)) == ["main"]


def test_replica_finalize_refuses_when_its_main_moved(world, tmp_path):
    """Finalize guards every repo: a replica whose main's new commits wrote into the region
    stops the finalize, before the primary is touched, and both temp branches are kept."""
    src, _ = world
    job = sim_job(src, str(tmp_path / "repo"), str(tmp_path / "replica"))
    region = job.region(START, np.datetime64("2025-08-01T18", "ns") + np.timedelta64(1, "ns"))
    backfill_plan(region).stages[0].service(Named("setup"))
    # An operational write to the replica's main only.
    run(sim_job(src, str(tmp_path / "replica")).region(START, SECOND_CYCLE))
    with pytest.raises(RegionOverlap, match="replica: main's commits since its setup wrote into"):
        backfill(job, start=START, workers=2, executor="sync")
    assert temp_branch(region) in R.branches(job.repo.open(fresh=True))
    assert fingerprint(job.repo, job.template.variables)["refs"] == set()


@pytest.mark.slow
def test_worker_sigkilled_mid_backfill_converges(world, tmp_path, local_cluster):
    """A process worker dies (SIGKILL) after writing its fork, before handing it back: Dask
    reruns its block elsewhere, the dead fork is never merged, the manifest equals a clean run."""
    src, want = world
    markers = storage.open_store(str(tmp_path / "markers"))
    job = sim_job(src, str(tmp_path / "repo"))
    with Client(local_cluster) as client:
        client.register_plugin(StepPlugin(KillOnceAt(markers, "worker_forked")), name="kill")
        try:
            report = backfill(job, start=START, workers=4, cluster=local_cluster)
        finally:
            client.unregister_worker_plugin("kill")
    assert storage.exists(markers, "killed-at-worker_forked")  # a worker really died
    assert report.stage("commit").gate_have == 12
    assert fingerprint(job.repo, job.template.variables) == want
    again = backfill(job, start=START, workers=4, cluster=local_cluster)
    assert again.stage("ingest").written == 0 and again.stage("ingest").skipped == 12
    assert fingerprint(job.repo, job.template.variables) == want


def backfill_cli(address: str, src: str, repo: Path) -> subprocess.Popen[str]:
    """The documented command, rounds of 3 files, on the cluster at `address`."""
    argv = ["--cluster", address, "virtual", "backfill", "sim-gfs", "--repo", str(repo)]
    argv += ["--source", src, "--start", "2025-08-01T00", "--round-files", "3", "--json"]
    cmd = [sys.executable, "-c", "from toolkit.cli import main; main()", *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def idle(address: str) -> None:
    """Wait until the scheduler holds no task (what a killed client started has ended)."""

    def tasks(dask_scheduler) -> int:
        return len(dask_scheduler.tasks)

    with Client(address, set_as_default=False) as c:
        deadline = time.monotonic() + 60
        while c.run_on_scheduler(tasks) and time.monotonic() < deadline:
            time.sleep(0.1)


def await_rounds(job, proc: subprocess.Popen[str], files: int) -> int:
    """Wait until the branch holds at least `files` files (rounds of 3), the command running."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        try:
            held = on_branch(job)
        except Exception:  # the branch not set up yet
            held = 0
        if held >= files:
            return held
        time.sleep(0.05)
    raise AssertionError(f"the branch never held {files} files")


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["scheduler", "client", "workers"])
def test_a_backfill_on_a_cluster_loses_at_most_the_round_in_flight(world, tmp_path, victim):
    """The CLI on an external scheduler, rounds of 3 files slowed to ~1 s each: once two rounds
    are on the branch, the scheduler, the command (SIGKILL) or every worker is killed. Workers
    come back (their nannies) and the command finishes; otherwise the same command is run
    again and skips exactly the files the branch holds. Either way the repo equals a clean
    backfill."""
    from tests.external import start

    src, want = world
    job = sim_job(src, str(tmp_path / "repo"))
    cluster = start(tmp_path / "cluster", workers=2)
    try:
        with Client(cluster.address, set_as_default=False) as c:
            c.register_plugin(StepPlugin(SleepAt("worker_forked", 0.5)), name="slow")
        proc = backfill_cli(cluster.address, src, tmp_path / "repo")
        await_rounds(job, proc, 6)
        if victim == "scheduler":
            cluster.procs[0].send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 2, err[-3000:]
            assert "lost the Dask scheduler" in err, err[-3000:]
            cluster.stop()
            cluster = start(tmp_path / "again", workers=2)
        elif victim == "client":
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            idle(cluster.address)  # a round's commit already running may still land
        else:
            for pid in cluster.worker_pids().values():
                os.kill(pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
            done = json.loads(out)
            assert done["committed"] == 12 and done["rounds"] == 4
        if victim != "workers":
            held = on_branch(job)
            assert 6 <= held < 12
            rerun = backfill_cli(cluster.address, src, tmp_path / "repo")
            out, err = rerun.communicate(timeout=180)
            assert rerun.returncode == 0, err[-3000:]
            ingest = next(s for s in json.loads(out)["stages"] if s["stage"] == "ingest")
            assert (ingest["skipped"], ingest["written"]) == (held, 12 - held)
    finally:
        cluster.stop()
    assert fingerprint(job.repo, job.template.variables) == want
    assert R.branches(job.repo.open(fresh=True)) == ["main"]
