"""Virtual backfill throughput, files/s end to end, side by side with the bare floor.

A simulated GFS-shaped archive of 2,400 files (100 inits x 24 leads, 8 GRIB2 messages each,
local disk), once with the simulator's own 8-line indexes and once with each index padded to
real size: the real GFS f007 inventory's other records (fields this catalog does not select)
appended, pointing at a filler region and one real message at the end of the data file, so
every selected byte range and the stale-header check stay exact.

Rows, per archive:
  floor             one listing, then read each .idx, gribberish.parse_grib_index, the
                    catalog's records by (element, level), set_virtual_refs, one commit: no
                    header check, no window match, no filter, no gate.
  run()             toolkit's in-process write loop: filter, listing, .idx + header check,
                    catalog match, one commit.
  backfill sync     the gated plan (setup, ingest, commit, finalize) in process, 2 workers.
  backfill cluster  the same plan on an already running 2-process LocalCluster (started and
                    warmed before the clock starts), 2 workers.

Run: .venv/bin/python -m benchmarks virtual_throughput -> benchmarks/results/virtual_throughput.*
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import gribberish
import numpy as np

from benchmarks._report import write
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import make_archive
from toolkit.virtual.layout import sync_dims_to
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.write import Job, ensure_repo, run

ROOT = Path(__file__).resolve().parents[1]
REAL_GFS = ROOT / "tests" / "data" / "idx" / "gfs.t00z.pgrb2.0p25.f007.idx"
FIRST = datetime(2025, 8, 1)
INITS = 100
LEADS = tuple(range(0, 72, 3))  # 24 leads: 2,400 files


def job(src: storage.Store, repo: Path) -> Job:
    ds = sim_gfs(src, first_init=FIRST, inits=INITS, lead_hours=LEADS, split=64)
    return Job(ds, R.RepoRef(storage.open_store(str(repo))))


def pad(src: storage.Store, out: storage.Store, wanted: set[tuple[str, str]]) -> int:
    """Copy the archive to `out` with every index padded by the real GFS records the catalog
    does not select; returns the padded index's line count."""
    padding = [
        line.split(":")[3:6]
        for line in REAL_GFS.read_text().splitlines()
        if tuple(line.split(":")[3:5]) not in wanted
    ]
    lines = 0
    for info in storage.list_objects(src, ""):
        if not info.key.endswith(".idx"):
            continue
        key = info.key[: -len(".idx")]
        data = storage.get(src, key).data
        index = storage.get(src, info.key).data.decode().splitlines()
        first = index[0].split(":")
        last_real = int(index[-1].split(":")[1])
        tail = data[: int(index[1].split(":")[1])]  # a real message to end the file with
        base = len(data)
        extra = [
            ":".join([str(len(index) + j + 1), str(base + j), first[2], *fields, ""])
            for j, fields in enumerate(padding[:-1])
        ]
        end = base + len(padding) - 1
        extra.append(":".join([str(len(index) + len(padding)), str(end), first[2],
                               *padding[-1], ""]))  # fmt: skip
        assert last_real < base
        storage.put(out, key, bytes(data) + b"\0" * (len(padding) - 1) + bytes(tail))
        storage.put(out, info.key, ("\n".join(index + extra) + "\n").encode())
        lines = len(index) + len(extra)
    return lines


