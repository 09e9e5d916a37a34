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
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.source_io import file_refs
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
        result = update(ds, fire_time=FIRE, deadline_seconds=60)
    finally:
        publisher.join()
    assert sorted(result.ingested) == sorted(archive.data_url(f) for f in rest)
    assert result.pending == [] and not result.skipped
    # the fire's own value, and the one-row table the CLI prints from it
    assert result.todo == len(rest) and result.files >= len(rest)
    row = result.as_report().stage("update")
    assert (row.tasks, row.skipped, row.written) == (result.files, result.files - 6, 6)
    assert result.as_report().plan == f"virtual-update-{FIRE}"
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
    result = update(ds, fire_time=FIRE, scheduled_at=scheduled, deadline_seconds=3, grace_seconds=1)
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
    stale = Lease(store, "u.lease", fire_time=1.0, interval=-1).acquire()  # beats never
    fresh = Lease(store, "u.lease", fire_time=1.0).acquire()  # so it is taken over at once
    assert fresh.took_over is not None and "heartbeat stopped" in fresh.took_over
    assert stale.took_over is None


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
        "20",  # the winner holds the lease, polling for the last cycle (10 s), past the loser
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


def _foreign(store, heartbeat_age: float, interval: float = 5.0, host: str = "pod-7") -> None:
    """A lease another host wrote, its last heartbeat `heartbeat_age` seconds ago."""
    import json
    import time

    beat = time.time() - heartbeat_age
    body = {"holder": "h-other", "host": host, "pid": 4242, "started": beat - 60,
            "fire_time": 100.0, "heartbeat": beat, "interval": interval,
            "expires": beat + 2 * interval}  # fmt: skip
    storage.put(store, "u.lease", json.dumps(body).encode())


def test_a_lease_whose_heartbeat_stopped_two_beats_ago_is_taken_over_from_any_host(tmp_path):
    store = storage.open_store(str(tmp_path / "leases"))
    _foreign(store, heartbeat_age=4.0)  # one beat late: the holder may still be working
    with pytest.raises(LeaseHeld, match=r"pid 4242 on pod-7 .*another update is running"):
        Lease(store, "u.lease", fire_time=100.0).acquire()
    _foreign(store, heartbeat_age=11.0)  # two beats missed: gone
    mine = Lease(store, "u.lease", fire_time=100.0).acquire()
    assert mine.took_over is not None
    assert "from pid 4242 on pod-7" in mine.took_over and "heartbeat stopped for 11 s" in (
        mine.took_over
    )
    mine.check()


def test_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    import socket
    import subprocess
    import sys

    store = storage.open_store(str(tmp_path / "leases"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    _foreign(store, heartbeat_age=0.0, host=socket.gethostname())
    import json

    body = json.loads(storage.get(store, "u.lease").data)
    storage.put(store, "u.lease", json.dumps({**body, "pid": int(gone.stdout)}).encode())
    mine = Lease(store, "u.lease", fire_time=100.0).acquire()  # no wait: its heartbeat is fresh
    assert mine.took_over is not None and f"process {int(gone.stdout)}" in mine.took_over


def test_the_heartbeat_keeps_a_working_holder_and_reports_a_lost_lease(tmp_path):
    import json
    import time

    store = storage.open_store(str(tmp_path / "leases"))
    a = Lease(store, "u.lease", fire_time=100.0, interval=0.05).acquire()

    def beat() -> float:
        return json.loads(storage.get(store, "u.lease").data)["heartbeat"]

    with a.heartbeat():
        first = beat()
        deadline = time.monotonic() + 30
        while beat() < first + 0.2:  # four beats and more: the thread renews, nobody else
            assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
        with pytest.raises(LeaseHeld):  # two intervals have passed, yet it is alive
            Lease(store, "u.lease", fire_time=100.0).acquire()
        b = Lease(store, "u.lease", fire_time=200.0).acquire()  # a newer fire takes over
        deadline = time.monotonic() + 30
        while a._lost is None:  # the next beat finds it taken
            assert time.monotonic() < deadline, "the heartbeat never noticed"
        with pytest.raises(LeaseLost, match="taken over by"):
            a.check()
    b.check()


def test_lease_wait_longer_than_the_deadline_leaves_is_refused(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    with pytest.raises(ValueError, match="--lease-wait 90 s does not fit"):
        update(ds, fire_time=FIRE, deadline_seconds=25, lease_wait=90)
    assert not (tmp_path / "repo").exists()  # refused before anything was written


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
    fire = update(ds, fire_time=np.datetime64("2025-08-01T18", "ns"), deadline_seconds=1)
    assert len(fire.pending) == 9  # nothing published: rolls over
