"""Recall plan for a reader's selection: the reads around `selection` and `recall`.

What it reads: one listing of the scope and its metadata documents (never a chunk: the
listing says which chunks exist and how big every blob is); for a `sel` by label, the 1-d
coordinate arrays of the dims it names, decoded as xarray decodes them (coordinates are hot
by the partition rules, so this recalls nothing); the scope's manifest and tier state.
"""

from __future__ import annotations

import bisect
import posixpath
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.archive import selection as S
from toolkit.archive.hierarchy import METADATA_NAMES, read_listing
from toolkit.archive.keys import check_key
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.model import ArrayInfo
from toolkit.archive.recall import ReadPlan, summarise
from toolkit.archive.resolve import Trie
from toolkit.archive.tierstore import TierStore
from toolkit.archive.units import parse_rate

__all__ = ["MissingManifest", "plan", "plan_read"]


class MissingManifest(LookupError):
    """The scope has no manifest: nothing says which blob holds what (exit 1, as `show`)."""


def plan_read(
    source: Any,
    *,
    manifests: str | storage.Store,
    data: str | storage.Store | None = None,
    variables: str | Sequence[str] | None = None,
    isel: Mapping[str, int | slice | tuple[int | None, int | None]] | None = None,
    sel: Mapping[str, Any] | None = None,
    rate: str | float = "300MB/s",
    mount: float = 90.0,
    storage_options: Mapping[str, Any] | None = None,
) -> ReadPlan:
    """What must come back from tape before `ds[variables].isel(...).sel(...)` can be read.

    `source`: a Dataset xarray opened from a Zarr store (its `encoding["source"]` names the
    store), or the store's path or URL. `data`: the data root the manifests' scopes are
    relative to; without it the scope is the manifest scope the store's path ends with.
    `isel` takes ints, slices (step 1) or (start, stop); `sel` labels or slices (both ends
    included, as xarray). `variables` defaults to the dataset's data variables.
    """
    options = dict(storage_options or {})
    if variables is None and not isinstance(source, str | Path) and hasattr(source, "data_vars"):
        variables = [str(v) for v in source.data_vars]
    m = _open(manifests, options)
    root, scope = _locate(_path_of(source), data, m, options)
    return plan(
        root,
        m,
        scope,
        variables=[variables] if isinstance(variables, str) else variables,
        isel={d: _spec(d, v) for d, v in (isel or {}).items()},
        sel={d: (v.start, v.stop) if isinstance(v, slice) else v for d, v in (sel or {}).items()},
        rate=parse_rate(rate) if isinstance(rate, str) else float(rate),
        mount=float(mount),
    )


def plan(
    data: storage.Store,
    manifests: storage.Store,
    scope: str,
    *,
    variables: Sequence[str] | None = None,
    isel: Mapping[str, S.Spec] | None = None,
    sel: Mapping[str, S.Label] | None = None,
    rate: float = 300e6,
    mount: float = 90.0,
) -> ReadPlan:
    """The plan of a selection of the store at `scope` under `data`."""
    isel, sel = dict(isel or {}), dict(sel or {})
    listing, arrays = read_listing(data, scope)
    chosen, coords = _arrays(arrays, scope, variables)
    planned = chosen + coords
    lengths = _lengths(planned)
    both = sorted(set(isel) & set(sel))
    if both:
        raise ValueError(f"dim {both[0]!r} is given to both --isel and --sel: choose one")
    for flag, dims in (("--isel", isel), ("--sel", sel)):
        for dim in dims:
            if dim not in lengths:
                have = ", ".join(lengths) or "none"
                raise ValueError(
                    f"{flag} {dim}: the arrays selected ({', '.join(_name(a, scope) for a in chosen)}) "
                    f"have no dim {dim!r}; they have {have}"
                )
    where = {d: S.positions(d, spec, lengths[d]) for d, spec in isel.items()}
    for dim, label in sel.items():
        where[dim] = S.label_positions(dim, label, _labels(data, _coordinate(planned, dim), arrays))
    keys, unwritten = _selected(listing, planned, where)

    stored = ManifestStore(manifests).read(scope)
    if stored is None:
        raise MissingManifest(
            f"no manifest for scope {scope!r} under {manifests.url}: partition it first"
        )
    trie = Trie([stored.manifest])
    resolved = trie.lookup_many(keys)
    touched = {r.blob for r in resolved if r.kind == "blob" and r.blob}
    sizes: Counter[str] = Counter()
    for o, r in zip(listing, trie.lookup_many(o.key for o in listing), strict=True):
        if r.blob in touched:
            sizes[r.blob] += o.size
    tiers = TierStore(manifests).read(scope)[0]
    return summarise(
        scope,
        keys,
        resolved,
        sizes,
        {b: tiers.tier(b).state for b in touched},
        rate=rate,
        mount=mount,
        unwritten=unwritten,
        selection={
            "scope": scope,
            "variables": [_name(a, scope) for a in chosen],
            "coordinates": [_name(a, scope) for a in coords],
            "isel": {d: _text(v) for d, v in isel.items()},
            "sel": {d: _text(v) for d, v in sel.items()},
            "positions": {d: [r.start, r.stop] for d, r in where.items()},
        },
    )


