"""Read what the planner needs from a store: level-0 array metadata, shard listings, coordinates.

Only metadata and listings are read here, never a data chunk.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from toolkit import storage
from toolkit.pyramid.plan import ArrayMeta, PlanError, check_dtype

LEVEL_GROUP = re.compile(r"^\d+x$")

# The plan and the metadata backup live under `.pyramid/`, which zarr lists as a stray object
# and warns about on every group listing. Filtered once, at import, never toggled per call.
warnings.filterwarnings("ignore", message=r"Object at \.pyramid is not recognized")


@dataclass
class Source:
    store: storage.Store
    arrays: dict[str, ArrayMeta]
    listings: dict[str, list[str]]
    coords: dict[str, np.ndarray]  # every 1-D array of the root, by name
    attrs: dict[str, dict[str, Any]]  # attributes of every root array
    crs: tuple[str, ...] = ()  # grid-mapping variables named by the chosen arrays
    node_keys: tuple[str, ...] = field(default=())  # zarr.json of every level-0 node


def _fill(value: Any) -> Any:
    if value is None:
        return None
    v = value.item() if hasattr(value, "item") else value
    return v


def open_source(source: str | storage.Store, **options: Any) -> storage.Store:
    """Open SOURCE for the pyramid; a bad URL or a local path that is not a directory is bad usage.

    Checked before opening because opening a local path creates it: a typo would otherwise
    leave an empty directory behind and fail later with a less useful message.
    """
    if isinstance(source, storage.Store):
        return source
    if "://" not in source or source.startswith("file://"):
        path = Path(source.removeprefix("file://")).expanduser()
        if not path.is_dir():
            what = "is not a directory" if path.exists() else "does not exist"
            raise PlanError(f"store {path.resolve()}: {what} (want a zarr v3 store)")
    try:
        return storage.open_store(source, **options)
    except storage.StorageError as err:
        raise PlanError(str(err)) from err


def _root_members(store: storage.Store) -> dict[str, Any]:
    # probed through toolkit.storage first: its errors name the store and the cause in one line
    # (zarr would surface obstore's raw, multi-line errors)
    if not storage.exists(store, "zarr.json"):
        if storage.exists(store, ".zgroup") or storage.exists(store, ".zarray"):
            raise PlanError(f"{store.url}: a zarr v2 store; the pyramid wants zarr v3")
        raise PlanError(f"{store.url}: no zarr.json at the root (not a zarr v3 store)")
    try:
        group = zarr.open_group(store.zarr(read_only=True), mode="r", use_consolidated=False)
    except (FileNotFoundError, KeyError, ValueError, TypeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PlanError(f"{store.url}: no zarr v3 group at the store root ({first})") from err
    if group.metadata.zarr_format != 3:
        raise PlanError(
            f"{store.url}: the root is a zarr v{group.metadata.zarr_format} group; "
            "the pyramid wants zarr v3"
        )
    return dict(group.members())


def _skip_reason(arr: Any, coords: dict[str, np.ndarray]) -> str | None:
    """Why a root array is not a pyramid variable (None: it is one)."""
    if arr.ndim < 2:
        return "has fewer than two dimensions"
    dims = arr.metadata.dimension_names
    if dims is None or any(d is None for d in dims):
        return "has no dimension_names (the two spatial dims must be named, last)"
    missing = [d for d in dims[-2:] if d not in coords]
    if missing:
        return f"has no 1-D coordinate array for {', '.join(map(repr, missing))}"
    return None


def array_meta(name: str, arr: Any) -> ArrayMeta:
    dims = arr.metadata.dimension_names
    if dims is None or any(d is None for d in dims):
        raise PlanError(
            f"array {name!r}: has no dimension_names; the two spatial dims must be named"
        )
    shards = arr.shards or arr.chunks
    return ArrayMeta(
        name=name,
        shape=tuple(arr.shape),
        dims=tuple(dims),
        grid=tuple(shards),
        chunks=tuple(arr.chunks),
        dtype=check_dtype(name, np.dtype(arr.dtype)).name,
        fill_value=_fill(arr.fill_value),
        key_encoding=arr.metadata.chunk_key_encoding.to_dict(),
    )


def read_source(
    store: storage.Store, variables: list[str] | None = None, listed: bool = True
) -> Source:
    """Level-0 arrays with two named spatial dims whose 1-D coordinates exist, and their listings
    (`listed=False`: none; the caller finds the objects another way)."""
    nodes = _root_members(store)
    members = {n: a for n, a in nodes.items() if isinstance(a, zarr.Array)}
    coords = {n: a[...] for n, a in members.items() if a.ndim == 1}
    attrs = {n: dict(a.attrs) for n, a in members.items()}
    # CF auxiliary coordinates (a forecast's 2-D valid_time) describe the data: not variables
    aux = {c for a in attrs.values() for c in str(a.get("coordinates", "")).split()}
    members = {n: a for n, a in members.items() if n not in aux}
    candidates: dict[str, ArrayMeta] = {}
    skipped: dict[str, str] = {}
    for name, arr in sorted(members.items()):
        why = _skip_reason(arr, coords)
        if why is None:
            try:
                candidates[name] = array_meta(name, arr)
            except PlanError as err:  # a dtype no pyramid pools: refused only if chosen
                skipped[name] = str(err).removeprefix(f"array {name!r} ")
        elif arr.ndim >= 2:
            skipped[name] = why
    if variables:
        for v in variables:
            if v not in members:
                raise PlanError(f"variable {v!r}: no such array at the root of {store.url}")
            if v not in candidates:
                why = skipped.get(v) or _skip_reason(members[v], coords) or "cannot be pyramided"
                raise PlanError(f"variable {v!r}: {why}")
        candidates = {v: candidates[v] for v in variables}
    elif not candidates:
        detail = "; ".join(f"array {n!r} {why}" for n, why in sorted(skipped.items()))
        raise PlanError(
            f"{store.url}: no array to pyramid ({detail or 'the root has no array of 2+ dims'})"
        )
    for name, meta in candidates.items():
        if 0 in meta.shape:
            raise PlanError(
                f"array {name!r} is empty (shape {tuple(meta.shape)}): there is nothing to "
                "pyramid; write data first, or pick another with --variable"
            )
        for d in meta.dims[-2:]:
            if len(coords[d]) != meta.shape[meta.dims.index(d)]:
                raise PlanError(f"array {name!r}: coordinate {d!r} length differs from its dim")
            if len(coords[d]) < 2:
                raise PlanError(f"array {name!r}: coordinate {d!r} needs >= 2 values for a spacing")
    listings = {
        name: [k[len(name) + 1 :] for k in storage.list_keys(store, name + "/")] if listed else []
        for name in candidates
    }
    crs = tuple(
        sorted(
            {
                attrs[n]["grid_mapping"]
                for n in candidates
                if attrs[n].get("grid_mapping") in members
            }
        )
    )
    node_keys = (
        "zarr.json",
        *(f"{n}/zarr.json" for n in sorted(nodes) if not LEVEL_GROUP.match(n)),
    )
    return Source(store, candidates, listings, coords, attrs, crs, node_keys)


def read_json(store: storage.Store, key: str) -> dict[str, Any]:
    return json.loads(storage.get(store, key).data)
