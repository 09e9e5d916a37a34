"""Operational tick latency: a source file is published -> its refs are visible on main.

An archive of 10^5, 10^6, 10^7 and 10^8 refs is laid down in bulk (one Icechunk session, refs set
per array slab with the store's vectorised `set_virtual_refs_arr`, which toolkit.icechunk
does not wrap, then `repo.commit`), with and without manifest splitting on init_time. Then the
real operational path runs — `toolkit.virtual.update.update()` (lease, metadata refresh,
filter, poll/discover, .idx + header check, whole-file commit to main) — while a thread
publishes the next cycle's simulator files one at a time. Latency per file = the moment its
commit returned minus the moment its `.idx` (written last) was in place; commit_s is the
commit alone. The update polls every 0.1 s (tick_interval), so ~0.05 s of each latency is
polling.

10^8 refs is prepopulated in commits of 10^7 (about 10 minutes and 2 GB of manifests) and
measured with splitting only.
Run: .venv/bin/python -m benchmarks virtual_tick [--no-1e7] [--no-1e8]
  -> benchmarks/results/virtual_tick.{json,md}
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import write
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import make_archive
from toolkit.transaction import AUDIT_EVENT
from toolkit.virtual.dataset import RepoSettings
from toolkit.virtual.layout import sync_dims_to
from toolkit.virtual.write import Job, ensure_repo

FIRST = datetime(2020, 1, 1)
LEADS = tuple(range(100))  # 100 leads x (5 single-level + 3 levels) = 800 refs per init
REFS_PER_INIT = 800
SPLIT = 64  # inits per manifest: 6,400 refs for a single-level array, 9,600 for the 3-level one

COMMITS: list[tuple[float, float, tuple[str, ...]]] = []  # (returned at, seconds, file keys)


@dataclass(frozen=True)
class LiveLeads:
    """The newest init expects only `n` files (the update then ends once they are in)."""

    newest: np.datetime64
    n: int

    def __call__(self, init: np.datetime64, leads: np.ndarray) -> np.ndarray:
        return leads[: self.n] if init == self.newest else leads


def tick_job(src: storage.Store, repo: Path, inits: int, splitting: bool, live: int) -> Job:
    """The simulator dataset, `live` files in its newest init, splitting switchable off,
    polled every 0.1 s."""
    ds = sim_gfs(src, first_init=FIRST, inits=inits, lead_hours=LEADS, split=SPLIT)
    ds = replace(
        ds,
        leads=LiveLeads(ds.template.coords["init_time"][-1], live),
        settings=ds.settings if splitting else RepoSettings(split=None),
    )
    return Job(ds, R.RepoRef(storage.open_store(str(repo))), tick_interval=0.1)


def time_commits(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: each commit's (returned at, seconds) from the write loop's own steps."""
    if event != AUDIT_EVENT:
        return
    if args[0] == "after_set_refs":
        STARTED.append(time.perf_counter())
    elif args[0] == "committed" and STARTED:
        COMMITS.append((time.time(), time.perf_counter() - STARTED.pop(), args[1]))


STARTED: list[float] = []


BLOCK = 12_800  # inits per prepopulating commit: 10^7 refs, so 10^8 never sits in one session


