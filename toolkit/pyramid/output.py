"""`pyramid build SOURCE --output REPO`: the source is only read; level 0 lives in an Icechunk
repo as virtual references to the source's own chunk objects, and the levels are built there
natively, exactly as inside any repo (`toolkit.pyramid.repo`).

A reference is one whole chunk object (offset 0, its length): the repo reads the source's bytes
and decodes them with the same codecs, so nothing is copied and nothing can differ. A Zarr v3
source's metadata is kept as it is (its chunk-key encoding set to the default, which is all
Icechunk reads: the refs are set by chunk index). A Zarr v2 source's is translated to v3: the
compressor and filters become their v3 codecs (blosc, zstd, gzip, or numcodecs' own v3
wrappers: zlib, lz4, delta, ...), `_ARRAY_DIMENSIONS` the dimension names; CF attributes stay.
An array whose chunks no v3 codec decodes byte for byte (Fortran order, a codec without a v3
form, an object dtype) is copied instead, and the build says so in one line.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import json
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.engine import Runner
from toolkit.plan import Report
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.metadata import strip_added
from toolkit.pyramid.repo import build_repo
from toolkit.pyramid.settings import Wanted
from toolkit.pyramid.store_build import check_output_source

__all__ = [
    "OUTPUT_BRANCH",
    "Level0",
    "OutputHome",
    "open_output",
    "reference_level0",
    "v3_metadata",
]

# where an --output build puts level 0's refresh and the levels built on it, before main moves
# to both at once (not "pyramid-": the pyramid's own setup drops branches of that prefix)
OUTPUT_BRANCH = "output-level0"

# the root attribute that records the listing level 0's refs were last set from: the newest
# object's modification time (the source's clock) and how long the listing took
LISTING_ATTR = "pyramid:source_listing"

# numcodecs ids whose v3 form is one of zarr's own codecs, with its configuration
V3_OWN = {"blosc", "zstd", "gzip"}
BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


class NoReference(ValueError):
    """An array whose chunk objects cannot be read by reference (they are copied instead)."""


@dataclass(frozen=True)
class Level0:
    """What `reference_level0` made of the source."""

    ref: R.RepoRef
    referenced: dict[str, int]  # array path -> chunk objects referenced
    copied: dict[str, str]  # array path -> why it was copied
    commit: str | None  # None: main already held exactly these refs
    changed: int = 0  # refs set or dropped by this build (0: the source had not changed)

    @property
    def note(self) -> str:
        n = sum(self.referenced.values())
        line = f"level 0: {n} chunk objects of {len(self.referenced)} arrays referenced"
        line += f" ({self.changed} changed)"
        if not self.copied:
            return line + ", none copied"
        why = "; ".join(f"{a}: {w}" for a, w in sorted(self.copied.items()))
        return f"{line}; copied {', '.join(sorted(self.copied))} ({why})"


@dataclass(frozen=True)
class OutputHome:
    """`pyramid build SOURCE --output REPO`: the pyramid's home is the repo, over a source that
    is only read. A home to build: verify and read the repo itself (a `RepoHome`)."""

    source: storage.Store
    output: storage.Store
    credentials: Literal["anonymous", "env"] = "anonymous"

    @classmethod
    def open(
        cls, source: storage.Store, output: str | storage.Store, options: storage.Options
    ) -> OutputHome:
        """The source and the output, each opened once (`_stores`)."""
        src, out = _stores(source, output, options)
        return cls(src, out, options.credentials)

    @property
    def url(self) -> str:
        return self.output.url

    def build(self, wanted: Wanted, runner: Runner) -> Report:
        """Level 0's refresh and the levels built on it land on main in one move. Both go on
        a branch of their own (`output-`), from main's head: the level-0 commit, then the
        pyramid's transaction with that branch as its base; main moves to the branch only if
        it is still where the branch began (else nothing reached main: run the build
        again)."""
        if wanted.positions or wanted.rebuild_from is not None:
            raise PlanError(
                "--output builds every level of the referenced level 0: --select, --latest "
                "and --rebuild-from do not apply"
            )
        check_output_source(self.source, wanted)
        ref = open_output(self.source, self.output, self.credentials)
        txn = T.Txn((ref,), OUTPUT_BRANCH)
        T.open_branch(txn)
        level0 = reference_level0(self.source, self.output, self.credentials, OUTPUT_BRANCH)
        try:
            report = build_repo(level0.ref, wanted, runner, base=OUTPUT_BRANCH)
        except PlanError as err:  # about level 0: named by the source given, not the branch
            where = f"{ref.url}@{OUTPUT_BRANCH}: "
            if not str(err).startswith(where):
                raise
            raise PlanError(f"{self.source.url}: {str(err)[len(where) :]}") from err
        T.finalize(txn, lambda url: f"{url}: main moved while the pyramid was built; run it again")
        return dataclasses.replace(report, notes=(level0.note, *report.notes))


# ------------------------------------------------------------------ metadata, v2 -> v3 (pure)


def _codec(conf: Mapping[str, Any], itemsize: int) -> dict[str, Any]:
    """The v3 codec of a numcodecs (v2) codec configuration."""
    conf = dict(conf)
    cid = str(conf.pop("id"))
    if cid == "blosc":
        shuffle = int(conf.get("shuffle", 1))
        if shuffle == -1:  # AUTOSHUFFLE: bit-shuffle for one-byte items, byte-shuffle else
            shuffle = 2 if itemsize == 1 else 1
        return {"name": "blosc", "configuration": {
            "cname": conf.get("cname", "lz4"), "clevel": int(conf.get("clevel", 5)),
            "shuffle": BLOSC_SHUFFLE[shuffle], "typesize": itemsize,
            "blocksize": int(conf.get("blocksize", 0))}}  # fmt: skip
    if cid == "zstd":
        return {"name": "zstd", "configuration": {"level": int(conf.get("level", 0)),
                                                  "checksum": bool(conf.get("checksum", False))}}  # fmt: skip
    if cid == "gzip":
        return {"name": "gzip", "configuration": {"level": int(conf.get("level", 1))}}
    return {"name": f"numcodecs.{cid}", "configuration": conf}


def _known(codec: Mapping[str, Any]) -> bool:
    """Whether zarr can build this v3 codec here (numcodecs' v3 wrappers are entry points)."""
    from zarr.registry import get_codec_class

    try:
        get_codec_class(str(codec["name"]))
    except (KeyError, ValueError):
        return False
    return True


def _cf_fill(fill: Any, dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        value = float(fill) if not isinstance(fill, str) else float(fill.replace("Infinity", "inf"))
        return base64.standard_b64encode(struct.pack("<d", value)).decode()
    if dtype.kind == "b":
        return bool(fill)
    return int(fill)


def v3_metadata(zarray: Mapping[str, Any], zattrs: Mapping[str, Any]) -> dict[str, Any]:
    """The Zarr v3 array metadata reading a v2 array's chunk objects byte for byte (the
    default chunk-key encoding: refs are set by index); `NoReference` when none can (then
    zarr itself reads the array to copy it)."""
    dtype = np.dtype(zarray["dtype"])
    if dtype.kind not in "biuf":  # strings, objects, complex, datetimes: zarr's own read
        raise NoReference(f"dtype {dtype} has no v3 form here")
    if zarray.get("order", "C") != "C":
        raise NoReference("Fortran-ordered chunks")
    codecs: list[dict[str, Any]] = []
    for f in zarray.get("filters") or ():
        codecs.append(_codec(f, dtype.itemsize))
    endian = "big" if dtype.byteorder == ">" else "little"
    codecs.append({"name": "bytes", "configuration": {"endian": endian}} if dtype.itemsize > 1
                  else {"name": "bytes"})  # fmt: skip
    if zarray.get("compressor"):
        codecs.append(_codec(zarray["compressor"], dtype.itemsize))
    unknown = [c["name"] for c in codecs if not _known(c)]
    if unknown:
        raise NoReference(f"codec {', '.join(unknown)} has no v3 form here")
    attrs = {k: v for k, v in zattrs.items() if k != "_ARRAY_DIMENSIONS"}
    fill = zarray.get("fill_value")
    if fill is None:  # v2's "no fill": zarr reads a missing chunk as zeros
        fill = 0
    elif "_FillValue" not in attrs:
        # xarray masks a v2 array's fill value as nodata, but a v3 array's `_FillValue`
        # attribute only (in its own encoding: base64 of a little-endian double for floats)
        attrs["_FillValue"] = _cf_fill(fill, dtype)
    meta: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(zarray["shape"]),
        "data_type": dtype.newbyteorder("=").name if dtype.kind != "b" else "bool",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(zarray["chunks"])}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": attrs,
    }
    if "_ARRAY_DIMENSIONS" in zattrs:
        meta["dimension_names"] = list(zattrs["_ARRAY_DIMENSIONS"])
    return meta


