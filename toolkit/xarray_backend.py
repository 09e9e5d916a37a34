"""xarray's engine "toolkit": `xr.open_datatree(path, engine="toolkit")` for a pyramid,
`xr.open_dataset(path, engine="toolkit")` for one level or a virtual GRIB repo.

xarray alone cannot open either: `engine="zarr"` refuses a pyramid's tree (every level reuses
level 0's dimension names, see `toolkit.pyramid.read`), and a virtual repo's chunks are read
only once its virtual chunk containers are authorized. This engine opens the location once and
reads through the home `toolkit.pyramid.home.open_home` finds there (a Zarr store, or a repo at
a branch or snapshot). xarray loads every installed engine on each `open_dataset` call, so
this module imports nothing but xarray's base class at import time.

What it returns is lazy and holds no dask: xarray chunks it when the caller passes `chunks=`
(`chunks={}`: each variable's `preferred_chunks` encoding, which this engine sets to one
object read, see `read_whole_objects`). `toolkit.virtual.open_dataset` is this engine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from xarray.backends import BackendEntrypoint

__all__ = ["ToolkitBackendEntrypoint"]

# xarray's CF decoding options, forwarded to `xr.open_zarr` when the caller sets them
DECODERS = (
    "mask_and_scale",
    "decode_times",
    "decode_timedelta",
    "use_cftime",
    "concat_characters",
    "decode_coords",
)
BASE = ("1x", ".", "", "/")  # the names of level 0: the store's root
WANT = (
    "engine 'toolkit' opens a Zarr v3 store (a pyramid built by `toolkit pyramid build`) "
    "or an Icechunk repo (a virtual dataset's): check the path"
)


class ToolkitBackendEntrypoint(BackendEntrypoint):
    """Open toolkit's outputs with xarray: a pyramid store (every level) or a virtual
    GRIB Icechunk repo (a path or URL; its pyramid levels too, when it has some)."""

    description = "toolkit's pyramids (every level) and virtual GRIB Icechunk repos"
    url = "docs/xarray.md"
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj",
        "drop_variables",
        "group",
        "branch",
        "snapshot",
        "credentials",
        "store_options",
        *DECODERS,
    )
    supports_groups: ClassVar[bool] = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """A local pyramid (a root zarr.json with a multiscales layout) or a local Icechunk
        repo; remote URLs are never probed here (xarray guesses for every open)."""
        root = _local_dir(filename_or_obj)
        if root is None:
            return False
        if (root / "repo").is_file() and (root / "snapshots").is_dir():
            return True
        try:
            attrs = json.loads((root / "zarr.json").read_text()).get("attributes", {})
        except (OSError, ValueError, AttributeError):
            return False
        return bool(attrs.get("multiscales", {}).get("layout"))

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        branch: str = "main",
        snapshot: str | None = None,
        credentials: Literal["anonymous", "env"] = "anonymous",
        store_options: Mapping[str, Any] | None = None,
        **decoders: Any,
    ) -> Any:
        """One pyramid level (`group="4x"`; None or "1x" is level 0), or a repo's dataset
        at `branch` (or `snapshot`), lazily: xarray applies `chunks` to what this returns."""
        kwargs = _zarr_kwargs(drop_variables, decoders)
        level = _level(group)
        home = _open(filename_or_obj, credentials, store_options)
        try:
            ds = home.open_level(level, branch, snapshot, **kwargs)
            return read_whole_objects(crs_as_coords(ds, decoders))
        except (KeyError, FileNotFoundError) as err:
            if level is None:
                raise
            from toolkit.pyramid.geometry import PlanError

            try:
                has = self.open_datatree(filename_or_obj, branch=branch, snapshot=snapshot,
                                         credentials=credentials, store_options=store_options)  # fmt: skip
                names = ", ".join(n.name for n in has.children.values() if n.name) or "none"
            except PlanError:  # a Zarr store that is no pyramid: it has no levels
                names = "none"
            raise PlanError(
                f"{_named(filename_or_obj)}: no group {level!r}; pass group= one of its "
                f"levels ({names})"
            ) from err

    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        branch: str = "main",
        snapshot: str | None = None,
        credentials: Literal["anonymous", "env"] = "anonymous",
        store_options: Mapping[str, Any] | None = None,
        **decoders: Any,
    ) -> Any:
        """The pyramid as `toolkit.pyramid.open_datatree` builds it: an empty root (the
        root's attributes) and one child per level, `1x` for level 0. A repo without levels
        is a one-node tree; a repo's levels are read from one snapshot."""
        import xarray as xr

        kwargs = _zarr_kwargs(drop_variables, decoders)
        tree = _open(filename_or_obj, credentials, store_options).open_tree(
            branch, snapshot, **kwargs
        )
        return xr.DataTree.from_dict(
            {
                n.path: read_whole_objects(crs_as_coords(n.to_dataset(inherit=False), decoders))
                for n in tree.subtree
            }
        )

    def open_groups_as_dict(  # type: ignore[override]
        self, filename_or_obj: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """`xr.open_groups`: the tree's nodes by path."""
        tree = self.open_datatree(filename_or_obj, **kwargs)
        return {node.path: node.to_dataset() for node in tree.subtree}


def crs_as_coords(ds: Any, decoders: Mapping[str, Any]) -> Any:
    """`toolkit.cf.crs_as_coords` with the caller's `decode_coords` (the readers below apply
    it already; a DataTree's nodes are rebuilt here)."""
    from toolkit.cf import crs_as_coords as as_coords

    return as_coords(ds, decoders.get("decode_coords", True))


def read_whole_objects(ds: Any) -> Any:
    """Each variable's `preferred_chunks` (what xarray's `chunks={}` gives, and what `"auto"`
    rounds to) set to one stored object: a shard where the array is sharded, else its chunk.

    xarray's zarr backend prefers the inner chunk, a tile-sized read (256 or 512 px in a
    pyramid level): a dask task per inner chunk reads the shard's index once per task and
    multiplies the tasks. A virtual GRIB array is never sharded: its chunk is one
    GRIB message (one (time, step) field of full ny x nx), decoded whole whatever is asked."""
    for var in ds.variables.values():
        shards = var.encoding.get("shards")
        if shards:
            var.encoding["preferred_chunks"] = dict(zip(var.dims, shards, strict=True))
    return ds


def _local_dir(filename_or_obj: Any) -> Path | None:
    if not isinstance(filename_or_obj, str | os.PathLike):
        return None
    text = os.fspath(filename_or_obj)
    if not isinstance(text, str) or ("://" in text and not text.startswith("file://")):
        return None
    from toolkit import storage

    path = storage.local_path_of(text)  # a file:// URL decoded, as every store reads it
    return path if path is not None and path.is_dir() else None


def _named(filename_or_obj: Any) -> str:
    """The location as the user wrote it (a local path resolved, not percent-encoded)."""
    from toolkit import storage

    if isinstance(filename_or_obj, storage.Store):
        return filename_or_obj.url
    text = os.fspath(filename_or_obj)
    local = storage.local_path_of(text)
    return str(local.resolve()) if local is not None else text


def _level(group: str | None) -> str | None:
    """The zarr group of a level (None: level 0, the root)."""
    if group is None:
        return None
    name = group.strip("/")
    return None if name in BASE else name


def _zarr_kwargs(drop_variables: Any, decoders: Mapping[str, Any]) -> dict[str, Any]:
    """What `xr.open_zarr` is given: lazily indexed arrays (`chunks=None`: xarray chunks
    the result itself when the caller asked), the variables dropped, the decoders set."""
    unknown = sorted(set(decoders) - set(DECODERS))
    if unknown:
        raise TypeError(f"engine 'toolkit' takes no argument {', '.join(map(repr, unknown))}")
    kwargs: dict[str, Any] = {"chunks": None, **decoders}
    if drop_variables is not None:
        kwargs["drop_variables"] = drop_variables
    return kwargs


def _open(
    filename_or_obj: Any,
    credentials: Literal["anonymous", "env"],
    store_options: Mapping[str, Any] | None,
) -> Any:
    """The home of what is there (`toolkit.pyramid.home.open_home`: a pyramid's Zarr store or
    an Icechunk repo), its location opened once; anything else is refused in one line naming
    the path and what it wants."""
    from toolkit import storage
    from toolkit.pyramid.geometry import PlanError
    from toolkit.pyramid.home import open_home

    if isinstance(filename_or_obj, os.PathLike):
        filename_or_obj = os.fspath(filename_or_obj)
    if not isinstance(filename_or_obj, str | storage.Store):
        raise TypeError(
            f"engine 'toolkit' opens a path or URL, not {type(filename_or_obj).__name__}"
        )
    named = _named(filename_or_obj)
    local = None if isinstance(filename_or_obj, storage.Store) else storage.local_path_of(named)
    if local is not None and not local.is_dir():
        what = "is not a directory" if local.exists() else "does not exist"
        raise PlanError(f"{named}: {what}; {WANT}")
    try:  # the store options as the caller gives them (any `toolkit.storage.open_store` takes)
        store = storage.open_store(filename_or_obj, **dict(store_options or {}))
    except storage.StorageError as err:
        raise PlanError(str(err)) from err
    home = open_home(store, storage.Options(credentials=credentials))
    if not home.exists():
        raise PlanError(f"{named}: holds no zarr.json at its root and no Icechunk repo; {WANT}")
    return home
