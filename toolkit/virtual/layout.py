"""A template written into an Icechunk session as zarr v3 metadata: create, grow, refresh.

Arrays are created unconsolidated with gribberish's codec as serializer, so a chunk is the
byte range of one GRIB2 message decoded at read time. Growing touches only arrays that span
the append dim; a refresh rewrites attrs and coordinate fixes and refuses structural drift.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from toolkit.virtual.template import VALID_TIME, Template

__all__ = [
    "MetadataDrift",
    "committed_extent",
    "encode_coord",
    "refresh_metadata",
    "sync_dims_to",
    "write_template",
]


class MetadataDrift(RuntimeError):
    """The store's structure differs from the template's: that needs a backfill, not a refresh."""


def encode_coord(values: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """CF-encode a coordinate so xarray decodes it: times as int64 seconds."""
    if np.issubdtype(values.dtype, np.datetime64):
        return (
            values.astype("datetime64[s]").astype("int64"),
            {"units": "seconds since 1970-01-01 00:00:00", "calendar": "proleptic_gregorian"},
        )
    if np.issubdtype(values.dtype, np.timedelta64):
        return (
            values.astype("timedelta64[s]").astype("int64"),
            {"units": "seconds", "dtype": "timedelta64[ns]"},
        )
    return values, {}


def write_template(session: Any, template: Template, extent: int) -> None:
    """Create every array (unconsolidated metadata), the append dim sized to `extent`.

    A variable with no dims (`spatial_ref`) is stored plainly, value 0, as CF grid-mapping
    variables are; appends never touch it."""
    from toolkit.virtual.grib.decode import codec

    root = zarr.open_group(session.store, mode="a", zarr_format=3)
    root.attrs.update(dict(template.attrs))
    for dim, values in template.coords.items():
        vals = values[:extent] if dim == template.append_dim else values
        data, attrs = encode_coord(np.asarray(vals))
        arr = root.create_array(
            dim,
            shape=data.shape,
            dtype=data.dtype,
            chunks=(max(1, len(data)) if dim != template.append_dim else 1024,),
            dimension_names=(dim,),
            overwrite=True,
            attributes={**attrs, **template.coord_attrs.get(dim, {})},
        )
        if len(data):
            arr[:] = data
    put_valid_time(root, template, extent)
    for name, v in template.variables.items():
        if not v.dims:  # a grid-mapping carrier (CF): a plain stored scalar, no GRIB behind it
            _write_scalar(root, name, v)
            continue
        root.create_array(
            name,
            shape=template.shape(name, extent),
            chunks=template.chunks(name),
            dtype=v.dtype,
            fill_value=np.nan,
            serializer=codec(name),
            compressors=None,
            filters=None,
            dimension_names=v.dims,
            attributes=dict(v.attrs),
            overwrite=True,
        )


def committed_extent(session: Any, template: Template) -> int | None:
    """How many append-dim positions the store holds (None: no template written yet)."""
    try:
        arr = zarr.open_array(session.store, path=template.append_dim, mode="r")
    except (FileNotFoundError, KeyError, zarr.errors.NodeNotFoundError):
        return None
    return int(arr.shape[0])


def sync_dims_to(session: Any, template: Template, extent: int) -> bool:
    """Grow the append dim to `extent` positions (never shrink); True when it grew.

    Only arrays spanning the append dim are touched, so fill-value chunks elsewhere survive.
    """
    have = committed_extent(session, template)
    if have is None:
        write_template(session, template, extent)
        return True
    if extent <= have:
        return False
    root = zarr.open_group(session.store, mode="r+")
    coord = root[template.append_dim]
    coord.resize((extent,))
    coord[have:extent] = encode_coord(
        np.asarray(template.coords[template.append_dim][have:extent])
    )[0]
    put_valid_time(root, template, extent, since=have)
    for name, v in template.variables.items():
        if template.append_dim in v.dims:
            root[name].resize(template.shape(name, extent))
    return True


def put_valid_time(root: Any, template: Template, extent: int, since: int = 0) -> bool:
    """Make the stored `valid_time` (a forecast's) hold `extent` inits: created when missing (a
    repo older than it gains it), else grown and its rows from `since` on rewritten where they
    differ. True when anything changed."""
    values = template.valid_time(extent)
    if values is None:
        return False
    data, attrs = encode_coord(values)
    attrs = {**attrs, **template.coord_attrs.get(VALID_TIME, {})}
    try:
        arr = root[VALID_TIME]
    except KeyError:
        arr = root.create_array(
            VALID_TIME,
            shape=data.shape,
            dtype=data.dtype,
            chunks=(1024, max(1, data.shape[1])),
            dimension_names=(template.append_dim, "lead_time"),
            attributes=attrs,
        )
        if data.size:
            arr[:] = data
        return True
    changed = _set_attrs(arr, attrs)
    if arr.shape != data.shape:
        arr.resize(data.shape)
        changed = True
    if data.shape[0] > since and not np.array_equal(arr[since:], data[since:]):
        arr[since:] = data[since:]
        changed = True
    return changed


def refresh_metadata(session: Any, template: Template, url: str) -> bool:
    """Rewrite `template`'s attrs and coordinate values at the committed extent in `session`;
    True when anything changed. Metadata an older repo lacks (the grid-mapping scalar, the
    forecast's valid_time) is added; a store whose GRIB variables' structure (names, dims,
    chunks, shapes) differs raises `MetadataDrift` naming `url`: that needs a backfill."""
    t = template
    extent = committed_extent(session, t)
    if extent is None:
        raise MetadataDrift(f"{url}: no template written; run a backfill first")
    root = zarr.open_group(session.store, mode="r+")
    # the root's attributes the template does not name are other jobs' (a pyramid's layout
    # and settings, which live in the same repo): kept, the template's own rewritten
    changed = _set_attrs(root, {**dict(root.attrs), **dict(t.attrs)})
    have_vars = {k for k, _ in root.arrays()} - set(t.coords) - {VALID_TIME}
    for name in sorted(set(t.variables) - have_vars):
        if not t.variables[name].dims:  # metadata only (a grid mapping an older repo lacks)
            _write_scalar(root, name, t.variables[name])
            have_vars.add(name)
            changed = True
    if have_vars != set(t.variables):
        raise MetadataDrift(
            f"{url}: variables {sorted(have_vars)} differ from the template's "
            f"{sorted(t.variables)}; run a backfill"
        )
    for name, v in t.variables.items():
        arr = root[name]
        if (
            tuple(arr.metadata.dimension_names or ()) != v.dims
            or arr.chunks != t.chunks(name)
            or arr.shape != t.shape(name, extent)
        ):
            raise MetadataDrift(
                f"{url}: array {name!r} structure differs from the template; run a backfill"
            )
        changed |= _set_attrs(arr, v.attrs)
    for dim, values in t.coords.items():
        vals = values[:extent] if dim == t.append_dim else values
        data, attrs = encode_coord(np.asarray(vals))
        arr = root[dim]
        if arr.shape != data.shape:
            raise MetadataDrift(
                f"{url}: coordinate {dim!r} has shape {arr.shape}, template {data.shape}; "
                "run a backfill"
            )
        if not np.array_equal(arr[:], data):
            arr[:] = data
            changed = True
        changed |= _set_attrs(arr, {**attrs, **t.coord_attrs.get(dim, {})})
    return put_valid_time(root, t, extent) | changed


def _write_scalar(root: Any, name: str, v: Any) -> None:
    arr = root.create_array(name, shape=(), dtype=v.dtype, attributes=dict(v.attrs), overwrite=True)
    arr[...] = 0


def _set_attrs(node: Any, want: Any) -> bool:
    if dict(node.attrs) == dict(want):
        return False
    node.attrs.clear()
    node.attrs.update(dict(want))
    return True