# ------------------------------------------------------------------ the store and its arrays


def _name(a: ArrayInfo, scope: str) -> str:
    """An array's name as a reader gives it: its path below the scope."""
    return a.path[len(scope) + 1 :] if a.path != scope else a.name


def _dims(a: ArrayInfo) -> tuple[str | None, ...]:
    return a.dimension_names if a.dimension_names is not None else (None,) * len(a.shape)


def _arrays(
    arrays: list[ArrayInfo], scope: str, variables: Sequence[str] | None
) -> tuple[list[ArrayInfo], list[ArrayInfo]]:
    """The variables read and the coordinates that come with them, as xarray's `ds[names]`
    takes them: every coordinate whose dims are among theirs, of the variable's group or one
    above it up to the scope (as a DataTree node inherits them)."""
    by_name = {_name(a, scope): a for a in arrays}
    if variables is None:
        chosen = [
            a
            for a in arrays
            if (posixpath.dirname(a.path) == scope or a.path == scope) and not a.is_coordinate
        ]
    else:
        unknown = [v for v in variables if v.strip("/") not in by_name]
        if unknown:
            raise ValueError(
                f"variable {unknown[0]!r}: no such array in {scope}; it has "
                f"{', '.join(sorted(by_name)) or 'none'}"
            )
        chosen = list(dict.fromkeys(by_name[v.strip("/")] for v in variables))
    coords: list[ArrayInfo] = []
    for group in sorted({posixpath.dirname(a.path) for a in chosen}):
        needed = {d for a in chosen if posixpath.dirname(a.path) == group for d in _dims(a)}
        taken: set[str] = set()
        for level in _ancestors(group, scope):  # nearest first, as a DataTree inherits them
            here = [
                a
                for a in arrays
                if posixpath.dirname(a.path) == level
                and a.is_coordinate
                and a.name not in taken
                and set(_dims(a)) <= needed - {None}  # a 0-d coordinate too (CF `height`)
            ]
            taken.update(a.name for a in here)
            coords += [a for a in here if a not in chosen and a not in coords]
    return chosen, coords


def _ancestors(group: str, scope: str) -> list[str]:
    """`group` and the groups above it, up to the scope's."""
    out = [group]
    while out[-1] != scope and posixpath.dirname(out[-1]) and out[-1].startswith(scope + "/"):
        out.append(posixpath.dirname(out[-1]))
    return out


def _lengths(arrays: list[ArrayInfo]) -> dict[str, int]:
    """Dim -> length over the arrays read; two lengths for one dim is refused, as xarray does."""
    out: dict[str, int] = {}
    for a in arrays:
        for d, n in zip(_dims(a), a.shape, strict=True):
            if d is None:
                continue
            if out.setdefault(d, n) != n:
                raise ValueError(
                    f"dim {d!r} has length {out[d]} and {n} ({a.path}): not one dataset"
                )
    return out


def _coordinate(arrays: list[ArrayInfo], dim: str) -> ArrayInfo:
    for a in arrays:
        if a.name == dim and len(a.shape) == 1 and _dims(a) == (dim,):
            return a
    raise ValueError(
        f"--sel {dim}: no coordinate array {dim!r} to look its labels up in; use --isel"
    )


