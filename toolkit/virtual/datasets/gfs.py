"""GFS 0.25° forecast, virtual over ``s3://noaa-gfs-bdp-pds``.

6-hourly cycles; leads hourly to 120 h, then 3-hourly to 384 h. The default file type is
``pgrb2`` (every surface variable and the 41 isobaric levels it carries); add ``pgrb2b`` with
`source_file_types=("pgrb2", "pgrb2b")` for the 16 intermediate levels (each file's manifest
probe then sits at a level that file owns).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

import numpy as np

from toolkit.virtual.datasets.common import NoaaDataset, hour_range
from toolkit.virtual.sources.noaa import GFS

__all__ = ["GfsForecast", "gfs_lead_times"]


def gfs_lead_times() -> np.ndarray:
    return np.concatenate([hour_range(0, 120), hour_range(123, 384, 3)])


@dataclass(frozen=True)
class GfsForecast(NoaaDataset):
    """NOAA GFS 0.25° global forecast, 0-384 h, virtual over NODD."""

    first_init: datetime = datetime(2021, 5, 1)

    bucket: ClassVar[str] = GFS.bucket  # declared once, by the source
    title: ClassVar[str] = "NOAA GFS 0.25 degree forecast (virtual)"
    source_cls: ClassVar[type] = GFS

    def lead_times(self) -> np.ndarray:
        return gfs_lead_times()

    def split_sizes(self) -> int | dict[str | None, int]:
        # single-level arrays: 209 refs/init, 500 inits ~ 104k refs ~ 1.7 MiB per manifest;
        # isobaric groups: 209 x 41 refs/init, 40 inits ~ 343k refs ~ 5.5 MiB (bulk readers).
        vertical = "|".join(v.name for v in self.catalog() if v.is_vertical)
        return {f"^/({vertical})$": 40, None: 500} if vertical else 500