# ------------------------------------------------------------------ reading the source


@dataclass(frozen=True)
class Node:
    path: str  # "" for the root
    kind: str  # "group" or "array"
    meta: dict[str, Any]  # v3 metadata to write (an array's: what reads its chunks)
    encoding: Any = None  # the source's chunk-key encoding (zarr's), for an array
    why_copy: str | None = None


def _hierarchy(store: storage.Store, objects: list[storage.ObjectInfo]) -> list[Node]:
    """Every group and array of the source (v3: zarr.json; v2: .zgroup / .zarray)."""
    from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

    keys = {o.key for o in objects}
    nodes: list[Node] = []
    for key in sorted(keys):
        head, _, name = key.rpartition("/")
        if name == "zarr.json":
            meta = storage.get_json(store, key)
            if meta.get("node_type") == "array":
                enc = parse_chunk_key_encoding(
                    meta.get("chunk_key_encoding") or {"name": "default"}
                )
                meta = {**meta, "chunk_key_encoding": {"name": "default",
                                                       "configuration": {"separator": "/"}}}  # fmt: skip
                nodes.append(Node(head, "array", meta, enc))
            else:
                nodes.append(Node(head, "group", meta))
        elif name in (".zgroup", ".zarray"):
            attrs_key = f"{head}/.zattrs" if head else ".zattrs"
            zattrs = storage.get_json(store, attrs_key) if attrs_key in keys else {}
            if name == ".zgroup":
                nodes.append(Node(head, "group", {"zarr_format": 3, "node_type": "group",
                                                  "attributes": zattrs}))  # fmt: skip
                continue
            zarray = storage.get_json(store, key)
            sep = zarray.get("dimension_separator") or "."
            enc = parse_chunk_key_encoding({"name": "v2", "configuration": {"separator": sep}})
            try:
                nodes.append(Node(head, "array", v3_metadata(zarray, zattrs), enc))
            except NoReference as err:
                nodes.append(Node(head, "array", {}, enc, why_copy=str(err)))
    if not nodes:
        raise PlanError(f"{store.url}: no zarr.json, .zgroup or .zarray: not a Zarr store")
    return nodes


