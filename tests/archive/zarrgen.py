"""Synthetic Zarr v2 / v3 stores written as raw objects, with no zarr-python.

The archive code parses Zarr metadata itself, so its fixtures must not come from the library
whose output they imitate. Chunk bodies are filler of a chosen size: nothing reads them.
"""

from __future__ import annotations

import itertools
import json
import math

from toolkit import storage


def _grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(
        itertools.product(*(range(math.ceil(s / c)) for s, c in zip(shape, chunks, strict=True)))
    )


def chunk_key(path: str, index: tuple[int, ...], encoding: str = "default", sep: str = "/") -> str:
    if encoding == "default":
        return f"{path}/c" + (sep + sep.join(map(str, index)) if index else "")
    return f"{path}/" + (sep.join(map(str, index)) if index else "0")


def v3_group(store: storage.Store, path: str, attrs: dict | None = None) -> None:
    doc = {"zarr_format": 3, "node_type": "group", "attributes": attrs or {}}
    storage.put(store, f"{path}/zarr.json", json.dumps(doc).encode())


def v3_array(
    store: storage.Store,
    path: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    shards: tuple[int, ...] | None = None,
    dims: tuple[str, ...] | None = None,
    encoding: str = "default",
    sep: str = "/",
    object_bytes: int = 100,
    attrs: dict | None = None,
    write: int | None = None,
) -> list[str]:
    """Metadata plus one object per chunk (or shard); `write` limits how many exist. Returns keys."""
    outer = shards or chunks
    codecs: list[dict] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if shards:
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(chunks),
                    "codecs": codecs,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ]
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(outer)}},
        "chunk_key_encoding": {"name": encoding, "configuration": {"separator": sep}},
        "fill_value": 0.0,
        "codecs": codecs,
        "attributes": attrs or {},
    }
    if dims is not None:
        doc["dimension_names"] = list(dims)
    storage.put(store, f"{path}/zarr.json", json.dumps(doc).encode())
    keys = [chunk_key(path, i, encoding, sep) for i in _grid(shape, outer)][:write]
    for k in keys:
        storage.put(store, k, b"\x01" * object_bytes)
    return keys


def v2_group(store: storage.Store, path: str) -> None:
    storage.put(store, f"{path}/.zgroup", b'{"zarr_format": 2}')


def v2_array(
    store: storage.Store,
    path: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    dims: tuple[str, ...] | None = None,
    sep: str = ".",
    object_bytes: int = 100,
    attrs: dict | None = None,
) -> list[str]:
    doc = {
        "zarr_format": 2,
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": "<f4",
        "compressor": None,
        "fill_value": 0.0,
        "filters": None,
        "order": "C",
        "dimension_separator": sep,
    }
    storage.put(store, f"{path}/.zarray", json.dumps(doc).encode())
    zattrs = dict(attrs or {})
    if dims is not None:
        zattrs["_ARRAY_DIMENSIONS"] = list(dims)
    storage.put(store, f"{path}/.zattrs", json.dumps(zattrs).encode())
    keys = [chunk_key(path, i, "v2", sep) for i in _grid(shape, chunks)]
    for k in keys:
        storage.put(store, k, b"\x02" * object_bytes)
    return keys


def cordex_v3(store: storage.Store, scope: str = "cordex/a.zarr") -> dict[str, list[str]]:
    """A realistic small v3 store: coordinates, a big sharded variable, small ones, a scalar."""
    v3_group(store, scope)
    v3_group(store, f"{scope}/sub")
    return {
        "time": v3_array(store, f"{scope}/time", (40,), (40,), dims=("time",), object_bytes=160),
        "lat": v3_array(store, f"{scope}/lat", (4,), (4,), dims=("lat",), object_bytes=16),
        "tas": v3_array(
            store,
            f"{scope}/tas",
            (40, 4, 4),
            (1, 2, 2),
            shards=(2, 4, 4),
            dims=("time", "lat", "lon"),
            object_bytes=1000,
        ),
        "pr": v3_array(
            store,
            f"{scope}/pr",
            (40, 4),
            (10, 4),
            dims=("time", "lat"),
            object_bytes=700,
            encoding="default",
            sep=".",
        ),
        "ps": v3_array(
            store,
            f"{scope}/sub/ps",
            (40,),
            (20,),
            dims=("time",),
            object_bytes=900,
            encoding="v2",
            sep=".",
        ),
        "orog": v3_array(store, f"{scope}/orog", (), (), object_bytes=2000),
    }
