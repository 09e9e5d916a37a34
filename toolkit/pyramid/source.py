"""Read what the planner needs from a store: level-0 array metadata, shard listings, coordinates.

Only metadata and listings are read here, never a data chunk.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.errors import UnknownCodecError

from toolkit import storage
from toolkit.cf import CFError, circle, decoding
from toolkit.pyramid import records
from toolkit.pyramid.geometry import (
    ArrayMeta,
    PlanError,
    PyramidPlan,
    RecordedPlan,
    RootNode,
    VarLevel,
    check_coordinate,
    check_dtype,
    decode_keys,
)

LEVEL_GROUP = re.compile(r"^\d+x$")


@dataclass
class Source:
    store: storage.Store
    arrays: dict[str, ArrayMeta]
    listings: dict[str, list[str]]
    coords: dict[str, np.ndarray]  # every 1-D array of the root, by name
    attrs: dict[str, dict[str, Any]]  # attributes of every root array
    crs: tuple[str, ...] = ()  # grid-mapping variables named by the chosen arrays
    node_keys: tuple[str, ...] = field(default=())  # zarr.json of every level-0 node
    prints: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> `settle_print`
    nodes: dict[str, RootNode] = field(default_factory=dict)  # every root node, by name


def _fill(value: Any) -> Any:
    if value is None:
        return None
    v = value.item() if hasattr(value, "item") else value
    return v


def open_source(
    source: str | storage.Store, options: storage.Options | None = None
) -> storage.Store:
    """Open SOURCE for the pyramid, with the `options` that concern its URL; a bad URL or a
    local path that is not a directory is bad usage.

    Checked before opening because opening a local path creates it: a typo would otherwise
    leave an empty directory behind and fail later with a less useful message.
    """
    if isinstance(source, storage.Store):
        return source
    path = storage.local_path_of(source)
    if path is not None and not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise PlanError(f"store {path.resolve()}: {what} (want a zarr v3 store)")
    try:
        return storage.open_store(source, options)
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
        with storage.zarr_metadata(store):
            group = zarr.open_group(store.zarr(read_only=True), mode="r", use_consolidated=False)
    except (FileNotFoundError, KeyError, ValueError, TypeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PlanError(f"{store.url}: no zarr v3 group at the store root ({first})") from err
    if group.metadata.zarr_format != 3:
        raise PlanError(
            f"{store.url}: the root is a zarr v{group.metadata.zarr_format} group; "
            "the pyramid wants zarr v3"
        )
    return _nodes(group, store)


def _nodes(group: Any, store: storage.Store) -> dict[str, Any]:
    """The group's child arrays and groups, opened concurrently. Unlike `Group.members()`,
    an object at the root that is no node (an older build's `.pyramid/plan.json`, a
    README) is passed over without a warning: it is not the user's to hear about here."""
    from zarr.core.sync import sync

    zs = group.store

    async def one(name: str) -> tuple[str, Any]:
        try:
            with storage.zarr_metadata(store, name):
                return name, await group._async_group.getitem(name)
        except KeyError:
            return name, None
        except UnknownCodecError as err:  # read in its metadata: refused before any write
            raise PlanError(_no_codec(store, name, err, opened=False)) from None

    async def every() -> list[tuple[str, Any]]:
        names = [k async for k in zs.list_dir(group.path) if k != "zarr.json"]
        return list(await asyncio.gather(*(one(n) for n in names)))

    out: dict[str, Any] = {}
    for name, node in sync(every()):
        if isinstance(node, zarr.AsyncArray):
            out[name] = zarr.Array(node)
        elif isinstance(node, zarr.AsyncGroup):
            out[name] = zarr.Group(node)
    return out


def _no_codec(store: storage.Store, name: str, err: Exception, opened: bool = True) -> str:
    said = str(err).split(". ")[0]
    skip = ", or leave the array out with --variable" if opened else ""
    return (
        f"{store.url}/{name}: {said}; install the package that provides it (here and on "
        f"every worker){skip}"
    )


def _codecs(codecs: Any) -> Iterator[Any]:
    """Every codec of a pipeline, those inside a sharding codec included."""
    for c in codecs:
        yield c
        for inner in ("codecs", "index_codecs"):
            yield from _codecs(getattr(c, inner, ()))


