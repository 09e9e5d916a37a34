"""Level groups and the additive root metadata.

Each level is a sibling group (`2x`, `4x`, ...) that opens on its own: data arrays named as at
level 0, a `<var>_count` plane, scaled cell-centre coordinates and the CRS variable. The root only
gains the zarr-conventions `multiscales` layout (v0.1) and its `zarr_conventions` registration;
the root zarr.json and every level-0 node's zarr.json are backed up first, and the metadata is
then consolidated, so one request serves the whole pyramid and xarray opens any level without a
warning. A level's count plane is named in its data array's `coordinates`: xarray shows it as a
coordinate, not a data variable.

Each level's CRS variable describes that level: level 0's CRS with the level's own GDAL
`GeoTransform` (the pixel size times the factor, the outer corner unchanged), and it is named in
its data arrays' `coordinates` too, so rioxarray and GDAL georeference a level opened on its own.
"""

from __future__ import annotations

import base64
import json
import warnings
from typing import Any

import numpy as np
import zarr

from toolkit import storage
from toolkit.cf import ENCODING_ATTRS, fill_attr, grid_mappings
from toolkit.pyramid import records
from toolkit.pyramid.geometry import MIXED, ArrayMeta, PyramidPlan, VarLevel
from toolkit.pyramid.source import Source

MULTISCALES_UUID = "d35379db-88df-4056-af3a-620245f8e347"
SPATIAL_UUID = "689b58e2-cf7b-45e0-9fff-9cfc0883d6b4"
# The conventions' published tag is v0.1 (the refs/tags/v1 URLs once printed in their READMEs
# were never published); each entry is the constant its v0.1 schema requires. GDAL reads
# conventions by uuid, so it finds these too.
REGISTRATION = {
    "uuid": MULTISCALES_UUID,
    "name": "multiscales",
    "schema_url": "https://raw.githubusercontent.com/zarr-conventions/multiscales/refs/tags/v0.1/schema.json",
    "spec_url": "https://github.com/zarr-conventions/multiscales/blob/v0.1/README.md",
    "description": "Multiscale layout of zarr datasets",
}
SPATIAL_REGISTRATION = {
    "uuid": SPATIAL_UUID,
    "name": "spatial",
    "schema_url": "https://raw.githubusercontent.com/zarr-conventions/spatial/refs/tags/v0.1/schema.json",
    "spec_url": "https://github.com/zarr-conventions/spatial/blob/v0.1/README.md",
    "description": "Spatial coordinate information",
}
ADDED_UUIDS = (MULTISCALES_UUID, SPATIAL_UUID)
RESAMPLING = {
    "mean": "average",
    "mode": "mode",
    "min": "min",
    "max": "max",
    "sum": "sum",
}
ADDED_ATTRS = ("multiscales", "spatial:dimensions", "spatial:bbox", "spatial:registration")


UNIFORM_RTOL = 1e-6  # an axis is uniform when every step is within this of the mean step


def axis_geometry(values: np.ndarray) -> tuple[float, float]:
    """(pixel edge origin, signed spacing) of uniform cell-centre coordinates."""
    values = np.asarray(values, dtype=np.float64)
    step = (values[-1] - values[0]) / (len(values) - 1)
    return float(values[0] - step / 2), float(step)


def uniform(values: np.ndarray, rtol: float = UNIFORM_RTOL) -> bool:
    """Every step within `rtol` of the mean step: an affine transform describes the axis."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return False
    steps = np.diff(values)
    mean = (values[-1] - values[0]) / (len(values) - 1)
    return bool(mean != 0 and np.all(np.abs(steps - mean) <= rtol * abs(mean)))


def level_coords(values: np.ndarray, factor: int, n: int) -> np.ndarray:
    """Each level cell's coordinate: the mean of the level-0 coordinates its window pools, exact
    for any spacing. A uniform axis is first extended past its end at its own spacing, so a
    partial edge window gets the centre its `spatial:transform` states; on an irregular axis
    (no transform) it is the mean of the cells it has."""
    values = np.asarray(values, dtype=np.float64)
    pad = n * factor - len(values)
    if pad > 0 and uniform(values):
        _, step = axis_geometry(values)
        values = np.concatenate([values, values[-1] + step * np.arange(1, pad + 1)])
    window = np.arange(len(values)) // factor
    return np.bincount(window, weights=values, minlength=n) / np.bincount(window, minlength=n)


def spatial_transform(src: Source, plan: PyramidPlan, factor: int) -> list[float] | None:
    """The level's affine transform, or None when an axis is not uniform (no transform holds)."""
    ydim, xdim = plan.spatial_dims
    if not (uniform(src.coords[ydim]) and uniform(src.coords[xdim])):
        return None
    y0, dy = axis_geometry(src.coords[ydim])
    x0, dx = axis_geometry(src.coords[xdim])
    return [dx * factor, 0.0, x0, 0.0, dy * factor, y0]


