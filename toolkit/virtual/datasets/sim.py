"""The simulated GFS-shaped dataset over `toolkit.virtual.simulate`'s archive (demo, tests).

It takes the path a real NOAA dataset takes (listing discovery, `.idx` + header check,
catalog match), pointed at a local or S3-emulator store.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from toolkit import storage
from toolkit.virtual.dataset import Dataset, LatestCycles, RepoSettings
from toolkit.virtual.datasets.common import forecast_template
from toolkit.virtual.source import GribSource
from toolkit.virtual.sources.noaa import GFS

__all__ = ["sim_gfs"]


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
