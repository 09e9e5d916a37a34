"""What forecast datasets share: the template builder, grids and CRS attributes, the checks.

A dataset module states its facts (catalog, file types, cycle spacing, leads, grid, manifest
split sizes) and calls `forecast(...)`, which checks them and returns the `Dataset` value:
the template is built once, when the value is, and travels with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.dataset import AllLeads, Dataset, LatestCycles, RepoSettings
from toolkit.virtual.source import GribSource
from toolkit.virtual.sources.noaa import GribVariable, Member, NoaaSource
from toolkit.virtual.template import Template, TemplateVar

__all__ = [
    "EARTH_RADIUS",
    "NOAA_REGION",
    "forecast",
    "forecast_template",
    "hour_range",
    "latlon_0p25",
    "latlon_crs_attrs",
    "noaa_store",
]

NOAA_REGION = "us-east-1"
EARTH_RADIUS = 6371229.0  # the sphere NCEP models and their GRIB grids use

COORD_ATTRS: dict[str, dict[str, Any]] = {
    "init_time": {"long_name": "forecast initialization time"},
    "lead_time": {"long_name": "forecast lead time"},
    "latitude": {"units": "degrees_north", "standard_name": "latitude"},
    "longitude": {"units": "degrees_east", "standard_name": "longitude"},
    "level": {"units": "hPa", "long_name": "isobaric level"},
    "ensemble_member": {"long_name": "ensemble member ('mean': ensemble mean)"},
    "x": {"units": "m", "standard_name": "projection_x_coordinate"},
    "y": {"units": "m", "standard_name": "projection_y_coordinate"},
}


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


def latlon_crs_attrs() -> dict[str, Any]:
    return {
        "grid_mapping_name": "latitude_longitude",
        "semi_major_axis": EARTH_RADIUS,
        "semi_minor_axis": EARTH_RADIUS,
        "inverse_flattening": 0.0,
        "longitude_of_prime_meridian": 0.0,
        "spatial_ref": f"+proj=longlat +R={EARTH_RADIUS:g} +no_defs",
    }


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
) -> Template:
    """init_time (append) x lead_time x [ensemble_member] x [level] x grid, one array per
    catalog variable (vertical groups get `level`), plus a `spatial_ref` grid-mapping scalar."""
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
            "step_type": v.step_type,
            "grib_element": v.element,
            "grib_index_level": v.level,
        }
        if crs is not None:
            a["grid_mapping"] = "spatial_ref"
        if v.period_hours is not None:
            a["statistic_period_hours"] = v.period_hours
        out[v.name] = TemplateVar(dims, "float32", a)
    if crs is not None:
        out["spatial_ref"] = TemplateVar((), "int32", dict(crs))
    coord_attrs = {d: COORD_ATTRS[d] for d in coords if d in COORD_ATTRS}
    if level_attrs is not None and "level" in coords:
        coord_attrs["level"] = dict(level_attrs)
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
) -> Template:
    """`valid_dim` (append) x [level] x grid: the forecast template without its init and lead
    dims, each position one valid time."""
    t = forecast_template(
        variables, file_types, inits=times, leads=np.array([], "timedelta64[ns]"), grid=grid,
        crs=crs, attrs=attrs,
    )  # fmt: skip
    coords = {(valid_dim if d == "init_time" else d): v for d, v in t.coords.items()}
    del coords["lead_time"]
    out = {
        n: TemplateVar(
            tuple(valid_dim if d == "init_time" else d for d in v.dims if d != "lead_time"),
            v.dtype,
            v.attrs,
        )
        for n, v in t.variables.items()
    }
    coord_attrs = {d: a for d, a in t.coord_attrs.items() if d not in ("init_time", "lead_time")}
    coord_attrs[valid_dim] = {"long_name": "valid time (analysis)"}
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


def forecast(
    name: str,
    catalog: NoaaSource,
    *,
    title: str,
    source_store: storage.Store | None,
    file_types: tuple[str, ...],
    first_init: datetime,
    append_dim_end: datetime | None,
    init_freq_hours: int,
    allowed_init_freq: Sequence[int],
    lead_times: np.ndarray,
    grid: Mapping[str, np.ndarray],
    crs: Mapping[str, Any],
    split: Any,
    members: tuple[Member, ...] = (None,),
    member_labels: tuple[Any, ...] | None = None,
    leads: Any = None,
    update_cycles: int = 3,
    publish_hours: int = 6,
) -> Dataset:
    """A NOAA forecast on its NODD bucket (or `source_store`: a mirror, a local copy).

    An update fire takes the `update_cycles` newest cycles and validates them: the newest
    cycle with refs may still be publishing (tier 0.0), every older one must be whole, and the
    newest cycle with data may be one cycle plus `publish_hours` (the provider's time to a
    cycle's first files) old at the fire.

    `append_dim_end` (exclusive) defaults to the cycle after the current one, resolved here
    once, so every copy of the dataset shipped to workers agrees on the template.
    """
    end = append_dim_end or next_cycle(init_freq_hours)
    check_inits(name, first_init, end, init_freq_hours, allowed_init_freq)
    unknown = set(file_types) - set(catalog.file_types)
    if unknown:
        raise ValueError(
            f"{name}: unknown file types {sorted(unknown)} (the source has {catalog.file_types})"
        )
    step = np.timedelta64(init_freq_hours, "h")
    inits = np.arange(np.datetime64(first_init, "ns"), np.datetime64(end, "ns"), step).astype(
        "datetime64[ns]"
    )
    variables = carried(catalog, file_types)
    template = forecast_template(
        variables,
        file_types,
        inits=inits,
        leads=lead_times,
        grid=grid,
        members=None if member_labels is None else np.array(member_labels),
        crs=crs,
        attrs={
            "title": title,
            "source": catalog.bucket,
            "file_types": list(file_types),
            "virtual": "chunks are byte ranges of the source GRIB2 messages",
        },
    )
    store = source_store or noaa_store(catalog.bucket)
    return Dataset(
        name,
        template,
        GribSource(catalog, store, file_types, members, member_labels),
        RepoSettings(split, home=catalog.bucket, home_region=NOAA_REGION),
        LatestCycles(update_cycles, init_freq_hours),
        leads or AllLeads(),
        title,
        min_present_fraction=(0.0, 1.0),
        expected_latency=np.timedelta64(init_freq_hours + publish_hours, "h"),
    )
