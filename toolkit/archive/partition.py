"""The partition decisions (pure). Four rules, top down, for the arrays of one scope:

1. coordinates and arrays under `t_hot` are pinned hot (never archived);
2. if what is left fits `t_max`, it is one blob (the common case);
3. an array bigger than `t_max` is bucketed on its first chunk index (`b_<array>_<n // width>`),
   the only cut inside an array, and arithmetic so appends need no manifest change;
4. the other arrays coalesce with their neighbours (by path) until a group clears `t_min`.

Cuts are frozen: with a previous manifest its blobs and hot prefixes are kept verbatim and the
rules only see unclaimed arrays, so a policy change never re-cuts a scope. `force=True` is the
one way to re-cut: it starts from nothing but the pins and `hot_always`.

An array with no chunk objects yet is left unclaimed (it resolves to "unmanaged", which stays
hot): cutting it now would freeze it hot by size before its first write, forever.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from toolkit.archive import ids
from toolkit.archive.model import (
    DEFAULT_HOT_ALWAYS,
    ArrayInfo,
    Blob,
    Bucket,
    Manifest,
    Policy,
    is_under,
)

__all__ = ["bucket_width", "excluded", "partition", "relative"]


def relative(path: str, scope: str) -> str:
    """An array's path inside its store ("root" for an array at the store root)."""
    return path[len(scope) + 1 :] if path != scope else "root"


def excluded(path: str, patterns: Iterable[str]) -> bool:
    """Glob patterns match the full path or any of its segment prefixes."""
    parts = path.split("/")
    heads = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    return any(fnmatch.fnmatchcase(h, p) for p in patterns for h in heads)


def bucket_width(array: ArrayInfo, t_max: int) -> int:
    """How many first-index slabs fit in `t_max`, from the mean stored object size."""
    mean = array.stored_bytes / max(array.objects, 1)
    slab = max(1, int(mean * array.slab_objects))
    return max(1, t_max // slab)


def _claimed(path: str, prefixes: Sequence[str]) -> bool:
    return any(is_under(path, p) or is_under(p, path) for p in prefixes)


def _blob(
    kind: str, members: Sequence[ArrayInfo], scope: str, bucket: Bucket | None = None
) -> Blob:
    first = min(members, key=lambda a: a.path)
    return Blob(
        id=ids.blob_id(kind, relative(first.path, scope)),
        prefixes=tuple(sorted(a.path for a in members)),
        bucket=bucket,
        bytes=sum(a.stored_bytes for a in members),
        objects=sum(a.objects for a in members),
    )


def _coalesce(arrays: Sequence[ArrayInfo], policy: Policy) -> list[list[ArrayInfo]]:
    groups: list[list[ArrayInfo]] = []
    current: list[ArrayInfo] = []
    size = 0
    for a in arrays:
        if current and size + a.stored_bytes > policy.t_max:
            groups.append(current)
            current, size = [], 0
        current.append(a)
        size += a.stored_bytes
        if size >= policy.t_min:
            groups.append(current)
            current, size = [], 0
    if current:
        last = sum(a.stored_bytes for a in groups[-1]) if groups else None
        if last is not None and last + size <= policy.t_max:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def cut(arrays: Sequence[ArrayInfo], scope: str, policy: Policy) -> tuple[list[Blob], list[str]]:
    """The four rules on unclaimed arrays that hold data: (new blobs, new hot prefixes)."""
    ordered = sorted((a for a in arrays if a.objects > 0), key=lambda a: a.path)
    hot = [a.path for a in ordered if a.is_coordinate or a.stored_bytes < policy.t_hot]
    rest = [a for a in ordered if a.path not in set(hot)]
    if not rest:
        return [], hot
    if sum(a.stored_bytes for a in rest) <= policy.t_max:
        return [_blob(ids.WHOLE, rest, scope)], hot
    blobs: list[Blob] = []
    small: list[ArrayInfo] = []
    for a in rest:
        if a.stored_bytes > policy.t_max and a.shape:
            bucket = Bucket(bucket_width(a, policy.t_max), a.encoding, a.separator)
            blobs.append(_blob(ids.BUCKET, [a], scope, bucket))
        else:
            small.append(a)
    blobs.extend(_blob(ids.GROUP, g, scope) for g in _coalesce(small, policy))
    return blobs, hot


def partition(
    arrays: Iterable[ArrayInfo],
    scope: str,
    policy: Policy,
    previous: Manifest | None = None,
    *,
    force: bool = False,
    exclude: Iterable[str] = (),
    hot_always: Iterable[str] | None = None,
) -> Manifest:
    """The manifest for `scope`: `previous` unchanged when nothing is new, else its successor."""
    patterns = tuple(exclude)
    inside = [a for a in arrays if is_under(a.path, scope) and not excluded(a.path, patterns)]
    keep = previous if (previous is not None and not force) else None
    kept_blobs = keep.blobs if keep else ()
    kept_hot = keep.hot if keep else ()
    claimed = [p for b in kept_blobs for p in b.prefixes] + list(kept_hot)
    fresh = [a for a in inside if not _claimed(a.path, claimed)]
    blobs, hot = cut(fresh, scope, policy)
    # hot_always only grows: the defaults, what the stored manifest added, what is asked for now
    names = tuple(
        dict.fromkeys(
            (*DEFAULT_HOT_ALWAYS, *(previous.hot_always if previous else ()), *(hot_always or ()))
        )
    )
    if (
        previous is not None
        and not force
        and not blobs
        and not hot
        and names == previous.hot_always
    ):
        return previous
    return Manifest(
        scope=scope,
        epoch=previous.epoch + 1 if previous is not None else 1,
        policy=policy,
        blobs=(*kept_blobs, *blobs),
        hot=(*kept_hot, *hot),
        pins=previous.pins if previous is not None else (),
        hot_always=names,
        root_array=any(a.path == scope for a in inside) or bool(previous and previous.root_array),
    )