def check_codecs(store: storage.Store, name: str, arr: Any) -> None:
    """Each codec of `arr` has an implementation here: zarr resolves a numcodecs codec only
    when it first decodes a chunk, which is mid-build, after the levels were created."""
    for codec in _codecs(arr.metadata.codecs):
        if hasattr(type(codec), "_codec"):  # zarr's wrapper of a numcodecs (v2) codec
            try:
                codec._codec  # noqa: B018 - resolving it is the check
            except UnknownCodecError as err:
                raise PlanError(_no_codec(store, name, err)) from None


def root_nodes(store: storage.Store, nodes: dict[str, Any]) -> dict[str, RootNode]:
    """Each root node's kind, and whether this toolkit's records mark it as its own: a level
    group carries its `pyramid:factor`, the records group holds the recorded plan."""
    out: dict[str, RootNode] = {}
    for name, node in nodes.items():
        if not isinstance(node, zarr.Group):
            out[name] = RootNode("array")
            continue
        factor = node.attrs.get("pyramid:factor")
        ours = bool(LEVEL_GROUP.match(name)) and factor == int(name[:-1])
        if name == records.GROUP:
            ours = records.exists(store, records.PLAN)
        out[name] = RootNode("group", ours)
    return out


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
    check_dtype(name, np.dtype(arr.dtype))
    try:  # the one place level 0's CF encoding is read: nodata, packing, valid range
        cf = decoding(name, arr.dtype, _fill(arr.fill_value), dict(arr.attrs))
    except CFError as err:
        raise PlanError(str(err)) from None
    return ArrayMeta(
        name=name,
        shape=tuple(arr.shape),
        dims=tuple(dims),
        grid=tuple(shards),
        chunks=tuple(arr.chunks),
        dtype=cf.dtype,
        fill_value=cf.fill,
        key_encoding=arr.metadata.chunk_key_encoding.to_dict(),
        cf=cf,
        circle=circle(dict(arr.attrs)),
    )


def read_source(
    store: storage.Store,
    variables: list[str] | None = None,
    listed: bool = True,
    versioned: bool = False,
) -> Source:
    """Level-0 arrays with two named spatial dims whose 1-D coordinates exist, and their listings
    (`listed=False`: none; the caller finds the objects another way). `versioned`: `store`
    is a view of a repo, whose history versions content: its objects are listed by key alone,
    with no fingerprints (those of an object store are `level0_prints`)."""
    nodes = _root_members(store)
    members = {n: a for n, a in nodes.items() if isinstance(a, zarr.Array)}
    coords = {n: storage.read(store, a) for n, a in members.items() if a.ndim == 1}
    attrs = {n: dict(a.attrs) for n, a in members.items()}
    # CF auxiliary coordinates (a forecast's 2-D valid_time) describe the data: not variables
    aux = {c for a in attrs.values() for c in str(a.get("coordinates", "")).split()}
    arrays = set(members)  # every array (a grid mapping may be listed as a coordinate)
    members = {n: a for n, a in members.items() if n not in aux}
    candidates: dict[str, ArrayMeta] = {}
    skipped: dict[str, str] = {}
    broken: dict[str, PlanError] = {}  # refused when chosen, or when nothing is chosen
    for name, arr in sorted(members.items()):
        why = _skip_reason(arr, coords)
        if why is None:
            try:
                check_dtype(name, np.dtype(arr.dtype))
            except PlanError as err:  # a dtype no pyramid pools: refused only if chosen
                skipped[name] = str(err).removeprefix(f"array {name!r} ")
            else:
                try:
                    candidates[name] = array_meta(name, arr)
                except PlanError as err:  # a CF attribute no reader can use
                    broken[name] = err
        elif arr.ndim >= 2:
            skipped[name] = why
    for name in variables or sorted(broken):
        if name in broken:
            raise broken[name]
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
        check_codecs(store, name, members[name])
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
            check_coordinate(d, coords[d], store.url)
    listings: dict[str, list[str]] = {name: [] for name in candidates}
    prints: dict[str, dict[str, str]] = {}
    then = _recorded_prints(store) if listed and not versioned else {}
    for name in candidates if listed else ():
        if not versioned:  # an object store: keys with what they hold
            since = time.time()  # before the listing: what is modified from here on is racy
            infos = storage.list_objects(store, name + "/")
            listings[name] = [i.key[len(name) + 1 :] for i in infos]
            prints[name] = level0_prints(store, candidates[name], infos, then.get(name), since)
        else:  # a repo's view: its history versions content
            listings[name] = [k[len(name) + 1 :] for k in storage.list_keys(store, name + "/")]
    crs = tuple(
        sorted(
            {attrs[n]["grid_mapping"] for n in candidates if attrs[n].get("grid_mapping") in arrays}
        )
    )
    node_keys = (
        "zarr.json",
        *(
            f"{n}/zarr.json"
            for n in sorted(nodes)
            if not (LEVEL_GROUP.match(n) or n == records.GROUP)
        ),
    )
    return Source(
        store, candidates, listings, coords, attrs, crs, node_keys, prints,
        root_nodes(store, nodes),
    )  # fmt: skip


