"""STAC entries for the toolkit's datasets: one self-contained Collection and one Item.

Catalogues and portals (Pangeo's, STAC browsers, `intake-stac`, `xpystac`) find Zarr and
Icechunk datasets as STAC Collections with the datacube extension (`cube:dimensions`,
`cube:variables`) and xarray-assets (`xarray:open_kwargs`). Everything here is derived from an
opened xarray Dataset and its CF metadata, never from a job's internals, so the jobs
(`toolkit.pyramid.catalog`, `toolkit.virtual.stac_entry`) only say what the asset is and how it
opens. Writes local JSON files only: a catalogue is published by copying the folder.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Entry", "StacAsset", "describe", "write_entry"]

ZARR_MEDIA_TYPE = "application/vnd+zarr"  # what Pangeo's and most STAC catalogues use for Zarr
# No media type is registered for Icechunk: a repo is a Zarr hierarchy behind Icechunk's own
# format (snapshots, manifests), which no plain Zarr reader opens. "+icechunk" says both, the
# way structured-syntax suffixes do, so a client that knows Zarr sees it is not plain Zarr.
ICECHUNK_MEDIA_TYPE = "application/vnd.zarr+icechunk"

X_NAMES = ("x", "lon", "longitude")
Y_NAMES = ("y", "lat", "latitude")
X_STANDARD = ("longitude", "projection_x_coordinate", "grid_longitude")
Y_STANDARD = ("latitude", "projection_y_coordinate", "grid_latitude")


@dataclass(frozen=True)
class StacAsset:
    """How a catalogue's reader opens the data: `xr.open_dataset(href, **open_kwargs)`."""

    key: str
    href: str
    media_type: str
    title: str
    description: str
    open_kwargs: dict[str, Any]
    roles: tuple[str, ...] = ("data",)
    storage_options: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """What was written: the files and the extents a catalogue will show."""

    collection: Path
    item: Path
    id: str
    bbox: list[float] | None
    interval: list[str | None]
    dimensions: list[str]
    variables: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "collection": str(self.collection),
            "item": str(self.item),
            "id": self.id,
            "bbox": self.bbox,
            "interval": self.interval,
            "dimensions": self.dimensions,
            "variables": self.variables,
        }


def slug(name: str) -> str:
    """A STAC id from a dataset's name: ASCII letters, digits and dashes (ids become file
    names and URL segments in every catalogue)."""
    ascii_ = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9_.]+", "-", ascii_).strip("-.").lower() or "dataset"


# --------------------------------------------------------------------------- reading the data


def grid_mappings(ds: Any) -> list[str]:
    """The CF grid-mapping variables: named by a `grid_mapping` attribute, or carrying
    `grid_mapping_name` (they describe the grid; they are not data)."""
    named = {str(v.attrs["grid_mapping"]).split(":")[0] for v in ds.variables.values()
             if "grid_mapping" in v.attrs}  # fmt: skip
    named |= {str(k) for k, v in ds.variables.items() if "grid_mapping_name" in v.attrs}
    return sorted(n for n in named if n in ds.variables)


def crs_of(ds: Any) -> Any:
    """The dataset's CRS (pyproj) from its CF grid mapping, or None when it has none."""
    from pyproj import CRS

    for name in grid_mappings(ds):
        attrs = ds[name].attrs
        for key in ("crs_wkt", "spatial_ref"):
            if attrs.get(key):
                return CRS.from_wkt(str(attrs[key]))
        try:
            return CRS.from_cf(dict(attrs))
        except Exception:
            continue
    return None


def axis_of(ds: Any, dim: str) -> str | None:
    """'x', 'y' or None for a dimension, from its coordinate's CF attributes or its name."""
    attrs = ds[dim].attrs if dim in ds.variables else {}
    axis = str(attrs.get("axis", "")).lower()
    standard = attrs.get("standard_name", "")
    if axis == "x" or standard in X_STANDARD or dim.lower() in X_NAMES:
        return "x"
    if axis == "y" or standard in Y_STANDARD or dim.lower() in Y_NAMES:
        return "y"
    return None