def level_geotransform(gt0: Any, t0: list[float] | None, factor: int) -> str | None:
    """A level's GDAL `GeoTransform` ("x0 dx rx y0 ry dy": the outer corner, then the pixel
    vectors): level 0's (`gt0`) with its pixel `factor` times larger and the same corner, as
    level 0's coordinates state it (`t0`, affine order; None: no transform holds, none is
    written). Level 0's own numbers are kept when they agree with its coordinates."""
    if t0 is None:
        return None
    a, b, c, d, e, f = t0
    ours = [c, a, b, f, d, e]
    try:
        theirs = [float(x) for x in str(gt0).split()]
    except ValueError:
        theirs = []
    tol = UNIFORM_RTOL * max(abs(a), abs(e))
    agree = len(theirs) == 6 and np.allclose(theirs, ours, rtol=0, atol=tol)
    x0, dx, rx, y0, ry, dy = theirs if agree else ours
    return " ".join(
        str(float(x)) for x in (x0, dx * factor, rx * factor, y0, ry * factor, dy * factor)
    )


def crs_attrs(src: Source, plan: PyramidPlan, name: str, factor: int) -> dict[str, Any]:
    """The CRS variable `name` of the level of `factor`: level 0's CF grid-mapping attributes
    (none depends on the pixel size) with the level's own `GeoTransform` when level 0 has one."""
    out = dict(src.attrs.get(name, {}))
    if "GeoTransform" in out:
        gt = level_geotransform(out["GeoTransform"], spatial_transform(src, plan, 1), factor)
        if gt is None:
            del out["GeoTransform"]  # an irregular axis: readers take the coordinates
        else:
            out["GeoTransform"] = gt
    return out


def data_attrs(src: Source, plan: PyramidPlan, v: VarLevel, factor: int) -> dict[str, Any]:
    """A level data array's attributes: `level_attrs`, the resampling, and its auxiliary
    coordinates (the CRS variable, which rioxarray reads only as a coordinate, and the count
    plane, which is no second variable to a reader) in `coordinates`, as xarray writes them."""
    base = src.attrs.get(v.var, {})
    method = "circular_mean" if v.circle is not None else v.method
    attrs = level_attrs(base, src.arrays[v.var], v, method, factor)
    attrs["resampling_method"] = RESAMPLING[v.method]
    gm = base.get("grid_mapping")
    coords = [*attrs.get("coordinates", "").split(), *([gm] if gm in src.crs else []), v.count_name]
    attrs["coordinates"] = " ".join(dict.fromkeys(coords))
    return attrs


def refresh_attrs(store: Any, key: str, attrs: dict[str, Any]) -> None:
    """Rewrite the attributes of the node whose zarr.json is `key` when they differ (levels
    built by an earlier toolkit get the current level metadata; chunks are not touched)."""
    doc = storage.get_json(store, key)
    if doc.get("attributes", {}) != attrs:
        doc["attributes"] = attrs
        storage.put(store, key, json.dumps(doc, indent=2).encode())


# A small array written whole (a coordinate, the CRS variable) keeps its one chunk even when it
# holds only the fill value (a CRS variable's 0): zarr would otherwise delete it, on S3 a batch
# delete (POST) that the store client does not retry when a pooled connection was reset.
WHOLE = {"write_empty_chunks": True}


def _create(zstore: Any, name: str, **kw: Any) -> Any:
    return zarr.create_array(zstore, name=name, overwrite=True, **kw)


