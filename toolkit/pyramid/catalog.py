"""A pyramid's STAC entry: level 0 as the data asset, every coarser level as one more asset.

Each asset opens with plain xarray, `xr.open_dataset(href, **asset["xarray:open_kwargs"])`
(engine zarr, the level's group), so a catalogue's reader needs nothing of toolkit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit import storage
from toolkit.pyramid.read import BASE, levels, open_level
from toolkit.pyramid.read import _root as root_metadata

__all__ = ["href_of", "store_entry"]


def href_of(store: storage.Store) -> str:
    """What a reader passes to xarray: the plain path of a local store (any letter, spaces as
    they are), else its URL."""
    return str(store.local_path) if store.is_local else store.url


def _storage_options(store: storage.Store) -> dict[str, Any] | None:
    """fsspec's options a reader needs to reach a cloud store: its endpoint and anonymity
    only, never a credential."""
    opts: dict[str, Any] = {}
    if store.options.get("endpoint"):
        opts["client_kwargs"] = {"endpoint_url": store.options["endpoint"]}
    if store.options.get("anonymous"):
        opts["anon"] = True
    return opts or None


def store_entry(store: storage.Store, output_dir: str | Path) -> Any:
    """`toolkit.pyramid.stac` of a Zarr store's pyramid."""
    from toolkit.stac import StacAsset, write_entry

    names = levels(store)
    consolidated = root_metadata(store).get("consolidated_metadata") is not None
    ds = open_level(store, ".", chunks=None)
    href = href_of(store)
    name = Path(store.url.rstrip("/").rsplit("/", 1)[-1]).stem or "pyramid"
    if store.is_local:
        name = store.local_path.stem
    reach = _storage_options(store)
    assets = []
    for level in names:
        kwargs: dict[str, Any] = {"engine": "zarr", "consolidated": consolidated}
        base = level in (".", BASE)
        if not base:
            kwargs["group"] = level
        assets.append(
            StacAsset(
                key="data" if base else f"level-{level}",
                href=href,
                media_type="application/vnd+zarr",
                title="level 0 (full resolution)" if base else f"level {level}",
                description=(
                    "Level 0 of the pyramid, at the store's root."
                    if base
                    else f"Pyramid level {level}: 1/{level[:-1]} of level 0's resolution, "
                    f"in the store's group {level}."
                ),
                open_kwargs=kwargs,
                roles=("data",) if base else ("data", "overview"),
                storage_options=reach,
            )
        )
    try:
        return write_entry(
            ds,
            output_dir,
            name=name,
            assets=assets,
            keywords=["zarr", "multiscales", "pyramid"],
            # as the root's multiscales layout names them: "." is the store's root (level
            # 0), every other name a group `xr.open_zarr(href, group=name)` opens
            summaries={"multiscales:levels": names},
        )
    finally:
        ds.close()