def edges(ds: Any, dim: str) -> tuple[float, float]:
    """The outer cell edges along `dim`: its CF `bounds` when given, else the coordinates taken
    as cell centres, half a step out on each side (one cell alone: its centre)."""
    coord = ds[dim]
    bounds = coord.attrs.get("bounds")
    if bounds and bounds in ds.variables:
        b = np.asarray(ds[bounds].values, dtype="float64")
        return float(np.nanmin(b)), float(np.nanmax(b))
    c = np.asarray(coord.values, dtype="float64")
    if c.size < 2:
        return float(c.min()), float(c.max())
    first, last = c[0] - (c[1] - c[0]) / 2, c[-1] + (c[-1] - c[-2]) / 2
    return float(min(first, last)), float(max(first, last))


def geographic(crs: Any, ds: Any, x: str) -> bool:
    """Whether x is longitude: the CRS says so, or (no CRS) its units or name do."""
    if crs is not None:
        return bool(crs.is_geographic)
    return ds[x].attrs.get("units", "").startswith("degree") or x.lower() in ("lon", "longitude")


def wgs84_bbox(ds: Any, x: str, y: str, crs: Any) -> list[float]:
    """[west, south, east, north] in WGS84 longitude/latitude, as STAC wants: longitudes in
    0..360 are brought to -180..180 (west > east when the data cross the antimeridian); a
    projected grid's edges are transformed (densified, so curved edges are covered)."""
    (x0, x1), (y0, y1) = edges(ds, x), edges(ds, y)
    if not geographic(crs, ds, x):
        from pyproj import CRS, Transformer

        t = Transformer.from_crs(crs, CRS.from_epsg(4326), always_xy=True)
        west, south, east, north = t.transform_bounds(x0, y0, x1, y1, densify_pts=21)
        return [float(west), float(south), float(east), float(north)]
    south, north = max(y0, -90.0), min(y1, 90.0)
    if x1 - x0 >= 360.0:
        return [-180.0, _round(south), 180.0, _round(north)]
    return [_round(_wrap(x0)), _round(south), _round(_wrap(x1)), _round(north)]


def _round(v: float) -> float:
    """Float noise of the edge arithmetic (89.99999999999999) off: 1e-9 degrees is < 1 mm."""
    return round(float(v), 9)


def _wrap(lon: float) -> float:
    """A longitude in [-180, 180] (180 itself stays 180, an eastern edge)."""
    wrapped = (lon + 180.0) % 360.0 - 180.0
    return 180.0 if wrapped == -180.0 and lon > 0 else wrapped


