"""Operational updates: whole files per tick while the simulator publishes; the lease."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.virtual.test_backfill import START, main_ds, sim
from tests.virtual.test_job import assert_exact
from toolkit import icechunk as R
from toolkit import storage
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.lease import Lease, LeaseHeld, LeaseLost
from toolkit.virtual.read import file_refs
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.update import BackfillInFlight, update

FIRE = np.datetime64("2025-08-01T18", "ns")


def test_update_commits_files_as_they_publish_and_readers_never_see_part(tmp_path):
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    backfill(ds, start=START, workers=2, executor="sync")
    rest = files[6:]
    publisher = threading.Thread(target=lambda: [archive.publish(f) for f in rest])
    publisher.start()
    try:
        report = update(ds, fire_time=FIRE, deadline_seconds=60)
    finally:
        publisher.join()
    result = report.stage("update").result
    assert sorted(result.ingested) == sorted(archive.data_url(f) for f in rest)
    assert result.pending == [] and not result.skipped
    assert_exact(main_ds(ds), files)
    # Reader safety: at every commit on main, each file is wholly present or wholly absent.
    repo = ds.repo.open(fresh=True)
    t = ds.template
    coords = ds.region(None, None).files()
    for commit in R.history(repo)[:-1]:
        session = R.readonly(repo, snapshot=commit.id)
        extent = committed_extent(session, t)
        if extent is None:
            continue
        geom = t.geometry(extent)
        for c in coords:
            size = storage.head(ds.dataset.source.store, c.url.split("/src/", 1)[1]).size
            refs = file_refs(ds.dataset.source, c, size)
            keys = [chunk_key(geom, r.variable, r.loc) for r in refs]
            present = R.exists_many(session, [k.key for k in keys if k is not None])
            assert all(present) or not any(present), (commit.message, c.url)
            assert len(present) in (0, len(refs)) or not any(present)


def test_update_with_nothing_new_stops_at_its_deadline_and_rolls_files_over(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=7,
    )
    scheduled = time.time()
    report = update(ds, fire_time=FIRE, scheduled_at=scheduled, deadline_seconds=3, grace_seconds=1)
    result = report.stage("update").result
    assert time.time() - scheduled < 3  # the poll deadline is anchored to the scheduled fire
    assert len(result.pending) == 5  # not yet published: rolls to the next fire
    assert main_ds(ds).sizes["init_time"] == 3


def test_update_refuses_while_a_backfill_is_in_flight(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    region = ds.region(START, FIRE)
    backfill_plan(region).stages[0].service(Named("setup"))
    with pytest.raises(BackfillInFlight, match="in flight"):
        update(ds, fire_time=FIRE, deadline_seconds=5)


def test_lease_single_writer_and_newer_fire_takeover(tmp_path):
    store = storage.open_store(str(tmp_path / "leases"))
    a = Lease(store, "u.lease", fire_time=100.0).acquire()
    with pytest.raises(LeaseHeld, match="another update is running"):
        Lease(store, "u.lease", fire_time=100.0).acquire()  # same fire started twice
    with pytest.raises(LeaseHeld):
        Lease(store, "u.lease", fire_time=50.0).acquire()  # an older fire never wins
    a.check()
    b = Lease(store, "u.lease", fire_time=200.0).acquire()  # the newer fire takes over
    with pytest.raises(LeaseLost, match="taken over"):
        a.check()
    a.release()  # not ours any more: leaves b's lease alone
    b.check()
    b.release()
    Lease(store, "u.lease", fire_time=1.0, ttl=-1).acquire()  # expired leases are taken over
    Lease(store, "u.lease", fire_time=1.0).acquire()


def test_two_update_processes_started_at_once_one_writes(tmp_path):
    """Two real `toolkit virtual update` processes on one repo: exactly one takes the lease and
    commits; the other exits 1 saying another update is running."""
    import subprocess
    import sys
    from pathlib import Path

    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    backfill(ds, start=START, workers=2, executor="sync")
    archive.publish(files[6:9])  # three new files; the last cycle stays unpublished
    n_before = len(R.history(ds.repo.open(fresh=True)))
    cmd = [
        str(Path(sys.executable).with_name("toolkit")),
        "virtual",
        "update",
        "sim-gfs",
        "--repo",
        str(tmp_path / "repo"),
        "--source",
        str(tmp_path / "src"),
        "--fire-time",
        "2025-08-01T18",
        "--scheduled-at",
        "now",  # the simulator's clock is not the wall clock: anchor the deadline at start
        "--deadline",
        "10",  # the winner holds the lease, polling for the last cycle, past the loser
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = [(p.wait(timeout=120), p.stdout.read()) for p in procs]
    codes = sorted(rc for rc, _ in outs)
    assert codes == [0, 1], outs
    loser = next(out for rc, out in outs if rc == 1)
    assert "another update is running" in loser and "lease" in loser
    new = R.history(ds.repo.open(fresh=True))[: -n_before or None]
    writers = {c.metadata.get("writer") for c in new if c.metadata.get("mode") == "update"}
    assert len(writers) == 1 and None not in writers  # one writer made every update commit
    assert sum(c.metadata.get("files", 0) for c in new if c.metadata.get("writer")) == 3
    assert_exact(main_ds(ds), files[:9])


def test_a_dead_holders_lease_lapses_and_a_waiting_update_takes_it(tmp_path):
    store = storage.open_store(str(tmp_path / "leases"))
    Lease(store, "u.lease", fire_time=100.0, ttl=0.5).acquire()  # never renewed: its holder died
    with pytest.raises(LeaseHeld):
        Lease(store, "u.lease", fire_time=100.0).acquire()
    b = Lease(store, "u.lease", fire_time=100.0, ttl=30).acquire(wait=10)
    b.check()
    b._renewed = 0.0  # force the next renew to write
    b.renew()
    b.check()


def test_an_update_far_behind_says_to_backfill_and_a_window_outside_the_template_is_refused(
    tmp_path,
):
    """Main ends more than one window before the fire's window: growing past the gap would
    leave readers empty positions no later fire covers, so the update refuses, saying
    backfill. A fire whose window misses the template entirely is refused, naming both."""
    from toolkit.examples.datasets import sim_gfs
    from toolkit.virtual.update import FarBehind
    from toolkit.virtual.write import Job

    ds = Job(
        sim_gfs(storage.open_store(str(tmp_path / "src")), inits=8),
        R.RepoRef(storage.open_store(str(tmp_path / "repo"))),
    )
    with pytest.raises(FarBehind, match=r"ends 5 init_time positions .*run a backfill"):
        update(ds, fire_time=np.datetime64("2025-08-02T18", "ns"), deadline_seconds=5)
    assert main_ds(ds).sizes["init_time"] == 0  # nothing grown, nothing committed
    with pytest.raises(ValueError, match=r"fire 2030-01-01.*holds no init_time of the template"):
        update(ds, fire_time=np.datetime64("2030-01-01", "ns"), deadline_seconds=5)
    # one window behind is tolerated (a new dataset, or a missed fire)
    report = update(ds, fire_time=np.datetime64("2025-08-01T18", "ns"), deadline_seconds=1)
    assert len(report.stage("update").result.pending) == 9  # nothing published: rolls over