def _chunks(
    node: Node, objects: list[storage.ObjectInfo]
) -> dict[tuple[int, ...], storage.ObjectInfo]:
    """The array's chunk objects by grid index (its metadata documents and strays left out)."""
    prefix = f"{node.path}/" if node.path else ""
    ndim = len(node.meta["shape"])
    out: dict[tuple[int, ...], storage.ObjectInfo] = {}
    for o in objects:
        if not o.key.startswith(prefix):
            continue
        rest = o.key[len(prefix) :]
        if rest.startswith(".z") or rest.endswith("zarr.json"):
            continue
        try:
            idx = tuple(node.encoding.decode_chunk_key(rest))
        except (ValueError, TypeError):
            continue
        if len(idx) == ndim and all(i >= 0 for i in idx):
            out[idx] = o
    return out


# ------------------------------------------------------------------ the output repo


def _open_output(output: storage.Store, source: storage.Store,
                 credentials: Literal["anonymous", "env"]) -> R.RepoRef:  # fmt: skip
    """The output repo, created with a virtual chunk container for the source's location;
    one that holds something else is refused."""
    container = R.container_for(source)
    if R.is_repo(output):
        repo = R.open_repo(output, credentials, fresh=True)
        if container.url_prefix not in R.container_prefixes(repo):
            raise PlanError(
                f"{output.url}: an Icechunk repo without a container for {source.url}; "
                "--output names a new repo, or the one an earlier build of this source made"
            )
        return R.RepoRef(output, credentials)
    if output.is_local and output.local_path.exists() and any(output.local_path.iterdir()):
        raise PlanError(f"{output.url}: exists and is no Icechunk repo; name a new --output")
    R.create_repo(output, R.VirtualConfig(containers=[container]))
    return R.RepoRef(output, credentials)