def write_levels(src: Source, plan: PyramidPlan) -> None:
    """Create every level group and its arrays (no data shards), skipping what exists."""
    store = src.store
    zstore = store.zarr()
    ydim, xdim = plan.spatial_dims
    for lvl in plan.levels:
        if all(storage.exists(store, k) for k in level_nodes(src, plan, lvl.group)):
            # metadata is written whole before any shard of the level: only attributes change
            for name in src.crs:
                attrs = crs_attrs(src, plan, name, lvl.factor)
                refresh_attrs(store, f"{lvl.group}/{name}/zarr.json", attrs)
            for v in lvl.vars:
                attrs = data_attrs(src, plan, v, lvl.factor)
                refresh_attrs(store, f"{lvl.group}/{v.var}/zarr.json", attrs)
            carry_coords(src, plan, lvl.group)
            continue
        group_doc = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": {
                "pyramid:factor": lvl.factor,
                "pyramid:method": plan.method,
                "pyramid:method_from": plan.method_from,
                **_resampling(plan),
            },
        }
        if plan.method == MIXED:  # each data array says its own (`data_attrs`)
            group_doc["attributes"]["pyramid:operators"] = plan.operators
        storage.put(store, f"{lvl.group}/zarr.json", json.dumps(group_doc, indent=2).encode())
        for dim, n in ((ydim, lvl.shape[0]), (xdim, lvl.shape[1])):
            vals = level_coords(src.coords[dim], lvl.factor, n).astype("float64")
            _write_coord(zstore, lvl.group, dim, vals, src.attrs.get(dim, {}), np.nan)
        leading = {d for v in lvl.vars for d in v.dims[:-2]}
        for dim in sorted(leading):
            if dim in src.coords:
                _write_coord(zstore, lvl.group, dim, src.coords[dim], src.attrs.get(dim, {}))
        for name in src.crs:
            base = zarr.open_array(store.zarr(read_only=True), path=name, mode="r")
            values = storage.read(store, base)
            arr = _create(
                zstore,
                f"{lvl.group}/{name}",
                shape=base.shape,
                dtype=base.dtype,
                chunks=base.shape,
                attributes=crs_attrs(src, plan, name, lvl.factor),
                dimension_names=base.metadata.dimension_names,
                fill_value=base.fill_value,
                config=WHOLE,
            )
            arr[...] = values
        for v in lvl.vars:
            attrs = data_attrs(src, plan, v, lvl.factor)
            mine = [f"{lvl.group}/{n}/zarr.json" for n in (v.var, v.count_name)]
            if all(storage.exists(store, k) for k in mine):  # a variable added beside it
                refresh_attrs(store, mine[0], attrs)  # its shards stay as they are
                continue
            sharded = v.shards != v.chunks
            _create(
                zstore,
                f"{lvl.group}/{v.var}",
                shape=v.shape,
                dtype=v.dtype,
                chunks=v.chunks,
                shards=v.shards if sharded else None,
                fill_value=v.fill_value,
                dimension_names=list(v.dims),
                attributes=attrs,
                chunk_key_encoding=v.key_encoding,
            )
            _create_counts(
                zstore,
                f"{lvl.group}/{v.count_name}",
                f"level-0 pixels valid in every band pooled into each {v.var} cell",
                attrs,
                v.key_encoding,
                "uint32",
                (v.count_shape, tuple(v.count_dims), v.count_shards, v.count_chunks),
                sharded,
            )
            if v.classes:
                _create_classes(zstore, lvl.group, v, src.attrs.get(v.var, {}), sharded)
        carry_coords(src, plan, lvl.group)


def carried_coords(src: Source, plan: PyramidPlan) -> tuple[str, ...]:
    """Level 0's non-spatial coordinates, as xarray opens level 0: each array a `coordinates`
    attribute names and each dimension coordinate, on no spatial dim (a forecast's 2-D
    `valid_time`, a scalar `forecast_period`, `level`). Every level holds them as they are;
    grid mappings aside (each level writes its own)."""
    spatial = set(plan.spatial_dims)
    named = {c for a in src.attrs.values() for c in str(a.get("coordinates", "")).split()}
    maps = {m for a in src.attrs.values() for m in grid_mappings(str(a.get("grid_mapping", "")))}
    z = src.store.zarr(read_only=True)
    out = []
    for name in sorted((named | set(src.coords)) - spatial - maps - set(src.arrays)):
        if name not in src.attrs:  # named, but no array of the root
            continue
        dims = tuple(zarr.open_array(z, path=name, mode="r").metadata.dimension_names or ())
        if not spatial & set(dims) and (name in named or dims == (name,)):
            out.append(name)
    return tuple(out)


