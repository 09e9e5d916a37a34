"""GEFS ensemble forecasts, virtual over ``s3://noaa-gefs-pds``: 0.25° or 0.5°.

6-hourly cycles, members 0 (control), 1-30 (perturbed) and the ensemble mean.
`ensemble_member` labels are strings, "0".."30" and "mean", so the mean sits on the same axis
as the members it summarises. The file types fix the grid, so they pick the template:

- ``pgrb2s`` (default): 0.25°, 721 x 1440, leads 0-240 h every 3 h (where those files stop);
- ``pgrb2a`` and/or ``pgrb2b``: 0.5°, 361 x 720 (90 to -90, 0 to 359.5), leads 0-240 h every
  3 h then 246-840 h every 6 h: the 00 UTC cycle runs 35 days, the others stop at 384 h.

A mix of the two grids is refused: one array cannot hold both.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from toolkit import storage
from toolkit.virtual.builtin.common import (
    Grid,
    Schedule,
    hour_range,
    latlon_0p25,
    latlon_0p50,
    latlon_crs_attrs,
    noaa_forecast,
    on_nodd,
)
from toolkit.virtual.dataset import AllLeads, Dataset, ShortCycles
from toolkit.virtual.sources.noaa import GEFS, Member

__all__ = ["MEMBERS", "gefs"]

MEMBERS: tuple[Member, ...] = (*range(31), "mean")
HALF_DEGREE = ("pgrb2a", "pgrb2b")


def gefs(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2020, 10, 1),  # GEFSv12 on NODD
    append_dim_end: datetime | None = None,
    init_freq_hours: int = 6,
    source_file_types: tuple[str, ...] | None = None,
) -> Dataset:
    """NOAA GEFS ensemble forecast (31 members + mean), virtual over NODD: 0.25° (pgrb2s) or
    0.5° (pgrb2a/pgrb2b), the grid following the file types."""
    file_types = source_file_types or ("pgrb2s",)
    half = [ft for ft in file_types if ft in HALF_DEGREE]
    if half and len(half) != len(file_types):
        raise ValueError(
            f"gefs: file types {list(file_types)} mix the 0.5° grid ({', '.join(half)}) with "
            "the 0.25° one (pgrb2s); build one dataset per grid"
        )
    if half:
        title, grid = "NOAA GEFS 0.5 degree ensemble forecast (virtual)", latlon_0p50()
        leads = np.concatenate([hour_range(0, 240, 3), hour_range(246, 840, 6)])
        rule, split = ShortCycles(24, 384), 32  # 181 leads x 32 members: 185k refs ~ 2.8 MiB
    else:
        title, grid = "NOAA GEFS 0.25 degree ensemble forecast (virtual)", latlon_0p25()
        leads = hour_range(0, 240, 3)
        rule, split = AllLeads(), 64  # 81 leads x 32 members x 64 inits: 166k refs ~ 2.6 MiB
    return noaa_forecast(
        "gefs",
        on_nodd(GEFS(), source_store, file_types, MEMBERS, tuple(str(m) for m in MEMBERS)),
        Grid(grid, latlon_crs_attrs()),
        Schedule(
            first_init, append_dim_end, init_freq_hours, leads,
            update_cycles=3, published=rule, source_every_hours=(6,),
        ),
        title=title,
        split=split,
        model=f"NOAA Global Ensemble Forecast System (GEFS v12), {'0.5' if half else '0.25'} degree",
    )  # fmt: skip
