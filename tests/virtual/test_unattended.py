"""An update run unattended from a scheduler: one deadline bounds the whole process, and a
fire that crashed does not block the next one (issue: run unattended)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.virtual.e2e.hooks import CRASH_EXIT, fingerprint, sim_job
from tests.virtual.test_backfill import START, main_ds, sim
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.simulate import make_archive
from toolkit.virtual.backfill import backfill
from toolkit.virtual.clock import EXIT_MARGIN, VALIDATION_FLOOR, FireClock

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = str(Path(sys.executable).with_name("toolkit"))
FIRE = "2025-08-01T18"


@given(
    deadline=st.floats(1, 3600),
    grace=st.floats(0, 30),
    validation=st.floats(0, 600),
    at=st.floats(0, 4000),
)
def test_the_clock_ends_every_step_inside_the_deadline(deadline, grace, validation, at):
    reserve = min(validation, VALIDATION_FLOOR)
    clock = FireClock(1000.0, deadline, grace, reserve)
    assert clock.poll_until <= clock.end - reserve
    now = max(clock.poll_until, 1000.0 + at)  # validation starts once polling has stopped
    until = clock.bound(validation, now)
    assert until - now <= validation + 1e-6  # never more than its own bound
    # inside the deadline, or inside the floor it was kept (which polling left free)
    assert until <= clock.end - EXIT_MARGIN + 1e-6 or until - now <= VALIDATION_FLOOR + 1e-6
    assert until - now >= min(validation, VALIDATION_FLOOR) - 1e-6  # the floor it was kept


@pytest.mark.slow
def test_a_fire_ends_inside_its_deadline_process_start_to_exit(tmp_path: Path) -> None:
    """The newest cycle is not published: the fire polls until its deadline, commits, then
    validates; from process start to exit it stays inside --deadline (+3 s)."""
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    backfill(ds, start=START, workers=2, executor="sync")
    archive.publish(files[6:9])  # the 18Z cycle stays unpublished: polling runs to the end
    deadline = 20
    started = time.monotonic()
    proc = subprocess.run(
        [TOOLKIT, "virtual", "update", "sim-gfs", "--repo", str(tmp_path / "repo"),
         "--source", str(tmp_path / "src"), "--fire-time", FIRE, "--scheduled-at", "now",
         "--deadline", str(deadline), "--validation-seconds", "60"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    wall = time.monotonic() - started
    assert wall <= deadline + 3, (wall, proc.stderr[-2000:])
    assert wall >= deadline - 2 * VALIDATION_FLOOR - 3  # it did poll: not an early exit
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # the missing cycle may fail checks
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_fire_that_crashed_holding_the_lease_does_not_block_the_next(tmp_path: Path) -> None:
    """The fire dies between the replica's commit and the primary's, its lease still held: the
    next fire takes the lease over at once, says from whom, and converges both repos."""
    inits = [np.datetime64("2025-08-01T00") + np.timedelta64(6 * i, "h") for i in range(4)]
    src, repo, replica = (str(tmp_path / n) for n in ("src", "repo", "replica"))
    make_archive(storage.open_store(src), kind="gfs", inits=[x.astype(object) for x in inits],
                 leads=[0, 3, 6])  # fmt: skip
    job = sim_job(src, repo, replica)
    backfill(job, start=START, end=np.datetime64(FIRE, "ns"), executor="sync")
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.virtual.e2e.crash_run", "update", src, repo, replica,
         "after_replica_commit"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert crashed.returncode == CRASH_EXIT, crashed.stderr[-2000:]
    assert storage.exists(storage.open_store(repo), "toolkit-update.lease")  # left behind

    started = time.monotonic()
    rerun = subprocess.run(
        [TOOLKIT, "virtual", "update", "sim-gfs", "--repo", repo, "--replica", replica,
         "--source", src, "--fire-time", FIRE, "--scheduled-at", "now", "--deadline", "60",
         "--lease-wait", "0", "--no-validate"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert time.monotonic() - started < 30  # no waiting out a lease
    line = next(x for x in rerun.stderr.splitlines() if x.startswith("warning: took over"))
    assert re.search(r"from pid \d+ on \S+ \(started .*\): process \d+ on \S+ is no longer", line)
    clean = sim_job(src, str(tmp_path / "clean"))
    backfill(clean, start=START, executor="sync")
    want = fingerprint(clean.repo, clean.template.variables)
    for ref in (job.repo, job.replicas[0]):
        assert fingerprint(ref, job.template.variables) == want
        assert R.branches(ref.open(fresh=True)) == ["main"]


def _region(ds, start: str, end: str | None):
    return ds.region(np.datetime64(start, "ns"), None if end is None else np.datetime64(end, "ns"))


def test_one_backfill_at_a_time_over_a_region(tmp_path: Path) -> None:
    """A runs (its guard held by this live process, its branch set up); B over an overlapping
    region is refused naming A; C over another region proceeds and finalizes; A's rerun then
    brings C's commit onto its branch and lands, no --rebase needed."""
    from toolkit.tasks import Named
    from toolkit.virtual.backfill import RegionOverlap, backfill_plan, claim
    from toolkit.virtual.inflight import in_flight

    _, _, ds = sim(storage.open_store(str(tmp_path / "src")),
                   storage.open_store(str(tmp_path / "repo")))  # fmt: skip
    a = _region(ds, "2025-08-01T00", "2025-08-01T12")
    guard = claim(a)
    backfill_plan(a).stages[0].service(Named("setup"))
    (flying,) = in_flight(ds.repo.open(fresh=True), ds.repo.store)
    assert flying.holder and f"pid {os.getpid()} on " in flying.holder  # inspect's view
    with pytest.raises(
        RegionOverlap, match=rf"backfill '{flying.branch}' \(region .*running in pid"
    ):
        backfill(ds, start=np.datetime64("2025-08-01T06", "ns"), executor="sync")
    c = backfill(ds, start=np.datetime64("2025-08-01T12", "ns"), executor="sync")  # disjoint
    assert c.stage("commit").gate_have == 6
    guard.release(keep=True)  # A's process ends without finishing
    # C's region is disjoint from A's: A's rerun brings C's commit onto its branch and lands
    report = backfill(ds, start=a.start, end=a.end, executor="sync")
    assert not [n for n in report.notes if "took over" in n]  # a released guard: no warning
    assert main_ds(ds).sizes["init_time"] == 4 and report.stage("commit").gate_have == 6
    assert R.branches(ds.repo.open(fresh=True)) == ["main"]
    assert not storage.exists(ds.repo.store, f"toolkit-{flying.branch}.lease")