def _recorded_prints(store: storage.Store) -> dict[str, dict[str, str]]:
    """The fingerprints the last build recorded ({} when none can be read: every object is
    then new to the comparison; the build names a bad record itself)."""
    try:
        doc = records.get_json(store, records.PRINTS)
    except (storage.StorageError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def fingerprint(info: storage.ObjectInfo) -> str:
    """The fast key of an object on a store whose ETag (or version) names its content: a hash
    of its size and ETag (or version, or last-modified), of one length whatever the store.
    Also what every build recorded before fast keys became store-aware (`level0_prints`)."""
    tag = info.version.etag or info.version.version or info.last_modified.isoformat()
    return hashlib.sha256(f"{info.size}:{tag}".encode()).hexdigest()[:16]


def _by_mtime(store: storage.Store, info: storage.ObjectInfo) -> bool:
    """The fast key is the modification time: a local file's ETag holds its inode, which no
    copy keeps; a store with neither ETag nor version has nothing else."""
    return store.is_local or not (info.version.etag or info.version.version)


def fast_key(store: storage.Store, info: storage.ObjectInfo) -> str:
    """What the listing says of an object, kept by a faithful copy: size and modification time
    to the second on a local store (`cp -a`, `rsync -a`, `shutil.copy2` keep it), else
    `fingerprint` (S3 keeps a single-part object's ETag, an MD5 of its bytes, on copy)."""
    if not _by_mtime(store, info):
        return fingerprint(info)
    second = int(info.last_modified.timestamp())
    return hashlib.sha256(f"{info.size}:s{second}".encode()).hexdigest()[:16]


RACY = "-"  # a recorded fast key that matches nothing: the object is hashed the next time


def _racy(store: storage.Store, info: storage.ObjectInfo, since: float) -> bool:
    """Modified within a second of the listing (or during it): a rewrite in that same second,
    of the same size, would keep the fast key (git's "racily clean"), so only the bytes tell.
    The margin covers a file system's coarse clock and rounding to the second."""
    return _by_mtime(store, info) and info.last_modified.timestamp() >= int(since) - 1


def digest(store: storage.Store, key: str) -> str:
    """The content token of one object: `#` and a hash of its bytes."""
    return "#" + hashlib.sha256(storage.get(store, key).data).hexdigest()[:32]


def settle_print(
    store: storage.Store, info: storage.ObjectInfo, then: str | None, since: float
) -> str | None:
    """An object's fingerprint now, `"<fast key> <content>"` (one token when they are the same),
    given the one recorded (`then`); None when only its bytes can say (`digest` them).

    The content token is what the build compares (`toolkit.pyramid.geometry.edited_in_place`); it
    is carried over while the fast key matches, so a copy that keeps the fast key is the same
    content for free. When the fast key changed, the bytes are hashed only if the record holds
    a hash to compare with (an object that was racy once); otherwise the object counts as
    changed (its dependants are rebuilt). A racy object is hashed and its fast key recorded as
    `RACY`, so the next build hashes it again, by then settled."""
    fast = fast_key(store, info)
    if _racy(store, info, since):
        return None
    if then is not None:
        was, _, content = then.partition(" ")
        content = content or was
        if was in (fast, fingerprint(info)):  # the same, or as an earlier toolkit recorded it
            return fast if content == fast else f"{fast} {content}"
        if content.startswith("#"):
            return None
    return fast


def level0_prints(
    store: storage.Store,
    a: ArrayMeta,
    infos: list[storage.ObjectInfo],
    then: dict[str, str] | None,
    since: float,
) -> dict[str, str]:
    """{key: fingerprint} of one array's listed objects (`settle_print`); `then` is the
    record's {"i.j": fingerprint} of the array, `since` when the listing began. Only the racy
    objects and those whose recorded hash must be checked are read, concurrently."""
    out: dict[str, str] = {}
    hash_these: dict[str, tuple[str, storage.ObjectInfo]] = {}
    for info in infos:
        rel = info.key[len(a.name) + 1 :]
        idx = decode_keys(a.encoding, [rel], len(a.shape)) if then else set()
        was = then.get(".".join(map(str, next(iter(idx))))) if then and idx else None
        fp = settle_print(store, info, was, since)
        if fp is None:
            fast = fast_key(store, info)
            hash_these[rel] = (RACY if _racy(store, info, since) else fast, info)
        else:
            out[rel] = fp
    if hash_these:
        with ThreadPoolExecutor(max_workers=min(16, len(hash_these))) as pool:
            digests = pool.map(lambda i: digest(store, i.key), [i for _, i in hash_these.values()])
            for (rel, (fast, _)), d in zip(hash_these.items(), digests, strict=True):
                out[rel] = f"{fast} {d}"
    return out


SHAPED = ("shape", "count_shape")  # what an append changes in a level's record of a variable


def _unshaped(v: VarLevel) -> str:
    """A level's variable as recorded, but for what an append changes."""
    doc = {k: x for k, x in asdict(v).items() if k not in SHAPED}
    return json.dumps(doc, sort_keys=True, default=list)


def grown_along(old: RecordedPlan, p: PyramidPlan) -> dict[str, tuple[int, int]]:
    """{dim: (extent then, now)} for each leading dim level 0 grew along since the build that
    recorded plan `old`, when that is all that differs (an xarray `append_dim` write); {}
    when anything else does (settings, the spatial grid, a dim that shrank, the band dim)."""
    if old.settings.core() != p.settings.core():
        return {}
    if old.base_shape != tuple(p.base_shape) or len(old.levels) != len(p.levels):
        return {}
    grew: dict[str, tuple[int, int]] = {}
    for lp, lvl in zip(old.levels, p.levels, strict=True):
        then = {v.var: v for v in lp.vars}
        if lp.group != lvl.group or set(then) != {v.var for v in lvl.vars}:
            return {}
        for v in lvl.vars:
            t = then[v.var]
            a, b = list(t.shape), list(v.shape)
            if _unshaped(t) != _unshaped(v) or len(a) != len(b) or a[-2:] != b[-2:]:
                return {}
            for d, x, y in zip(v.dims[:-2], a, b, strict=False):
                if y < x or (y > x and d == p.band_dim):
                    return {}
                if y > x:
                    grew[d] = (x, y)
    return grew


def level0_growth(store: storage.Store) -> dict[str, tuple[int, int]]:
    """What a reader checks when the levels do not open: the leading dims the recorded
    variables' level-0 arrays grew along since the build (from their zarr.json alone, no
    listing); {} when there is no record, or nothing grew."""
    try:
        old = records.read_plan(store)
    except storage.StorageError:
        return {}
    if old is None or not old.levels:
        return {}
    grew: dict[str, tuple[int, int]] = {}
    for v in old.levels[0].vars:
        try:
            now = storage.get_json(store, f"{v.var}/zarr.json").get("shape") or []
        except (storage.StorageError, ValueError):
            return {}
        a = list(v.shape)  # level 1's: level 0's leading extents
        if len(now) != len(a) or now[-2:] != list(old.base_shape):
            return {}
        for d, x, y in zip(v.dims, a[:-2], now[:-2], strict=False):
            if y < x:
                return {}
            if y > x:
                grew[d] = (x, y)
    return grew


def growth_note(grew: Mapping[str, tuple[int, int]]) -> str:
    """How build, verify and readers say it: "level 0 grew along time (365 -> 366)"."""
    dims = " and ".join(f"{d} ({x} -> {y})" for d, (x, y) in sorted(grew.items()))
    return f"level 0 grew along {dims}"


def read_json(store: storage.Store, key: str) -> dict[str, Any]:
    return storage.get_json(store, key)
