"""Virtual backfill at archive scale: files/s and peak memory of `toolkit virtual backfill` as
a user runs it, at 10^4, 10^5 and 10^6 files, and a kill and rerun (issue 53, item 6).

Archives: a simulated GFS-shaped archive (25 leads an init, 0-72 h every 3 h, 8 GRIB2 messages a
file), grown init by init as the sizes need it: one init's files are encoded by the simulator,
every later init is their bytes with the reference time rewritten (virtual_throughput's
`retime`). One archive on local disk serves every size (a size's dataset is its first
files / 25 inits, a listing is per init), and one on SeaweedFS (tests/seaweed.py, uploaded
directly) is read through tests/faults.py's proxy in its own process, 20 ms on every request;
the S3 rows' repos are on the same server, behind the proxy. The 10^6 archive is ~20 GB and
2M files on local disk, removed at the end.

Each row is one command in a subprocess, `toolkit virtual backfill DATASET --repo REPO --source
SRC --start ... --json`, DATASET a `path/to/file.py:files_N` this benchmark writes (sim-gfs over
the first N / 25 inits), into a fresh repo. `mode`: in_process is `--executor sync`; cluster is
`--cluster ADDRESS` of an external `dask scheduler` and 2 `dask worker` processes (1 thread each),
started and warmed before any clock. `files_per_s` is the files committed over the run's own
seconds as `--json` reports them (the plan: the command's interpreter start and imports, ~2 s,
are left out; `wall_s` has them). `client_peak_mib` is the command's process peak RSS
(`wait4`'s ru_maxrss), `scheduler_peak_mib` the scheduler process's VmHWM over the row (reset
before it through /proc/PID/clear_refs), `worker_peak_mib` the largest worker's likewise. Every
row of a size must commit all its files and the same refs.

Kill and rerun (local disk, each mode): the same command with `--round-files N` (N = files / 10)
is SIGKILLed once the temp branch holds two rounds (polling its commits' file counts, as
`toolkit virtual status` does), the cluster left to finish what it had started, then rerun as
is. `reingested` = the rerun's ingest `written` minus the files not on the branch before it;
the goal is at most one round.

Run: .venv/bin/python -m benchmarks virtual_scale   -> benchmarks/results/virtual_scale.*
     `python -m benchmarks.virtual_scale --quick`: 10^3 and 10^4 files, printed, not written
     (it took 4.7 min on a 2-core box shared with other work); `--sizes 1000,20000`: other
     sizes (multiples of 25), printed likewise. The full run is estimated from --quick's rates
     at about 90 minutes: archives ~8 min; 10^6 files ~14 min in process (~1,200 files/s) and
     ~27 min on the cluster (~600 files/s); the S3 rows at 10^5 ~7 and ~9 min (~240 and ~180
     files/s: latency bound); the kill and rerun ~5 min.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._report import _table, commit, write
from benchmarks.virtual_throughput import Proxy, retime
from toolkit import storage
from toolkit.examples.simulate import SimFile, make_archive

ROOT = Path(__file__).resolve().parents[1]
TOOLKIT = str(Path(sys.executable).parent / "toolkit")
FIRST = datetime(2025, 8, 1)
LEADS = tuple(range(0, 75, 3))  # 25 leads: 10^k files are 4 x 10^(k-2) inits
SIZES = (10**4, 10**5, 10**6)  # local disk
S3_MAX = 10**5  # SeaweedFS rows: the sizes up to this
QUICK = (10**3, 10**4)
KILL_MAX = 10**5  # the kill and rerun runs at the largest size up to this
ROUNDS = 10  # its --round-files is a tenth of its files
LATENCY_MS = 20
WORKERS = 2  # worker processes on the cluster, one thread each
MODES = ("in_process", "cluster")
MIB = 1024 * 1024
S3_FLAGS = ("--allow-http", "--path-style")

DATASETS = '''"""sim-gfs over the first files / 25 inits of virtual_scale's archive."""
from datetime import datetime
from toolkit.examples.datasets import sim_gfs

LEADS = {leads!r}


def _files(n):
    return lambda store: sim_gfs(store, first_init=datetime({y}, {m}, {d}), inits=n // 25,
                                 lead_hours=LEADS, split=64)