def carry_coords(src: Source, plan: PyramidPlan, group: str) -> None:
    """Level 0's non-spatial coordinates (`carried_coords`) into the level `group`: each
    array copied whole (values as stored, attributes, fill, dims) where the level's differs
    or is missing, so a level's `valid_time` follows level 0's as it grows. The level's own
    leading dimension coordinates are written with its arrays (`write_levels`)."""
    store = src.store
    z = store.zarr(read_only=True)
    lvl = plan.level(group)
    own = {d for v in lvl.vars for d in v.dims[:-2] if d in src.coords}
    for name in [n for n in carried_coords(src, plan) if n not in own]:
        base = zarr.open_array(z, path=name, mode="r")
        values = storage.read(store, base)
        if _same_array(store, f"{group}/{name}", base, values):
            continue
        arr = _create(
            store.zarr(),
            f"{group}/{name}",
            shape=base.shape,
            dtype=base.dtype,
            chunks=tuple(max(1, n) for n in base.shape),
            attributes=dict(base.attrs),
            dimension_names=base.metadata.dimension_names,
            fill_value=base.fill_value,
            config=WHOLE,
        )
        arr[...] = values


def _same_array(store: Any, path: str, base: Any, values: np.ndarray) -> bool:
    """Whether `path` holds `base` as it is: its dtype, dims, fill, attributes and values."""
    if not storage.exists(store, f"{path}/zarr.json"):
        return False
    got = zarr.open_array(store.zarr(read_only=True), path=path, mode="r")
    same_meta = (
        got.dtype == base.dtype
        and got.metadata.dimension_names == base.metadata.dimension_names
        and dict(got.attrs) == dict(base.attrs)
        and same_values(np.asarray(got.fill_value), np.asarray(base.fill_value))
    )
    return same_meta and same_values(storage.read(store, got), values)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and values, NaN (NaT) equal to NaN, for any dtype (strings too)."""
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # a dtype without NaN
        return bool(np.array_equal(a, b))


def _create_classes(zstore: Any, group: str, v: Any, attrs: dict[str, Any], sharded: bool) -> None:
    """The class-count array (how many level-0 pixels of each class each window holds: what
    the next mode level sums, and each class's cover fraction with the count plane) and its
    class coordinate, labelled with the classes' CF meanings."""
    shape, dims, shards, chunks = v.classes_layout()
    labels = np.asarray(v.classes, dtype=v.dtype)
    meanings = str(attrs.get("flag_meanings", "")).split()
    flags = [int(x) for x in np.atleast_1d(np.asarray(attrs.get("flag_values", [])))]
    named = dict(zip(flags, meanings, strict=False)) if len(meanings) == len(flags) else {}
    coord_attrs: dict[str, Any] = {"long_name": f"class of {v.var}"}
    if named:
        coord_attrs |= {
            "flag_values": labels.tolist(),
            "flag_meanings": " ".join(named.get(int(c), str(c)) for c in labels),
        }
    _write_coord(zstore, group, v.class_dim, labels, coord_attrs)
    _create_counts(
        zstore,
        f"{group}/{v.classes_name}",
        f"level-0 pixels of each class of {v.var} in each cell",
        attrs,
        v.key_encoding,
        v.classes_dtype,
        (shape, dims, shards, chunks),
        sharded,
    )


def _write_coord(
    zstore: Any, group: str, dim: str, values: Any, attrs: dict[str, Any], fill: Any = None
) -> None:
    """A level's 1-D coordinate array `group/dim`, one chunk, written whole."""
    values = np.asarray(values)
    kw = {} if fill is None else {"fill_value": fill}
    arr = _create(
        zstore,
        f"{group}/{dim}",
        shape=values.shape,
        dtype=values.dtype,
        chunks=values.shape,
        dimension_names=[dim],
        attributes=attrs,
        config=WHOLE,
        **kw,
    )
    arr[:] = values


def _create_counts(
    zstore: Any,
    path: str,
    long_name: str,
    data_attrs: dict[str, Any],
    encoding: dict[str, Any],
    dtype: str,
    layout: tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], tuple[int, ...]],
    sharded: bool,
) -> None:
    """A count array beside a level's data (the count plane, the class counts): unitless,
    fill 0, on the data's grid mapping; `layout` is (shape, dims, shards, chunks)."""
    shape, dims, shards, chunks = layout
    attrs: dict[str, Any] = {"long_name": long_name, "units": "1"}
    if "grid_mapping" in data_attrs:
        attrs["grid_mapping"] = data_attrs["grid_mapping"]
    _create(
        zstore,
        path,
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards if sharded else None,
        fill_value=0,
        dimension_names=list(dims),
        attributes=attrs,
        chunk_key_encoding=encoding,
    )


CELL_METHODS = {
    "mean": "mean",
    "mode": "mode",
    "min": "minimum",
    "max": "maximum",
    "sum": "sum",
    "circular_mean": "mean (circular)",
}


