"""Planning at archive scale: the task list of a whole HRRR template, built and striped.

Pure work (no I/O): every source file's coord (init x lead x file type), the stable task list
(sorted, hashed) and its contiguous stripes, as a backfill plans them. Reports files/s and the
peak memory the plan took (tracemalloc), for the template's whole append dim.
    .venv/bin/python -m benchmarks virtual_plan
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from benchmarks._report import write
from toolkit.tasks import stable, stripe
from toolkit.virtual.dataset import file_tasks
from toolkit.virtual.datasets import DATASETS


def plan(ds: object, start: object, end: object) -> int:
    tasks = stable(file_tasks(ds, start, end))  # type: ignore[arg-type]
    blocks = [stripe(tasks, i, 64, "contiguous") for i in range(64)]
    assert sum(len(b) for b in blocks) == len(tasks)
    return len(tasks)


def main() -> None:
    rows = []
    for name in ("hrrr", "gfs"):
        ds = DATASETS[name]()
        t = ds.template
        inits = t.coords[t.append_dim]
        region = (inits[0], inits[-1] + np.timedelta64(1, "ns"))
        t0 = time.perf_counter()
        files = plan(ds, *region)
        seconds = time.perf_counter() - t0
        tracemalloc.start()  # a second pass for memory: tracemalloc slows the first 2-3x
        plan(ds, *region)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append(
            {
                "dataset": name,
                "inits": len(inits),
                "files": files,
                "seconds": round(seconds, 2),
                "files_per_s": round(files / seconds),
                "peak_MiB": round(peak / 2**20, 1),
                "bytes_per_file": round(peak / files),
                "projected_1e7_files_s": round(1e7 / (files / seconds)),
            }
        )
    write(
        "virtual_plan",
        rows,
        "Whole-template backfill plan, pure: coords, stable task list, 64 contiguous stripes. "
        "Seconds from a plain pass; peak memory (Python allocations, tracemalloc) from a "
        "second. One core. Issue 10's goal: 10^7 files in under 60 s and 4 GB.",
    )


if __name__ == "__main__":
    main()
