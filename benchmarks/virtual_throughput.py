"""Virtual backfill throughput, files/s end to end, side by side with the bare floor, on local
disk and on a real S3 server behind a fixed per-request latency.

Archives: a simulated GFS-shaped archive of 20,016 files (834 inits x 24 leads, 8 GRIB2
messages each; `--quick`: 2,400), once with the simulator's own 8-line indexes and once with
each index padded to real size: the real GFS f007 inventory's other records (fields this
catalog does not select) appended, pointing at a filler region and one real message at the end
of the data file, so every selected byte range and the stale-header check stay exact. One
init's files are encoded by the simulator; every other init is that init's bytes with the
reference time rewritten (index `d=` and each message's section 1), so making 20,000 files
takes seconds. Each archive is on local disk and on SeaweedFS (tests/seaweed.py, a real S3
server on loopback), uploaded directly; the benchmarked requests go through
tests/faults.py's proxy (its own process) adding a fixed latency to every request (20 ms and
50 ms), which also counts them by kind. The repos are on the same server, behind the proxy.

Rows (`mode`), per archive and latency (0 = local disk); `workers` is processes:
  floor          a bare loop: one listing, a pool of `download_concurrency` (64) threads GETs
                 each .idx then the 16-byte header at its last record, gribberish parses, the
                 catalog's records by (element, level) become refs; set_virtual_refs, one
                 commit. With N workers: the files in N contiguous stripes, each run in its own
                 process of an already running cluster with the same thread pool, the refs
                 returned to the client, one set_virtual_refs + commit there.
  in_process     toolkit's write loop, `run()`: filter, listing, .idx + header check, catalog
                 match, one commit.
  sync_backfill  the gated plan (setup, ingest, commit, finalize) in process, 2 stripes
                 (local disk only).
  cluster        the same plan on an already running cluster of N single-thread worker
                 processes (started and warmed before the clock starts), N workers; on local
                 disk and at 50 ms (the floor's cluster rows likewise), to keep the run short.
`vs_floor` is files/s over the floor row of the same archive, latency and workers. Every
row's committed refs are compared with the in-process floor's (location, offset, length of
every chunk of every variable): a difference fails the run.

The second table says where the time goes: requests by kind as the proxy saw them, and the
toolkit's seconds per stage.

Run: .venv/bin/python -m benchmarks virtual_throughput    (--quick: python -m
     benchmarks.virtual_throughput --quick, 2,400 files, printed, not written)
     -> benchmarks/results/virtual_throughput.*. The full run took 14 minutes on a 2-core
     box shared with other work (42 on a slower day; archives 36 s, 38 rows at 3-43 s; the
     S3 rows are bound by the Python proxy, ~700 requests/s, not by the latency).
     `--inits N` (24 files an init) runs another size, printed like --quick.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
from toolkit.virtual import write as W
from toolkit.virtual.layout import sync_dims_to
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.write import Job, ensure_repo, run

ROOT = Path(__file__).resolve().parents[1]
REAL_GFS = ROOT / "tests" / "data" / "idx" / "gfs.t00z.pgrb2.0p25.f007.idx"
FIRST = datetime(2025, 8, 1)
LEADS = tuple(range(0, 72, 3))  # 24 leads
INITS = 834  # x 24 leads: 20,016 files
QUICK_INITS = 100  # 2,400 files
LATENCIES = (20, 50)  # ms per request, through the proxy
CLUSTER_LATENCIES = (0, 50)  # the cluster rows: local disk, and the slower store
PROCESSES = (1, 2, 4)
CONCURRENCY = Job.__dataclass_fields__["download_concurrency"].default

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


# ----------------------------------------------------------------------------- archives


def wanted_fields(j: Job) -> dict[tuple[str, str], tuple[str, Any]]:
    """(element, level text) -> (variable, level): the catalog's records."""
    return {(v.element, v.level.format(level=lv) if v.is_vertical else v.level): (v.name, lv)
            for v in j.dataset.source.catalog.variables
            for lv in (v.levels if v.is_vertical else (None,))}  # fmt: skip