def _iso(t: np.datetime64) -> str:
    return datetime_of(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def datetime_of(t: np.datetime64) -> datetime:
    """A UTC-aware datetime (CF times in these stores are UTC)."""
    seconds = t.astype("datetime64[s]").astype("int64")
    return datetime.fromtimestamp(int(seconds), tz=UTC)


def time_range(ds: Any) -> tuple[np.datetime64, np.datetime64] | None:
    """Min and max over every datetime coordinate (a forecast's init_time and its valid_time:
    the interval covers the times the data are valid for), NaT left out; None without one."""
    found: list[np.ndarray] = []
    for coord in ds.coords.values():
        if np.issubdtype(coord.dtype, np.datetime64):
            v = np.asarray(coord.values).ravel()
            v = v[~np.isnat(v)]
            if v.size:
                found.append(v)
    if not found:
        return None
    allv = np.concatenate(found)
    return allv.min(), allv.max()


def _duration(td: np.timedelta64) -> str:
    """An ISO 8601 duration (PT3H, PT90S, P1D)."""
    seconds = int(td.astype("timedelta64[s]").astype("int64"))
    if seconds and seconds % 86400 == 0:
        return f"P{seconds // 86400}D"
    if seconds % 3600 == 0:
        return f"PT{seconds // 3600}H"
    if seconds % 60 == 0:
        return f"PT{seconds // 60}M"
    return f"PT{seconds}S"


def label_of(v: Any) -> Any:
    """A JSON value of one coordinate label."""
    if isinstance(v, np.timedelta64):
        return _duration(v)
    if isinstance(v, np.datetime64):
        return _iso(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _step(values: np.ndarray) -> Any:
    """The regular spacing of `values`, or None when irregular (the datacube spec's null)."""
    if values.size < 2:
        return None
    d = np.diff(values)
    if np.issubdtype(d.dtype, np.floating):  # float coordinates: equal to rounding
        return round(float(d[0]), 9) if np.allclose(d, d[0], rtol=1e-6, atol=0) else None
    return label_of(d[0]) if np.all(d == d[0]) else None


def _reference_system(crs: Any) -> Any:
    """An EPSG code when pyproj is sure of one, else PROJJSON (both are what the datacube
    extension accepts)."""
    code = crs.to_epsg()
    return code if code is not None else crs.to_json_dict()


def cube_dimensions(ds: Any, crs: Any) -> dict[str, dict[str, Any]]:
    """`cube:dimensions` from the dataset's dims and their coordinates' CF attributes."""
    out: dict[str, dict[str, Any]] = {}
    for dim in map(str, ds.dims):
        has = dim in ds.coords
        attrs = ds[dim].attrs if has else {}
        entry: dict[str, Any] = {}
        axis = axis_of(ds, dim) if has else None
        values = np.asarray(ds[dim].values) if has else np.arange(ds.sizes[dim])
        if axis is not None:
            v = values.astype("float64")
            entry = {"type": "spatial", "axis": axis, "extent": [float(v.min()), float(v.max())]}
            entry["step"] = _step(v)
            if crs is not None:
                entry["reference_system"] = _reference_system(crs)
        elif np.issubdtype(values.dtype, np.datetime64):
            ok = values[~np.isnat(values)]
            entry = {"type": "temporal", "extent": [_iso(ok.min()), _iso(ok.max())]}
            entry["step"] = _step(ok) if ok.size > 1 else None
        else:
            entry = {"type": "other", "values": [label_of(v) for v in values]}
            if np.issubdtype(values.dtype, np.number) and values.dtype.kind != "m":
                entry["extent"] = [label_of(values.min()), label_of(values.max())]
            if "units" in attrs:
                entry["unit"] = str(attrs["units"])
        if "long_name" in attrs:
            entry["description"] = str(attrs["long_name"])
        out[dim] = entry
    return out


def cube_variables(ds: Any) -> dict[str, dict[str, Any]]:
    """`cube:variables`: the data variables (type data, grid mappings left out: they describe
    the grid) and the coordinates that are not a dimension's own (type auxiliary, e.g. a
    forecast's 2-D valid_time)."""
    skip = set(grid_mappings(ds))
    out: dict[str, dict[str, Any]] = {}
    chosen = [(str(k), "data") for k in ds.data_vars if str(k) not in skip]
    chosen += [(str(k), "auxiliary") for k in ds.coords if str(k) not in {*ds.dims, *skip}]
    for name, kind in chosen:
        var = ds[name]
        entry: dict[str, Any] = {"dimensions": [str(d) for d in var.dims], "type": kind}
        if "units" in var.attrs:
            entry["unit"] = str(var.attrs["units"])
        if "long_name" in var.attrs:
            entry["description"] = str(var.attrs["long_name"])
        out[name] = entry
    return out


@dataclass(frozen=True)
class Description:
    """What a STAC entry says about one dataset, derived from it alone."""

    bbox: list[float] | None
    interval: tuple[datetime | None, datetime | None]
    dimensions: dict[str, dict[str, Any]]
    variables: dict[str, dict[str, Any]]
    attrs: dict[str, Any]


def describe(ds: Any) -> Description:
    """Extents and datacube fields of an opened xarray Dataset (reads its coordinates only)."""
    crs = crs_of(ds)
    dims = [str(d) for d in ds.dims if str(d) in ds.coords]
    xs = [d for d in dims if axis_of(ds, d) == "x" and ds[d].ndim == 1]
    ys = [d for d in dims if axis_of(ds, d) == "y" and ds[d].ndim == 1]
    bbox = wgs84_bbox(ds, xs[0], ys[0], crs) if xs and ys else None
    span = time_range(ds)
    interval = (None, None) if span is None else (datetime_of(span[0]), datetime_of(span[1]))
    return Description(bbox, interval, cube_dimensions(ds, crs), cube_variables(ds), dict(ds.attrs))


# --------------------------------------------------------------------------- writing the entry


def _asset(a: StacAsset) -> Any:
    import pystac

    asset = pystac.Asset(
        href=a.href,
        media_type=a.media_type,
        title=a.title,
        description=a.description,
        roles=list(a.roles),
        extra_fields=dict(a.extra),
    )
    asset.extra_fields["xarray:open_kwargs"] = dict(a.open_kwargs)
    if a.storage_options:
        asset.extra_fields["xarray:storage_options"] = dict(a.storage_options)
    return asset


def write_entry(
    ds: Any,
    output_dir: str | Path,
    *,
    name: str,
    assets: list[StacAsset],
    description: str | None = None,
    keywords: list[str] | None = None,
    summaries: Mapping[str, list[Any]] | None = None,
) -> Entry:
    """Write `output_dir`/collection.json and its one Item (self-contained: relative links, so
    the folder can be copied anywhere) describing `ds`, with `assets` on both. Rewrites what
    is there: the entry of an updated dataset is simply written again."""
    import pystac
    from pystac.extensions.datacube import DatacubeExtension
    from pystac.extensions.xarray_assets import XarrayAssetsExtension

    found = describe(ds)
    ident = slug(name)
    title = str(found.attrs.get("title") or name)
    about = description or str(found.attrs.get("summary") or found.attrs.get("source") or title)
    bbox = found.bbox if found.bbox is not None else [-180.0, -90.0, 180.0, 90.0]
    start, end = found.interval
    collection = pystac.Collection(
        id=ident,
        title=title,
        description=about,
        extent=pystac.Extent(pystac.SpatialExtent([bbox]), pystac.TemporalExtent([[start, end]])),
        license=_license(found.attrs),
        keywords=list(keywords or []),
        summaries=pystac.Summaries(dict(summaries or {})) if summaries else None,
    )
    geometry = _polygon(bbox)
    props: dict[str, Any] = {"title": title}
    if start is None:  # no time in the data: the entry's own time, said as such
        when: datetime | None = datetime.now(UTC).replace(microsecond=0)
        props["description"] = "no time dimension: datetime is when this entry was written"
    elif start == end:
        when = start
    else:
        when = None
    item = pystac.Item(
        id=ident,
        geometry=geometry,
        bbox=bbox,
        datetime=when,
        start_datetime=start if when is None else None,
        end_datetime=end if when is None else None,
        properties=props,
    )
    for obj in (collection, item):
        DatacubeExtension.add_to(obj)
        obj.extra_fields["cube:dimensions"] = found.dimensions
        obj.extra_fields["cube:variables"] = found.variables
        XarrayAssetsExtension.add_to(obj)
        for a in assets:  # a fresh Asset each: an asset has one owner
            obj.add_asset(a.key, _asset(a))
    collection.add_item(item)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    collection.normalize_hrefs(str(out.resolve()))
    collection.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    return Entry(
        collection=Path(collection.get_self_href() or out / "collection.json"),
        item=Path(item.get_self_href() or ""),
        id=ident,
        bbox=found.bbox,
        interval=[None if t is None else t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in (start, end)],
        dimensions=list(found.dimensions),
        variables=list(found.variables),
    )


def _license(attrs: dict[str, Any]) -> str:
    """An SPDX id when the dataset's `license` attribute is one, else "other" (STAC 1.1)."""
    text = str(attrs.get("license", "")).strip()
    return text if re.fullmatch(r"[A-Za-z0-9.+-]+", text) else "other"


def _polygon(bbox: list[float]) -> dict[str, Any]:
    west, south, east, north = bbox
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    return {"type": "Polygon", "coordinates": [ring]}
