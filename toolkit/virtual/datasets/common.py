"""What forecast datasets share: the template builder, grids and CRS attributes, the checks.

A dataset module states its facts (catalog, file types, cycle spacing, leads, grid, manifest
split sizes) and calls `forecast(...)`, which checks them and returns the `Dataset` value:
the template is built once, when the value is, and travels with it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual import cf
from toolkit.virtual.dataset import AllLeads, Dataset, LatestCycles, RepoSettings
from toolkit.virtual.source import GribSource
from toolkit.virtual.sources.noaa import GribVariable, Member, NoaaSource
from toolkit.virtual.template import VALID_TIME, Template, TemplateVar

__all__ = [
    "EARTH_RADIUS",
    "NOAA_REGION",
    "forecast",
    "forecast_template",
    "global_attrs",
    "grid_mapping",
    "hour_range",
    "latlon_0p25",
    "latlon_crs_attrs",
    "noaa_store",
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

    Each variable carries its CF attributes (`toolkit.virtual.cf`) and `valid_time` as a
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
            **cf.variable_attrs(
                v.element, v.level, v.step_type, v.period_hours,
                grid_relative_winds=grid_relative_winds,
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
    coord_attrs = {d: cf.coord_attrs(d) for d in [*coords, VALID_TIME] if cf.coord_attrs(d)}
    if "level" in coords:
        spelled = {v.level for v in variables if v.is_vertical}
        coord_attrs["level"] = dict(level_attrs or cf.level_attrs(spelled))
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
    coord_attrs[valid_dim] = cf.coord_attrs("time")
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
    model: str = "",
    grid_relative_winds: bool = False,
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
        attrs=global_attrs(
            title=title,
            source=noaa_source(model or catalog.name, catalog.bucket),
            grid=grid,
            crs=crs,
            start=inits,
            institution=NCEP,
            license=NOAA_LICENSE,
            file_types=list(file_types),
            virtual="chunks are byte ranges of the source GRIB2 messages",
        ),
        grid_relative_winds=grid_relative_winds,
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
