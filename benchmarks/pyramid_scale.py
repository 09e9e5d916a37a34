"""Pyramids past memory: time per level-0 GiB and peak RSS per worker as level 0 grows.

Level 0 is a sparse float32 field (the synthetic store's kind: a smooth field with noise over a
few round "continents", ocean NaN and absent), shards (1024, 1024), chunks (256, 256), at
4096x4096 (64 MiB), 16384x16384 (1 GiB) and 32768x65536 (8 GiB, three times this machine's
free memory per worker and a third of all of it). It is written shard row by shard row in two
spawned processes, so no process ever holds it. Each size is built with `toolkit.pyramid.build`
on a fresh LocalCluster of 2 process workers (1 thread each; started and warmed before the
clock starts, as a notebook's cluster is), every level down to the toolkit's default coarsest.
Peak RSS per worker is its own VmHWM (a fresh cluster per size, so the peak is that build's).
Time per GiB counts level-0 bytes as dense (rows x columns x 4), absent ocean included; per
present GiB counts only the shards stored (the largest store is 15% land: 1.2 GiB to read).

Correctness is checked, not assumed: 64 cells of the coarsest level, drawn at random among the
cells with any data, equal numpy's nanmean (float64) of their level-0 window read with zarr.

Goals (issue 33): time per level-0 GiB within 1.3x from the smallest to the largest, peak RSS
per worker within 1.25x. About 6 minutes here, most of it writing and building the 8 GiB store.
    .venv/bin/python -m benchmarks pyramid_scale [--quick]   (--quick: the two smaller sizes)
Writes benchmarks/results/pyramid_scale.{json,md}.
"""

from __future__ import annotations

import multiprocessing
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import write

SIZES = [(4096, 4096), (16384, 16384), (32768, 65536)]
SHARDS = (1024, 1024)
CHUNKS = (256, 256)
CHECKED = 64  # coarsest cells checked against numpy


def _land(y0: int, y1: int, x0: int, x1: int, shape: tuple[int, int]) -> np.ndarray:
    """Round continents in relative coordinates: the same map at every size."""
    h, w = shape
    yy = ((np.arange(y0, y1) + 0.5) / h)[:, None]
    xx = ((np.arange(x0, x1) + 0.5) / w)[None, :]
    field = np.zeros((y1 - y0, x1 - x0))
    for cy, cx, r in ((0.3, 0.2, 0.12), (0.6, 0.55, 0.15), (0.25, 0.8, 0.1), (0.8, 0.3, 0.08)):
        field += np.exp(-((yy - cy) ** 2 + ((xx - cx) * w / h) ** 2) / (2 * r * r))
    return field > 0.5


def _write_rows(path: str, shape: tuple[int, int], rows: list[int]) -> None:
    """Fill the shard rows `rows` of the field (each a block of whole shards)."""
    import zarr

    from toolkit import storage

    arr = zarr.open_array(storage.open_store(path).zarr(), path="field", mode="r+")
    h, w = shape
    for r in rows:
        y0, y1 = r * SHARDS[0], min(h, (r + 1) * SHARDS[0])
        lat = 90 - (np.arange(y0, y1) + 0.5) * (180 / h)
        for x0 in range(0, w, 8 * SHARDS[1]):
            x1 = min(w, x0 + 8 * SHARDS[1])
            land = _land(y0, y1, x0, x1, shape)
            if not land.any():
                continue  # an all-ocean block: absent, as zarr would leave it
            rng = np.random.default_rng([r, x0])
            block = (20 + 10 * np.cos(np.deg2rad(lat))[:, None]).astype(np.float32) + rng.normal(
                0, 2, land.shape
            ).astype(np.float32)
            block[~land] = np.nan
            arr[y0:y1, x0:x1] = block


