"""HRRR CONUS surface forecast and analysis, virtual over ``s3://noaa-hrrr-bdp-pds``.

The 3 km Lambert conformal grid (1059 x 1799) in projection metres, south row first as the
GRIB messages scan it (``wrfsfc`` files).

- `hrrr`: the forecast. By default the 6-hourly long cycles (00/06/12/18 UTC, leads 0-48 h);
  `init_freq_hours=1` takes every hourly cycle, whose other hours publish leads 0-18 h only.
- `hrrr_analysis`: hourly valid times; instants from each cycle's lead 0, accumulations from
  the previous cycle's lead 1 (`Analysis`), withheld until their hour's lead 0 has landed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.builtin.common import (
    EARTH_RADIUS,
    NCEP,
    NOAA_LICENSE,
    NOAA_REGION,
    Grid,
    Schedule,
    analysis_template,
    carried,
    check_inits,
    global_attrs,
    grid_mapping,
    hour_range,
    next_cycle,
    noaa_forecast,
    noaa_source,
    noaa_store,
    on_nodd,
)
from toolkit.virtual.dataset import Analysis, Dataset, LatestCycles, RepoSettings, ShortCycles
from toolkit.virtual.gribsource import GribSource
from toolkit.virtual.sources.noaa import HRRR

__all__ = ["hrrr", "hrrr_analysis", "hrrr_xy"]

NY, NX = 1059, 1799
DX = 3000.0
# The grid's first point (21.138123 N, 122.719528 W) in the lcc projection below.
X0 = -2697520.142521929
Y0 = -1587306.152556665
SHORT_CYCLE_MAX_LEAD_H = 18
MODEL = "NOAA High-Resolution Rapid Refresh (HRRR), CONUS 3 km"


def hrrr_xy() -> dict[str, np.ndarray]:
    """Projection coordinates of the HRRR CONUS grid (metres, ascending)."""
    return {"y": Y0 + DX * np.arange(NY), "x": X0 + DX * np.arange(NX)}


def lcc_crs_attrs() -> dict[str, Any]:
    """HRRR's Lambert conformal conic on NCEP's sphere, as `spatial_ref`'s attributes."""
    return {
        **grid_mapping(
            {
                "grid_mapping_name": "lambert_conformal_conic",
                "standard_parallel": [38.5, 38.5],
                "longitude_of_central_meridian": 262.5,
                "latitude_of_projection_origin": 38.5,
                "false_easting": 0.0,
                "false_northing": 0.0,
                "earth_radius": EARTH_RADIUS,
            }
        ),
        "GeoTransform": f"{X0 - DX / 2} {DX} 0 {Y0 - DX / 2} 0 {DX}",
    }


def hrrr(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2020, 12, 3),  # HRRRv4: 48 h leads on the long cycles
    append_dim_end: datetime | None = None,
    init_freq_hours: int = 6,
    source_file_types: tuple[str, ...] | None = None,
) -> Dataset:
    """HRRR CONUS 3 km surface forecast (wrfsfc), 48 h long cycles, virtual over NODD."""
    return noaa_forecast(
        "hrrr",
        on_nodd(HRRR(), source_store, source_file_types or ("sfc",)),
        # HRRR's u/v follow the Lambert grid's axes
        Grid(hrrr_xy(), lcc_crs_attrs(), grid_relative_winds=True),
        Schedule(
            first_init, append_dim_end, init_freq_hours, hour_range(0, 48),
            update_cycles=3, published=ShortCycles(6, SHORT_CYCLE_MAX_LEAD_H),
            source_every_hours=(6, 1),
        ),
        title="NOAA HRRR CONUS surface forecast (virtual)",
        # 49 refs per init per array: 1000 inits ~ 49k refs ~ 0.8 MiB per manifest; an
        # operational commit rewrites ~19 arrays x 49k refs ~ 1M refs.
        split=1000,
        model=MODEL,
        publish_hours=2,  # a cycle's first files land about an hour after its init
    )  # fmt: skip


def hrrr_analysis(
    source_store: storage.Store | None = None,
    *,
    first_time: datetime = datetime(2020, 12, 3),
    append_dim_end: datetime | None = None,
) -> Dataset:
    """HRRR CONUS 3 km hourly analysis (wrfsfc lead 0, accumulations from lead 1), virtual."""
    catalog = HRRR()
    end = append_dim_end or next_cycle(1)
    check_inits("hrrr-analysis", first_time, end, 1, (1,))
    times = np.arange(
        np.datetime64(first_time, "ns"), np.datetime64(end, "ns"), np.timedelta64(1, "h")
    )
    title = "NOAA HRRR CONUS hourly analysis (virtual)"
    grid, crs = hrrr_xy(), lcc_crs_attrs()
    template = analysis_template(
        carried(catalog, ("sfc",)),
        ("sfc",),
        times=times,
        grid=grid,
        crs=crs,
        attrs=global_attrs(
            title=title,
            source=noaa_source(
                f"{MODEL}, analysis (lead 0; accumulations from lead 1)", catalog.bucket
            ),
            grid=grid,
            crs=crs,
            start=times,
            institution=NCEP,
            license=NOAA_LICENSE,
            file_types=["sfc"],
        ),
        grid_relative_winds=True,
    )
    return Dataset(
        "hrrr-analysis",
        template,
        GribSource(catalog, source_store or noaa_store(catalog.bucket), ("sfc",)),
        # 1 ref per hour per array: 8760 hours (a year) ~ 140 KiB per manifest
        RepoSettings(8760, home=catalog.bucket, home_region=NOAA_REGION),
        LatestCycles(6, 1),  # the six newest hours
        Analysis(stat_lead_hours=1),
        title,
        min_present_fraction=(0.5, 1.0),  # the newest hour may wait for its accumulations
        expected_latency=np.timedelta64(3, "h"),
    )
