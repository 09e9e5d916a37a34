"""Engine at scale: a gated plan of 10^4..10^6 no-op tasks against `client.map`, and a pyramid
planned from a listing of 15 million level-0 objects (issue 52, item 7).

Tasks rows, one per size, each on a fresh local cluster of a scheduler process and 2 worker
processes x 1 thread (`SubprocessCluster`: the scheduler in a process of its own, so that
neither its memory nor its allocations count as the client's). Each size runs, in order: the
gated plan (one stage, `workers=AUTO`, a gate wanting every key from an observe that returns
them), then `client.map` + gather of the same tasks, both untraced and timed; then the gated plan
again under tracemalloc for the client's memory.
- `client_bytes_per_task`: tracemalloc's peak above its baseline over planning and running the
  gated plan (the traced pass), over the task count.
- `scheduler_peak_mib`: the scheduler process's peak RSS (VmHWM, reset through
  /proc/self/clear_refs before the untraced gated run) during that run.
- `largest_message_mib`: the largest message the client wrote to the scheduler during the
  untraced gated run, as distributed's TCP comm counted the bytes it wrote.
- `ratio_over_map`: wall seconds of the gated run over those of `client.map` + gather.

The pyramid row plans a (time, y, x) float32 store of 4096 x 4096 shards, 1500 x 100 x 100
objects (1 PB), from its key strings made page by page (nothing written): `plan_s` untraced,
`plan_peak_mib` tracemalloc's peak above baseline in a second, traced pass.

    .venv/bin/python -m benchmarks engine_scale
A trial at other sizes prints its rows and writes no result:
    ENGINE_SCALE_TASKS=10000 ENGINE_SCALE_OBJECTS=100000 .venv/bin/python -m benchmarks engine_scale
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from benchmarks._report import commit, write
from toolkit.engine import AUTO, Each, Gate, Plan, Runner, Stage
from toolkit.pyramid.geometry import ArrayMeta, plan_pyramid

SIZES = (10_000, 100_000, 1_000_000)
OBJECTS = 15_000_000  # 1500 x 100 x 100 shards of 4096 x 4096 float32: 1 PB
MIB = 2**20


@dataclass(frozen=True)
class Noop:
    n: int

    @property
    def key(self) -> str:
        return f"noop/{self.n:07d}"


def noop(task: Noop) -> int:
    return task.n


@dataclass(frozen=True)
class Noops:
    """Tasks `start`..`stop` as a range (a columnar task list: a stripe ships as two ints)."""

    start: int
    stop: int

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"noop:{self.start}:{self.stop}".encode()).hexdigest()

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[Noop]:
        return (Noop(i) for i in range(self.start, self.stop))

    @overload
    def __getitem__(self, i: int) -> Noop: ...
    @overload
    def __getitem__(self, i: slice) -> Noops: ...
    def __getitem__(self, i: int | slice) -> Noop | Noops:
        if isinstance(i, slice):
            r = range(self.start, self.stop)[i]
            if r.step != 1:
                raise ValueError("a stripe of no-ops is contiguous")
            return Noops(r.start, r.stop)
        return Noop(range(self.start, self.stop)[i])


@dataclass(frozen=True)
class Keys(Collection[str]):
    """The keys of some no-ops: what the gate wants, and what its observe finds (all of them:
    a no-op writes nothing, and the gate still compares every key)."""

    tasks: Noops

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[str]:
        return (t.key for t in self.tasks)

    def __contains__(self, key: object) -> bool:
        return any(k == key for k in self)

    def __call__(self) -> Iterator[str]:
        return iter(self)


def gated(n: int) -> Plan:
    tasks = Noops(0, n)
    keys = Keys(tasks)
    stage = Stage("noop", tasks, Each(noop), Gate(keys, want=keys), workers=AUTO, resume=False)
    return Plan(f"scale-{n}", (stage,))


class Sent:
    """The largest message this process wrote to the scheduler, as distributed's TCP comm
    returned the bytes it wrote (every write of the client's comms is seen while installed)."""

    def __init__(self, scheduler: str) -> None:
        self.scheduler = scheduler
        self.largest = 0

    @contextmanager
    def watching(self) -> Iterator[Sent]:
        from distributed.comm.tcp import TCP

        original = TCP.write

        async def write(comm: Any, msg: Any, serializers: Any = None, on_error: str = "message"):
            n = await original(comm, msg, serializers=serializers, on_error=on_error)
            if comm.peer_address == self.scheduler:
                self.largest = max(self.largest, n)
            return n

        TCP.write = write  # type: ignore[method-assign]
        try:
            yield self
        finally:
            TCP.write = original  # type: ignore[method-assign]


def reset_peak() -> None:
    """Start the scheduler's peak RSS afresh (Linux: VmHWM is reset by writing 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


@contextmanager
def traced() -> Iterator[Callable[[], int]]:
    """tracemalloc's peak above the baseline at entry, in bytes (read at exit)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    peak = [0]
    try:
        yield lambda: peak[0]
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def tasks_row(n: int, at: str) -> dict[str, Any]:
    from distributed import Client
    from distributed.deploy.subprocess import SubprocessCluster

    with (
        SubprocessCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.submit(noop, Noop(0)).result()  # warm the workers
        runner = Runner(cluster=client, executor="dask")
        sent = Sent(client.scheduler.address)
        client.run_on_scheduler(reset_peak)
        with sent.watching():
            gated_s = timed(lambda: runner.run(gated(n)))
        scheduler_kib = client.run_on_scheduler(peak_kib)
        map_s = timed(lambda: client.gather(client.map(noop, list(Noops(0, n)), pure=False)))
        with traced() as client_peak:
            runner.run(gated(n))
    return {
        "kind": "tasks",
        "tasks": n,
        "client_bytes_per_task": round(client_peak() / n, 1),
        "scheduler_peak_mib": round(scheduler_kib / 1024, 1),
        "largest_message_mib": round(sent.largest / MIB, 3),
        "ratio_over_map": round(gated_s / map_s, 3),
        "gated_s": round(gated_s, 2),
        "map_s": round(map_s, 2),
        "commit": at,
    }


def store(objects: int) -> tuple[ArrayMeta, tuple[int, int, int]]:
    """A (time, y, x) float32 array of 4096 x 4096 shards, ~`objects` of them."""
    side = 100 if objects >= 10_000 else max(1, int(objects**0.5))
    times = max(1, objects // side**2)
    shape = (times, side * 4096, side * 4096)
    meta = ArrayMeta(
        "t2m", shape, ("time", "y", "x"), (1, 4096, 4096), (1, 512, 512), "float32", float("nan")
    )
    return meta, (times, side, side)


def listing(grid: tuple[int, int, int]) -> Iterator[str]:
    """Every shard's key, made as it is read (a store's listing, page after page)."""
    t, gy, gx = grid
    for i in range(t):
        for y in range(gy):
            for x in range(gx):
                yield f"c/{i}/{y}/{x}"


def pyramid_row(objects: int, at: str) -> dict[str, Any]:
    meta, grid = store(objects)
    plan_s = timed(lambda: plan_pyramid({"t2m": meta}, {"t2m": listing(grid)}))
    with traced() as peak:
        p = plan_pyramid({"t2m": meta}, {"t2m": listing(grid)})
    return {
        "kind": "pyramid_plan",
        "objects": grid[0] * grid[1] * grid[2],
        "plan_s": round(plan_s, 2),
        "plan_peak_mib": round(peak() / MIB, 1),
        "levels": len(p.levels),
        "shards": sum(len(lvl.tasks) for lvl in p.levels),
        "commit": at,
    }


def main(sizes: tuple[int, ...] = SIZES, objects: int = OBJECTS) -> None:
    trial_sizes = os.environ.get("ENGINE_SCALE_TASKS")
    trial_objects = os.environ.get("ENGINE_SCALE_OBJECTS")
    trial = bool(trial_sizes or trial_objects)
    if trial_sizes:
        sizes = tuple(int(s) for s in trial_sizes.split(","))
    if trial_objects:
        objects = int(trial_objects)
    os.environ["PYTHONPATH"] = os.pathsep.join(  # the workers import this module's no-op
        [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    at = commit()
    rows = []
    for n in sizes:
        rows.append(tasks_row(n, at))
        print(rows[-1], flush=True)
    rows.append(pyramid_row(objects, at))
    print(rows[-1], flush=True)
    if trial:
        print("trial sizes: no result written", file=sys.stderr)
        return
    write(
        "engine_scale",
        rows,
        "Tasks rows: each size on a fresh SubprocessCluster (scheduler process + 2 worker "
        "processes x 1 thread); the gated plan (one stage, workers=auto, a gate comparing every "
        "key) then client.map + gather, untraced and timed, then the gated plan again under "
        "tracemalloc for client_bytes_per_task. scheduler_peak_mib: the scheduler's VmHWM over "
        "the untraced gated run; largest_message_mib: the largest write of the client's TCP "
        "comm to the scheduler in that run. Pyramid row: plan_pyramid over a generated listing "
        "of a (time, y, x) float32 store of 4096^2 shards, plan_s untraced, plan_peak_mib "
        "traced in a second pass. Goals: client_bytes_per_task <= 1024, ratio_over_map <= 1.2, "
        "the plan in < 60 s and < 4 GiB.",
    )


if __name__ == "__main__":
    main()
