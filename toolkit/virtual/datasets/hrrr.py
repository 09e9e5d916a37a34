"""HRRR CONUS surface forecast, virtual over ``s3://noaa-hrrr-bdp-pds`` (``wrfsfc`` files).

The 3 km Lambert conformal grid (1059 x 1799) in projection metres, south row first as the
GRIB messages scan it. By default the 6-hourly long cycles (00/06/12/18 UTC, leads 0-48 h);
`init_freq_hours=1` takes every hourly cycle, whose other hours publish leads 0-18 h only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.dataset import Dataset, ShortCycles
from toolkit.virtual.datasets.common import EARTH_RADIUS, forecast, hour_range
from toolkit.virtual.sources.noaa import HRRR

__all__ = ["hrrr", "hrrr_xy"]

NY, NX = 1059, 1799
DX = 3000.0
# The grid's first point (21.138123 N, 122.719528 W) in the lcc projection below.
X0 = -2697520.142521929
Y0 = -1587306.152556665
SHORT_CYCLE_MAX_LEAD_H = 18
PROJ4 = (
    f"+proj=lcc +lat_0=38.5 +lon_0=262.5 +lat_1=38.5 +lat_2=38.5 "
    f"+x_0=0 +y_0=0 +R={EARTH_RADIUS:g} +units=m +no_defs"
)


def hrrr_xy() -> dict[str, np.ndarray]:
    """Projection coordinates of the HRRR CONUS grid (metres, ascending)."""
    return {"y": Y0 + DX * np.arange(NY), "x": X0 + DX * np.arange(NX)}


def lcc_crs_attrs() -> dict[str, Any]:
    return {
        "grid_mapping_name": "lambert_conformal_conic",
        "standard_parallel": [38.5, 38.5],
        "longitude_of_central_meridian": 262.5,
        "latitude_of_projection_origin": 38.5,
        "false_easting": 0.0,
        "false_northing": 0.0,
        "earth_radius": EARTH_RADIUS,
        "spatial_ref": PROJ4,
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
    return forecast(
        "hrrr",
        HRRR(),
        title="NOAA HRRR CONUS surface forecast (virtual)",
        source_store=source_store,
        file_types=source_file_types or ("sfc",),
        first_init=first_init,
        append_dim_end=append_dim_end,
        init_freq_hours=init_freq_hours,
        allowed_init_freq=(6, 1),
        lead_times=hour_range(0, 48),
        grid=hrrr_xy(),
        crs=lcc_crs_attrs(),
        # 49 refs per init per array: 1000 inits ~ 49k refs ~ 0.8 MiB per manifest; an
        # operational commit rewrites ~19 arrays x 49k refs ~ 1M refs.
        split=1000,
        leads=ShortCycles(6, SHORT_CYCLE_MAX_LEAD_H),
        publish_hours=2,  # a cycle's first files land about an hour after its init
    )
