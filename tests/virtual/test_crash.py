"""Crash at every step of a commit, then rerun: the manifest converges to a clean run's.

Each crash is a real process death (a subprocess that `os._exit`s at a hook the job exposes,
or a Dask worker SIGKILLed mid-backfill); nothing in Icechunk is mocked. "Converges" means the
primary's and the replica's manifests hold exactly the refs of one uninterrupted run: the same
(variable, chunk, length, referenced bytes), the same source locations and the same live ref
count (so nothing duplicated, nothing missing).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from tests.virtual.e2e.hooks import (
    CRASH_EXIT,
    INITS,
    KillOnceAt,
    StepPlugin,
    fingerprint,
    sim_job,
)
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.simulate import make_archive
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan, temp_branch
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


def crash(mode: str, src: str, repo: Path, replica: Path, point: str) -> None:
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


def test_replica_finalize_refuses_when_its_main_moved(world, tmp_path):
    """Finalize guards every repo: a replica whose main moved stops the finalize, before the
    primary is touched, and both temp branches are kept."""
    src, _ = world
    job = sim_job(src, str(tmp_path / "repo"), str(tmp_path / "replica"))
    region = job.region(START, np.datetime64("2025-08-01T18", "ns") + np.timedelta64(1, "ns"))
    backfill_plan(region).stages[0].service(Named("setup"))
    # An operational write to the replica's main only.
    run(sim_job(src, str(tmp_path / "replica")).region(START, SECOND_CYCLE))
    with pytest.raises(R.BranchMoved, match="moved since setup"):
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
