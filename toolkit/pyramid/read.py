"""Read a built pyramid back with xarray: one dataset per level, or all of them as a DataTree.

`xr.open_datatree(store)` refuses this layout: level 0 stays at the root (so the store is
unchanged for existing readers) and every level reuses level 0's dimension names, which
DataTree's parent/child alignment rule rejects. `open_datatree` here builds the same tree with
an empty root (the root's attributes only) and one child per level, level 0 as `1x`: the
tree's name for the store's root, not a group (the layout and STAC name it ".").
`xr.open_groups(url, engine="zarr")` and `xr.open_zarr(url, group="4x")` also work as they are.
"""

from __future__ import annotations

from typing import Any

from toolkit import storage
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.source import open_source

BASE = "1x"


def levels(source: str | storage.Store) -> list[str]:
    """The level groups named by the root's multiscales layout, level 0 as "."."""
    store = open_source(source)
    attrs = _root(store).get("attributes", {})
    layout = attrs.get("multiscales", {}).get("layout")
    if not layout:
        raise PlanError(
            f"{store.url}: the root has no multiscales layout (build the pyramid first)"
        )
    return [item["asset"] for item in layout]


def open_level(source: str | storage.Store, level: str = ".", **kwargs: Any) -> Any:
    """One level as an xarray Dataset ("." or "1x" is level 0); `kwargs` go to `xr.open_zarr`.
    The CRS variable is a coordinate (`toolkit.cf.crs_as_coords`), so rioxarray finds it.

    Without `chunks`, each dask chunk is one stored object, a whole shard, as
    `xr.open_dataset(store, engine="toolkit", chunks={})` gives (zarr's own default is the
    inner chunk: a task per 256 px tile, each reading the shard's index again)."""
    import xarray as xr

    from toolkit.cf import crs_as_coords

    store = open_source(source)
    group = None if level in (".", BASE, "") else level
    consolidated = _root(store).get("consolidated_metadata") is not None
    kwargs.setdefault("consolidated", consolidated)
    if "chunks" not in kwargs:
        lazy = xr.open_zarr(store.zarr(read_only=True), group=group, **kwargs, chunks=None)
        kwargs["chunks"] = whole_objects(lazy)
    ds = xr.open_zarr(store.zarr(read_only=True), group=group, **kwargs)
    return crs_as_coords(ds, kwargs.get("decode_coords", True))


def whole_objects(ds: Any) -> dict[str, int]:
    """Dask chunk sizes by dimension that keep every array's stored objects whole: its shards
    (else its chunks). A dimension whose arrays disagree keeps zarr's own chunking ({})."""
    sizes: dict[str, set[int]] = {}
    for name, var in ds.variables.items():
        if name in ds.dims:  # an index coordinate: read whole into memory, never chunked
            continue
        shape = var.encoding.get("shards") or var.encoding.get("chunks")
        for dim, n in zip(var.dims, shape or (), strict=False):
            sizes.setdefault(dim, set()).add(int(n))
    return {dim: next(iter(ns)) for dim, ns in sizes.items() if len(ns) == 1}


def open_datatree(source: str | storage.Store, **kwargs: Any) -> Any:
    """Every level as a child of an empty-root DataTree (`1x`, `2x`, ...), lazily (dask)."""
    import xarray as xr

    store = open_source(source)
    root = _root(store)
    children = {}
    for asset in levels(store):
        children[BASE if asset == "." else asset] = open_level(store, asset, **kwargs)
    tree = {"/": xr.Dataset(attrs=root.get("attributes", {}))}
    tree.update({f"/{name}": ds for name, ds in children.items()})
    return xr.DataTree.from_dict(tree)


def _root(store: storage.Store) -> dict[str, Any]:
    try:
        return storage.get_json(store, "zarr.json")
    except storage.NotFound as err:
        raise PlanError(f"{store.url}: no zarr.json at the root (not a zarr v3 store)") from err
