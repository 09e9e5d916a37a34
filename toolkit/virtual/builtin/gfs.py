"""GFS 0.25° forecast, virtual over ``s3://noaa-gfs-bdp-pds``.

6-hourly cycles; leads hourly to 120 h, then 3-hourly to 384 h. The default file type is
``pgrb2`` (every surface variable and the 41 isobaric levels it carries); add ``pgrb2b`` with
`source_file_types=("pgrb2", "pgrb2b")` for the 16 intermediate levels (each file's manifest
probe then sits at a level that file owns).
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from toolkit import storage
from toolkit.virtual.builtin.common import (
    Grid,
    Schedule,
    carried,
    hour_range,
    latlon_0p25,
    latlon_crs_attrs,
    noaa_forecast,
    on_nodd,
)
from toolkit.virtual.dataset import Dataset
from toolkit.virtual.sources.noaa import GFS

__all__ = ["gfs", "gfs_lead_times"]


def gfs_lead_times() -> np.ndarray:
    return np.concatenate([hour_range(0, 120), hour_range(123, 384, 3)])


def gfs(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2021, 5, 1),
    append_dim_end: datetime | None = None,
    init_freq_hours: int = 6,
    source_file_types: tuple[str, ...] | None = None,
) -> Dataset:
    """NOAA GFS 0.25° global forecast, 0-384 h, virtual over NODD."""
    catalog = GFS()
    file_types = source_file_types or ("pgrb2",)
    # single-level arrays: 209 refs/init, 500 inits ~ 104k refs ~ 1.7 MiB per manifest;
    # isobaric groups: 209 x 41 refs/init, 40 inits ~ 343k refs ~ 5.5 MiB (bulk readers).
    vertical = "|".join(v.name for v in carried(catalog, file_types) if v.is_vertical)
    return noaa_forecast(
        "gfs",
        on_nodd(catalog, source_store, file_types),
        Grid(latlon_0p25(), latlon_crs_attrs()),
        Schedule(
            first_init, append_dim_end, init_freq_hours, gfs_lead_times(),
            update_cycles=3, source_every_hours=(6,),
        ),
        title="NOAA GFS 0.25 degree forecast (virtual)",
        split={f"^/({vertical})$": 40, None: 500} if vertical else 500,
        model="NOAA Global Forecast System (GFS), 0.25 degree",
    )  # fmt: skip
