"""The build's own records (its plan, the pre-pyramid metadata backup) as Zarr arrays.

Each record is a 1-D uint8 array of JSON bytes in the `.pyramid` group, stored uncompressed in
one chunk, so the chunk object *is* the JSON: the toolkit reads and writes it as one object,
while zarr and xarray see a valid hierarchy and warn about nothing on any read of the store,
consolidated or not. Stores built before this layout kept `.pyramid/<name>.json` objects; those
are still read, and removed when the record is next written.

A record read back is checked (`decode`): empty, cut short, not JSON or not of its record's
shape is a `CorruptObject` naming it and the rebuild that rewrites it. The plan is read back
as the planner's `RecordedPlan` (`read_plan`), which names the same rebuild.

The `prints` record holds one fingerprint per level-0 object, `{var: {"i.j": print}}`: what
tells an edit in place (`to_zarr(region=...)`) from an object left alone, so a build rebuilds
exactly the shards that depend on the edited ones. A print is `"<fast key> <content>"` (one
token when both are the same; `toolkit.pyramid.source.settle_print` makes it):

- the fast key is what the listing says, chosen to survive a faithful copy: on a local store
  the size and modification time to the second (`cp -a`, `rsync -a` and `shutil.copy2` keep
  them; the local ETag holds the inode, which no copy keeps); elsewhere size and ETag (an S3
  copy keeps a single-part object's ETag, an MD5 of its bytes). No object is read for it, so a
  build of 10^7 objects costs a listing, as before.
- the content token is what builds compare: carried over while the fast key matches; a hash
  of the bytes (`#...`) for an object modified within a second of the listing (a rewrite in
  that second, of the same size, would keep the fast key: git's "racily clean" case), whose
  fast key is then recorded as `-` so the next build hashes it once more, settled. An object
  whose fast key changed is hashed only when the record holds a hash to compare with; else it
  counts as edited. So a copy that keeps neither mtime nor ETag (plain `cp`, a multipart
  re-upload, Azure) is rebuilt where it was not hashed, never taken as unchanged by mistake.
  Prints of an earlier toolkit (size and ETag, one token) still match the object they named.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from toolkit import storage
from toolkit.pyramid.geometry import RecordedPlan

GROUP = ".pyramid"
PLAN = "plan"
BACKUP = "backup"
PRINTS = "prints"  # level-0 fingerprints: this store's own, so beside the (reproducible) plan


def chunk_key(name: str) -> str:
    """The object that holds record `name`'s JSON bytes."""
    return f"{GROUP}/{name}/c/0"


def legacy_key(name: str) -> str:
    return f"{GROUP}/{name}.json"


def _array_doc(name: str, n: int) -> bytes:
    return json.dumps(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [n],
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(n, 1)]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
            "attributes": {
                "long_name": f"toolkit pyramid {name} (UTF-8 JSON bytes)",
                "media_type": "application/json",
            },
            "dimension_names": [f"{name}_byte"],
        },
        indent=2,
    ).encode()


GROUP_DOC = json.dumps(
    {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {
            "description": "what toolkit pyramid keeps for itself: plan, backup, prints"
        },
    },
    indent=2,
).encode()


def exists(store: storage.Store, name: str) -> bool:
    return storage.exists(store, chunk_key(name)) or storage.exists(store, legacy_key(name))


def get(store: storage.Store, name: str) -> tuple[str, bytes]:
    """(the key it was read from, the JSON bytes) of record `name`; NotFound if none, a
    `CorruptObject` if the bytes are not that record (the plan: if they are not JSON)."""
    try:
        key, data = chunk_key(name), storage.get(store, chunk_key(name)).data
    except storage.NotFound:
        key, data = legacy_key(name), storage.get(store, legacy_key(name)).data
    if name != PLAN:  # the planner says what a bad plan is, and its rebuild skips reading it
        decode(store, key, name, data)
    return key, data


def rebuild_fix(store: storage.Store) -> str:
    """The command that rewrites every record: a rebuild of every level."""
    return f"rebuild every level: `toolkit pyramid build {store.url} --rebuild-from 2x`"


def decode(store: storage.Store, key: str, name: str, data: bytes) -> Any:
    """Record `name`'s JSON, or a `CorruptObject` naming `key` when it is not that record."""
    what = f"a pyramid {name} record"
    doc = storage.record_json(store, key, data, what, rebuild_fix(store))
    why = SHAPES[name](doc) if name in SHAPES else None
    if why:
        raise storage.CorruptObject(store.url, key, what, why, rebuild_fix(store))
    return doc


def _backup_shape(doc: Any) -> str | None:
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict) or "zarr.json" not in nodes:
        return "no `nodes` object holding the root's zarr.json"
    try:
        for body in nodes.values():
            base64.b64decode(body, validate=True)
    except (TypeError, binascii.Error):
        return "a node that is not base64"
    return None


def _prints_shape(doc: Any) -> str | None:
    ok = isinstance(doc, dict) and all(
        isinstance(v, dict) and all(isinstance(fp, str) for fp in v.values()) for v in doc.values()
    )
    return None if ok else "not {variable: {shard: fingerprint}}"


SHAPES = {BACKUP: _backup_shape, PRINTS: _prints_shape}


def put(store: storage.Store, name: str, data: bytes, create: bool = False) -> None:
    """Write record `name` (`create`: only if none exists; raises AlreadyExists)."""
    if create and storage.exists(store, legacy_key(name)):
        raise storage.AlreadyExists(f"{store.url}/{legacy_key(name)} exists")
    storage.put(store, chunk_key(name), data, mode="create" if create else "overwrite")
    storage.put(store, f"{GROUP}/{name}/zarr.json", _array_doc(name, len(data)))
    storage.put(store, f"{GROUP}/zarr.json", GROUP_DOC)
    if storage.exists(store, legacy_key(name)):
        storage.delete(store, legacy_key(name))


def migrate(store: storage.Store, name: str) -> None:
    """Move an older build's `.pyramid/<name>.json` into the record layout, bytes unchanged."""
    if storage.exists(store, legacy_key(name)) and not storage.exists(store, chunk_key(name)):
        put(store, name, storage.get(store, legacy_key(name)).data)


def get_json(store: storage.Store, name: str) -> object | None:
    """Record `name` as JSON (None: there is none; a `CorruptObject` if it is not that
    record)."""
    try:
        return json.loads(get(store, name)[1])
    except storage.NotFound:
        return None


RECORDED = ("digest", "source_digest", "method", "band_dim", "variables", "levels", "level_plans")


def read_plan(store: storage.Store) -> RecordedPlan | None:
    """The plan the last build recorded (None: none); one that is not a plan this toolkit
    wrote is a `CorruptObject` naming it and the rebuild that rewrites it, as every other
    record."""
    try:
        key, raw = get(store, PLAN)
    except storage.NotFound:
        return None
    what, fix = "a pyramid plan record", rebuild_fix(store)
    doc = storage.record_json(store, key, raw, what, fix)
    missing = [k for k in RECORDED if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise storage.CorruptObject(store.url, key, what, f"lacks {', '.join(missing)}", fix)
    try:
        return RecordedPlan.from_json(doc)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        why = f"a field is not what a build writes ({type(err).__name__}: {err})"
        raise storage.CorruptObject(store.url, key, what, why, fix) from err
