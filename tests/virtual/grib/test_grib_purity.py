"""The parsing/matching modules stay pure: importing them pulls in no storage, zarr or dask."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "toolkit.virtual.grib.index",
    "toolkit.virtual.grib.message",
    "toolkit.virtual.grib.identity",
    "toolkit.virtual.grib.ecmwf_index",
    "toolkit.virtual.grib.kinds",
    "toolkit.virtual.sources.noaa",
    "toolkit.virtual.sources.ecmwf",
]
FORBIDDEN = ["toolkit.storage", "obstore", "zarr", "icechunk", "dask", "distributed", "xarray"]


def test_pure_modules_import_no_io() -> None:
    script = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE)
        + f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
