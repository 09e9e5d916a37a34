"""Open a virtual dataset with xarray in one line: `open_dataset("path/or/s3://repo")`.

Chunks decode at read time through gribberish's codec from the source GRIB2 byte ranges; the
repo's persisted config says where the sources are, so the location is all a reader needs.
"""

from __future__ import annotations

from typing import Any, Literal

from toolkit import icechunk as R
from toolkit import storage

__all__ = ["open_dataset"]


def open_dataset(
    repo: str | storage.Store,
    *,
    branch: str = "main",
    snapshot: str | None = None,
    credentials: Literal["anonymous", "env"] = "anonymous",
    store_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """The dataset at `branch` (or `snapshot`) as an xarray Dataset, lazily; `kwargs` go to
    `xr.open_zarr`. Sources are read anonymously unless `credentials="env"`. The CRS variable
    is a coordinate (`toolkit.cf.crs_as_coords`), so rioxarray finds it."""
    import xarray as xr

    from toolkit.cf import crs_as_coords

    try:
        store = storage.open_store(repo, must_exist=True, **(store_options or {}))
    except storage.NotFound:
        raise R.NotARepo(f"no Icechunk repo at {repo}: the path does not exist; check it") from None
    handle = R.open_repo(store, credentials, fresh=True)
    kwargs.setdefault("consolidated", False)
    ds = xr.open_zarr(R.readonly(handle, branch, snapshot).store, **kwargs)
    return crs_as_coords(ds, kwargs.get("decode_coords", True))