'''


# ----------------------------------------------------------------------------- archives


class Archive:
    """A simulated archive grown init by init: the first init's files encoded, every later one
    their bytes retimed, put through `put(key, bytes)` (data before index, as a provider does)."""

    def __init__(self, seed_dir: Path, put: Callable[[str, bytes], None]) -> None:
        seed = storage.open_store(str(seed_dir))
        self.sim = make_archive(seed, kind="gfs", leads=list(LEADS), inits=[FIRST])
        self.seeds = {
            f.lead: (
                bytes(storage.get(seed, self.sim.data_key(f)).data),
                storage.get(seed, self.sim.index_key(f)).data.decode(),
            )
            for f in self.sim.files()
        }
        self.put, self.inits = put, 0

    def elsewhere(self, put: Callable[[str, bytes], None]) -> Archive:
        """The same archive, put somewhere else from its first init."""
        other = copy.copy(self)
        other.put, other.inits = put, 0
        return other

    def grow(self, files: int) -> None:
        """Put the inits the first `files` files need and this archive lacks."""
        inits = files // len(LEADS)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(self._init, range(self.inits, inits)))
        self.inits = max(self.inits, inits)

    def _init(self, i: int) -> None:
        init = FIRST + timedelta(hours=6 * i)
        pairs = [
            (self.sim.data_key(SimFile(init, lead)), retime(data, index, FIRST, init))
            for lead, (data, index) in self.seeds.items()
        ]
        for key, (data, _) in pairs:
            self.put(key, data)
        for key, (_, index) in pairs:
            self.put(key + ".idx", index.encode())


def local_put(root: Path) -> Callable[[str, bytes], None]:
    def put(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return put


def write_datasets(path: Path, sizes: list[int]) -> None:
    """The DATASET module the commands name: `files_N` for each size."""
    text = DATASETS.format(leads=LEADS, y=FIRST.year, m=FIRST.month, d=FIRST.day)
    path.write_text(text + "".join(f"files_{n} = _files({n})\n" for n in sizes))


# ----------------------------------------------------------------------------- processes


@dataclass
class Done:
    """One finished command: its exit, output, wall seconds and peak RSS (MiB)."""

    code: int
    doc: dict[str, Any]
    stderr: str
    wall: float
    peak_mib: float


def vm_hwm(pid: int) -> float:
    """A live process's peak RSS in MiB (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def reset_hwm(pid: int) -> None:
    """Start a process's peak RSS over from its current RSS (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def run_cli(
    args: list[str], work: Path, watch: Callable[[], bool] | None = None, every: float = 0.25
) -> Done:
    """Run `toolkit ARGS` to its end, or SIGKILL it once `watch()` says so. Waited on with
    wait4, so the peak RSS is the command's own (ru_maxrss)."""
    out, err = work / "stdout", work / "stderr"
    t0 = time.perf_counter()
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([TOOLKIT, *args], stdout=o, stderr=e, cwd=work)
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if watch is None else os.WNOHANG)
        if pid:
            break
        if watch is not None and watch():
            os.kill(proc.pid, signal.SIGKILL)
            watch = None
        else:
            time.sleep(every)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    text = out.read_text().strip()
    doc = json.loads(text) if proc.returncode == 0 and text else {}
    return Done(proc.returncode, doc, err.read_text(), wall, usage.ru_maxrss / 1024)


def backfill_args(dataset: str, repo: str, source: str, files: int) -> list[str]:
    end = FIRST + timedelta(hours=6 * (files // len(LEADS)))
    return ["virtual", "backfill", dataset, "--repo", repo, "--source", source,
            "--start", f"{FIRST:%Y-%m-%dT%H}", "--end", f"{end:%Y-%m-%dT%H}", "--json"]  # fmt: skip


def has_round_files() -> bool:
    help_text = subprocess.run(
        [TOOLKIT, "virtual", "backfill", "--help"], capture_output=True, text=True
    ).stdout
    return "--round-files" in help_text


def on_branch(repo: storage.Store) -> int | None:
    """Files committed on the repo's backfill branch (None: no branch yet)."""
    from toolkit import icechunk as R
    from toolkit.virtual.inflight import in_flight

    try:
        found = in_flight(R.open_repo(repo))
    except Exception:  # the repo or the branch not set up yet, or mid-write
        return None
    return found[0].files if found else None


def stage(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["stages"] if s["stage"] == name)


# ----------------------------------------------------------------------------- main


def parse(argv: list[str]) -> tuple[list[int], bool]:
    """(sizes, whether to write the results): the default sizes write them."""
    if "--sizes" in argv:
        sizes = sorted(int(s) for s in argv[argv.index("--sizes") + 1].split(","))
        bad = [s for s in sizes if s <= 0 or s % len(LEADS)]
        if bad:
            raise SystemExit(f"--sizes: {bad} not positive multiples of {len(LEADS)} files")
        return sizes, False
    return (list(QUICK), False) if "--quick" in argv else (list(SIZES), True)


def main(argv: list[str] | None = None) -> None:
    from distributed import Client

    from tests.conftest import make_bucket
    from tests.external import start
    from tests.seaweed import Weed

    argv = sys.argv[1:] if argv is None else argv
    sizes, keep = parse(argv)
    s3_sizes = [n for n in sizes if n <= S3_MAX]
    kill_at = max((n for n in sizes if n <= KILL_MAX), default=None)
    began, at = time.perf_counter(), commit()
    work = Path(tempfile.mkdtemp(prefix="vscale-"))
    datasets = work / "scale_datasets.py"
    write_datasets(datasets, sizes)
    rows: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    refs: dict[int, int] = {}
    weed = Weed(work / "weed")
    weed.start()
    proxy = Proxy(weed.endpoint)
    cluster = start(work / "cluster", workers=WORKERS)
    made = 0
    try:
        with Client(cluster.address, set_as_default=False) as c:
            c.wait_for_workers(WORKERS)
            c.run(_warm)  # workers up, toolkit imported, before any clock starts
            worker_pids = list(c.run(os.getpid).values())
        scheduler_pid = cluster.procs[0].pid
        direct = {"region": "us-east-1", "allow_http": True, "path_style": True,
                  "endpoint": weed.endpoint}  # fmt: skip
        src_bucket = make_bucket(weed.endpoint, "src")
        make_bucket(weed.endpoint, "repos")
        src_s3 = storage.open_store(f"s3://{src_bucket}/gfs", **direct)
        local = Archive(work / "seed", local_put(work / "src"))
        remote = local.elsewhere(lambda k, b: storage.put(src_s3, k, b))

        def repo_for(store: str) -> tuple[str, storage.Store, list[str]]:
            """A fresh repo: its URL for the command, its store for checks, the flags."""
            nonlocal made
            made += 1
            if store == "local":
                path = str(work / "repos" / f"r{made}")
                return path, storage.open_store(path), []
            url = f"s3://repos/r{made}"
            return url, storage.open_store(url, **direct), ["--endpoint", proxy.url, *S3_FLAGS]

        def command(files: int, store: str, mode: str) -> tuple[list[str], storage.Store]:
            url, repo, flags = repo_for(store)
            source = str(work / "src") if store == "local" else f"s3://{src_bucket}/gfs"
            how = ["--executor", "sync"] if mode == "in_process" else ["--cluster", cluster.address]
            args = backfill_args(f"{datasets}:files_{files}", url, source, files)
            return [*args, *flags, *how], repo

        def measure(files: int, store: str, mode: str) -> None:
            args, _ = command(files, store, mode)
            reset_hwm(scheduler_pid)
            for pid in worker_pids:
                reset_hwm(pid)
            if store != "local":
                proxy.ask("latency", LATENCY_MS / 1000)
                proxy.ask("reset")
            done = run_cli(args, work)
            seen = proxy.ask("reset") if store != "local" else {}
            if store != "local":
                proxy.ask("latency", 0.0)
            assert done.code == 0, (
                f"{files} {store} {mode}: exit {done.code}\n{done.stderr[-3000:]}"
            )
            doc = done.doc
            assert doc["committed"] == files == doc["on_branch"], (files, doc)
            assert refs.setdefault(files, doc["refs"]) == doc["refs"], (files, doc["refs"])
            cluster_side = mode == "cluster"
            row = {
                "files": files,
                "store": "local" if store == "local" else f"seaweedfs +{LATENCY_MS} ms",
                "mode": mode,
                "files_per_s": round(files / doc["seconds"], 1),
                "client_peak_mib": round(done.peak_mib, 1),
                "scheduler_peak_mib": round(vm_hwm(scheduler_pid), 1) if cluster_side else None,
                "worker_peak_mib": (
                    round(max(vm_hwm(p) for p in worker_pids), 1) if cluster_side else None
                ),
                "run_s": round(doc["seconds"], 2),
                "wall_s": round(done.wall, 2),
                "refs": doc["refs"],
                "requests": sum(seen.values()) if seen else None,
                "stages (s)": ", ".join(f"{s['stage']} {s['seconds']:.2f}" for s in doc["stages"]),
                "commit": at,
            }
            rows.append(row)
            print(row, flush=True)

        def kill_and_rerun(files: int, mode: str) -> None:
            rnd = files // ROUNDS
            args, repo = command(files, "local", mode)
            args = [*args, "--round-files", str(rnd)]
            killed = run_cli(args, work, watch=lambda: (on_branch(repo) or 0) >= 2 * rnd)
            at_kill = on_branch(repo) or 0
            if mode == "cluster":  # what the workers had started finishes (or fails) first
                with Client(cluster.address, set_as_default=False) as c:
                    deadline = time.monotonic() + 300
                    while any(c.processing().values()) and time.monotonic() < deadline:
                        time.sleep(0.5)
            before = on_branch(repo) or 0
            again = run_cli(args, work)
            assert again.code == 0, f"rerun {mode}: exit {again.code}\n{again.stderr[-3000:]}"
            doc = again.doc
            assert doc["on_branch"] == files, doc
            ingest = stage(doc, "ingest")
            row = {
                "files": files,
                "mode": mode,
                "round_files": rnd,
                "killed_exit": killed.code,
                "killed_after_s": round(killed.wall, 1),
                "on_branch_at_kill": at_kill,
                "on_branch_before_rerun": before,
                "rerun_skipped": ingest["skipped"],
                "rerun_written": ingest["written"],
                "rerun_rounds": doc.get("rounds"),
                "reingested": ingest["written"] - (files - before),
            }
            row["goal_met"] = row["reingested"] <= rnd
            kills.append(row)
            print(row, flush=True)

        for files in sizes:
            t = time.perf_counter()
            local.grow(files)
            print(f"local archive: {files} files in {time.perf_counter() - t:.0f} s", flush=True)
            for mode in MODES:
                measure(files, "local", mode)
        for files in s3_sizes:
            t = time.perf_counter()
            remote.grow(files)
            print(f"S3 archive: {files} files in {time.perf_counter() - t:.0f} s", flush=True)
            for mode in MODES:
                measure(files, "s3", mode)
        kill_note = ""
        if kill_at is None:
            kill_note = "no size up to 10^5 files was run"
        elif not has_round_files():
            kill_note = ("skipped: this toolkit's `virtual backfill` has no --round-files (a "
                         "backfill is one transaction: a kill loses all of it)")  # fmt: skip
        else:
            for mode in MODES:
                kill_and_rerun(kill_at, mode)
        if kill_note:
            print(f"kill and rerun: {kill_note}", flush=True)
    finally:
        cluster.stop()
        proxy.close()
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - began
    notes = " ".join(__doc__.split("\n\n")[1:3]).replace("\n", " ")
    goals = goal_lines(rows, kills, kill_note)
    print(f"took {took / 60:.1f} min")
    if not keep:
        print("\n".join([*_table(rows), "", *_table(kills), "", *goals]))
        return
    write("virtual_scale", rows, f"{notes} The run took {took / 60:.0f} min. " + " ".join(goals),
          more={"kill and rerun": (kill_note or __doc__.split("\n\n")[3].replace("\n", " "),
                                   kills)})  # fmt: skip


def goal_lines(
    rows: list[dict[str, Any]], kills: list[dict[str, Any]], kill_note: str
) -> list[str]:
    """Issue 53's goals, per mode on local disk: the largest size against 10^4 (else the
    smallest), peak of the command's process <= 1.5x, files/s >= 0.8x; a kill re-ingests at
    most one round."""
    out = []
    for mode in MODES:
        mine = {r["files"]: r for r in rows if r["mode"] == mode and r["store"] == "local"}
        if len(mine) < 2:
            continue
        big = mine[max(mine)]
        small = mine[10**4 if 10**4 in mine and big["files"] > 10**4 else min(mine)]
        peak = big["client_peak_mib"] / small["client_peak_mib"]
        rate = big["files_per_s"] / small["files_per_s"]
        out.append(
            f"Goal ({mode}, {big['files']} vs {small['files']} files): peak "
            f"{peak:.2f}x <= 1.5x {'met' if peak <= 1.5 else 'NOT met'}; files/s "
            f"{rate:.2f}x >= 0.8x {'met' if rate >= 0.8 else 'NOT met'}."
        )
    for k in kills:
        out.append(
            f"Goal (kill and rerun, {k['mode']}, {k['files']} files): re-ingested "
            f"{k['reingested']} <= one round ({k['round_files']}) "
            f"{'met' if k['goal_met'] else 'NOT met'}."
        )
    if kill_note:
        out.append(f"Kill and rerun: {kill_note}.")
    return out


def _warm() -> int:
    import toolkit.virtual.backfill  # noqa: F401

    return 1


if __name__ == "__main__":
    main()