def pad(data: bytes, index: str, padding: list[list[str]]) -> tuple[bytes, str]:
    """One file padded by the real GFS records the catalog does not select."""
    lines = index.splitlines()
    first = lines[0].split(":")
    tail = data[: int(lines[1].split(":")[1])]  # a real message to end the file with
    base = len(data)
    extra = [
        ":".join([str(len(lines) + j + 1), str(base + j), first[2], *fields, ""])
        for j, fields in enumerate(padding[:-1])
    ]
    end = base + len(padding) - 1
    extra.append(":".join([str(len(lines) + len(padding)), str(end), first[2],
                           *padding[-1], ""]))  # fmt: skip
    assert int(lines[-1].split(":")[1]) < base
    return data + b"\0" * (len(padding) - 1) + tail, "\n".join(lines + extra) + "\n"


def retime(data: bytes, index: str, old: datetime, new: datetime) -> tuple[bytes, str]:
    """One file's bytes with its reference time moved from `old` to `new`: the index's `d=`
    and section 1 of every message (year, month, day, hour at bytes 28..32)."""
    out = bytearray(data)
    for line in index.splitlines():
        at = int(line.split(":")[1])
        if out[at : at + 4] != b"GRIB":
            continue  # the padded archive's filler records
        assert out[at + 20] == 1, "section 1 follows the 16-byte indicator"
        out[at + 28 : at + 33] = bytes(
            [new.year >> 8, new.year & 0xFF, new.month, new.day, new.hour]
        )
    return bytes(out), index.replace(f"d={old:%Y%m%d%H}", f"d={new:%Y%m%d%H}")


def make_sources(work: Path, inits: int) -> dict[str, dict[str, bytes]]:
    """The two archives as {key: bytes}: one init encoded, the rest retimed copies."""
    seed = storage.open_store(str(work / "seed"))
    archive = make_archive(seed, kind="gfs", leads=list(LEADS), inits=[FIRST])
    every = make_archive(seed, kind="gfs", leads=list(LEADS), publish=False,
                         inits=[FIRST + timedelta(hours=6 * i) for i in range(inits)])  # fmt: skip
    wanted = set(wanted_fields(job(seed, work / "x", 1)))
    padding = [line.split(":")[3:6] for line in REAL_GFS.read_text().splitlines()
               if tuple(line.split(":")[3:5]) not in wanted]  # fmt: skip
    seeds = {}
    for f in archive.files():
        data = bytes(storage.get(seed, archive.data_key(f)).data)
        index = storage.get(seed, archive.index_key(f)).data.decode()
        seeds[f.lead] = {"8-line": (data, index), "padded": pad(data, index, padding)}
    out: dict[str, dict[str, bytes]] = {"8-line": {}, "padded": {}}
    for f in every.files():
        for name, (data, index) in seeds[f.lead].items():
            d, i = retime(data, index, FIRST, f.init)
            out[name][every.data_key(f)] = d
            out[name][every.index_key(f)] = i.encode()
    return out


def write_local(root: Path, objects: dict[str, bytes]) -> storage.Store:
    for key, data in objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return storage.open_store(str(root))


def upload(store: storage.Store, objects: dict[str, bytes]) -> None:
    """Data objects first, then indexes (as a provider publishes), 32 PUTs at a time."""
    for part in (False, True):
        keys = [k for k in objects if k.endswith(".idx") == part]
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda k: storage.put(store, k, objects[k]), keys))


def job(src: storage.Store, repo: storage.Store | Path, inits: int) -> Job:
    ds = sim_gfs(src, first_init=FIRST, inits=inits, lead_hours=LEADS, split=64)
    store = repo if isinstance(repo, storage.Store) else storage.open_store(str(repo))
    return Job(ds, R.RepoRef(store))


# ----------------------------------------------------------------------------- the proxy


