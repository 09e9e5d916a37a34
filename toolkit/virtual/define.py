"""Your own GRIB2 archive as a virtual dataset, in one short module and no subclassing.

    DATASET = grib_forecast("mymodel", source=..., key=..., variables=[variable(...)], ...)

or, the same definition as a few values,

    DATASET = forecast("mymodel", source=Source(...), variables=[...], grid=Grid(...),
                       schedule=Schedule(...))

then `toolkit virtual backfill mymodule:DATASET --repo ...` (see docs/how-to/own-dataset.md). A file's
messages are found as `index=` says: a wgrib2 `.idx` beside it (`<key>.idx`, the default),
ECMWF's `.index`, or the messages' own sections ("scan", "whole"); the catalog says which
records (element, level, in wgrib2's spelling) become which variables, so files may carry
much more than you take.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

import numpy as np

from toolkit import storage
from toolkit.virtual.builtin.common import (
    Checks,
    Grid,
    Schedule,
    forecast_dataset,
    grid_mapping,
    latlon_crs_attrs,
)
from toolkit.virtual.dataset import Dataset, RepoSettings
from toolkit.virtual.grib.kinds import check_kind
from toolkit.virtual.gribsource import GribSource
from toolkit.virtual.sources.noaa import GribVariable, KnownMissing, Member, NoaaSource

__all__ = [
    "Checks",
    "Dataset",
    "GribVariable",
    "Grid",
    "KnownMissing",
    "Schedule",
    "Source",
    "forecast",
    "grib_forecast",
    "latlon_crs",
    "variable",
]

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
    at_lead_zero: bool = False,
) -> GribVariable:
    """One variable: the index records spelled `element`:`level` (`level` may hold
    ``{level:g}`` with `levels` for a vertical group, e.g. ``"{level:g} mb"``); `step_type`
    "accum"/"avg"/"max"/"min" with `period_hours` for statistics (None: since init);
    `at_lead_zero` when the source publishes a statistic at lead 0 too (ECMWF's zero field)."""
    return GribVariable(
        name,
        element,
        level,
        file_type,
        step_type,
        period_hours,
        tuple(float(x) for x in levels),
        at_lead_zero=at_lead_zero,
    )


def latlon_crs(earth_radius: float = 6371229.0) -> dict[str, Any]:
    """A regular latitude/longitude grid on a sphere of `earth_radius` metres (NCEP's by
    default) as `crs=`: CF grid-mapping attributes plus its WKT."""
    return latlon_crs_attrs(earth_radius)


@dataclass(frozen=True)
class Source:
    """Where the files are: `location` (a URL or path, or an open `Store`; `store_options` as
    for any store, e.g. region, endpoint, anonymous) and each file's `key`, a format string
    over `init` (datetime), `lead` (whole hours), `file_type` and `member`, relative to
    `location`. One file per `(init, lead[, member][, file type])` of `file_types` and
    `members` (labelled `member_labels`, or the members as strings); `known_missing` records
    are not expected. `index` says how each file's messages are found: "wgrib2" (a `.idx`
    beside it), "ecmwf" (ECMWF's `.index`), "scan" (read from the messages themselves) or
    "whole" (one message per object); see `toolkit.virtual.grib.kinds`. `discovery` says how
    files are found: "list" (a listing per directory) or "probe" (a HEAD per expected file:
    HTTP servers, buckets without LIST)."""

    location: str | storage.Store
    key: str
    file_types: tuple[str, ...] = (FILE_TYPE,)
    members: tuple[Member, ...] = (None,)
    member_labels: tuple[Any, ...] | None = None
    known_missing: tuple[KnownMissing, ...] = ()
    store_options: Mapping[str, Any] | None = None
    index: str = "wgrib2"
    discovery: str = "list"

    def __post_init__(self) -> None:
        check_kind(self.index, f"source {self.key!r}")
        for name in ("file_types", "members", "known_missing"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.member_labels is not None:
            object.__setattr__(self, "member_labels", tuple(self.member_labels))

    def files(self, name: str, variables: Sequence[GribVariable]) -> GribSource:
        """The `GribSource` of dataset `name`: a catalog of `variables`, the store opened."""
        catalog = NoaaSource(
            bucket="",
            variables=tuple(variables),
            known_missing=self.known_missing,
            name=name,
            file_types=self.file_types,
            key_format=self.key,
            index=self.index,
            discovery=self.discovery,
        )
        store = storage.open_store(self.location, **dict(self.store_options or {}))
        labels = self.member_labels
        if labels is None and self.members != (None,):
            labels = tuple(str(m) for m in self.members)
        return GribSource(catalog, store, catalog.file_types, self.members, labels)


def forecast(
    name: str,
    *,
    source: Source,
    variables: Sequence[GribVariable],
    grid: Grid,
    schedule: Schedule,
    title: str = "",
    attrs: Mapping[str, Any] | None = None,
    split: int | Mapping[str | None, int] | None = 1000,
    checks: Checks = Checks(),
) -> Dataset:
    """A forecast archive from its values: `source` (where the files are), `variables` (which
    index records become which arrays), `grid`, `schedule` (inits, leads, update window).

    `grid.crs` (CF grid-mapping attributes, e.g. `latlon_crs()`) gains its WKT and a
    `spatial_ref` variable; `attrs` (e.g. institution, license) join the root's; `split` sizes
    manifests along `init_time` (as `RepoSettings.split`); `checks` are validation's terms.
    Variables get their CF attributes from their element (`toolkit.virtual.grib_params`).
    """
    schedule.inits(name)  # the schedule's errors come before the store is opened
    if grid.crs is not None:
        grid = dataclasses.replace(grid, crs=grid_mapping(grid.crs))
    return forecast_dataset(
        name,
        grid,
        source.files(name, variables),
        variables,
        schedule,
        title=title,
        attrs=attrs,
        settings=RepoSettings(split),
        checks=checks,
    )


class _Needed(TypedDict):
    source: str | storage.Store
    key: str
    variables: Sequence[GribVariable]
    grid: Mapping[str, np.ndarray]
    first_init: datetime
    end: datetime
    every_hours: int
    leads_hours: Iterable[int]


class GribForecastKeywords(_Needed, total=False):
    """`grib_forecast`'s keywords, in their documented order (the first eight required)."""

    members: Sequence[Member]
    member_labels: Sequence[Any] | None
    file_types: Sequence[str]
    crs: Mapping[str, Any] | None
    split: int | Mapping[str | None, int]
    update_cycles: int
    known_missing: Sequence[KnownMissing]
    title: str
    store_options: Mapping[str, Any] | None
    allow_all_nan_vars: Sequence[str]
    min_present_fraction: Sequence[float]
    expected_latency_hours: float | None
    attrs: Mapping[str, Any] | None
    grid_relative_winds: bool
    index: str
    discovery: str


_DEFAULTS: dict[str, Any] = {
    "members": (None,),
    "member_labels": None,
    "file_types": (FILE_TYPE,),
    "crs": None,
    "split": 1000,
    "update_cycles": 2,
    "known_missing": (),
    "title": "",
    "store_options": None,
    "allow_all_nan_vars": (),
    "min_present_fraction": (1.0,),
    "expected_latency_hours": None,
    "attrs": None,
    "grid_relative_winds": False,
    "index": "wgrib2",
    "discovery": "list",
}


def grib_forecast(name: str, **keywords: Unpack[GribForecastKeywords]) -> Dataset:
    """A forecast archive: one file per `(init, lead[, member][, file type])` at `key`.

    `key` is a format string over `init` (datetime), `lead` (whole hours), `file_type` and
    `member`, relative to `source` (a URL or path; `store_options` as for any store, e.g.
    region, endpoint, anonymous). `index` is how each file's messages are found: "wgrib2"
    (default: `KEY.idx`), "ecmwf" (ECMWF's `.index`), "scan" (no sidecar) or "whole" (one
    message per object); `discovery` how files are found: "list" (default) or "probe" (a
    HEAD per file the window expects, for an `https://` source or a bucket without LIST). `grid` is the grid's coordinates in the order the messages
    scan them (e.g. latitude then longitude); inits run `first_init` .. `end` (exclusive)
    every `every_hours`. An update fire takes the `update_cycles` newest cycles.
    `allow_all_nan_vars` names variables validation lets decode entirely to NaN;
    `min_present_fraction` are its completeness tiers (newest position first, the last 1.0);
    `expected_latency_hours` how old the newest data may be at a fire (default: the window).

    Variables get their CF attributes from their element (`toolkit.virtual.grib_params`); `crs` (CF
    grid-mapping attributes, e.g. `latlon_crs()`) gains its WKT and a `spatial_ref` variable;
    `attrs` (e.g. institution, license) join the root's; `grid_relative_winds` says u/v follow
    a projected grid's axes.

    The keyword form of `forecast`: the keywords go to its `Source`, `Grid`, `Schedule` and
    `Checks` values unchanged, so both forms build the same dataset.
    """
    try:
        bound = _SIGNATURE.bind(name, **keywords)
    except TypeError as err:
        raise TypeError(f"grib_forecast(): {err}") from None
    bound.apply_defaults()
    k = bound.arguments
    return forecast(
        name,
        source=Source(
            k["source"],
            k["key"],
            file_types=k["file_types"],
            members=k["members"],
            member_labels=k["member_labels"],
            known_missing=k["known_missing"],
            store_options=k["store_options"],
            index=k["index"],
            discovery=k["discovery"],
        ),
        variables=k["variables"],
        grid=Grid(k["grid"], k["crs"], k["grid_relative_winds"]),
        schedule=Schedule(
            k["first_init"],
            k["end"],
            k["every_hours"],
            k["leads_hours"],
            update_cycles=k["update_cycles"],
        ),
        title=k["title"],
        attrs=k["attrs"],
        split=k["split"],
        checks=Checks(
            k["allow_all_nan_vars"], k["min_present_fraction"], k["expected_latency_hours"]
        ),
    )


def _signature() -> inspect.Signature:
    """The keyword form as help() and `inspect.signature` show it: `name`, then each keyword
    of `GribForecastKeywords` with its annotation as written and its default."""
    params = [inspect.Parameter("name", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str")]
    for key, hint in GribForecastKeywords.__annotations__.items():
        params.append(
            inspect.Parameter(
                key,
                inspect.Parameter.KEYWORD_ONLY,
                default=_DEFAULTS.get(key, inspect.Parameter.empty),
                annotation=getattr(hint, "__forward_arg__", hint),
            )
        )
    return inspect.Signature(params, return_annotation="Dataset")


_SIGNATURE = grib_forecast.__signature__ = _signature()  # type: ignore[attr-defined]
