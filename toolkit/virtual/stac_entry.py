"""A virtual dataset's STAC entry: its Icechunk repo as the data asset.

`xr.open_dataset(href, **open_kwargs)` opens it through toolkit's xarray engine ("toolkit",
installed with the package): plain xarray cannot authorize a repo's virtual chunk containers
from a location string. The asset also names the toolkit reader (`toolkit:opener`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from toolkit import storage

__all__ = ["OPENER", "OPEN_KWARGS", "stac"]

OPENER = "toolkit.virtual.open_dataset"
OPEN_KWARGS: dict[str, Any] = {"engine": "toolkit"}  # toolkit.xarray_backend
DESCRIPTION = (
    "An Icechunk repo of byte-range references into the source GRIB2 files, decoded at read "
    "time. Open it with `xr.open_dataset(href, **xarray:open_kwargs)` (engine 'toolkit': pip "
    "install zarr-toolkit), or `toolkit.virtual.open_dataset(href)`."
)


def stac(
    repo: str | storage.Store,
    output_dir: str | Path,
    *,
    name: str | None = None,
    branch: str = "main",
    credentials: Literal["anonymous", "env"] = "anonymous",
    store_options: dict[str, Any] | None = None,
) -> Any:
    """Write the STAC Collection + Item of the virtual dataset at `repo` (its `branch`, main by
    default) to `output_dir`; returns the `toolkit.stac.Entry`. Rerun after an update: the
    entry is rewritten with the new extents."""
    from toolkit.stac import ICECHUNK_MEDIA_TYPE, StacAsset, write_entry
    from toolkit.virtual.reader import open_dataset

    store = storage.open_store(repo, must_exist=True, **(store_options or {}))
    # chunks=None: coordinates load through zarr, not dask's threaded scheduler, whose
    # non-daemon pool would keep the `toolkit` process waiting (toolkit.cli.main joins threads)
    ds = open_dataset(store, branch=branch, credentials=credentials, chunks=None)
    href = str(store.local_path) if store.is_local else store.url
    kwargs = dict(OPEN_KWARGS)
    if branch != "main":
        kwargs["branch"] = branch
    asset = StacAsset(
        key="data",
        href=href,
        # Icechunk has no registered media type: see toolkit.stac.ICECHUNK_MEDIA_TYPE
        media_type=ICECHUNK_MEDIA_TYPE,
        title="Icechunk repo (virtual GRIB2 references)",
        description=DESCRIPTION,
        open_kwargs=kwargs,
        roles=("data", "references"),
        extra={"toolkit:opener": OPENER},
    )
    label = name or (store.local_path.name if store.is_local else store.url.rstrip("/"))
    try:
        return write_entry(
            ds,
            output_dir,
            name=label.rsplit("/", 1)[-1],
            assets=[asset],
            keywords=["icechunk", "zarr", "grib2", "virtual"],
        )
    finally:
        ds.close()