def _serve_proxy(upstream: str, conn: Any) -> None:
    """The fault proxy in its own process (its threads would contend for this one's GIL)."""
    from tests.faults import FaultProxy

    with FaultProxy(upstream, keep_alive=True) as proxy:
        conn.send(proxy.url)
        while True:
            cmd, arg = conn.recv()
            if cmd == "latency":
                proxy.latency = arg
                conn.send(None)
            elif cmd == "reset":
                conn.send(dict(proxy.reset()))
            else:
                conn.send(None)
                return


class Proxy:
    def __init__(self, upstream: str) -> None:
        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_proxy, args=(upstream, theirs), daemon=True)
        self.proc.start()
        self.url: str = self.conn.recv()

    def ask(self, cmd: str, arg: Any = None) -> Any:
        self.conn.send((cmd, arg))
        return self.conn.recv()

    def close(self) -> None:
        self.ask("stop")
        self.proc.join(10)


# ----------------------------------------------------------------------------- the floor


@dataclass(frozen=True)
class Stripe:
    """One stripe of the floor: its files' coords, keys and listed sizes."""

    store: storage.Store
    files: list[tuple[Any, str, int]]
    geom: Any
    fields: dict[tuple[str, str], tuple[str, Any]]
    concurrency: int = CONCURRENCY


def floor_stripe(s: Stripe) -> dict[str, list[Any]]:
    """GET each .idx then its 16-byte header in a thread pool, parse here: refs by variable."""

    def get(item: tuple[Any, str, int]) -> tuple[bytes, bytes]:
        _, key, _ = item
        index = bytes(storage.get(s.store, key + ".idx").data)
        last = int(index.rstrip().rsplit(b"\n", 1)[-1].split(b":", 2)[1])
        return index, storage.get_range(s.store, key, last, 16)

    by_var: dict[str, list[Any]] = {}
    with ThreadPoolExecutor(s.concurrency) as pool:
        for (c, _, size), (index, header) in zip(s.files, pool.map(get, s.files), strict=True):
            assert header[:4] == b"GRIB", c.get_url()
            entries = gribberish.parse_grib_index(index.decode())
            ends = [e.offset for e in entries[1:]] + [size]
            for e, end in zip(entries, ends, strict=True):
                hit = s.fields.get((e.var, e.level))
                if hit is None:
                    continue
                name, lv = hit
                loc = dict(c.out_loc(), **({"level": lv} if lv is not None else {}))
                ck = chunk_key(s.geom, name, loc)
                by_var.setdefault(name, []).append(
                    (ck.index, c.get_url(), e.offset, end - e.offset, None)
                )
    return by_var


