"""What an xarray append costs the pyramid: a daily store of 365 steps, built, gets one more
step with `to_zarr(append_dim="time")`; the same `pyramid build` then builds only the new
step's shards (and puts back the root layout the append replaced), side by side with the full
rebuild a user had to run before (`--rebuild-from 2x`) on the same appended store.

Objects written are counted from the files themselves (new or with a new mtime under the level
groups), not from the build's report.

    .venv/bin/python -m benchmarks pyramid_append              # 365 steps of 256x512
    .venv/bin/python -m benchmarks.pyramid_append 365x512x1024
Writes benchmarks/results/pyramid_append.{json,md}. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

from benchmarks._report import write
from toolkit.pyramid import build

LEVELS = 3
EXECUTOR = "sync"  # one process: the two builds differ in work, not in cluster start-up


def days(first: int, n: int, h: int, w: int) -> xr.Dataset:
    rng = np.random.default_rng(first)
    t = (280 + 10 * rng.standard_normal((n, h, w))).astype("float32")
    t[:, : h // 4, : w // 4] = np.nan  # a corner of nodata
    when = np.datetime64("2025-01-01", "ns") + np.arange(first, first + n) * np.timedelta64(1, "D")
    return xr.Dataset(
        {"t": (("time", "y", "x"), t, {"units": "K"})},
        coords={"time": when, "y": np.linspace(60, 30, h), "x": np.linspace(-10, 40, w)},
    )


def level_files(path: Path) -> dict[str, int]:
    """Every object under the level groups, with its mtime (ns)."""
    return {
        p.relative_to(path).as_posix(): p.stat().st_mtime_ns
        for level in path.glob("*x")
        for p in level.rglob("*")
        if p.is_file()
    }


def timed_build(path: Path, **kw: object) -> tuple[float, int, int, int]:
    """(seconds, objects written, chunk objects among them, shard tasks written)."""
    before = level_files(path)
    t0 = time.perf_counter()
    report = build(str(path), levels=LEVELS, executor=EXECUTOR, **kw)
    seconds = time.perf_counter() - t0
    after = level_files(path)
    written = [k for k, m in after.items() if before.get(k) != m]
    chunks = sum(1 for k in written if k.split("/")[1] in ("t", "t_count") and "/c/" in k)
    return seconds, len(written), chunks, report.written


def main() -> None:
    arg = sys.argv[1] if len(sys.argv) > 1 else "365x256x512"
    n, h, w = (int(x) for x in arg.split("x"))
    with tempfile.TemporaryDirectory() as d:
        warm = Path(d) / "warm.zarr"  # numba compiles once, outside the timings
        days(0, 2, 64, 64).to_zarr(warm, zarr_format=3, consolidated=False)
        build(str(warm), levels=1, executor=EXECUTOR)
        path = Path(d) / "daily.zarr"
        enc = {"t": {"chunks": (1, h, w)}}
        days(0, n, h, w).to_zarr(path, zarr_format=3, mode="w", encoding=enc)
        first = timed_build(path)
        days(n, 1, h, w).to_zarr(path, append_dim="time")
        incremental = timed_build(path)
        full = timed_build(path, rebuild_from="2x")
    rows = [
        {
            "build": name,
            "seconds": round(s, 2),
            "objects written": objs,
            "of them data/count chunks": chunks,
            "shard tasks written": tasks,
        }
        for name, (s, objs, chunks, tasks) in (
            (f"first build ({n} steps)", first),
            ("after appending 1 step: `pyramid build`", incremental),
            ("after appending 1 step: `--rebuild-from 2x`", full),
        )
    ]
    ratios = [
        {
            "full rebuild / incremental": "time",
            "ratio": round(full[0] / incremental[0], 1),
        },
        {
            "full rebuild / incremental": "objects written",
            "ratio": round(full[1] / max(incremental[1], 1), 1),
        },
        {
            "full rebuild / incremental": "data/count chunks written",
            "ratio": round(full[2] / max(incremental[2], 1), 1),
        },
    ]
    write(
        "pyramid_append",
        rows,
        notes=(
            f"{n} daily steps of {h}x{w} float32, one chunk per step, {LEVELS} levels, "
            f"executor={EXECUTOR}; xarray appends 1 step, then each build runs on the same "
            "appended store (objects written: files new or with a new mtime under the levels, "
            "metadata included)."
        ),
        more={"ratios": ("The full rebuild against the incremental build.", ratios)},
    )


if __name__ == "__main__":
    main()
