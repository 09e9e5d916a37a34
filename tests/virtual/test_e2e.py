"""Issue 5 end to end, on a local and an S3-emulator store: backfill with 4 process workers,
then operational fires as the simulator publishes, while a live reader polls main.

The reader is a thread that keeps opening main with xarray (fresh repo, fresh session) for as
long as the update runs. Besides its free-running reads, the update's commit seam asks it for
one read at the worst moment -- every ref of the next file set in the writer's session, not yet
committed -- and waits for that read before committing. Every snapshot it sees must hold whole
files only (each file's cells all exact or all absent) and never extend the append dim past a
position with data.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
import xarray as xr

from tests.conftest import make_bucket, s3_options
from tests.virtual.e2e.hooks import at_steps
from tests.virtual.test_job import VARS
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import SimArchive, make_archive
from toolkit.virtual.backfill import backfill
from toolkit.virtual.source_io import file_refs
from toolkit.virtual.update import update
from toolkit.virtual.write import Job, ensure_repo, expected_of, run, write_refs

INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
LEVELS = (0.4, 500.0, 1000.0)
MAX_READS = 5000  # the reader's loop bound; it normally stops far sooner, when told


@pytest.fixture(scope="module")
def four_workers() -> Iterator[Any]:
    """A LocalCluster of 4 spawned worker processes (one per backfill block)."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=4, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    yield cluster
    cluster.close()


def stores(kind: str, tmp_path, request) -> tuple[storage.Store, storage.Store]:
    if kind == "local":
        return storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    from tests.virtual.test_repo import public_bucket

    endpoint = request.getfixturevalue("s3_endpoint" if kind == "s3" else "seaweed_endpoint")
    opts = s3_options(endpoint)
    return (
        storage.open_store(f"s3://{public_bucket(endpoint)}/src", **opts),
        storage.open_store(f"s3://{make_bucket(endpoint)}/repo", **opts),
    )