def floor(j: Job, client: Any = None, workers: int = 1) -> dict[str, Any]:
    """The least any writer does: list, GET + parse each index, GET its header, set the
    catalog's refs, commit once; on `client`, in `workers` stripes on as many processes."""
    store = j.dataset.source.store
    t0 = time.perf_counter()
    ensure_repo(j)
    files = j.files()
    t = j.template
    n = len(t.coords[t.append_dim])
    session = R.writable(j.repo.open(fresh=True))
    sync_dims_to(session, t, n)
    prefix = store.url.rstrip("/") + "/"
    sizes = {i.key: i.size for i in storage.list_objects(store, "")}  # one listing
    items = [(c, c.get_url()[len(prefix) :], 0) for c in files]
    items = [(c, k, sizes[k]) for c, k, _ in items]
    geom, fields = t.geometry(n), wanted_fields(j)
    if client is None:
        parts = [floor_stripe(Stripe(store, items, geom, fields))]
    else:
        addrs = sorted(client.scheduler_info()["workers"])
        assert len(addrs) == workers, addrs
        step = -(-len(items) // workers)
        futures = [
            client.submit(floor_stripe, Stripe(store, items[i * step : (i + 1) * step], geom,
                                               fields), workers=[a], pure=False)
            for i, a in enumerate(addrs)
        ]  # fmt: skip
        parts = client.gather(futures)
    refs = 0
    for name in sorted({v for p in parts for v in p}):
        refs += R.set_virtual_refs(session, name, [s for p in parts for s in p.get(name, ())])
    R.commit(session, "floor")
    return {"files": len(files), "refs": refs, "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- toolkit


def ours_run(j: Job) -> dict[str, Any]:
    """`run()` in process, its steps timed (setup, filter, read+parse, commit)."""
    stages: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                stages[name] = stages.get(name, 0.0) + time.perf_counter() - t

        return wrapped

    patched = {"filter_already_present": "filter", "commit_batch": "commit"}
    saved = {name: getattr(W, name) for name in patched}
    for name, stage in patched.items():
        setattr(W, name, timed(stage, saved[name]))
    try:
        t0 = time.perf_counter()
        timed("setup", ensure_repo)(j)
        result = run(j)
        seconds = time.perf_counter() - t0
    finally:
        for name, fn in saved.items():
            setattr(W, name, fn)
    assert not result.skipped and not result.pending, result.skipped[:2]
    stages["read+parse"] = seconds - sum(stages.values())
    return {"files": len(result.ingested), "refs": result.refs, "seconds": seconds,
            "stages": stages}  # fmt: skip


def ours_backfill(j: Job, inits: int, workers: int, **kw: Any) -> dict[str, Any]:
    from toolkit.virtual.backfill import backfill

    t0 = time.perf_counter()
    report = backfill(j, start=np.datetime64(FIRST, "ns"), workers=workers, **kw)
    seconds = time.perf_counter() - t0
    out = report.stage("commit").result
    assert not out.skipped and not out.unpublished, (out.skipped[:2], out.unpublished[:2])
    stages = {s.name: s.seconds for s in report.stages}
    # the rest: last_published, the region's guard, each stage's done-set and gate (probes of
    # the branch) and the scheduler's round trips between stages
    stages["guard, done-sets, gates, scheduling"] = seconds - sum(stages.values())
    return {"files": out.ingested, "refs": out.refs, "seconds": seconds, "stages": stages}


# ----------------------------------------------------------------------------- checks


def refs_of(repo: storage.Store, variables: list[str]) -> dict[str, Any]:
    session = R.readonly(R.open_repo(repo))
    return {v: R.chunk_refs(session, v) for v in variables}


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    from distributed import Client, LocalCluster

    from tests.seaweed import Weed

    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    inits = QUICK_INITS if quick else INITS
    if "--inits" in argv:  # another size (24 files an init), printed like --quick
        inits, quick = int(argv[argv.index("--inits") + 1]), True
    work = Path(tempfile.mkdtemp(prefix="vthroughput-"))
    rows: list[dict[str, Any]] = []
    more: list[dict[str, Any]] = []
    weed = Weed(work / "weed")
    weed.start()
    proxy = Proxy(weed.endpoint)
    opts = {"region": "us-east-1", "allow_http": True, "path_style": True}
    direct = {**opts, "endpoint": weed.endpoint}
    slow = {**opts, "endpoint": proxy.url}
    made = 0
    try:
        t = time.perf_counter()
        objects = make_sources(work, inits)
        print(f"made {len(objects['8-line']) // 2} files x 2 in {time.perf_counter() - t:.0f} s")
        from tests.conftest import make_bucket

        sources: dict[tuple[str, int], storage.Store] = {}
        for name, objs in objects.items():
            t = time.perf_counter()
            sources[(name, 0)] = write_local(work / name, objs)
            bucket = make_bucket(weed.endpoint, f"src-{name}")
            upload(storage.open_store(f"s3://{bucket}/gfs", **direct), objs)
            for ms in LATENCIES:
                sources[(name, ms)] = storage.open_store(f"s3://{bucket}/gfs", **slow)
            print(f"{name}: local + S3 in {time.perf_counter() - t:.0f} s", flush=True)
        make_bucket(weed.endpoint, "repos")
        lines = {n: max(len(v.splitlines()) for k, v in objs.items() if k.endswith(".idx"))
                 for n, objs in objects.items()}  # fmt: skip
        del objects
        variables = sorted(job(sources[("8-line", 0)], work / "x", 1).template.variables)
        oracle: dict[tuple[str, int], dict[str, Any]] = {}
        floors: dict[tuple[str, int, int], float] = {}

        def repo_for(ms: int) -> tuple[Any, storage.Store]:
            """A fresh repo: its store for the row (behind the proxy) and for the check."""
            nonlocal made
            made += 1
            if ms == 0:
                path = storage.open_store(str(work / "repos" / f"r{made}"))
                return path, path
            return (storage.open_store(f"s3://repos/r{made}", **slow),
                    storage.open_store(f"s3://repos/r{made}", **direct))  # fmt: skip

        def measure(name: str, ms: int, mode: str, workers: int,
                    fn: Callable[[Job], dict[str, Any]]) -> None:  # fmt: skip
            src = sources[(name, ms)]
            row_repo, check_repo = repo_for(ms)
            j = job(src, row_repo, inits)
            if ms:
                proxy.ask("latency", ms / 1000)
                proxy.ask("reset")
            got = fn(j)
            seen = proxy.ask("reset") if ms else {}
            if ms:
                proxy.ask("latency", 0.0)
            refs = refs_of(check_repo, variables)
            key = (name, ms)
            if key not in oracle:
                oracle[key] = refs
            assert refs == oracle[key], f"{mode} {name} {ms} ms x{workers}: refs differ"
            fps = got["files"] / got["seconds"]
            if mode == "floor":
                floors[(name, ms, workers)] = fps
            base = floors[(name, ms, workers if (name, ms, workers) in floors else 1)]
            row = {"archive": f"{name} ({lines[name]} lines)", "mode": mode, "latency_ms": ms,
                   "workers": workers, "files": got["files"], "files_per_s": round(fps, 1),
                   "vs_floor": round(fps / base, 3)}  # fmt: skip
            rows.append(row)
            stages = got.get("stages") or {}
            more.append({**{k: row[k] for k in ("archive", "mode", "latency_ms", "workers")},
                         "seconds": round(got["seconds"], 2), "refs": got["refs"],
                         **{k: seen.get(k, 0) for k in KINDS},
                         "other requests": sum(v for k, v in seen.items() if k not in KINDS),
                         "stages (s)": ", ".join(f"{k} {v:.2f}" for k, v in stages.items())})  # fmt: skip
            print(row, more[-1], flush=True)

        archives = list(lines)
        for name in archives:
            for ms in (0, *LATENCIES):
                measure(name, ms, "floor", 1, floor)
                measure(name, ms, "in_process", 1, ours_run)
            measure(name, 0, "sync_backfill", 1,
                    lambda j: ours_backfill(j, inits, 2, executor="sync"))  # fmt: skip
        for n in PROCESSES:
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")  # fmt: skip
            client = Client(cluster)
            client.run(warm)  # workers up, toolkit imported, before any clock starts
            try:
                for name in archives:
                    for ms in CLUSTER_LATENCIES:
                        measure(name, ms, "floor", n, lambda j, c=client, n=n: floor(j, c, n))
                        measure(name, ms, "cluster", n,
                                lambda j, c=client, n=n: ours_backfill(j, inits, n, cluster=c))  # fmt: skip
            finally:
                client.close()
                cluster.close()
    finally:
        proxy.close()
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    if quick:  # an iteration's figures: printed, the results files left alone
        from benchmarks._report import _table

        print("\n".join([*_table(rows), "", *_table(more)]))
        return
    write("virtual_throughput", rows, __doc__.split("\n\n")[1].replace("\n", " ") +
          " Issue 33's goals: in process >= 0.8x the floor; on a running cluster files/s grows "
          "with processes >= 0.9x as well as the floor's; on local disk >= 0.8x in process "
          "and on a cluster.",
          more={"where the time goes": (
              "Requests the proxy saw, by kind, and seconds per stage (in_process: run()'s "
              "steps timed; backfills: the report's stages).", more)})  # fmt: skip


KINDS = ("LIST", "GET .idx", "GET range", "GET", "PUT")


def warm() -> int:
    import toolkit.virtual.backfill  # noqa: F401

    return 1


if __name__ == "__main__":
    main()