def _labels(data: storage.Store, coord: ArrayInfo, arrays: list[ArrayInfo]) -> np.ndarray:
    """The coordinate's values decoded as xarray decodes them (CF time units included): its
    group opened with every other array dropped, so nothing else is read or decoded."""
    import xarray as xr

    group = posixpath.dirname(coord.path)
    others = [a.name for a in arrays if posixpath.dirname(a.path) == group and a is not coord]
    ds = xr.open_zarr(
        data.zarr(read_only=True),
        group=group,
        chunks=None,
        consolidated=False,
        drop_variables=others,
        create_default_indexes=False,
    )
    return np.asarray(ds[coord.name].values)


def _selected(
    listing: list[storage.ObjectInfo], arrays: list[ArrayInfo], where: Mapping[str, range]
) -> tuple[list[str], int]:
    """The listed keys the selection reads, and how many of its chunks were never written."""
    keys = [o.key for o in listing]  # sorted by key
    out: list[str] = []
    unwritten = 0
    for a in arrays:
        ranges = S.chunk_ranges(a.object_shape, S.spans(a.dimension_names, a.shape, where))
        prefix = a.path + "/"
        lo = bisect.bisect_left(keys, prefix)
        hi = bisect.bisect_left(keys, a.path + "0")  # "0" sorts right after "/"
        found = 0
        for key in keys[lo:hi]:
            if posixpath.basename(key) in METADATA_NAMES:
                continue
            index = S.chunk_index(key[len(prefix) :], len(a.shape), a.encoding, a.separator)
            if index is not None and S.within(index, ranges):
                out.append(key)
                found += 1
        unwritten += S.size(ranges) - found
    return sorted(out), unwritten


# ------------------------------------------------------------------ the Python entry's inputs


def _spec(dim: str, value: Any) -> S.Spec:
    if isinstance(value, slice):
        if value.step not in (None, 1):
            raise ValueError(f"isel {dim}: a step ({value.step}) is not supported")
        return (value.start, value.stop)
    if isinstance(value, tuple) and len(value) == 2:
        return value
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    raise ValueError(f"isel {dim}={value!r}: want an int, a slice or (start, stop)")


def _text(spec: Any) -> str:
    if isinstance(spec, tuple):
        return ":".join("" if x is None else str(x) for x in spec)
    return str(spec)


def _open(url: str | storage.Store, options: Mapping[str, Any]) -> storage.Store:
    if isinstance(url, storage.Store):
        return url
    cloud = storage.local_path_of(url) is None
    return storage.open_store(url, must_exist=not cloud, **(dict(options) if cloud else {}))


def _path_of(source: Any) -> str:
    if isinstance(source, str | Path):
        return str(source)
    path = getattr(source, "encoding", {}).get("source")
    if not isinstance(path, str | Path) or not str(path):
        raise ValueError(
            "xarray recorded no store path for this dataset (encoding['source']): pass the "
            "store's path or URL instead, plan_read('s3://bucket/store.zarr', ...)"
        )
    return str(path)


def _locate(
    path: str, data: str | storage.Store | None, m: storage.Store, options: Mapping[str, Any]
) -> tuple[storage.Store, str]:
    """(data root, scope) of a store's path: below `data` when given, else the manifest scope
    the path ends with (one listing of the manifests)."""
    local = storage.local_path_of(path)
    full = str(local.expanduser().resolve()) if local is not None else path.rstrip("/")
    if data is not None:
        root = _open(data, options)
        if local is not None and "://" not in path and not local.expanduser().is_absolute():
            return root, check_key(path, "scope")  # a scope, as the command line takes it
        base = str(root.local_path.resolve()) if root.is_local else root.url.rstrip("/")
        if not full.startswith(base + "/"):
            raise ValueError(f"{path} is not under the data root {root.url}")
        return root, check_key(full[len(base) + 1 :], "scope")
    ends = [s for s in ManifestStore(m).scopes() if full.endswith("/" + s)]
    if len(ends) != 1:
        which = "no manifest scope" if not ends else f"scopes {', '.join(ends)}"
        raise ValueError(
            f"{path}: {which} under {m.url} ends this path; pass data= (the data root)"
        )
    return _open(full[: -len(ends[0]) - 1], options), ends[0]