def floor(j: Job) -> dict[str, Any]:
    """The least any writer does: parse each index, set the catalog's refs, commit once."""
    ds, store = j.dataset, j.dataset.source.store
    t0 = time.perf_counter()
    ensure_repo(j)
    files = j.files()
    t = ds.template
    geom = t.geometry(len(t.coords[t.append_dim]))
    session = R.writable(j.repo.open(fresh=True))
    sync_dims_to(session, t, len(t.coords[t.append_dim]))
    fields = {(v.element, v.level.format(level=lv) if v.is_vertical else v.level): (v.name, lv)
              for v in ds.source.catalog.variables
              for lv in (v.levels if v.is_vertical else (None,))}  # fmt: skip
    by_var: dict[str, list[Any]] = {}
    refs = 0
    prefix = store.url.rstrip("/") + "/"
    sizes = {i.key: i.size for i in storage.list_objects(store, "")}  # one listing
    for c in files:
        key = c.get_url()[len(prefix) :]
        entries = gribberish.parse_grib_index(storage.get(store, key + ".idx").data.decode())
        ends = [e.offset for e in entries[1:]] + [sizes[key]]
        for e, end in zip(entries, ends, strict=True):
            hit = fields.get((e.var, e.level))
            if hit is None:
                continue
            name, lv = hit
            loc = dict(c.out_loc(), **({"level": lv} if lv is not None else {}))
            ck = chunk_key(geom, name, loc)
            by_var.setdefault(name, []).append(
                (ck.index, c.get_url(), e.offset, end - e.offset, None)
            )
            refs += 1
    for name, specs in by_var.items():
        R.set_virtual_refs(session, name, specs)
    R.commit(session, "floor")
    return {"files": len(files), "refs": refs, "seconds": time.perf_counter() - t0}


def ours_run(j: Job) -> dict[str, Any]:
    t0 = time.perf_counter()
    ensure_repo(j)
    result = run(j)
    assert not result.skipped and not result.pending, result.skipped[:2]
    return {"files": len(result.ingested), "refs": result.refs, "seconds": time.perf_counter() - t0}


def ours_backfill(j: Job, **kw: Any) -> dict[str, Any]:
    from toolkit.virtual.backfill import backfill

    t0 = time.perf_counter()
    report = backfill(j, start=np.datetime64(FIRST, "ns"), workers=2, **kw)
    out = report.stage("commit").result
    assert not out.skipped and not out.unpublished
    return {"files": len(out.ingested), "refs": out.refs, "seconds": time.perf_counter() - t0}


def main() -> None:
    from distributed import Client, LocalCluster

    work = Path(tempfile.mkdtemp(prefix="vthroughput-"))
    rows = []
    try:
        plain = storage.open_store(str(work / "plain"))
        make_archive(plain, kind="gfs", leads=list(LEADS),
                     inits=[FIRST + timedelta(hours=6 * i) for i in range(INITS)])  # fmt: skip
        catalog = job(plain, work / "x").dataset.source.catalog
        wanted = {(v.element, v.level.format(level=lv) if v.is_vertical else v.level)
                  for v in catalog.variables
                  for lv in (v.levels if v.is_vertical else (None,))}  # fmt: skip
        padded = storage.open_store(str(work / "padded"))
        lines = pad(plain, padded, wanted)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=":0")  # fmt: skip
        client = Client(cluster)
        client.run(lambda: 1)  # workers up and warm before any clock starts
        try:
            for name, src, idx_lines in (("8-line indexes", plain, 8), ("padded", padded, lines)):
                runs = [
                    ("floor: parse .idx + set_virtual_refs + 1 commit", floor),
                    ("toolkit run() in process", ours_run),
                    ("toolkit backfill, sync, 2 workers", lambda j: ours_backfill(j, executor="sync")),
                    ("toolkit backfill, running 2-process cluster, 2 workers",
                     lambda j: ours_backfill(j, cluster=client)),
                ]  # fmt: skip
                base = None
                for i, (label, fn) in enumerate(runs):
                    got = fn(job(src, work / f"repo-{name}-{i}"))
                    fps = got["files"] / got["seconds"]
                    base = base or fps
                    rows.append({
                        "archive": f"{name} ({idx_lines} lines)",
                        "pipeline": label,
                        "files": got["files"],
                        "refs": got["refs"],
                        "seconds": round(got["seconds"], 3),
                        "files_per_s": round(fps),
                        "vs_floor": round(fps / base, 3),
                    })  # fmt: skip
                    print(rows[-1], flush=True)
        finally:
            client.close()
            cluster.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write("virtual_throughput", rows, __doc__.split("\n\n")[1].replace("\n", " ") +
          " Issue 10's goals: >= 3,000 files/s end to end (8-line), >= 1,500 files/s padded.")  # fmt: skip


if __name__ == "__main__":
    main()
