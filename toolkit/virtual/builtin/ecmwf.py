"""ECMWF's open data, virtual over ``s3://ecmwf-forecasts``: IFS HRES and AIFS single, 0.25°.

- ``ecmwf-ifs-oper``: IFS HRES, oper stream, the 00z and 12z cycles from 2025-01-01, steps 0-144
  h every 3 h then 150-360 h every 6 h (ECMWF's table since IFS 49r1, 2024-11-12).
- ``ecmwf-aifs-single``: AIFS single, the 00/06/12/18z cycles from 2025-02-25 06z (the files
  under ``aifs-single/``), steps 0-360 h every 6 h.

Both read ECMWF's `.index` sidecars. The grid is the messages' own: 721 x 1440, latitude 90 to
-90, longitude -180 to 179.75 (the first point is encoded as 180). Variables carry ECMWF's
shortName (`short_name`) and ecCodes' units; `tp` accumulates from step 0, where ECMWF
publishes a field of zeros.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.builtin.common import (
    Checks,
    Grid,
    Schedule,
    forecast_dataset,
    grid_mapping,
    hour_range,
)
from toolkit.virtual.dataset import Dataset, RepoSettings
from toolkit.virtual.gribsource import GribSource
from toolkit.virtual.sources.ecmwf import BUCKET, REGION, AifsSingle, IfsOper
from toolkit.virtual.sources.noaa import NoaaSource

__all__ = ["ecmwf_aifs_single", "ecmwf_ifs_oper", "ifs_lead_times", "latlon_ecmwf_0p25"]

ECMWF_RADIUS = 6371229.0  # the sphere ECMWF's regular lat/lon GRIB2 grids declare (shape 6)
INSTITUTION = "European Centre for Medium-Range Weather Forecasts (ECMWF)"
LICENSE = "CC-BY-4.0: ECMWF open data (https://www.ecmwf.int/en/forecasts/datasets/open-data)"


def latlon_ecmwf_0p25() -> dict[str, np.ndarray]:
    """ECMWF's global 0.25° grid as the messages scan it: 90 -> -90, -180 -> 179.75."""
    return {
        "latitude": 90.0 - 0.25 * np.arange(721, dtype="float64"),
        "longitude": -180.0 + 0.25 * np.arange(1440, dtype="float64"),
    }


def ifs_lead_times() -> np.ndarray:
    return np.concatenate([hour_range(0, 144, 3), hour_range(150, 360, 6)])


def _crs() -> dict[str, Any]:
    return grid_mapping(
        {
            "grid_mapping_name": "latitude_longitude",
            "semi_major_axis": ECMWF_RADIUS,
            "semi_minor_axis": ECMWF_RADIUS,
            "inverse_flattening": 0.0,
            "longitude_of_prime_meridian": 0.0,
        }
    )


def _on_bucket(catalog: NoaaSource, source_store: storage.Store | None) -> GribSource:
    store = source_store or storage.open_store(BUCKET, region=REGION, anonymous=True)
    return GribSource(catalog, store, catalog.file_types)


def _ecmwf(
    name: str, catalog: NoaaSource, source_store: storage.Store | None, schedule: Schedule,
    *, title: str, model: str, publish_hours: int,
) -> Dataset:  # fmt: skip
    vertical = "|".join(v.name for v in catalog.variables if v.is_vertical)
    return forecast_dataset(
        name,
        Grid(latlon_ecmwf_0p25(), _crs()),
        _on_bucket(catalog, source_store),
        catalog.variables,
        schedule,
        title=title,
        attrs={
            "source": f"{model}; GRIB2 files read in place from {BUCKET} (ECMWF open data)",
            "institution": INSTITUTION,
            "license": LICENSE,
            "virtual": "chunks are byte ranges of the source GRIB2 messages",
        },
        settings=RepoSettings(
            {f"^/({vertical})$": 100, None: 500}, home=BUCKET, home_region=REGION
        ),
        checks=Checks(
            min_present_fraction=(0.0, 1.0),
            expected_latency_hours=schedule.every_hours + publish_hours,
        ),
    )


def ecmwf_ifs_oper(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2025, 1, 1),
    append_dim_end: datetime | None = None,
) -> Dataset:
    """ECMWF IFS HRES 0.25° global forecast (oper, 00z/12z), 0-360 h, virtual over ECMWF open data."""
    schedule = Schedule(
        first_init, append_dim_end, 12, ifs_lead_times(), update_cycles=2, source_every_hours=(12,)
    )
    return _ecmwf(
        "ecmwf-ifs-oper", IfsOper(), source_store, schedule,
        title="ECMWF IFS HRES 0.25 degree forecast (virtual)",
        model="ECMWF Integrated Forecasting System (IFS) HRES, oper stream, 0.25 degree",
        publish_hours=9,
    )  # fmt: skip


def ecmwf_aifs_single(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2025, 2, 25, 6),
    append_dim_end: datetime | None = None,
) -> Dataset:
    """ECMWF AIFS single 0.25° global forecast (00/06/12/18z), 0-360 h, virtual over ECMWF open data."""
    schedule = Schedule(
        first_init, append_dim_end, 6, hour_range(0, 360, 6), update_cycles=3,
        source_every_hours=(6,),
    )  # fmt: skip
    return _ecmwf(
        "ecmwf-aifs-single", AifsSingle(), source_store, schedule,
        title="ECMWF AIFS single 0.25 degree forecast (virtual)",
        model="ECMWF Artificial Intelligence Forecasting System (AIFS) single, 0.25 degree",
        publish_hours=7,
    )  # fmt: skip
