"""Virtual backfill benchmarks on the simulator's GRIB2 archive (real bytes, real .idx sidecars).

(a) refs/s, index parse -> commit, on the same files:
    * toolkit `run()`: the in-process write loop (listing discovery, .idx GET + 16-byte header
      check + catalog match per file, one commit);
    * toolkit `backfill()`: the gated plan (setup branch, a round of forks committed where
      they were folded, finalize),
      in-process (`executor="sync"`) and on a LocalCluster of 2 spawned process workers;
    * VirtualiZarr 2.x + gribberish's own VirtualiZarr parser (`GribberishParser(use_index=".idx")`,
      which ranged-GETs every message's header), files opened serially and with 8 threads,
      groups concatenated, `.vz.to_icechunk()` + one commit.
(c) commits and max rebase attempts vs worker count (1, 2, 4, 8, 16) for the same backfill on the
    LocalCluster (rebase attempts are stamped into each commit's metadata by toolkit.icechunk),
    in one round and in rounds of 72 files.

Run: .venv/bin/python -m benchmarks virtual_backfill
  -> benchmarks/results/virtual_backfill_{refs,contention}.{json,md}
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import write
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import make_archive
from toolkit.virtual.write import Job, ensure_repo, run

FIRST = datetime(2025, 8, 1)
INITS = 48
LEADS = (0, 3, 6, 9, 12, 15)


def dataset(src: storage.Store, repo_dir: Path) -> Job:
    return Job(
        sim_gfs(src, first_init=FIRST, inits=INITS, lead_hours=LEADS, split=8),
        R.RepoRef(storage.open_store(str(repo_dir))),
    )


def end_label() -> np.datetime64:
    return np.datetime64(FIRST + timedelta(hours=6 * INITS), "ns")


def ours_run(src: storage.Store, work: Path) -> dict[str, Any]:
    ds = dataset(src, work / "run")
    t0 = time.perf_counter()
    ensure_repo(ds)
    result = run(ds)
    dt = time.perf_counter() - t0
    assert not result.skipped and not result.pending
    return {"refs": result.refs, "files": len(result.ingested), "seconds": dt, "commits": 1}


def ours_backfill(src: storage.Store, work: Path, name: str, **kw: Any) -> dict[str, Any]:
    from toolkit.virtual.backfill import backfill

    ds = dataset(src, work / name)
    t0 = time.perf_counter()
    report = backfill(ds, start=np.datetime64(FIRST, "ns"), end=end_label(), **kw)
    dt = time.perf_counter() - t0
    out = report.stage("commit").result
    commits = [c for c in R.history(ds.repo.open(fresh=True)) if c.message.startswith("backfill")]
    return {
        "refs": out.refs,
        "files": out.ingested,
        "seconds": dt,
        "commits": len([c for c in commits if c.message.startswith("backfill:")]),
        "max_rebase_attempts": max((c.rebase_attempts or 0) for c in commits),
    }


def peer(src: storage.Store, work: Path, urls: list[str], threads: int) -> dict[str, Any]:
    import virtualizarr as vz
    import xarray as xr
    from gribberish.virtualizarr.parser import GribberishParser
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore

    registry = ObjectStoreRegistry({"file:///": LocalStore("/")})
    parser = GribberishParser(use_index=".idx")
    cfg = R.VirtualConfig([R.local_container(src.url)])
    repo = R.create_repo(storage.open_store(str(work / f"peer-{threads}")), cfg)
    t0 = time.perf_counter()

    def one(url: str) -> Any:
        return vz.open_virtual_datatree(url, registry=registry, parser=parser)

    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            trees = list(pool.map(one, urls))
    else:
        trees = [one(u) for u in urls]
    t_parse = time.perf_counter() - t0
    groups: dict[str, list[Any]] = {}
    for tree in trees:
        for node in tree.subtree:
            if node.data_vars:
                groups.setdefault(node.path, []).append(node.to_dataset())
    combined = {
        path: xr.concat(
            dss, dim="time", coords="minimal", compat="override", combine_attrs="override"
        )
        for path, dss in groups.items()
    }
    refs = sum(
        int(np.prod(v.shape[:-2])) for ds in combined.values() for v in ds.data_vars.values()
    )
    session = R.writable(repo)
    xr.DataTree.from_dict(combined).vz.to_icechunk(session.store)
    R.commit(session, "virtualizarr")
    dt = time.perf_counter() - t0
    return {"refs": refs, "files": len(urls), "seconds": dt, "parse_seconds": t_parse}


def main() -> None:
    from distributed import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="vbench-"))
    try:
        src = storage.open_store(str(work / "src"))
        t0 = time.perf_counter()
        archive = make_archive(
            src,
            kind="gfs",
            inits=[FIRST + timedelta(hours=6 * i) for i in range(INITS)],
            leads=list(LEADS),
        )
        gen = time.perf_counter() - t0
        urls = [archive.data_url(f) for f in archive.files()]
        rows = []

        def row(name: str, r: dict[str, Any]) -> None:
            rows.append(
                {
                    "pipeline": name,
                    "files": r["files"],
                    "refs": r["refs"],
                    "seconds": round(r["seconds"], 3),
                    "refs_per_s": round(r["refs"] / r["seconds"], 1),
                    "commits": r.get("commits", 1),
                    "peer_open_seconds": round(r["parse_seconds"], 3)
                    if "parse_seconds" in r
                    else "-",
                }
            )

        row("toolkit run() (in-process write loop)", ours_run(src, work))
        row("toolkit backfill, sync, 4 workers", ours_backfill(src, work, "bf-sync", workers=4,
                                                                executor="sync"))  # fmt: skip
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster:  # fmt: skip
            row(
                "toolkit backfill, LocalCluster 2 procs, 4 workers",
                ours_backfill(src, work, "bf-dask", workers=4, cluster=cluster),
            )
            contention = []
            for w, size in [(w, size) for size in (None, 72) for w in (1, 2, 4, 8, 16)]:
                name = f"bf-w{w}-{size or 'all'}"
                r = ours_backfill(src, work, name, workers=w, cluster=cluster, round_files=size)
                contention.append(
                    {
                        "round_files": size or "all",
                        "workers": w,
                        "files": r["files"],
                        "refs": r["refs"],
                        "backfill_commits": r["commits"],
                        "max_rebase_attempts": r["max_rebase_attempts"],
                        "seconds": round(r["seconds"], 3),
                    }
                )
        row("VirtualiZarr + gribberish parser (.idx), serial", peer(src, work, urls, 1))
        row("VirtualiZarr + gribberish parser (.idx), 8 threads", peer(src, work, urls, 8))
        base = rows[0]["refs_per_s"]
        for r in rows:
            r["vs_toolkit_run"] = round(r["refs_per_s"] / base, 3)
        write(
            "virtual_backfill_refs",
            rows,
            f"{len(urls)} simulator GFS-shaped files ({INITS} inits x {len(LEADS)} leads, 7-8 "
            f"GRIB2 messages each, 32x48 grid), local disk, 2 cores; archive written in "
            f"{gen:.1f} s (not timed). refs/s = refs committed / wall time from an empty repo "
            "to the commit. toolkit reads each .idx plus one 16-byte header; the peer's parser "
            "ranged-GETs every message's header (sections 0-5) and decodes its metadata; "
            "peer_open_seconds is its open_virtual_datatree time for all files, most of it "
            "xarray opening each file's ManifestStore (profiled: ~0.28 s/file), not GRIB parsing.",
        )
        write(
            "virtual_backfill_contention",
            contention,
            "Same backfill on a LocalCluster (2 spawned processes, 1 thread each), in one round "
            "and in rounds of 72 files (--round-files). Workers write Icechunk forks; each "
            "round's forks are merged and committed once, where they were folded, before the "
            "next round starts: one commit per round at any worker count, none racing another "
            "for the branch; max_rebase_attempts is read back from the commits' metadata.",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
