"""Zarr store -> arrays, from one listing and the metadata documents only.

Never reads a chunk or shard: a shard index lives inside the object, so on cold data even a
range read would trigger a restore. Sizes come from the listing; geometry from metadata. Handles
Zarr v2 (`.zarray` + `.zattrs`) and v3 (`zarr.json`), sharded arrays (measured by the shard,
the object), 0-d arrays, and both v3 chunk key encodings.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolkit import storage
from toolkit.archive.model import ArrayInfo

__all__ = [
    "METADATA_NAMES",
    "HierarchyError",
    "metadata_keys",
    "parse_arrays",
    "read_arrays",
    "read_listing",
]

METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


class HierarchyError(ValueError):
    """A metadata document cannot be understood; names the key and the cause."""

    def __init__(self, key: str, cause: str) -> None:
        self.key = key
        super().__init__(f"{key}: {cause}")


class NotJSON(HierarchyError):
    """A metadata document whose bytes are not JSON: the object is corrupt, not the input."""

    def __init__(self, key: str, detail: str) -> None:
        self.detail = detail
        super().__init__(key, f"metadata is not valid JSON ({detail})")


def _dir(key: str) -> str:
    return posixpath.dirname(key)


def metadata_keys(keys: Iterable[str]) -> list[str]:
    """The documents to GET: every zarr.json and .zarray, and .zattrs beside a .zarray. Pure."""
    keys = list(keys)
    arrays_v2 = {_dir(k) for k in keys if posixpath.basename(k) == ".zarray"}
    out = []
    for k in keys:
        base = posixpath.basename(k)
        if base in ("zarr.json", ".zarray") or (base == ".zattrs" and _dir(k) in arrays_v2):
            out.append(k)
    return sorted(out)


def _ints(value: Any, key: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise HierarchyError(key, f"{what} must be a list of integers, got {value!r}")
    return tuple(value)


def _v3(key: str, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    if doc.get("node_type") != "array":
        return None
    shape = _ints(doc.get("shape"), key, "shape")
    grid = doc.get("chunk_grid") or {}
    if grid.get("name") != "regular":
        raise HierarchyError(
            key, f"only regular chunk grids can be partitioned, not {grid.get('name')!r}"
        )
    outer = _ints((grid.get("configuration") or {}).get("chunk_shape"), key, "chunk_shape")
    inner = None
    for codec in doc.get("codecs") or []:
        if isinstance(codec, Mapping) and codec.get("name") == "sharding_indexed":
            inner = _ints(
                (codec.get("configuration") or {}).get("chunk_shape"), key, "inner chunk_shape"
            )
    enc = doc.get("chunk_key_encoding") or {"name": "default"}
    name = enc.get("name")
    if name not in ("default", "v2"):
        raise HierarchyError(key, f"unknown chunk_key_encoding {name!r}")
    sep = (enc.get("configuration") or {}).get("separator", "/" if name == "default" else ".")
    attrs = doc.get("attributes") or {}
    dims = doc.get("dimension_names")
    return {
        "shape": shape,
        "object_shape": outer,
        "inner_shape": inner,
        "zarr_format": 3,
        "encoding": name,
        "separator": sep,
        "dimension_names": tuple(dims) if isinstance(dims, list) else None,
        "coordinates": attrs.get("coordinates") if isinstance(attrs, Mapping) else None,
    }


def _v2(key: str, doc: Mapping[str, Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    shape = _ints(doc.get("shape"), key, "shape")
    chunks = _ints(doc.get("chunks"), key, "chunks")
    dims = attrs.get("_ARRAY_DIMENSIONS")
    return {
        "shape": shape,
        "object_shape": chunks,
        "inner_shape": None,
        "zarr_format": 2,
        "encoding": "v2",
        "separator": doc.get("dimension_separator") or ".",
        "dimension_names": tuple(dims) if isinstance(dims, list) else None,
        "coordinates": attrs.get("coordinates"),
    }


def _decode(key: str, body: bytes) -> Mapping[str, Any]:
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotJSON(key, f"{type(err).__name__}: {err}") from None
    if not isinstance(doc, Mapping):
        raise HierarchyError(key, "metadata is not a JSON object")
    return doc


def parse_arrays(
    objects: Iterable[tuple[str, int]], documents: Mapping[str, bytes]
) -> list[ArrayInfo]:
    """Arrays from (key, size) pairs and the bodies of `metadata_keys` (pure)."""
    docs = {k: _decode(k, v) for k, v in documents.items()}
    found: dict[str, dict[str, Any]] = {}
    for key, doc in docs.items():
        base = posixpath.basename(key)
        if base == "zarr.json":
            info = _v3(key, doc)
        elif base == ".zarray":
            info = _v2(key, doc, docs.get(posixpath.join(_dir(key), ".zattrs"), {}))
        else:
            continue
        if info is not None:
            if len(info["shape"]) != len(info["object_shape"]):
                raise HierarchyError(
                    key, f"shape {info['shape']} and chunks {info['object_shape']} differ in rank"
                )
            found[_dir(key)] = info
    if "" in found:
        raise HierarchyError(
            "zarr.json", "an array at the root of the listing has no path; list its parent"
        )
    sizes = {path: [0, 0] for path in found}
    for key, size in objects:
        if posixpath.basename(key) in METADATA_NAMES:
            continue
        parent = _dir(key)
        while parent and parent not in sizes:
            parent = _dir(parent)
        if parent in sizes:
            sizes[parent][0] += size
            sizes[parent][1] += 1
    named: set[str] = set()
    for path, info in found.items():
        coords = info["coordinates"]
        if isinstance(coords, str):
            named.update(posixpath.join(_dir(path), c) for c in coords.split())
    return [
        ArrayInfo(
            path=path,
            shape=info["shape"],
            object_shape=info["object_shape"],
            zarr_format=info["zarr_format"],
            encoding=info["encoding"],
            separator=info["separator"],
            dimension_names=info["dimension_names"],
            inner_shape=info["inner_shape"],
            stored_bytes=sizes[path][0],
            objects=sizes[path][1],
            coordinate=path in named,
        )
        for path, info in sorted(found.items())
    ]


def read_arrays(store: storage.Store, scope: str) -> list[ArrayInfo]:
    """The arrays of the Zarr store at `scope` (a prefix of `store`): one LIST, metadata GETs."""
    return read_listing(store, scope)[1]


def read_listing(
    store: storage.Store, scope: str
) -> tuple[list[storage.ObjectInfo], list[ArrayInfo]]:
    """The scope's listing and its arrays: for callers that also need which chunks exist and
    their sizes (one LIST serves both)."""
    listing = storage.list_objects(store, scope)
    wanted = metadata_keys(o.key for o in listing)
    if not wanted:
        raise HierarchyError(
            scope or store.url, "no Zarr metadata (zarr.json / .zarray) under this prefix"
        )
    with ThreadPoolExecutor(max_workers=8) as pool:
        bodies = dict(
            zip(wanted, pool.map(lambda k: storage.get(store, k).data, wanted), strict=True)
        )
    try:
        return listing, parse_arrays(((o.key, o.size) for o in listing), bodies)
    except NotJSON as err:  # named in its store, with the way out: exit 1, not bad usage
        raise storage.CorruptObject(store.url, err.key, "JSON", err.detail) from None