def cells(x: xr.Dataset, f) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, got, want) for every chunk file `f` fills (precipitation is absent at lead 0)."""
    from toolkit.examples.simulate import expected_values

    sel = {
        "init_time": np.datetime64(f.init, "ns"),
        "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]"),
    }
    out = [
        (name, x[name].sel(sel).values, expected_values(name, f.init, f.lead))
        for name in VARS
        if not (name == "precipitation_surface" and f.lead == 0)
    ]
    out += [
        (
            f"temperature@{lv:g}",
            x["temperature"].sel(sel).sel(level=lv).values,
            expected_values("temperature", f.init, f.lead, level=lv),
        )
        for lv in LEVELS
    ]
    return out


def observe(ds: Job, archive: SimArchive) -> tuple[str, frozenset[str]]:
    """One reader's look at main: (snapshot, files it holds). Raises on a partial file, on a
    wrong value, or on an append dim grown past the data."""
    repo = ds.repo.open(fresh=True)
    snap = R.snapshot_of(repo, "main")
    # chunks=None: read in this thread (no dask, so no detour through a default Client)
    x = xr.open_zarr(R.readonly(repo, snapshot=snap).store, consolidated=False, chunks=None)
    x = x.load()
    inits = set(x["init_time"].values)
    whole: set[str] = set()
    for f in archive.files():
        if np.datetime64(f.init, "ns") not in inits:
            continue  # past the extent: absent, not NaN-padded
        here = [not np.isnan(got).all() for _, got, _ in cells(x, f)]
        if any(here) and not all(here):
            raise AssertionError(f"{snap}: part of {archive.data_key(f)}: {here}")
        if all(here):
            for name, got, want in cells(x, f):
                np.testing.assert_array_equal(got, want, err_msg=f"{snap} {name} {f}")
            whole.add(archive.data_url(f))
    if len(inits):
        newest = max(inits)
        assert any(
            np.datetime64(f.init, "ns") == newest and archive.data_url(f) in whole
            for f in archive.files()
        ), f"{snap}: init_time grown to {newest} with no file there (NaN padding)"
    return snap, frozenset(whole)


class Reader(threading.Thread):
    """Polls main until told to stop (at most MAX_READS times); answers read requests."""

    def __init__(self, ds: Job, archive: SimArchive) -> None:
        super().__init__(daemon=True)
        self.ds, self.archive = ds, archive
        self.requests: queue.Queue[None] = queue.Queue()
        self.answers: queue.Queue[frozenset[str] | BaseException] = queue.Queue()
        self.done = threading.Event()
        self.seen: list[tuple[str, frozenset[str]]] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        for _ in range(MAX_READS):
            if self.done.is_set() and self.requests.empty():
                return
            try:
                self.requests.get_nowait()
                asked = True  # this read starts after the request: it sees the moment asked
            except queue.Empty:
                asked = False
            try:
                look = observe(self.ds, self.archive)
                self.seen.append(look)
            except BaseException as err:  # report, keep polling
                self.errors.append(err)
                look = None
            if asked:
                self.answers.put(look[1] if look else self.errors[-1])

    def read_now(self) -> frozenset[str]:
        self.requests.put(None)
        got = self.answers.get(timeout=120)
        if isinstance(got, BaseException):
            raise got
        return got


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "s3", "seaweed"])
def test_backfill_then_updates_with_a_live_reader(kind, tmp_path, request, four_workers):
    src, repo_store = stores(kind, tmp_path, request)
    archive = make_archive(src, kind="gfs", inits=INITS, leads=[0, 3, 6], publish=False)
    files = archive.files()
    urls = [archive.data_url(f) for f in files]
    archive.publish(files[:6])  # cycles 00 and 06
    ds = Job(sim_gfs(src), R.RepoRef(repo_store))

    # -- backfill: 4 contiguous blocks, one per worker process, forks merged into one commit
    assert len(four_workers.get_client().run(lambda: 1)) == 4
    report = backfill(ds, start=np.datetime64(INITS[0], "ns"), workers=4, cluster=four_workers)
    out = report.stage("commit").result
    assert out.ingested == 6 and not out.skipped and len(out.commits) == 1
    assert report.stage("commit").gate_have == report.stage("commit").gate_want == 6
    hist = R.history(ds.repo.open(fresh=True))
    (merge,) = [c for c in hist if c.metadata.get("forks")]
    assert merge.metadata["forks"] == 4  # every worker's fork landed in the one commit
    assert R.branches(ds.repo.open(fresh=True)) == ["main"]
    _, first = observe(ds, archive)
    assert first == frozenset(urls[:6])

    # -- fire 12Z: its cycle publishes one file per commit while the reader polls
    reader = Reader(ds, archive)
    landed: list[frozenset[str]] = []
    next_file = iter(files[7:9])

    def at_commit_step(point: str) -> None:
        if point != "after_set_refs":
            return
        landed.append(reader.read_now())  # refs set, not committed: main must not show them
        f = next(next_file, None)
        if f is not None:
            archive.publish(f)  # the next file publishes while this one commits

    archive.publish(files[6])
    reader.start()
    try:
        with at_steps(at_commit_step):
            fire = update(ds, fire_time=np.datetime64("2025-08-01T12", "ns"), deadline_seconds=60)
        after = reader.read_now()
    finally:
        reader.done.set()
        reader.join(timeout=120)
    assert not reader.errors, reader.errors
    assert not reader.is_alive()
    result = fire
    assert sorted(result.ingested) == sorted(urls[6:9]) and not result.pending
    assert len(result.commits) == 3  # one whole file per commit, as each published
    # at each commit step the reader still saw the state before that file ...
    assert landed == [frozenset(urls[:n]) for n in (6, 7, 8)]
    assert after == frozenset(urls[:9])  # ... and after the last commit, all of them
    assert {w for _, w in reader.seen} >= {frozenset(urls[:n]) for n in (6, 7, 8, 9)}
    x = xr.open_zarr(R.readonly(ds.repo.open(fresh=True)).store, consolidated=False)
    assert x.sizes["init_time"] == 3  # the 18Z cycle is unpublished: never padded toward it

    # -- fire 18Z: only lead 0 has published; the rest roll to the next fire
    archive.publish(files[9])
    fire = update(
        ds,
        fire_time=np.datetime64("2025-08-01T18", "ns"),
        deadline_seconds=0.5,
        grace_seconds=0.0,
    )
    assert fire.ingested == [urls[9]] and sorted(fire.pending) == urls[10:]
    _, final = observe(ds, archive)
    assert final == frozenset(urls[:10])  # exact values for every ingested file
    x = xr.open_zarr(R.readonly(ds.repo.open(fresh=True)).store, consolidated=False)
    assert x.sizes["init_time"] == 4
    session = R.readonly(ds.repo.open(fresh=True))
    t = ds.template
    geom = t.geometry(4)
    from toolkit.virtual.refs import chunk_key

    for f in files[10:]:  # not published: no ref at all (a reader gets the fill value)
        c = next(c for c in ds.files() if c.get_url() == archive.data_url(f))
        keys = [chunk_key(geom, v, loc) for v, loc in expected_of(ds, c)]
        assert not any(R.chunks_present(session, [(k.variable, k.index) for k in keys]))
    assert max(c.rebase_attempts or 0 for c in R.history(ds.repo.open(fresh=True))) == 0


def test_the_reader_check_catches_a_partial_file(tmp_path):
    """Positive control for `observe`: a commit holding only some of a file's refs (what the
    write loop never makes) is reported as part of a file."""
    src, repo_store = stores("local", tmp_path, None)
    archive = make_archive(src, kind="gfs", inits=INITS, leads=[0, 3, 6], publish=False)
    files = archive.files()
    archive.publish(files[:2])
    ds = Job(sim_gfs(src), R.RepoRef(repo_store))
    ensure_repo(ds)
    run(ds.region(None, np.datetime64("2025-08-01T01", "ns")))
    assert observe(ds, archive)[1] == frozenset(archive.data_url(f) for f in files[:2])
    archive.publish(files[2])
    coord = next(c for c in ds.files() if c.get_url() == archive.data_url(files[2]))
    size = storage.head(src, archive.data_key(files[2])).size
    refs = [r for r in file_refs(ds.dataset.source, coord, size) if r.variable != "wind_v_10m"]
    session = R.writable(ds.repo.open(fresh=True))
    write_refs(ds, session, [(coord, refs)])
    R.commit(session, "a partial file, by hand")
    with pytest.raises(
        AssertionError, match=r"part of gfs\.20250801/00/atmos/gfs\.t00z\.pgrb2\.0p25\.f006"
    ):
        observe(ds, archive)
