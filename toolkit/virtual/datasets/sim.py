"""The simulated GFS-shaped dataset over `toolkit.virtual.simulate`'s archive (demo, tests).

It takes the path a real NOAA dataset takes (listing discovery, `.idx` + header check,
catalog match), pointed at a local or S3-emulator store.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from toolkit import storage
from toolkit.virtual.dataset import Analysis, Dataset, LatestCycles, RepoSettings
from toolkit.virtual.datasets.common import analysis_template, forecast_template
from toolkit.virtual.source import GribSource
from toolkit.virtual.sources.noaa import GFS, HRRR

__all__ = ["sim_gfs", "sim_hrrr_analysis"]


def sim_gfs(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2025, 8, 1),
    inits: int = 4,
    freq_hours: int = 6,
    lead_hours: tuple[int, ...] = (0, 3, 6),
    split: int = 8,
) -> Dataset:
    """Simulated GFS-shaped forecast over toolkit.virtual.simulate's archive (demo, tests).

    init_time (append, every `freq_hours`) x lead_time x [level] x latitude x longitude.
    """
    from toolkit.virtual.simulate import lats_lons, sim_variables

    if source_store is None:
        raise ValueError(
            "dataset 'sim-gfs' reads a simulator archive and has no bucket of its own: "
            "pass its store (--source)"
        )
    catalog = GFS(variables=sim_variables("pgrb2"))
    lat, lon = lats_lons()
    template = forecast_template(
        catalog.variables,
        ("pgrb2",),
        inits=np.array(
            [
                np.datetime64(first_init + timedelta(hours=freq_hours * i), "ns")
                for i in range(inits)
            ]
        ),
        leads=np.array([np.timedelta64(h, "h") for h in lead_hours]).astype("timedelta64[ns]"),
        grid={"latitude": lat.astype("float64"), "longitude": lon.astype("float64")},
        attrs={"title": "simulated GFS (virtual)", "source": "toolkit.virtual.simulate"},
    )
    return Dataset(
        "sim-gfs",
        template,
        GribSource(catalog, source_store, ("pgrb2",)),
        RepoSettings({"^/temperature$": split // 2 or 1, None: split}),
        LatestCycles(3, freq_hours),  # the fire's cycle and the two before it
        title="simulated GFS (virtual)",
    )


def sim_hrrr_analysis(
    source_store: storage.Store | None = None,
    *,
    first_time: datetime = datetime(2025, 8, 1),
    hours: int = 6,
    split: int = 8,
) -> Dataset:
    """Simulated HRRR-shaped hourly analysis over toolkit.virtual.simulate's "hrrr" archive.

    time (append, hourly) x [level] x latitude x longitude: instants from lead 0, the
    accumulation from the previous hour's lead 1, withheld until its hour's lead 0 lands.
    """
    from toolkit.virtual.simulate import lats_lons, sim_variables

    if source_store is None:
        raise ValueError(
            "dataset 'sim-hrrr-analysis' reads a simulator archive and has no bucket of its "
            "own: pass its store (--source)"
        )
    catalog = HRRR(variables=sim_variables("sfc"))
    lat, lon = lats_lons()
    times = np.array([np.datetime64(first_time + timedelta(hours=h), "ns") for h in range(hours)])
    template = analysis_template(
        catalog.variables,
        ("sfc",),
        times=times,
        grid={"latitude": lat.astype("float64"), "longitude": lon.astype("float64")},
        attrs={"title": "simulated HRRR analysis (virtual)", "source": "toolkit.virtual.simulate"},
    )
    return Dataset(
        "sim-hrrr-analysis",
        template,
        GribSource(catalog, source_store, ("sfc",)),
        RepoSettings(split),
        LatestCycles(3, 1),
        Analysis(stat_lead_hours=1),
        title="simulated HRRR analysis (virtual)",
        min_present_fraction=(0.5, 1.0),
    )
