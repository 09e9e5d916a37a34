"""Synthetic level-0 stores for tests, benchmarks and the demo.

A global lat/lon grid (north-up, cell centres), a CRS variable, and one field: sparse floats over
a ragged "land" mask (ocean shards are simply absent, as in real sparse stores), multi-band floats
whose bands are invalid at different pixels, or categorical labels with many ties.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import zarr

from toolkit import storage

CRS_ATTRS = {
    "grid_mapping_name": "latitude_longitude",
    "semi_major_axis": 6378137.0,
    "inverse_flattening": 298.257223563,
    "crs_wkt": 'GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
    'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]]',
}


def land_mask(shape: tuple[int, int], seed: int = 0, blobs: int = 6) -> np.ndarray:
    """A few ragged continents: smooth blobs plus pixel noise on the coast."""
    rng = np.random.default_rng(seed)
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    field = np.zeros(shape)
    for _ in range(blobs):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = rng.uniform(0.05, 0.11) * max(h, w)
        field += np.exp(-(((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r)))
    field += rng.normal(0, 0.05, shape)  # a ragged coast
    return field > 0.5


def write_store(
    store: storage.Store,
    shape: tuple[int, int] = (300, 500),
    shards: tuple[int, int] = (64, 64),
    chunks: tuple[int, int] | None = None,
    kind: str = "sparse",
    bands: int = 3,
    seed: int = 0,
    consolidated: bool = False,
    key_separator: str = "/",
    name: str = "field",
) -> dict[str, Any]:
    """Write a level-0 store; returns {"values": level-0 array, "fill": nodata}."""
    rng = np.random.default_rng(seed)
    zstore = store.zarr()
    root = zarr.open_group(zstore, mode="w", attributes={"title": f"synthetic {kind} field"})
    h, w = shape
    lat = 90 - (np.arange(h) + 0.5) * (180 / h)
    lon = -180 + (np.arange(w) + 0.5) * (360 / w)
    for dim, vals, attrs in (
        ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
        ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"}),
    ):
        arr = root.create_array(
            dim,
            shape=vals.shape,
            dtype="float64",
            chunks=vals.shape,
            dimension_names=[dim],
            attributes=attrs,
        )
        arr[:] = vals
    crs = root.create_array("spatial_ref", shape=(), dtype="int32", attributes=CRS_ATTRS)
    crs[...] = 0
    land = land_mask(shape, seed)
    chunks = chunks or tuple(min(32, s) for s in shards)
    encoding = {"name": "default", "configuration": {"separator": key_separator}}
    attrs = {"grid_mapping": "spatial_ref", "units": "1", "long_name": f"synthetic {kind}"}
    if kind == "categorical":
        values = rng.integers(1, 5, shape).astype(np.uint8)
        values[:, : w // 3] = rng.integers(1, 3, (h, w // 3))  # 2 labels: ties are common
        values[~land] = 0
        fill: Any = 0
        attrs |= {  # CF says these are classes: the pyramid's operator follows (mode)
            "flag_values": [0, 1, 2, 3, 4],
            "flag_meanings": "nodata water forest cropland urban",
        }
        dims = ["lat", "lon"]
        arr_shards: tuple[int, ...] = shards
        arr_chunks: tuple[int, ...] = chunks
    elif kind == "bands":
        band = root.create_array(
            "band", shape=(bands,), dtype="int32", chunks=(bands,), dimension_names=["band"]
        )
        band[:] = np.arange(bands)
        values = rng.dirichlet(np.ones(bands), size=shape).transpose(2, 0, 1).astype(np.float32)
        values[:, ~land] = np.nan
        for b in range(bands):  # each band loses its own pixels
            values[b][rng.random(shape) < 0.05] = np.nan
        fill = float("nan")
        dims = ["band", "lat", "lon"]
        arr_shards, arr_chunks = (1, *shards), (1, *chunks)
    else:
        values = (20 + 10 * np.cos(np.deg2rad(lat))[:, None] + rng.normal(0, 2, shape)).astype(
            np.float32
        )
        values[~land] = np.nan
        fill = float("nan")
        dims = ["lat", "lon"]
        arr_shards, arr_chunks = shards, chunks
    arr = root.create_array(
        name,
        shape=values.shape,
        dtype=values.dtype,
        chunks=arr_chunks,
        shards=arr_shards,
        fill_value=fill,
        dimension_names=dims,
        attributes=attrs,
        chunk_key_encoding=encoding,
    )
    arr[...] = values  # all-fill shards are skipped by zarr: the ocean is absent
    if consolidated:
        with warnings.catch_warnings():  # zarr notes consolidation is not in the v3 spec yet
            warnings.simplefilter("ignore", UserWarning)
            zarr.consolidate_metadata(zstore)
    return {"values": values, "fill": fill, "name": name, "dims": dims}