def test_the_guard_of_a_dead_backfill_is_taken_over_by_its_rerun(tmp_path: Path) -> None:
    import json
    import socket

    from toolkit.virtual.backfill import temp_branch
    from toolkit.virtual.inflight import guard_key
    from toolkit.virtual.write import ensure_repo

    _, _, ds = sim(storage.open_store(str(tmp_path / "src")),
                   storage.open_store(str(tmp_path / "repo")))  # fmt: skip
    region = _region(ds, "2025-08-01T00", "2025-08-01T12")
    ensure_repo(region)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    body = {"holder": "x", "host": socket.gethostname(), "pid": int(dead.stdout),
            "started": time.time(), "fire_time": 0.0, "heartbeat": time.time(),
            "interval": 5.0, "expires": time.time() + 10}  # fmt: skip
    key = guard_key(temp_branch(region))
    storage.put(ds.repo.store, key, json.dumps(body).encode())
    report = backfill(ds, start=region.start, end=region.end, executor="sync")
    assert any(
        f"process {int(dead.stdout)}" in n and "no longer running" in n for n in report.notes
    )
    assert not storage.exists(ds.repo.store, key)


def _objects(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def test_expiry_keeps_the_window_main_and_what_is_in_flight(tmp_path: Path) -> None:
    """Many ticks, then an expiry at a cutoff among them: the history shrinks to the kept
    window, objects only expired snapshots held are deleted, main and a retained snapshot
    read as before, and a backfill in flight (branch and marker) still finalizes."""
    import zarr

    from toolkit import transaction as T
    from toolkit.tasks import Named
    from toolkit.virtual.backfill import backfill_plan
    from toolkit.virtual.update import expire

    archive, files, ds = sim(storage.open_store(str(tmp_path / "src")),
                             storage.open_store(str(tmp_path / "repo")), publish=9)  # fmt: skip
    backfill(ds, start=START, executor="sync")

    def tick(i: int):
        def change(_ref, session) -> None:
            zarr.open_group(session.store).attrs["tick"] = i

        return change

    snaps = [T.commit_on([ds.repo], "main", tick(i), f"tick {i}") for i in range(30)]
    archive.publish(files[9:])
    newest = np.datetime64("2025-08-01T18", "ns")
    flying = ds.region(newest, newest + np.timedelta64(1, "ns"))  # as `--start 18Z` makes it
    backfill_plan(flying).stages[0].service(Named("setup"))  # in flight, nothing finalized
    repo = ds.repo.open(fresh=True)
    kept_at = next(c for c in R.history(repo) if c.id == snaps[20]).written_at
    before = {s: zarr.open_group(R.readonly(repo, snapshot=s).store, mode="r").attrs["tick"]
              for s in snaps[20:]}  # fmt: skip
    main_before = xr_main(ds)
    count = _objects(tmp_path / "repo")
    done = R.expire(repo, kept_at)
    assert done.snapshots >= 20 and done.objects > 0
    assert _objects(tmp_path / "repo") < count
    repo = ds.repo.open(fresh=True)
    history = [c.id for c in R.history(repo)]
    assert snaps[:20] == [s for s in snaps[:20] if s not in history]  # expired, all of them
    assert all(s in history for s in snaps[20:])  # the window is kept
    for s, i in before.items():  # readers of retained snapshots are unaffected
        assert zarr.open_group(R.readonly(repo, snapshot=s).store, mode="r").attrs["tick"] == i
    assert xr_main(ds).identical(main_before)
    report = backfill(ds, start=flying.start, executor="sync")  # the in-flight one lands
    assert report.stage("finalize").gate_have == 1
    landed = xr_main(ds)
    # the command: 0s keeps only the tips; a duration it cannot read is one line, exit 2
    ran = subprocess.run([TOOLKIT, "virtual", "expire", str(tmp_path / "repo"),
                          "--older-than", "0s"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"repo: \d+ snapshot\(s\) expired, \d+ object\(s\) deleted", ran.stdout)
    assert xr_main(ds).identical(landed)  # main reads as before
    ((url, again),) = expire([ds.repo], timedelta(0))  # under the lease, nothing left to do
    assert url == ds.repo.url and again.snapshots == 0


def xr_main(ds):
    from tests.virtual.test_backfill import main_ds

    return main_ds(ds).load()


def test_update_json_and_status_say_what_a_monitor_needs(tmp_path: Path) -> None:
    import json

    archive, files, ds = sim(storage.open_store(str(tmp_path / "src")),
                             storage.open_store(str(tmp_path / "repo")), publish=6)  # fmt: skip
    backfill(ds, start=START, executor="sync")
    archive.publish(files[6:])
    repo = str(tmp_path / "repo")
    fired = subprocess.run(
        [TOOLKIT, "virtual", "update", "sim-gfs", "--repo", repo, "--source", str(tmp_path / "src"),
         "--fire-time", FIRE, "--scheduled-at", "now", "--deadline", "60", "--json"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert fired.returncode == 0, fired.stderr[-2000:]
    (line,) = fired.stdout.splitlines()  # stdout is the one JSON object
    summary = json.loads(line)
    assert summary["fire"] == "2025-08-01T18:00:00" and summary["committed"] == 6
    assert summary["pending"] == 0 and summary["skipped"] == [] and summary["given_up"] == []
    assert summary["validation"] == {"passed": True, "failures": []}
    assert 0 <= summary["lag_seconds"] < 600  # the sim's files were written just now
    shown = subprocess.run([TOOLKIT, "virtual", "status", repo, "--json"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["latest"] == {"init_time": "2025-08-01T18:00:00"}
    assert state["last_fire"] == summary and state["in_flight"] == []
    assert state["manifests"]["refs"] > 0 and state["manifests"]["bytes_per_ref"] > 0
    text = subprocess.run([TOOLKIT, "virtual", "status", repo], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert "last fire 2025-08-01T18:00:00: 6 file(s) committed" in text.stdout
    assert "validation passed" in text.stdout
    # a failed validation is what an alert reads: status exits 1
    from toolkit.virtual.status import record_validation

    record_validation(ds.repo.store, False, ["completeness: 1 file missing"])
    assert subprocess.run([TOOLKIT, "virtual", "status", repo], capture_output=True,
                          timeout=120).returncode == 1  # fmt: skip


def test_the_one_fire_function_shows_the_fire_then_validates_and_records(tmp_path: Path) -> None:
    """`unattended.fire`, all `toolkit virtual update` calls: the fire is handed to `shown`
    before validation has written anything, the STAC entry follows main, the verdict lands in
    the fire's record; with validation off the record keeps none, and a fire past its poll
    deadline says it sweeps once."""
    from toolkit.virtual.status import last_fire
    from toolkit.virtual.unattended import Checks, Schedule, fire
    from toolkit.virtual.update import Fire

    archive, files, ds = sim(storage.open_store(str(tmp_path / "src")),
                             storage.open_store(str(tmp_path / "repo")), publish=6)  # fmt: skip
    backfill(ds, start=START, executor="sync")
    archive.publish(files[6:])
    at = np.datetime64(FIRE, "ns")
    seen: list = []
    said: list[str] = []

    def shown(done: Fire) -> None:
        seen.append((done, (last_fire(ds.repo.store) or {}).get("validation")))

    out = fire(ds, Schedule(at, time.time(), 60), Checks(sample=2), stac=tmp_path / "stac",
               say=said.append, shown=shown)  # fmt: skip
    ((done, verdict_then),) = seen
    assert done is out.fire and len(done.ingested) == 6 and not done.pending
    assert verdict_then is None  # shown before validation ran
    assert out.ok and out.validation is not None and out.validation.ok
    assert out.record["validation"] == {"passed": True, "failures": []}
    assert last_fire(ds.repo.store) == out.record
    assert said == [f"stac: {tmp_path / 'stac' / 'collection.json'} rewritten"]
    late = fire(ds, Schedule(at, 0.0, 60), Checks(validate=False), say=said.append)
    assert late.validation is None and late.ok and late.fire.ingested == []
    assert late.record["validation"] is None and late.record["committed"] == 0
    assert "(60 s after the scheduled 2025-08-01T18:00:00, less" in said[-1]
    assert said[-1].endswith("has passed: one sweep only")


def test_an_unreachable_samples_cluster_never_holds_back_the_commits(tmp_path: Path) -> None:
    """The cluster of `update --executor dask --cluster ADDR` is the decode samples': a fire
    commits what published first, and only its validation needs the cluster (exit 2 naming
    it); with --no-validate the fire never reaches for it."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    archive, files, ds = sim(storage.open_store(str(tmp_path / "src")),
                             storage.open_store(str(tmp_path / "repo")), publish=6)  # fmt: skip
    backfill(ds, start=START, executor="sync")
    archive.publish(files[6:])
    repo = str(tmp_path / "repo")
    before = R.snapshot_of(R.RepoRef(storage.open_store(repo)).open(fresh=True))
    fire = [TOOLKIT, "virtual", "update", "sim-gfs", "--repo", repo, "--source",
            str(tmp_path / "src"), "--fire-time", FIRE, "--scheduled-at", "now", "--deadline",
            "60", "--executor", "dask", "--cluster", f"tcp://127.0.0.1:{port}",
            "--wait-for-workers", "2"]  # fmt: skip
    fired = subprocess.run([*fire, "--no-validate"], capture_output=True, text=True, timeout=180)
    assert fired.returncode == 0, fired.stderr[-2000:]
    after = R.snapshot_of(R.RepoRef(storage.open_store(repo)).open(fresh=True))
    assert after != before  # the fire's files landed on main
    again = subprocess.run(fire, capture_output=True, text=True, timeout=180)
    assert again.returncode == 2, again.stderr[-2000:]
    assert f"127.0.0.1:{port}" in again.stderr.strip().splitlines()[-1]