def _stores(
    source: str | storage.Store, output: str | storage.Store, options: storage.Options | None
) -> tuple[storage.Store, storage.Store]:
    """The source (which must exist) and the output, each opened once with the `options` that
    concern its URL; an output inside the source is refused."""
    try:
        src = storage.open_store(source, options, must_exist=True)
    except storage.NotFound as err:
        raise PlanError(
            f"{err.store}: does not exist; name the Zarr store (v2 or v3) to read"
        ) from err
    out = storage.open_store(output, options)
    if out.url.rstrip("/") == src.url.rstrip("/") or out.url.startswith(src.url.rstrip("/") + "/"):
        raise PlanError(f"--output {out.url}: inside the source {src.url}, which is only read")
    return src, out


def open_output(
    source: str | storage.Store,
    output: str | storage.Store,
    credentials: Literal["anonymous", "env"] = "anonymous",
) -> R.RepoRef:
    """The output repo of `source` (created with a container for the source's location when
    new); a repo made for another source, or a folder that is no repo, is refused. The source
    is read first: one that cannot be read, or is no Zarr store, creates nothing."""
    src, out = _stores(source, output, None)
    if not any(storage.exists(src, key) for key in ("zarr.json", ".zgroup", ".zarray")):
        raise PlanError(f"{src.url}: no zarr.json, .zgroup or .zarray: not a Zarr store")
    return _open_output(out, src, credentials)


def reference_level0(
    source: str | storage.Store,
    output: str | storage.Store,
    credentials: Literal["anonymous", "env"] = "anonymous",
    branch: str = "main",
) -> Level0:
    """Make (or refresh) the output repo's level 0 from `source`: its metadata, a virtual
    reference per chunk object (copies where none can be made), one commit on `branch` when
    anything changed. The source is only listed and read."""
    src, out = _stores(source, output, None)
    started = time.monotonic()
    objects = storage.list_objects(src)
    listing = {
        "newest": max((_second(o.last_modified) for o in objects), default=None),
        "seconds": round(time.monotonic() - started, 3),
    }
    nodes = _hierarchy(src, objects)
    ref = _open_output(out, src, credentials)
    referenced: dict[str, int] = {}
    copied: dict[str, str] = {}
    changed = 0

    def change(ref: R.RepoRef, session: Any) -> None:
        """Level 0 on main's head: the documents and refs the source has now."""
        nonlocal changed
        view = R.SessionView(ref.url, session)
        root = _held(view, "zarr.json")
        doubt = _doubtful(root.get("attributes", {}).get(LISTING_ATTR) if root else None)
        for node in nodes:
            key = f"{node.path}/zarr.json" if node.path else "zarr.json"
            if node.why_copy is not None:
                copied[node.path] = node.why_copy
                if _held(view, key) is None:  # copied once; a later build keeps the copy
                    _copy(src, node, view)
                continue
            _write_doc(view, key, node.meta)
            if node.kind == "array":
                chunks = _chunks(node, objects)
                referenced[node.path], n = _refresh_refs(session, view, src, node, chunks, doubt)
                changed += n
        root = _held(view, "zarr.json")
        if root is not None and (changed or doubt is None):
            attrs = root.setdefault("attributes", {})
            attrs[LISTING_ATTR] = {**listing, "newest": _iso(listing["newest"])}
            storage.put(view, "zarr.json", json.dumps(root).encode())

    commit = T.commit_on([ref], branch, change, f"level 0 referenced from {src.url}", fresh=True)
    return Level0(ref, referenced, copied, commit, changed)


def _second(mod: _dt.datetime) -> _dt.datetime:
    """A modification time as Icechunk keeps a ref's checksum: whole seconds, rounded up."""
    return mod.replace(microsecond=0) + _dt.timedelta(seconds=1) if mod.microsecond else mod


def _iso(mod: _dt.datetime | None) -> str | None:
    return None if mod is None else mod.isoformat()


