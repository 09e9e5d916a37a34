"""Open a virtual dataset with xarray in one line: `open_dataset("path/or/s3://repo")`.

Chunks decode at read time through gribberish's codec from the source GRIB2 byte ranges; the
repo's persisted config says where the sources are, so the location is all a reader needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from toolkit import icechunk as R
from toolkit import storage

__all__ = ["PREFERRED", "open_dataset"]

PREFERRED: Mapping[str, Any] = MappingProxyType({})  # xarray's `chunks={}`, immutable


def open_dataset(
    repo: str | storage.Store,
    *,
    chunks: int | str | Mapping[str, Any] | None = PREFERRED,
    branch: str = "main",
    snapshot: str | None = None,
    credentials: Literal["anonymous", "env"] = "anonymous",
    store_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """`xr.open_dataset(repo, engine="toolkit", chunks={}, ...)`, refusing anything but an
    Icechunk repo: one reader, so both return the same Dataset (variables, coordinates,
    encodings, dask chunks). The default `chunks={}` is dask with one chunk per GRIB message
    (a pyramid level's: per shard); `chunks=None` is lazy without dask, `"auto"` dask's sizing
    in whole messages. `kwargs` are `xr.open_dataset`'s (`group="2x"`, `drop_variables`,
    decoders). Sources are read anonymously unless `credentials="env"`.

    `branch` is pinned to its head snapshot here: xarray names dask tasks after the
    arguments, so two versions of a live repo never share task names on a cluster."""
    import xarray as xr

    try:
        store = storage.open_store(repo, must_exist=True, **(store_options or {}))
    except storage.NotFound:
        raise R.NotARepo(f"no Icechunk repo at {repo}: the path does not exist; check it") from None
    handle = R.open_repo(store, credentials, fresh=True)  # a Zarr store or nothing: NotARepo
    pinned = snapshot if snapshot is not None else R.snapshot_of(handle, branch)
    return xr.open_dataset(
        store,
        engine="toolkit",  # toolkit.xarray_backend, by its entry point: it is a layer above
        chunks=dict(chunks) if isinstance(chunks, Mapping) else chunks,
        branch=branch,
        snapshot=pinned,
        credentials=credentials,
        **kwargs,
    )
