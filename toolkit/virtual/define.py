"""Your own GRIB2 archive as a virtual dataset, in one short module and no subclassing.

    DATASET = grib_forecast("mymodel", source=..., key=..., variables=[variable(...)], ...)

then `toolkit virtual backfill mymodule:DATASET --repo ...` (see docs/virtual.md). Every file
needs a wgrib2-style `.idx` beside it (`<key>.idx`); the catalog says which index records
(element, level) become which variables, so files may carry much more than you take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.dataset import Dataset, LatestCycles, RepoSettings
from toolkit.virtual.datasets.common import (
    check_inits,
    forecast_template,
    global_attrs,
    grid_mapping,
    latlon_crs_attrs,
)
from toolkit.virtual.source import GribSource
from toolkit.virtual.sources.noaa import GribVariable, KnownMissing, Member, NoaaSource

__all__ = ["Dataset", "GribVariable", "KnownMissing", "grib_forecast", "latlon_crs", "variable"]

FILE_TYPE = "grib2"  # the one file type of an archive that has one file per (init, lead)


def variable(
    name: str,
    element: str,
    level: str,
    *,
    step_type: str = "instant",
    period_hours: int | None = None,
    levels: Sequence[float] = (),
    file_type: str = FILE_TYPE,
) -> GribVariable:
    """One variable: the index records spelled `element`:`level` (`level` may hold
    ``{level:g}`` with `levels` for a vertical group, e.g. ``"{level:g} mb"``); `step_type`
    "accum"/"avg"/"max"/"min" with `period_hours` for statistics (None: since init)."""
    return GribVariable(
        name, element, level, file_type, step_type, period_hours, tuple(float(x) for x in levels)
    )


def latlon_crs(earth_radius: float = 6371229.0) -> dict[str, Any]:
    """A regular latitude/longitude grid on a sphere of `earth_radius` metres (NCEP's by
    default) as `crs=`: CF grid-mapping attributes plus its WKT."""
    return latlon_crs_attrs(earth_radius)


def grib_forecast(
    name: str,
    *,
    source: str | storage.Store,
    key: str,
    variables: Sequence[GribVariable],
    grid: Mapping[str, np.ndarray],
    first_init: datetime,
    end: datetime,
    every_hours: int,
    leads_hours: Iterable[int],
    members: Sequence[Member] = (None,),
    member_labels: Sequence[Any] | None = None,
    file_types: Sequence[str] = (FILE_TYPE,),
    crs: Mapping[str, Any] | None = None,
    split: int | Mapping[str | None, int] = 1000,
    update_cycles: int = 2,
    known_missing: Sequence[KnownMissing] = (),
    title: str = "",
    store_options: Mapping[str, Any] | None = None,
    allow_all_nan_vars: Sequence[str] = (),
    min_present_fraction: Sequence[float] = (1.0,),
    expected_latency_hours: float | None = None,
    attrs: Mapping[str, Any] | None = None,
    grid_relative_winds: bool = False,
) -> Dataset:
    """A forecast archive: one file per (init, lead[, member][, file type]) at `key`.

    `key` is a format string over `init` (datetime), `lead` (whole hours), `file_type` and
    `member`, relative to `source` (a URL or path; `store_options` as for any store, e.g.
    region, endpoint, anonymous). `grid` is the grid's coordinates in the order the messages
    scan them (e.g. latitude then longitude); inits run `first_init` .. `end` (exclusive)
    every `every_hours`. An update fire takes the `update_cycles` newest cycles.
    `allow_all_nan_vars` names variables validation lets decode entirely to NaN;
    `min_present_fraction` are its completeness tiers (newest position first, the last 1.0);
    `expected_latency_hours` how old the newest data may be at a fire (default: the window).

    Variables get their CF attributes from their element (`toolkit.virtual.cf`); `crs` (CF
    grid-mapping attributes, e.g. `latlon_crs()`) gains its WKT and a `spatial_ref` variable;
    `attrs` (e.g. institution, license) join the root's; `grid_relative_winds` says u/v follow
    a projected grid's axes.
    """
    check_inits(name, first_init, end, every_hours, (every_hours,))
    members = tuple(members)
    catalog = NoaaSource(
        bucket="",
        variables=tuple(variables),
        known_missing=tuple(known_missing),
        name=name,
        file_types=tuple(file_types),
        key_format=key,
    )
    store = (
        source
        if isinstance(source, storage.Store)
        else storage.open_store(source, **dict(store_options or {}))
    )
    inits = np.arange(
        np.datetime64(first_init, "ns"), np.datetime64(end, "ns"), np.timedelta64(every_hours, "h")
    )
    leads = np.array(sorted(set(leads_hours)), dtype="timedelta64[h]").astype("timedelta64[ns]")
    labels = None if member_labels is None else tuple(member_labels)
    template = forecast_template(
        catalog.variables,
        catalog.file_types,
        inits=inits,
        leads=leads,
        grid=grid,
        members=None if members == (None,) else np.array(labels or [str(m) for m in members]),
        crs=None if crs is None else grid_mapping(crs),
        attrs=global_attrs(
            title=title or name, source=store.url, grid=grid, crs=crs, start=inits,
            **dict(attrs or {}),
        ),
        grid_relative_winds=grid_relative_winds,
    )  # fmt: skip
    if labels is None and members != (None,):
        labels = tuple(str(m) for m in members)
    return Dataset(
        name,
        template,
        GribSource(catalog, store, catalog.file_types, tuple(members), labels),
        RepoSettings(split),
        LatestCycles(update_cycles, every_hours),
        title=title or name,
        allow_all_nan_vars=tuple(allow_all_nan_vars),
        min_present_fraction=tuple(min_present_fraction),
        expected_latency=None
        if expected_latency_hours is None
        else np.timedelta64(int(expected_latency_hours * 3600), "s").astype("timedelta64[ns]"),
    )
