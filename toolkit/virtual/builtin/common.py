"""What forecast datasets share: the template builder, grids and CRS attributes, the checks.

A forecast is stated as a few values: its `Grid`, its source (a `GribSource`), its variables,
its `Schedule` (inits, leads, update window) and its `Checks`; `forecast_dataset(...)` checks
them and returns the `Dataset` value, whose template is built once, when the value is, and
travels with it. A NOAA dataset module adds its catalog and bucket through `noaa_forecast`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual import grib_params
from toolkit.virtual.dataset import AllLeads, Dataset, LatestCycles, RepoSettings
from toolkit.virtual.gribsource import GribSource
from toolkit.virtual.sources.noaa import GribVariable, Member, NoaaSource
from toolkit.virtual.template import VALID_TIME, Template, TemplateVar

__all__ = [
    "EARTH_RADIUS",
    "NOAA_REGION",
    "Checks",
    "Grid",
    "Schedule",
    "forecast_dataset",
    "forecast_template",
    "global_attrs",
    "grid_mapping",
    "hour_range",
    "latlon_0p25",
    "latlon_crs_attrs",
    "noaa_forecast",
    "noaa_store",
    "on_nodd",
]

NOAA_REGION = "us-east-1"
EARTH_RADIUS = 6371229.0  # the sphere NCEP models and their GRIB grids use

NCEP = "NOAA National Centers for Environmental Prediction (NCEP)"
NOAA_LICENSE = (
    "Public domain: NOAA data from the NOAA Open Data Dissemination program (NODD), "
    "free to use without restriction"
)


def noaa_source(model: str, bucket: str) -> str:
    """The root `source` attribute: the model, and the bucket whose GRIB2 bytes are read."""
    return f"{model}; GRIB2 files read in place from {bucket} (NOAA Open Data Dissemination)"


def noaa_store(bucket: str) -> storage.Store:
    """The NODD bucket, read anonymously (the buckets are public, in us-east-1)."""
    return storage.open_store(bucket, region=NOAA_REGION, anonymous=True)


def hour_range(start: int, stop: int, step: int = 1) -> np.ndarray:
    """Lead times start..stop (inclusive) every `step` hours, as timedelta64[ns]."""
    return np.arange(start, stop + 1, step).astype("timedelta64[h]").astype("timedelta64[ns]")


def latlon_0p25() -> dict[str, np.ndarray]:
    """The NCEP global 0.25° grid as the GRIB messages scan it: 90 -> -90, 0 -> 359.75."""
    return {
        "latitude": 90.0 - 0.25 * np.arange(721, dtype="float64"),
        "longitude": 0.25 * np.arange(1440, dtype="float64"),
    }


def latlon_0p50() -> dict[str, np.ndarray]:
    """The NCEP global 0.5° grid as the GRIB messages scan it: 90 -> -90, 0 -> 359.5."""
    return {
        "latitude": 90.0 - 0.5 * np.arange(361, dtype="float64"),
        "longitude": 0.5 * np.arange(720, dtype="float64"),
    }


def latlon_crs_attrs(earth_radius: float = EARTH_RADIUS) -> dict[str, Any]:
    """A regular latitude/longitude grid on a sphere (NCEP's by default), as `spatial_ref`."""
    return grid_mapping(
        {
            "grid_mapping_name": "latitude_longitude",
            "semi_major_axis": earth_radius,
            "semi_minor_axis": earth_radius,
            "inverse_flattening": 0.0,
            "longitude_of_prime_meridian": 0.0,
        }
    )


def grid_mapping(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """CF grid-mapping attributes plus the same CRS as WKT2 (`crs_wkt`, and `spatial_ref` for
    GDAL and rioxarray), from pyproj, so every reader finds the CRS the way it looks for one."""
    cf_only = {k: v for k, v in attrs.items() if k not in ("crs_wkt", "spatial_ref")}
    wkt = _wkt(json.dumps(cf_only, sort_keys=True))
    return {**cf_only, "crs_wkt": wkt, "spatial_ref": wkt}


@functools.cache
def _wkt(cf_json: str) -> str:
    """pyproj takes most of a second over a projection's CF attributes: once per process."""
    import pyproj

    return pyproj.CRS.from_cf(json.loads(cf_json)).to_wkt()


def domain_attrs(grid: Mapping[str, np.ndarray], crs: Mapping[str, Any] | None) -> dict[str, Any]:
    """ACDD `geospatial_*` bounds of the grid: its coordinates' range on a latitude/longitude
    grid, the projected grid's edge taken back to latitude/longitude otherwise."""
    if "latitude" in grid and "longitude" in grid:
        lat, lon = np.asarray(grid["latitude"]), np.asarray(grid["longitude"])
    elif crs is not None and "x" in grid and "y" in grid:
        import pyproj

        x, y = np.asarray(grid["x"]), np.asarray(grid["y"])
        ex = np.concatenate([x, np.full(len(y), x[-1]), x[::-1], np.full(len(y), x[0])])
        ey = np.concatenate([np.full(len(x), y[0]), y, np.full(len(x), y[-1]), y[::-1]])
        proj = pyproj.CRS.from_wkt(grid_mapping(crs)["crs_wkt"])
        to_geo = pyproj.Transformer.from_crs(proj, proj.geodetic_crs, always_xy=True)
        lon, lat = to_geo.transform(ex, ey)
    else:
        return {}
    return {
        "geospatial_lat_min": float(np.min(lat)),
        "geospatial_lat_max": float(np.max(lat)),
        "geospatial_lat_units": "degrees_north",
        "geospatial_lon_min": float(np.min(lon)),
        "geospatial_lon_max": float(np.max(lon)),
        "geospatial_lon_units": "degrees_east",
    }


def global_attrs(
    *,
    title: str,
    source: str,
    grid: Mapping[str, np.ndarray],
    crs: Mapping[str, Any] | None,
    start: np.ndarray,
    institution: str = "",
    license: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """Root attributes a catalog or a CF reader shows: what the dataset is, where its bytes
    come from, under which terms, and its time and space domain."""
    out: dict[str, Any] = {"title": title, "source": source}
    if institution:
        out["institution"] = institution
    if license:
        out["license"] = license
    out["Conventions"] = "CF-1.10"
    out.update(domain_attrs(grid, crs))
    if len(start):
        first = np.datetime64(start[0], "s")
        out["time_coverage_start"] = f"{first}Z"
    out.update(extra)
    return out


def owned(var: GribVariable, file_types: Sequence[str]) -> tuple[float, ...] | bool:
    """The levels of `var` owned by `file_types` (vertical), or whether it is owned (root)."""
    if not var.is_vertical:
        return var.file_type in file_types
    return tuple(lv for lv in var.all_levels() if var.owner(lv) in file_types)


def carried(catalog: NoaaSource, file_types: Sequence[str]) -> list[GribVariable]:
    """The catalog variables `file_types` carry."""
    return [v for v in catalog.variables if owned(v, file_types)]


def forecast_template(
    variables: Sequence[GribVariable],
    file_types: Sequence[str],
    *,
    inits: np.ndarray,
    leads: np.ndarray,
    grid: Mapping[str, np.ndarray],
    members: np.ndarray | None = None,
    crs: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    level_attrs: Mapping[str, Any] | None = None,
    grid_relative_winds: bool = False,
) -> Template:
    """init_time (append) x lead_time x [ensemble_member] x [level] x grid, one array per
    catalog variable (vertical groups get `level`), plus a `spatial_ref` grid-mapping scalar.

    Each variable carries its CF attributes (`toolkit.virtual.grib_params`) and `valid_time` as a
    coordinate; `grid_relative_winds` says the u/v winds follow the grid's axes (HRRR)."""
    grid_dims = tuple(grid)
    coords: dict[str, np.ndarray] = {"init_time": inits, "lead_time": leads}
    if members is not None:
        coords["ensemble_member"] = members
    levels = sorted({lv for v in variables if v.is_vertical for lv in owned(v, file_types)})  # type: ignore[union-attr]
    if levels:
        coords["level"] = np.array(levels, dtype="float64")
    coords.update(grid)
    out: dict[str, TemplateVar] = {}
    for v in variables:
        dims = (
            ("init_time", "lead_time")
            + (("ensemble_member",) if members is not None else ())
            + (("level",) if v.is_vertical else ())
            + grid_dims
        )
        a: dict[str, Any] = {
            **grib_params.variable_attrs(
                v.element, v.level, v.step_type, v.period_hours,
                grid_relative_winds=grid_relative_winds, ecmwf=v.ecmwf, short_name=v.short_name,
            ),
            "step_type": v.step_type,
            "grib_element": v.element,
            "grib_index_level": v.level,
            "coordinates": VALID_TIME,
        }  # fmt: skip
        if crs is not None:
            a["grid_mapping"] = "spatial_ref"
        if v.period_hours is not None:
            a["statistic_period_hours"] = v.period_hours
        out[v.name] = TemplateVar(dims, "float32", a)
    if crs is not None:
        out["spatial_ref"] = TemplateVar((), "int32", dict(crs))
    coord_attrs = {
        d: grib_params.coord_attrs(d) for d in [*coords, VALID_TIME] if grib_params.coord_attrs(d)
    }
    if "level" in coords:
        spelled = {v.level for v in variables if v.is_vertical}
        coord_attrs["level"] = dict(level_attrs or grib_params.level_attrs(spelled))
    return Template("init_time", coords, out, grid_dims, dict(attrs or {}), coord_attrs)


def analysis_template(
    variables: Sequence[GribVariable],
    file_types: Sequence[str],
    *,
    times: np.ndarray,
    grid: Mapping[str, np.ndarray],
    crs: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    valid_dim: str = "time",
    grid_relative_winds: bool = False,
) -> Template:
    """`valid_dim` (append) x [level] x grid: the forecast template without its init and lead
    dims, each position one valid time."""
    t = forecast_template(
        variables, file_types, inits=times, leads=np.array([], "timedelta64[ns]"), grid=grid,
        crs=crs, attrs=attrs, grid_relative_winds=grid_relative_winds,
    )  # fmt: skip
    coords = {(valid_dim if d == "init_time" else d): v for d, v in t.coords.items()}
    del coords["lead_time"]
    out = {
        n: TemplateVar(
            tuple(valid_dim if d == "init_time" else d for d in v.dims if d != "lead_time"),
            v.dtype,
            {k: x for k, x in v.attrs.items() if k != "coordinates"},  # no valid_time: the dim is
        )
        for n, v in t.variables.items()
    }
    coord_attrs = {
        d: a for d, a in t.coord_attrs.items() if d not in ("init_time", "lead_time", VALID_TIME)
    }
    coord_attrs[valid_dim] = grib_params.coord_attrs("time")
    return Template(valid_dim, coords, out, t.grid_dims, t.attrs, coord_attrs)


def cycle_floor(t: np.datetime64, hours: int) -> np.datetime64:
    step = np.timedelta64(hours, "h").astype("timedelta64[ns]").astype("int64")
    ns = np.datetime64(t, "ns").astype("int64")
    return np.datetime64(int(ns - ns % step), "ns")


def check_inits(
    name: str, first: datetime, end: datetime, freq: int, allowed: Sequence[int]
) -> None:
    if freq not in allowed:
        raise ValueError(
            f"{name}: the source cycles every {' or '.join(map(str, allowed))} h, not every "
            f"{freq} h"
        )
    if first.minute or first.second or first.microsecond:
        raise ValueError(f"{name}: first_init must be a whole hour")
    if first.hour % freq:
        raise ValueError(f"{name}: first_init {first:%Y-%m-%dT%H} is not a {freq}-hourly cycle")
    if end <= first:
        raise ValueError(f"{name}: append_dim_end {end} is not after first_init {first}")


def next_cycle(freq: int) -> datetime:
    """The cycle after the current one: the default end of a live dataset's append dim."""
    now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "ns")
    end = cycle_floor(now, freq) + np.timedelta64(freq, "h")
    return end.astype("datetime64[s]").item()


@dataclass(frozen=True, eq=False)
class Grid:
    """The grid: its coordinates in the order the messages scan them (e.g. latitude then
    longitude), its CRS as CF grid-mapping attributes with their WKT (None: no `spatial_ref`),
    and whether u/v winds follow a projected grid's axes (HRRR) rather than east/north."""

    coords: Mapping[str, np.ndarray]
    crs: Mapping[str, Any] | None = None
    grid_relative_winds: bool = False


@dataclass(frozen=True)
class Schedule:
    """When files exist: inits `first_init` .. `end` (exclusive; None: the cycle after the
    current one, resolved when the dataset is built) every `every_hours`, each at
    `leads_hours` (hours, or timedelta64s), of which `published` says which an init publishes
    (`AllLeads`, `ShortCycles`). An update fire takes the `update_cycles` newest cycles.
    `source_every_hours` are the cycle spacings the source publishes (empty: any)."""

    first_init: datetime
    end: datetime | None
    every_hours: int
    leads_hours: Iterable[Any]
    update_cycles: int = 2
    published: Any = field(default_factory=AllLeads)
    source_every_hours: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "leads_hours", tuple(self.leads_hours))  # a generator, once

    def inits(self, name: str) -> np.ndarray:
        """The init times, after checking them (whole hours on the cycle, `end` after
        `first_init`, a spacing the source publishes); `name` prefixes the errors."""
        end = self.end or next_cycle(self.every_hours)
        allowed = self.source_every_hours or (self.every_hours,)
        check_inits(name, self.first_init, end, self.every_hours, allowed)
        step = np.timedelta64(self.every_hours, "h")
        return np.arange(np.datetime64(self.first_init, "ns"), np.datetime64(end, "ns"), step)

    def leads(self) -> np.ndarray:
        """The lead times, sorted and unique, as timedelta64[ns]."""
        hours = np.array(sorted(set(self.leads_hours)), dtype="timedelta64[h]")
        return hours.astype("timedelta64[ns]")


@dataclass(frozen=True)
class Checks:
    """What validation holds the dataset to: the variables that may decode entirely to NaN,
    the completeness tiers (newest position first, the last 1.0), and how old the newest data
    may be at a fire, in hours (None: the update window's span)."""

    allow_all_nan_vars: tuple[str, ...] = ()
    min_present_fraction: tuple[float, ...] = (1.0,)
    expected_latency_hours: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_all_nan_vars", tuple(self.allow_all_nan_vars))
        object.__setattr__(self, "min_present_fraction", tuple(self.min_present_fraction))

    @property
    def expected_latency(self) -> np.timedelta64 | None:
        hours = self.expected_latency_hours
        if hours is None:
            return None
        return np.timedelta64(int(hours * 3600), "s").astype("timedelta64[ns]")


def forecast_dataset(
    name: str,
    grid: Grid,
    source: GribSource,
    variables: Sequence[GribVariable],
    schedule: Schedule,
    *,
    title: str = "",
    attrs: Mapping[str, Any] | None = None,
    settings: RepoSettings | None = None,
    checks: Checks = Checks(),
) -> Dataset:
    """A forecast: one file of `source` per (init, lead[, member][, file type]) at
    `schedule`'s times, on `grid`, one array per variable.

    `attrs` join the root's (its `source` defaults to the store's URL, `title` to `name`).
    The template is built here, once, so every copy shipped to workers agrees on it."""
    inits = schedule.inits(name)
    title = title or name
    members = None
    if source.members != (None,):
        members = np.array(source.member_labels or [str(m) for m in source.members])
    root = {"source": source.store.url, **dict(attrs or {})}
    template = forecast_template(
        variables,
        source.file_types,
        inits=inits,
        leads=schedule.leads(),
        grid=grid.coords,
        members=members,
        crs=grid.crs,
        attrs=global_attrs(title=title, grid=grid.coords, crs=grid.crs, start=inits, **root),
        grid_relative_winds=grid.grid_relative_winds,
    )
    return Dataset(
        name,
        template,
        source,
        settings or RepoSettings(),
        LatestCycles(schedule.update_cycles, schedule.every_hours),
        schedule.published,
        title,
        allow_all_nan_vars=checks.allow_all_nan_vars,
        min_present_fraction=checks.min_present_fraction,
        expected_latency=checks.expected_latency,
    )


def on_nodd(
    catalog: NoaaSource,
    source_store: storage.Store | None,
    file_types: tuple[str, ...],
    members: tuple[Member, ...] = (None,),
    member_labels: tuple[Any, ...] | None = None,
) -> GribSource:
    """The catalog's `file_types` on its NODD bucket, or on `source_store` (a mirror, a local
    copy)."""
    store = source_store or noaa_store(catalog.bucket)
    return GribSource(catalog, store, file_types, members, member_labels)


def noaa_forecast(
    name: str,
    source: GribSource,
    grid: Grid,
    schedule: Schedule,
    *,
    title: str,
    split: Any,
    model: str = "",
    publish_hours: int = 6,
) -> Dataset:
    """A NOAA forecast of the variables `source`'s file types carry, with NOAA's attributes
    and the provider's bucket as the repo's home.

    An update fire validates the cycles it takes: the newest cycle with refs may still be
    publishing (tier 0.0), every older one must be whole, and the newest cycle with data may
    be one cycle plus `publish_hours` (the provider's time to a cycle's first files) old."""
    catalog = source.catalog
    return forecast_dataset(
        name,
        grid,
        source,
        carried(catalog, source.file_types),
        schedule,
        title=title,
        attrs={
            "source": noaa_source(model or catalog.name, catalog.bucket),
            "institution": NCEP,
            "license": NOAA_LICENSE,
            "file_types": list(source.file_types),
            "virtual": "chunks are byte ranges of the source GRIB2 messages",
        },
        settings=RepoSettings(split, home=catalog.bucket, home_region=NOAA_REGION),
        checks=Checks(
            min_present_fraction=(0.0, 1.0),
            expected_latency_hours=schedule.every_hours + publish_hours,
        ),
    )
