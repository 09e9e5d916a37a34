"""Virtual GRIB2 datasets: Icechunk repos of byte-range references, decoded at read time.

`toolkit.virtual.open_dataset(repo)` opens one with xarray in one line, and
`toolkit.virtual.stac(repo, output_dir)` writes its STAC catalogue entry. Both are imported on
first use, so the pure modules stay light to import.
"""

from __future__ import annotations

from typing import Any

__all__ = ["open_dataset", "stac"]


def __getattr__(name: str) -> Any:
    if name == "open_dataset":
        from toolkit.virtual.reader import open_dataset

        return open_dataset
    if name == "stac":
        from toolkit.virtual.stac_entry import stac

        return stac
    raise AttributeError(f"module 'toolkit.virtual' has no attribute {name!r}")