def level_attrs(
    attrs: dict[str, Any], base: ArrayMeta, v: VarLevel, method: str, factor: int
) -> dict[str, Any]:
    """A level array's attributes: level 0's meaning (units, long_name, standard_name,
    grid_mapping, flags) with the encoding a reader needs for the level's own values, and a CF
    `cell_methods` entry saying what the level is.

    A float level holds decoded values with NaN nodata: every CF encoding attribute of level 0
    (`_FillValue`, `missing_value`, `scale_factor`, `add_offset`, the valid range, `_Unsigned`)
    would be stale and is dropped. An integer level (mode, min, max, integer sums) keeps the
    stored encoding, every kind of nodata written as its one fill, which `_FillValue` names
    when level 0 declared CF nodata."""
    out = dict(attrs)
    if np.dtype(v.dtype).kind == "f":
        for key in ENCODING_ATTRS:
            out.pop(key, None)
    else:
        cf_nodata = "_FillValue" in out or "missing_value" in out
        out.pop("missing_value", None)
        if base.cf is not None and base.cf.view:
            out.pop("_Unsigned", None)  # the level is written in the unsigned dtype itself
        if cf_nodata:
            out["_FillValue"] = fill_attr(v.fill_value, v.dtype)
        else:
            out.pop("_FillValue", None)
    name, _, how = CELL_METHODS[method].partition(" (")
    how = how.rstrip(")") + ", " if how else ""
    what = f"area: {name} ({how}window {factor}x{factor}, nodata excluded)"
    out["cell_methods"] = " ".join([*str(attrs.get("cell_methods", "")).split(), what])
    return out


def level_nodes(src: Source, plan: PyramidPlan, group: str) -> list[str]:
    """The zarr.json keys a level must have."""
    lvl = plan.level(group)
    names = [*plan.spatial_dims, *src.crs]
    names += sorted({d for v in lvl.vars for d in v.dims[:-2] if d in src.coords})
    for v in lvl.vars:
        names += [v.var, v.count_name]
        names += [v.classes_name, v.class_dim] if v.classes else []
    return [f"{group}/zarr.json", *(f"{group}/{n}/zarr.json" for n in names)]


def backup(src: Source, refresh: bool = False) -> None:
    """Keep the pre-pyramid root and level-0 node metadata (the first backup wins, unless
    `refresh`: a build that accepted a changed level 0 records it as it is now)."""
    store = src.store
    records.migrate(store, records.BACKUP)
    if records.exists(store, records.BACKUP) and not refresh:
        return
    nodes = {k: base64.b64encode(storage.get(store, k).data).decode() for k in src.node_keys}
    body = json.dumps({"nodes": nodes}).encode()
    records.put(store, records.BACKUP, body, create=not refresh)


def read_backup(store: storage.Store) -> dict[str, bytes]:
    doc = json.loads(records.get(store, records.BACKUP)[1])
    return {k: base64.b64decode(v) for k, v in doc["nodes"].items()}


