"""The simulated GFS-shaped virtual dataset and the `toolkit demo` virtual job.

`SimGfs` is a complete dataset over `toolkit.virtual.simulate`'s archive: the same code path a
real NOAA dataset takes (listing discovery, `.idx` + header check, catalog match), pointed at a
local or S3-emulator store. `demo()` backfills it with process workers, then runs an update
while the simulator publishes new files.
"""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.plan import Report
from toolkit.virtual import repo as R
from toolkit.virtual.job import Template, TemplateVar
from toolkit.virtual.noaa_job import NoaaVirtualRegionJob
from toolkit.virtual.sources.noaa import GFS, NoaaSource

_TEMPLATES: dict[tuple[Any, ...], Template] = {}


@dataclass(frozen=True)
class SimGfs(NoaaVirtualRegionJob):
    """Simulated GFS-shaped forecast over toolkit.virtual.simulate's archive (demo, tests).

    init_time (append, every `freq_hours`) x lead_time x [level] x latitude x longitude.
    """

    first_init: datetime = datetime(2025, 8, 1)
    inits: int = 4
    freq_hours: int = 6
    lead_hours: tuple[int, ...] = (0, 3, 6)
    split: int = 8

    def __post_init__(self) -> None:
        if self.source_store is None:
            raise ValueError(
                "dataset 'sim-gfs' reads a simulator archive and has no bucket of its own: "
                "pass its store (--source)"
            )

    def source(self) -> NoaaSource:
        from toolkit.virtual.simulate import sim_variables

        assert self.source_store is not None
        return GFS(bucket=self.source_store.url, variables=sim_variables("pgrb2"))

    def template(self) -> Template:
        key = (self.first_init, self.inits, self.freq_hours, self.lead_hours)
        if key not in _TEMPLATES:
            _TEMPLATES[key] = _sim_template(*key)
        return _TEMPLATES[key]

    def virtual_config(self) -> R.VirtualConfig:
        assert self.source_store is not None
        return R.VirtualConfig(
            [R.container_for(self.source_store)],
            R.manifest_append_dim_split(
                "init_time", {"^/temperature$": self.split // 2 or 1, None: self.split}
            ),
        )

    def operational_update_window(self, fire_time: Any) -> tuple[Any, Any]:
        """The two newest cycles up to the scheduled fire (inclusive)."""
        fire = np.datetime64(fire_time, "ns")
        return fire - np.timedelta64(2 * self.freq_hours, "h"), fire + np.timedelta64(1, "ns")


def _sim_template(first: datetime, n: int, freq: int, leads: tuple[int, ...]) -> Template:
    from toolkit.virtual.simulate import SIM_LEVELS, lats_lons, sim_variables

    lat, lon = lats_lons()
    inits = np.array([np.datetime64(first + timedelta(hours=freq * i), "ns") for i in range(n)])
    coords = {
        "init_time": inits,
        "lead_time": np.array([np.timedelta64(h, "h") for h in leads]).astype("timedelta64[ns]"),
        "level": np.array(SIM_LEVELS, dtype="float64"),
        "latitude": lat.astype("float64"),
        "longitude": lon.astype("float64"),
    }
    variables = {}
    for v in sim_variables("pgrb2"):
        dims = (
            ("init_time", "lead_time")
            + (("level",) if v.is_vertical else ())
            + ("latitude", "longitude")
        )
        variables[v.name] = TemplateVar(
            dims, "float32", {"step_type": v.step_type, "grib_element": v.element}
        )
    return Template(
        "init_time",
        coords,
        variables,
        ("latitude", "longitude"),
        attrs={"title": "simulated GFS (virtual)", "source": "toolkit.virtual.simulate"},
    )


def demo(
    root: pathlib.Path,
    cluster: Any = None,
    executor: str = "dask",
    progress: Callable[[str, int, int], None] | None = None,
) -> list[Report]:
    """Backfill the first cycles with process workers, then update while new files publish."""
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.simulate import make_archive
    from toolkit.virtual.update import update

    root = pathlib.Path(root)
    src = storage.open_store(str(root / "virtual-source"))
    archive = make_archive(
        src,
        kind="gfs",
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
        leads=[0, 3, 6],
        publish=False,
    )
    files = archive.files()
    first = [f for f in files if f.init < datetime(2025, 8, 1, 12)]
    archive.publish(first)
    ds = SimGfs(R.RepoRef(storage.open_store(str(root / "virtual-repo"))), source_store=src)
    reports = [
        backfill(
            ds,
            start=np.datetime64("2025-08-01T00", "ns"),
            end=np.datetime64("2025-08-01T12", "ns"),
            workers=4,
            cluster=cluster,
            executor=executor,
            progress=progress,
        )
    ]
    rest = [f for f in files if f not in first]
    publisher = threading.Thread(target=lambda: [archive.publish(f) for f in rest])
    publisher.start()
    try:
        reports.append(
            update(
                ds,
                fire_time=np.datetime64("2025-08-01T18", "ns"),
                deadline_seconds=60,
            )
        )
    finally:
        publisher.join()
    return reports
