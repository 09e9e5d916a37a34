"""What a pyramid of a store you cannot write costs: `pyramid build SOURCE --output REPO` (level
0 as virtual references to the source's chunk objects in an Icechunk repo, the levels native
there) side by side with `pyramid build SOURCE` in place, on the same 8192x16384 store, in one
run. The reference step is timed on its own and the repo's bytes are counted: references cost
seconds and kilobytes, not a copy.

    .venv/bin/python -m benchmarks pyramid_output              # 8192x16384
    .venv/bin/python -m benchmarks.pyramid_output 2048x4096    # a quicker look
Writes benchmarks/results/pyramid_output.{json,md}. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

from benchmarks._report import write
from toolkit.pyramid import build
from toolkit.pyramid.output import reference_level0

LEVELS = 4
CHUNKS = (1024, 1024)


def field(h: int, w: int) -> xr.Dataset:
    """A float32 global field as xarray writes it (CF attributes, NaN nodata over a third)."""
    rng = np.random.default_rng(0)
    t = (280 + 10 * rng.standard_normal((h, w))).astype("float32")
    t[: h // 3, : w // 2] = np.nan
    lat = 90 - (np.arange(h) + 0.5) * 180 / h
    lon = -180 + (np.arange(w) + 0.5) * 360 / w
    return xr.Dataset(
        {"t": (("lat", "lon"), t, {"units": "K", "long_name": "air temperature"})},
        coords={
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
    )


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(shape: tuple[int, int] = (8192, 16384)) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="pyramid-output-") as d:
        root = Path(d)
        warm = root / "warm.zarr"  # numba compiles once, outside the timings
        field(256, 512).to_zarr(warm, zarr_format=3, consolidated=False)
        build(str(warm), levels=1, executor="sync")
        build(str(warm), output=str(root / "warm-repo"), levels=1, executor="sync")
        src = root / "source.zarr"
        field(*shape).to_zarr(src, zarr_format=3, mode="w", consolidated=False,
                              encoding={"t": {"chunks": CHUNKS}})  # fmt: skip
        source_bytes = size(src)
        # 1. the references alone, into a scratch repo
        t0 = time.perf_counter()
        level0 = reference_level0(str(src), str(root / "refs-only"))
        refs_s = time.perf_counter() - t0
        # 2. the whole command with --output (the source only read)
        repo = root / "repo"
        t0 = time.perf_counter()
        build(str(src), output=str(repo), levels=LEVELS, executor="auto")
        output_s = time.perf_counter() - t0
        repo_bytes = size(repo)
        # 3. the same build in place (writes its levels into the source)
        t0 = time.perf_counter()
        build(str(src), levels=LEVELS, executor="auto")
        inplace_s = time.perf_counter() - t0
        levels_bytes = size(src) - source_bytes
        shutil.rmtree(root / "refs-only", ignore_errors=True)
    gib = 1 << 30
    rows = [
        {"build": "--output REPO (level 0 referenced, levels in the repo)",
         "seconds": round(output_s, 2), "x in place": round(output_s / inplace_s, 3),
         "bytes written": repo_bytes},
        {"build": "in place (levels written into the source)", "seconds": round(inplace_s, 2),
         "x in place": 1.0, "bytes written": levels_bytes},
        {"build": "level 0 referenced alone (list, metadata, refs, one commit)",
         "seconds": round(refs_s, 3), "x in place": round(refs_s / inplace_s, 4),
         "bytes written": ""},
    ]  # fmt: skip
    write(
        "pyramid_output",
        rows,
        notes=(
            f"Level 0: {shape[0]}x{shape[1]} float32 ({source_bytes / gib:.2f} GiB on disk as "
            f"written by xarray, chunks {CHUNKS}), {LEVELS} levels, executor auto, one process; "
            f"the --output build runs first (the source untouched), then the in-place one. "
            f"{sum(level0.referenced.values())} chunk objects referenced. 'bytes written': "
            "the whole repo (level-0 references and metadata, the levels, Icechunk's "
            "manifests and snapshots) vs the levels the in-place build added to the source."
        ),
    )


if __name__ == "__main__":
    main(tuple(int(v) for v in sys.argv[1].split("x")) if len(sys.argv) > 1 else (8192, 16384))  # type: ignore[arg-type]