def _doubtful(record: Any) -> tuple[_dt.datetime, _dt.datetime] | None:
    """From the last listing's record, the modification times a ref may be stale at though its
    location and length still match: after the newest object then listed, an object was
    rewritten (certainly stale); within the listing's own span before it, one may have been
    rewritten while it was listed (looked at). None: no record, every ref is set again."""
    try:
        newest = _dt.datetime.fromisoformat(record["newest"])
        span = _dt.timedelta(seconds=float(record["seconds"]) + 2)
    except (KeyError, TypeError, ValueError):
        return None
    return newest - span, newest


def _held(view: R.SessionView, key: str) -> dict[str, Any] | None:
    try:
        return storage.get_json(view, key)
    except storage.NotFound:
        return None


def _source_part(doc: dict[str, Any]) -> dict[str, Any]:
    """A document without what the pyramid adds to it (the root's multiscales, conventions,
    settings): what the source's own document is compared with."""
    doc = strip_added(doc)
    attrs = doc.get("attributes", {})
    for key in [k for k in attrs if k.startswith("pyramid:")]:
        attrs.pop(key)
    return doc


def _write_doc(view: R.SessionView, key: str, meta: dict[str, Any]) -> None:
    """The source's document, unless the repo holds it already (an equal rewrite would make a
    commit); what the pyramid added to the repo's copy (the root's layout) is kept."""
    held = _held(view, key)
    want = json.loads(json.dumps(meta))
    if held is not None and _source_part(held) == want:
        return
    if held is not None:
        own = _source_part(held).get("attributes", {})
        added = {k: v for k, v in held.get("attributes", {}).items() if k not in own}
        want["attributes"] = {**want.get("attributes", {}), **added}
    storage.put(view, key, json.dumps(want).encode())


def _refresh_refs(
    session: Any,
    view: R.SessionView,
    src: storage.Store,
    node: Node,
    chunks: dict[tuple[int, ...], storage.ObjectInfo],
    doubt: tuple[_dt.datetime, _dt.datetime] | None,
) -> tuple[int, int]:
    """Point the array's refs at the source's chunk objects as listed now: new or changed
    objects get a ref, chunks gone from the source lose theirs. Changed: another location or
    length, or (`_doubtful`) modified after the last listing, or during it and no longer read
    through the old ref. Returns (chunk objects the array references, refs set or dropped)."""
    held = R.chunk_refs(session, node.path)
    prefix = f"{node.path}/c/" if node.path else "c/"

    def same(idx: tuple[int, ...], url: str, n: int) -> bool:
        if held.get(idx, (None, None, None))[0::2] != (url, n):
            return False
        if doubt is None:
            return False
        mod = _second(chunks[idx].last_modified)
        if mod > doubt[1]:
            return False
        return mod < doubt[0] or not R.stale_ref(session, prefix + "/".join(map(str, idx)))

    want = {idx: (storage.object_url(src, o.key), o.size) for idx, o in chunks.items()}
    changed = [
        (idx, url, 0, n, chunks[idx].last_modified)
        for idx, (url, n) in sorted(want.items())
        if not same(idx, url, n)
    ]
    R.set_virtual_refs(session, node.path, changed)
    gone = sorted(set(held) - set(want))
    for idx in gone:
        storage.delete(view, prefix + "/".join(map(str, idx)))
    return len(want), len(changed) + len(gone)


def _copy(src: storage.Store, node: Node, view: R.SessionView) -> None:
    """The array read by zarr from the source and written natively (zarr's default codecs)."""
    import zarr

    a = zarr.open_array(src.zarr(read_only=True), path=node.path, mode="r")
    attrs = dict(a.attrs)
    dims = attrs.pop("_ARRAY_DIMENSIONS", None)
    b = zarr.create_array(view.zarr(), name=node.path, shape=a.shape, dtype=a.dtype,
                          chunks=a.chunks, fill_value=a.fill_value, attributes=attrs,
                          dimension_names=dims, overwrite=True)  # fmt: skip
    for block in np.ndindex(*a.cdata_shape):
        sl = tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(block, a.chunks, a.shape, strict=True)
        )
        b[sl] = a[sl]