def multiscales(src: Source, plan: PyramidPlan) -> dict[str, Any]:
    """The layout: each level's shape, its scale relative to the asset it derives from, and
    `spatial:transform` only where the grid is uniform (an irregular axis has none)."""
    method = _resampling(plan)
    base: dict[str, Any] = {
        "asset": ".",
        "transform": {"scale": [1.0, 1.0], "translation": [0.0, 0.0]},
        "spatial:shape": list(plan.base_shape),
    }
    layout: list[dict[str, Any]] = [base]
    factors = {".": 1}
    for lvl in plan.levels:
        # each level pooled from level 0: mode, or only directions (circular means)
        direct = all(v.method == "mode" or v.circle is not None for v in lvl.vars)
        source = "." if direct or not lvl.parent else lvl.parent
        factors[lvl.group] = lvl.factor
        rel = float(lvl.factor // factors[source])  # relative to `derived_from`
        layout.append(
            {
                "asset": lvl.group,
                "derived_from": source,
                "transform": {"scale": [rel, rel], "translation": [0.0, 0.0]},
                **method,
                "spatial:shape": list(lvl.shape),
            }
        )
    for item, factor in zip(layout, [1, *(lvl.factor for lvl in plan.levels)], strict=True):
        t = spatial_transform(src, plan, factor)
        if t is not None:
            item["spatial:transform"] = t
    return {"layout": layout, **method}


def _resampling(plan: PyramidPlan) -> dict[str, str]:
    """The level's one `resampling_method`, or none when its variables have their own."""
    return {"resampling_method": RESAMPLING[plan.method]} if plan.method != MIXED else {}


def spatial_attrs(src: Source, plan: PyramidPlan) -> dict[str, Any]:
    """The spatial convention's group keys, as GDAL writes them: the dims, pixel registration,
    and (on a uniform grid) the bounding box [xmin, ymin, xmax, ymax] of level 0."""
    out: dict[str, Any] = {
        "spatial:dimensions": list(plan.spatial_dims),
        "spatial:registration": "pixel",
    }
    t = spatial_transform(src, plan, 1)
    if t is not None:
        ny, nx = plan.base_shape
        xs = sorted((t[2], t[2] + t[0] * nx))
        ys = sorted((t[5], t[5] + t[4] * ny))
        out["spatial:bbox"] = [xs[0], ys[0], xs[1], ys[1]]
    return out


def update_root(src: Source, plan: PyramidPlan, refresh: bool = False) -> None:
    """Add the multiscales attributes to the root zarr.json (and refresh consolidation if
    present); `refresh` the backup of level 0's metadata too."""
    store = src.store
    backup(src, refresh)
    blob = storage.get(store, "zarr.json")
    doc = json.loads(blob.data)
    doc["attributes"] = root_attributes(doc.get("attributes", {}), src, plan)
    storage.put(store, "zarr.json", json.dumps(doc, indent=2).encode())
    with warnings.catch_warnings():  # zarr notes consolidation is not in the v3 spec yet
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(store.zarr())  # one request serves the whole pyramid
    # the build's own records are no part of the dataset a reader opens in one request
    doc = json.loads(storage.get(store, "zarr.json").data)
    meta = doc.get("consolidated_metadata", {}).get("metadata", {})
    for key in [k for k in meta if k == records.GROUP or k.startswith(records.GROUP + "/")]:
        del meta[key]
    storage.put(store, "zarr.json", json.dumps(doc, indent=2).encode())


def root_attributes(attrs: dict[str, Any], src: Source, plan: PyramidPlan) -> dict[str, Any]:
    """The root's attributes with the multiscales layout, the spatial keys and both
    conventions' registrations added (replacing what an earlier build added)."""
    out = dict(attrs)
    conventions = [c for c in out.get("zarr_conventions", []) if c.get("uuid") not in ADDED_UUIDS]
    out["zarr_conventions"] = [*conventions, REGISTRATION, SPATIAL_REGISTRATION]
    out["multiscales"] = multiscales(src, plan)
    out.update(spatial_attrs(src, plan))
    return out


def set_root_attrs(src: Source, plan: PyramidPlan, extra: dict[str, Any]) -> None:
    """The root attributes through zarr (a store that versions its own history, such as an
    Icechunk session, needs neither the backup nor consolidation)."""
    group = zarr.open_group(src.store.zarr(), mode="r+", use_consolidated=False)
    now = dict(group.attrs)
    want = {**root_attributes(now, src, plan), **extra}
    if want != now:
        group.attrs.update(want)


def grow_levels(src: Source, plan: PyramidPlan) -> None:
    """Levels made for a shorter level 0 (an update appended positions) take its leading
    extent: every level array is resized and its leading coordinates rewritten."""
    zstore = src.store.zarr()
    for lvl in plan.levels:
        grown = False
        for v in lvl.vars:
            arrays = [(v.var, v.shape), (v.count_name, v.count_shape)]
            if v.classes:
                arrays.append((v.classes_name, v.classes_layout()[0]))
            for name, shape in arrays:
                arr = zarr.open_array(zstore, path=f"{lvl.group}/{name}", mode="r+")
                if tuple(arr.shape) != tuple(shape):
                    arr.resize(shape)
                    grown = True
        if grown:
            for dim in sorted({d for v in lvl.vars for d in v.dims[:-2] if d in src.coords}):
                _write_coord(zstore, lvl.group, dim, src.coords[dim], src.attrs.get(dim, {}))


def strip_added(doc: dict[str, Any]) -> dict[str, Any]:
    """A root document without what the pyramid adds (for the diff against the backup)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("consolidated_metadata", None)
    attrs = doc.get("attributes", {})
    for key in ADDED_ATTRS:
        attrs.pop(key, None)
    if "zarr_conventions" in attrs:
        rest = [c for c in attrs["zarr_conventions"] if c.get("uuid") not in ADDED_UUIDS]
        if rest:
            attrs["zarr_conventions"] = rest
        else:
            attrs.pop("zarr_conventions")
    return doc
