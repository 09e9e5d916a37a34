"""What reading level 0 as CF says costs: one field written by xarray's `to_zarr` three ways
(float32 with a CF `_FillValue`; int16 packed with `scale_factor`/`add_offset`; float32 with a
valid range and `missing_value`, the decoded path), each pyramided in this process, side by
side with the peer a user would reach for: xarray decoding level 0 and `coarsen().mean()` for
every level, in memory (writing nothing).

    .venv/bin/python -m benchmarks pyramid_cf               # 4096x8192
    .venv/bin/python -m benchmarks.pyramid_cf 8192x16384
Writes benchmarks/results/pyramid_cf.{json,md}. Not a test: nothing here asserts a time.
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

LEVELS = 4
ENCODINGS = {
    "float32, CF _FillValue": {"_FillValue": -9999.0},
    "int16 packed (scale_factor/add_offset)": {
        "dtype": "int16",
        "scale_factor": 0.01,
        "add_offset": 280.0,
        "_FillValue": -32767,
    },
}
RANGED = {"valid_range": [150.0, 400.0], "missing_value": [-1.0]}


def field(h: int, w: int) -> xr.Dataset:
    rng = np.random.default_rng(0)
    t = (280 + 10 * rng.standard_normal((h, w))).astype("float32")
    t[: h // 3, : w // 2] = np.nan  # a third of the grid is nodata
    return xr.Dataset(
        {"t": (("y", "x"), t, {"units": "K"})},
        coords={"y": np.linspace(90, -90, h), "x": np.linspace(-180, 180, w)},
    )


def peer(path: Path) -> float:
    """xarray's decode of level 0 and a nodata-aware coarsen mean per level, in memory."""
    t0 = time.perf_counter()
    da = xr.open_zarr(path, consolidated=False)["t"].load()
    for k in range(1, LEVELS + 1):
        da.coarsen(y=2**k, x=2**k, boundary="pad").mean().values  # noqa: B018
    return time.perf_counter() - t0


def main() -> None:
    shape = tuple(int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "4096x8192").split("x"))
    ds = field(*shape)
    cases = [(name, enc, {}) for name, enc in ENCODINGS.items()]
    cases.append(
        ("float32, valid_range + missing_value (decoded)", {"_FillValue": -9999.0}, RANGED)
    )
    rows = []
    with tempfile.TemporaryDirectory() as d:
        warm = Path(d) / "warm.zarr"  # numba compiles once, outside the timings
        field(256, 256).to_zarr(warm, zarr_format=3, consolidated=False)
        build(str(warm), levels=1, executor="sync")
        for name, enc, attrs in cases:
            path = Path(d) / "case.zarr"
            shutil.rmtree(path, ignore_errors=True)
            case = ds.copy()
            case["t"].attrs.update(attrs)
            case.to_zarr(
                path,
                zarr_format=3,
                consolidated=False,
                encoding={"t": {"chunks": (2048, 2048), **enc}},
            )
            t0 = time.perf_counter()
            build(str(path), levels=LEVELS, executor="sync")
            ours = time.perf_counter() - t0
            theirs = peer(path)
            rows.append(
                {
                    "level 0": name,
                    "toolkit build (s)": round(ours, 2),
                    "xarray decode + coarsen (s)": round(theirs, 2),
                    "ratio": round(ours / theirs, 2),
                }
            )
    write(
        "pyramid_cf",
        rows,
        notes=(
            f"{shape[0]}x{shape[1]} field, 2048x2048 chunks, {LEVELS} levels, one process each; "
            "toolkit writes and commits every level, the peer writes nothing."
        ),
    )


if __name__ == "__main__":
    main()
