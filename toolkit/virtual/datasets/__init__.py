"""The virtual datasets this build knows, by name.

`DATASETS[name](repo, source_store=None, **overrides)` builds the job; `source_store` points
it at a mirror or a local copy instead of the dataset's own bucket (the simulated `sim-gfs`
has no bucket of its own and needs one).
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit.virtual.datasets.gefs import GefsForecast
from toolkit.virtual.datasets.gfs import GfsForecast
from toolkit.virtual.datasets.hrrr import HrrrForecast
from toolkit.virtual.demo import SimGfs
from toolkit.virtual.job import VirtualRegionJob

__all__ = ["DATASETS", "GefsForecast", "GfsForecast", "HrrrForecast"]

DATASETS: dict[str, Callable[..., VirtualRegionJob]] = {
    "hrrr": HrrrForecast,
    "gfs": GfsForecast,
    "gefs": GefsForecast,
    "sim-gfs": SimGfs,
}