def prepopulate(ds: Job, history: int) -> float:
    """`history` inits of refs (800 each), one commit per BLOCK inits; returns seconds."""
    t = ds.template
    t0 = time.perf_counter()
    ensure_repo(ds)
    base = ds.dataset.source.store.url.rstrip("/")
    rng = np.random.default_rng(0)
    slab = 64
    for b0 in range(0, history, BLOCK):
        b1 = min(history, b0 + BLOCK)
        session = R.writable(ds.repo.open(fresh=True))
        if b0 == 0:
            sync_dims_to(session, t, history)
        for name, v in t.variables.items():
            nlev = len(t.coords["level"]) if "level" in v.dims else 1
            for i0 in range(b0, b1, slab):
                n = min(slab, b1 - i0)
                locs = []
                for i in range(i0, i0 + n):
                    init = FIRST + timedelta(hours=6 * i)
                    d = f"{base}/gfs.{init:%Y%m%d}/{init:%H}/atmos/gfs.t{init:%H}z.pgrb2.0p25.f"
                    for lead in LEADS:
                        locs.extend([f"{d}{lead:03d}"] * nlev)
                count = len(locs)
                offsets = rng.integers(0, 500_000_000, count, dtype=np.uint64)
                lengths = rng.integers(100_000, 1_000_000, count, dtype=np.uint64)
                grid = (n, len(LEADS)) + ((nlev,) if "level" in v.dims else ()) + (1, 1)
                offset = (i0, 0) + ((0,) if "level" in v.dims else ()) + (0, 0)
                failed = session.store.set_virtual_refs_arr(
                    f"/{name}", grid, locs, offsets, lengths, arr_offset=offset
                )
                assert not failed, failed
        R.commit(session, f"prepopulate inits {b0}..{b1 - 1} of {history}")
    return time.perf_counter() - t0


def measure(refs: int, splitting: bool, ticks: int, gap: float) -> dict[str, Any]:
    from toolkit.virtual.update import update

    history = refs // REFS_PER_INIT
    work = Path(tempfile.mkdtemp(prefix="vtick-"))
    try:
        src = storage.open_store(str(work / "src"))
        ds = tick_job(src, work / "repo", history + 1, splitting, ticks)
        pre = prepopulate(ds, history)
        live = FIRST + timedelta(hours=6 * history)
        archive = make_archive(src, kind="gfs", inits=[live], leads=list(LEADS[:ticks]),
                               publish=False)  # fmt: skip
        files = archive.files()
        published: dict[str, float] = {}

        def publish() -> None:
            for f in files:
                time.sleep(gap)
                archive.publish(f)
                published[archive.data_url(f)] = time.time()

        COMMITS.clear()
        STARTED.clear()
        pub = threading.Thread(target=publish)
        pub.start()
        update(ds, fire_time=np.datetime64(live, "ns"), deadline_seconds=ticks * gap + 300.0)
        pub.join()
        lat = []
        for at, _, keys in COMMITS:
            lat += [at - published[k] for k in keys]
        assert len(lat) == ticks, (len(lat), ticks)
        commit_s = [s for _, s, _ in COMMITS]
        rep = R.manifest_report(ds.repo.open(fresh=True))
        return {
            "archive_refs": history * REFS_PER_INIT,
            "splitting": f"init_time/{SPLIT}" if splitting else "none",
            "files": ticks,
            "commits": len(COMMITS),
            "p50_s": round(float(np.percentile(lat, 50)), 3),
            "p95_s": round(float(np.percentile(lat, 95)), 3),
            "max_s": round(max(lat), 3),
            "commit_p50_s": round(float(np.median(commit_s)), 3),
            "manifests": rep.manifests,
            "bytes_per_ref": round(rep.bytes_per_ref, 1),
            "prepopulate_s": round(pre, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sys.addaudithook(time_commits)
    sizes = [10**5, 10**6] + ([] if "--no-1e7" in argv else [10**7])
    sizes += [] if "--no-1e8" in argv else [10**8]
    rows = []
    for refs in sizes:
        # 10^8 unsplit would rewrite one 2 GB manifest per array on every commit: split only
        for splitting in (True, False) if refs < 10**8 else (True,):
            ticks = 8 if refs < 10**7 else 5
            rows.append(measure(refs, splitting, ticks, gap=1.0))
            print(rows[-1], flush=True)
    write(
        "virtual_tick",
        rows,
        "Simulator GFS-shaped dataset (6 arrays, 100 leads, 800 refs per init); each row a "
        "fresh local repo pre-populated to archive_refs, then one update fire while files of "
        "the next cycle publish 1 s apart. p50/p95/max: file published (.idx in place) -> its "
        "commit on main returned. commit_p50_s: the commit alone (refs set -> committed). Local disk, 2 cores.",
    )


if __name__ == "__main__":
    main()
