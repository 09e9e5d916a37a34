"""HRRR CONUS surface forecast, virtual over ``s3://noaa-hrrr-bdp-pds`` (``wrfsfc`` files).

The 3 km Lambert conformal grid (1059 x 1799) in projection metres, south row first as the
GRIB messages scan it. By default the 6-hourly long cycles (00/06/12/18 UTC, leads 0-48 h);
`init_freq_hours=1` takes every hourly cycle, whose other hours publish leads 0-18 h only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from toolkit.virtual.datasets.common import EARTH_RADIUS, NoaaDataset, hour_range
from toolkit.virtual.sources.noaa import HRRR

__all__ = ["HrrrForecast", "hrrr_xy"]

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


@dataclass(frozen=True)
class HrrrForecast(NoaaDataset):
    """HRRR CONUS 3 km surface forecast (wrfsfc), 48 h long cycles, virtual over NODD."""

    first_init: datetime = datetime(2020, 12, 3)  # HRRRv4: 48 h leads on the long cycles

    bucket: ClassVar[str] = HRRR.bucket  # declared once, by the source
    title: ClassVar[str] = "NOAA HRRR CONUS surface forecast (virtual)"
    source_cls: ClassVar[type] = HRRR
    grid_dims: ClassVar[tuple[str, ...]] = ("y", "x")
    allowed_init_freq: ClassVar[tuple[int, ...]] = (6, 1)

    def lead_times(self) -> np.ndarray:
        return hour_range(0, 48)

    def leads(self, init: np.datetime64) -> Any:
        hour = int((np.datetime64(init, "h").astype("int64")) % 24)
        leads = self.template().coords["lead_time"]
        if hour % 6 == 0:
            return leads
        return leads[leads <= np.timedelta64(SHORT_CYCLE_MAX_LEAD_H, "h")]

    def grid(self) -> Mapping[str, np.ndarray]:
        return hrrr_xy()

    def crs_attrs(self) -> dict[str, Any]:
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
            "comment": "fill-valued on purpose: a CRS carrier, no data",
        }

    def coord_attrs(self) -> dict[str, dict[str, Any]]:
        return {
            **super().coord_attrs(),
            "x": {"units": "m", "standard_name": "projection_x_coordinate"},
            "y": {"units": "m", "standard_name": "projection_y_coordinate"},
        }

    def split_sizes(self) -> int | dict[str | None, int]:
        # 49 refs per init per array: 1000 inits ~ 49k refs ~ 0.8 MiB per manifest; an
        # operational commit rewrites ~19 arrays x 49k refs ~ 1M refs.
        return 1000