def write_source(path: Path, shape: tuple[int, int]) -> int:
    """The level-0 store at `path`, streamed by 2 processes; returns the shards present."""
    import zarr

    from toolkit import storage
    from toolkit.examples.synthetic import CRS_ATTRS

    h, w = shape
    root = zarr.open_group(storage.open_store(str(path)).zarr(), mode="w")
    for dim, vals, units in (
        ("lat", 90 - (np.arange(h) + 0.5) * (180 / h), "degrees_north"),
        ("lon", -180 + (np.arange(w) + 0.5) * (360 / w), "degrees_east"),
    ):
        a = root.create_array(dim, shape=vals.shape, dtype="float64", chunks=vals.shape,
                              dimension_names=[dim], attributes={"units": units})  # fmt: skip
        a[:] = vals
    crs = root.create_array("spatial_ref", shape=(), dtype="int32", attributes=CRS_ATTRS)
    crs[...] = 0
    root.create_array("field", shape=shape, dtype="float32", chunks=CHUNKS, shards=SHARDS,
                      fill_value=float("nan"), dimension_names=["lat", "lon"],
                      attributes={"grid_mapping": "spatial_ref", "units": "K"})  # fmt: skip
    rows = list(range(-(-h // SHARDS[0])))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        for f in [pool.submit(_write_rows, str(path), shape, rows[i::2]) for i in range(2)]:
            f.result()
    return sum(1 for p in (path / "field" / "c").rglob("*") if p.is_file())


def _vmhwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _warm() -> None:
    import zarr  # noqa: F401

    from toolkit import kernels
    from toolkit.pyramid import shards  # noqa: F401

    kernels.pool_level0(np.zeros((1, 4, 4), np.float32), np.nan, "mean", np.nan)
    kernels.pool(np.zeros((1, 4, 4), np.float32), np.ones((4, 4), np.uint32), "mean", np.nan)


def check(path: Path, rng: np.random.Generator) -> tuple[str, int, float]:
    """CHECKED random data cells of the coarsest level against numpy's nanmean of their
    level-0 window; returns (level, cells checked, max abs difference)."""
    import zarr

    from toolkit import storage
    from toolkit.pyramid.read import levels

    group = levels(str(path))[-1]
    zs = storage.open_store(str(path)).zarr(read_only=True)
    base = zarr.open_array(zs, path="field", mode="r")
    coarse = zarr.open_array(zs, path=f"{group}/field", mode="r")
    f = int(group.rstrip("x"))
    values = coarse[...]
    cells = np.argwhere(np.isfinite(values))
    picked = cells[rng.choice(len(cells), min(CHECKED, len(cells)), replace=False)]
    worst = 0.0
    for cy, cx in picked:
        window = base[cy * f : (cy + 1) * f, cx * f : (cx + 1) * f].astype(np.float64)
        want = np.nanmean(window)
        worst = max(worst, abs(float(values[cy, cx]) - want))
        assert np.isclose(values[cy, cx], want, rtol=1e-5, atol=1e-4), (group, cy, cx)
    return group, len(picked), worst


def measure(shape: tuple[int, int], root: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from toolkit.pyramid import build

    src = root / f"level0-{shape[0]}x{shape[1]}"
    t = time.perf_counter()
    present = write_source(src, shape)
    written = time.perf_counter() - t
    gib = shape[0] * shape[1] * 4 / (1 << 30)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                     dashboard_address=None) as lc,
        Client(lc) as client,
    ):  # fmt: skip
        client.run(_warm)
        base = sorted(client.run(_vmhwm).values(), reverse=True)
        t = time.perf_counter()
        report = build(str(src), cluster=lc)
        seconds = time.perf_counter() - t
        peaks = sorted(client.run(_vmhwm).values(), reverse=True)
    group, checked, worst = check(src, np.random.default_rng(0))
    shards_total = -(-shape[0] // SHARDS[0]) * -(-shape[1] // SHARDS[1])
    mib = 1 << 20
    row = {
        "level 0": f"{shape[0]}x{shape[1]} f32",
        "GiB (dense)": round(gib, 3),
        "shards present": f"{present} of {shards_total}",
        "coarsest level": group,
        "shards written": report.written,
        "write s": round(written, 1),
        "build s": round(seconds, 2),
        "s per GiB": round(seconds / gib, 2),
        "s per present GiB": round(seconds / (present * SHARDS[0] * SHARDS[1] * 4 / (1 << 30)), 2),
        "peak RSS MiB per worker": "/".join(f"{p / mib:.0f}" for p in peaks),
        "RSS after warm-up MiB": "/".join(f"{p / mib:.0f}" for p in base),
        "checked cells (max abs diff)": f"{checked} ({worst:.2g})",
    }
    shutil.rmtree(src, ignore_errors=True)
    return row


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sizes = SIZES[:2] if "--quick" in argv else SIZES
    root = Path(tempfile.mkdtemp(prefix="pyrscale-"))
    rows = []
    try:
        for shape in sizes:
            rows.append(measure(shape, root))
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    first, last = rows[0], rows[-1]
    peak = [max(int(p) for p in r["peak RSS MiB per worker"].split("/")) for r in rows]
    summary = [
        {
            "from -> to": f"{first['level 0']} -> {last['level 0']}",
            "s per GiB ratio (goal <= 1.3)": round(last["s per GiB"] / first["s per GiB"], 3),
            "s per present GiB ratio": round(
                last["s per present GiB"] / first["s per present GiB"], 3
            ),
            "peak RSS per worker ratio (goal <= 1.25)": round(peak[-1] / peak[0], 3),
        }
    ]
    write(
        "pyramid_scale",
        rows,
        __doc__.split("\n\n")[0].replace("\n", " ")
        + " "
        + " ".join(__doc__.split("\n\n")[1].split()),
        more={"Growth": ("Largest against smallest, same run.", summary)},
    )


if __name__ == "__main__":
    main()
