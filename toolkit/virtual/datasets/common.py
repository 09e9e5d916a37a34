"""What the real NOAA datasets share: the anonymous bucket store, the template builder, the grid
and CRS attributes, the update window and the Icechunk config.

A dataset module only states its facts (bucket, catalog, file types, cycle spacing, leads,
grid, manifest split sizes); `NoaaDataset` turns them into the template, the containers and
the operational window. Templates are built once per process (and `Template` memoizes its
geometry), so the write loop's label -> position lookups stay cheap on a multi-year append dim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import numpy as np

from toolkit import storage
from toolkit.virtual import repo as R
from toolkit.virtual.job import Template, TemplateVar
from toolkit.virtual.noaa_job import NoaaVirtualRegionJob
from toolkit.virtual.sources.noaa import GribVariable, NoaaSource

__all__ = [
    "NOAA_REGION",
    "MemoTemplate",
    "NoaaDataset",
    "hour_range",
    "latlon_0p25",
    "noaa_store",
]

NOAA_REGION = "us-east-1"
EARTH_RADIUS = 6371229.0  # the sphere NCEP models and their GRIB grids use

_SOURCES: dict[tuple[Any, ...], NoaaSource] = {}
_TEMPLATES: dict[tuple[Any, ...], Template] = {}


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


def latlon_crs_attrs() -> dict[str, Any]:
    return {
        "grid_mapping_name": "latitude_longitude",
        "semi_major_axis": EARTH_RADIUS,
        "semi_minor_axis": EARTH_RADIUS,
        "inverse_flattening": 0.0,
        "longitude_of_prime_meridian": 0.0,
        "spatial_ref": f"+proj=longlat +R={EARTH_RADIUS:g} +no_defs",
        "comment": "fill-valued on purpose: a CRS carrier, no data",
    }


# Kept for callers that still name it: `Template` memoizes its geometry itself now.
MemoTemplate = Template


def _owns(var: GribVariable, file_types: Sequence[str]) -> tuple[float, ...] | bool:
    """The levels of `var` owned by `file_types` (vertical), or whether it is owned (root)."""
    if not var.is_vertical:
        return var.file_type in file_types
    return tuple(lv for lv in var.all_levels() if var.owner(lv) in file_types)


def _floor(t: np.datetime64, hours: int) -> np.datetime64:
    step = np.timedelta64(hours, "h").astype("timedelta64[ns]").astype("int64")
    ns = np.datetime64(t, "ns").astype("int64")
    return np.datetime64(int(ns - ns % step), "ns")


@dataclass(frozen=True)
class NoaaDataset(NoaaVirtualRegionJob):
    """A real NOAA forecast dataset on its NODD bucket.

    `source_store` defaults to the bucket itself (anonymous); pass a mirror or a local copy to
    read from there (a container is registered for it too). `append_dim_end` (exclusive)
    defaults to the cycle after the current one, resolved once at construction so every
    pickled copy of the job agrees on the template.
    """

    first_init: datetime = datetime(2021, 1, 1)
    append_dim_end: datetime | None = None
    source_file_types: tuple[str, ...] | None = None
    init_freq_hours: int = 6

    bucket: ClassVar[str] = ""
    title: ClassVar[str] = ""
    source_cls: ClassVar[type[NoaaSource]] = NoaaSource
    allowed_init_freq: ClassVar[tuple[int, ...]] = (6,)
    update_cycles: ClassVar[int] = 2
    grid_dims: ClassVar[tuple[str, ...]] = ("latitude", "longitude")

    def __post_init__(self) -> None:
        if self.init_freq_hours not in self.allowed_init_freq:
            raise ValueError(
                f"{type(self).__name__}: the source cycles every "
                f"{' or '.join(map(str, self.allowed_init_freq))} h, not every "
                f"{self.init_freq_hours} h"
            )
        if self.source_store is None:
            object.__setattr__(self, "source_store", noaa_store(self.bucket))
        if self.append_dim_end is None:
            now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "ns")
            end = _floor(now, self.init_freq_hours) + np.timedelta64(self.init_freq_hours, "h")
            object.__setattr__(self, "append_dim_end", end.astype("datetime64[s]").item())
        if self.first_init.minute or self.first_init.second or self.first_init.microsecond:
            raise ValueError(f"{type(self).__name__}: first_init must be a whole hour")
        if self.first_init.hour % self.init_freq_hours:
            raise ValueError(
                f"{type(self).__name__}: first_init {self.first_init:%Y-%m-%dT%H} is not a "
                f"{self.init_freq_hours}-hourly cycle"
            )
        assert self.append_dim_end is not None
        if self.append_dim_end <= self.first_init:
            raise ValueError(
                f"{type(self).__name__}: append_dim_end {self.append_dim_end} is not after "
                f"first_init {self.first_init}"
            )
        unknown = set(self.file_types()) - set(self.source().file_types)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown file types {sorted(unknown)} "
                f"(the source has {self.source().file_types})"
            )

    # ---- facts a dataset states ------------------------------------------------------------
    def lead_times(self) -> np.ndarray:
        raise NotImplementedError

    def grid(self) -> Mapping[str, np.ndarray]:
        return latlon_0p25()

    def crs_attrs(self) -> dict[str, Any]:
        return latlon_crs_attrs()

    def member_labels(self) -> np.ndarray | None:
        """The ensemble_member coordinate, or None for a deterministic dataset."""
        return None

    def split_sizes(self) -> int | dict[str | None, int]:
        raise NotImplementedError

    def default_file_types(self) -> tuple[str, ...]:
        return self.source().file_types[:1]

    # ---- derived ---------------------------------------------------------------------------
    def file_types(self) -> tuple[str, ...]:
        return self.source_file_types or self.default_file_types()

    def source(self) -> NoaaSource:
        assert self.source_store is not None
        key = (self.source_cls, self.source_store.url)
        src = _SOURCES.get(key)
        if src is None:
            src = _SOURCES[key] = self.source_cls(bucket=self.source_store.url)
        return src

    def catalog(self) -> list[GribVariable]:
        """The catalog variables the dataset's file types carry."""
        return [v for v in self.source().variables if _owns(v, self.file_types())]

    def inits(self) -> np.ndarray:
        assert self.append_dim_end is not None
        step = np.timedelta64(self.init_freq_hours, "h")
        return np.arange(
            np.datetime64(self.first_init, "ns"), np.datetime64(self.append_dim_end, "ns"), step
        ).astype("datetime64[ns]")

    def template(self) -> Template:
        key = (
            type(self),
            self.first_init,
            self.append_dim_end,
            self.init_freq_hours,
            self.file_types(),
            self.source_store.url if self.source_store else "",
        )
        t = _TEMPLATES.get(key)
        if t is None:
            t = _TEMPLATES[key] = self._build_template()
        return t

    def _build_template(self) -> Template:
        catalog = self.catalog()
        coords: dict[str, np.ndarray] = {
            "init_time": self.inits(),
            "lead_time": self.lead_times(),
        }
        members = self.member_labels()
        if members is not None:
            coords["ensemble_member"] = members
        levels = sorted(
            {lv for v in catalog if v.is_vertical for lv in _owns(v, self.file_types())}  # type: ignore[union-attr]
        )
        if levels:
            coords["level"] = np.array(levels, dtype="float64")
        coords.update(self.grid())
        variables: dict[str, TemplateVar] = {}
        for v in catalog:
            dims = (
                ("init_time", "lead_time")
                + (("ensemble_member",) if members is not None else ())
                + (("level",) if v.is_vertical else ())
                + self.grid_dims
            )
            attrs: dict[str, Any] = {
                "step_type": v.step_type,
                "grib_element": v.element,
                "grib_index_level": v.level,
                "grid_mapping": "spatial_ref",
            }
            if v.period_hours is not None:
                attrs["statistic_period_hours"] = v.period_hours
            variables[v.name] = TemplateVar(dims, "float32", attrs)
        variables["spatial_ref"] = TemplateVar((), "float32", self.crs_attrs())
        assert self.source_store is not None
        return Template(
            "init_time",
            coords,
            variables,
            self.grid_dims,
            attrs={
                "title": self.title,
                "source": self.bucket,
                "file_types": list(self.file_types()),
                "virtual": "chunks are byte ranges of the source GRIB2 messages",
            },
            coord_attrs=self.coord_attrs(),
        )

    def coord_attrs(self) -> dict[str, dict[str, Any]]:
        return {
            "init_time": {"long_name": "forecast initialization time"},
            "lead_time": {"long_name": "forecast lead time"},
            "latitude": {"units": "degrees_north", "standard_name": "latitude"},
            "longitude": {"units": "degrees_east", "standard_name": "longitude"},
            "level": {"units": "hPa", "long_name": "isobaric level"},
            "ensemble_member": {"long_name": "ensemble member ('mean': ensemble mean)"},
        }

    def virtual_config(self) -> R.VirtualConfig:
        """The NODD bucket's container (anonymous, us-east-1), a second one for a mirror or
        local copy the job reads from, and manifests split along init_time."""
        assert self.source_store is not None
        containers = [R.s3_container(self.bucket, region=NOAA_REGION)]
        if self.source_store.url.rstrip("/") != self.bucket.rstrip("/"):
            containers.append(R.container_for(self.source_store))
        return R.VirtualConfig(
            containers, R.manifest_append_dim_split("init_time", self.split_sizes())
        )

    def operational_update_window(self, fire_time: Any) -> tuple[Any, Any]:
        """The `update_cycles` newest cycles at or before the scheduled fire."""
        fire = np.datetime64(fire_time, "ns")
        newest = _floor(fire, self.init_freq_hours)
        start = newest - np.timedelta64(self.init_freq_hours * (self.update_cycles - 1), "h")
        return start, fire + np.timedelta64(1, "ns")

    def with_source(self, store: storage.Store) -> NoaaDataset:
        return dataclasses.replace(self, source_store=store)
