"""The partition decisions (pure). Four rules, top down, for the arrays of one scope:

1. coordinates and arrays under `t_hot` are pinned hot (never archived);
2. if what is left fits `t_max`, it is one blob (the common case);
3. an array bigger than `t_max` is bucketed on its first chunk index (`b_<array>_<n // width>`),
   the only cut inside an array, and arithmetic so appends need no manifest change;
4. the other arrays coalesce with their neighbours (by path) until a group clears `t_min`.

Cuts are frozen: with a previous manifest its blobs and hot prefixes are kept verbatim and the
rules only see unclaimed arrays, so a policy change never re-cuts a scope: the new policy opens
a new cut (numbered, with its policy recorded) for the arrays it cuts. `force=True` is the one
way to re-cut: it starts from nothing but the pins and `hot_always`. Ids are forever: a blob the
re-cut reproduces exactly keeps its id; every other old blob is retired (its id stays taken,
naming the same keys, with the tier states it had) and the new blobs take the new cut's ids.

An array with no chunk objects yet is left unclaimed (it resolves to "unmanaged", which stays
hot): cutting it now would freeze it hot by size before its first write, forever.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from toolkit.archive import ids
from toolkit.archive.model import (
    DEFAULT_HOT_ALWAYS,
    ArrayInfo,
    Blob,
    Bucket,
    Cut,
    Manifest,
    Policy,
    Retired,
    is_under,
)

__all__ = ["bucket_width", "excluded", "partition", "policy_note", "relative", "states_of"]


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
    kind: str,
    members: Sequence[ArrayInfo],
    scope: str,
    number: int,
    bucket: Bucket | None = None,
) -> Blob:
    first = min(members, key=lambda a: a.path)
    return Blob(
        id=ids.blob_id(kind, relative(first.path, scope), number),
        prefixes=tuple(sorted(a.path for a in members)),
        bucket=bucket,
        bytes=sum(a.stored_bytes for a in members),
        objects=sum(a.objects for a in members),
        cut=number,
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


def cut(
    arrays: Sequence[ArrayInfo], scope: str, policy: Policy, number: int = 1
) -> tuple[list[Blob], list[str]]:
    """The four rules on unclaimed arrays that hold data: (new blobs of cut `number`, new hot
    prefixes)."""
    ordered = sorted((a for a in arrays if a.objects > 0), key=lambda a: a.path)
    hot = [a.path for a in ordered if a.is_coordinate or a.stored_bytes < policy.t_hot]
    rest = [a for a in ordered if a.path not in set(hot)]
    if not rest:
        return [], hot
    if sum(a.stored_bytes for a in rest) <= policy.t_max:
        return [_blob(ids.WHOLE, rest, scope, number)], hot
    blobs: list[Blob] = []
    small: list[ArrayInfo] = []
    for a in rest:
        if a.stored_bytes > policy.t_max and a.shape:
            width = bucket_width(a, policy.t_max)
            count = -(-a.grid[0] // width) if a.grid else 1
            bucket = Bucket(width, a.encoding, a.separator, count)
            blobs.append(_blob(ids.BUCKET, [a], scope, number, bucket))
        else:
            small.append(a)
    blobs.extend(_blob(ids.GROUP, g, scope, number) for g in _coalesce(small, policy))
    return blobs, hot


def states_of(blob: Blob, tiers: Mapping[str, str]) -> dict[str, str]:
    """The tier states of the ids `blob` answers (its buckets' for a bucketed blob), hot left out."""
    if blob.bucket is None:
        state = tiers.get(blob.id, "hot")
        return {} if state == "hot" else {blob.id: state}
    head = blob.id + "_"
    return {
        k: v
        for k, v in tiers.items()
        if k.startswith(head) and k[len(head) :].isdigit() and v != "hot"
    }


def policy_note(previous: Manifest | None, policy: Policy, force: bool = False) -> str | None:
    """One line when `policy` is not the one the scope's newest cut was made with: what it
    does (new arrays only), what it does not (existing cuts are frozen), and how to re-cut."""
    if previous is None or force or policy == previous.cut.policy:
        return None
    old, new = previous.cut.policy, policy
    changed = ", ".join(
        f"{n} {getattr(old, n)} -> {getattr(new, n)} B"
        for n in ("t_hot", "t_max", "t_min")
        if getattr(old, n) != getattr(new, n)
    )
    return (
        f"{previous.scope}: policy differs from cut {previous.cut.number}'s ({changed}): it "
        "applies to arrays not yet cut only; existing cuts are frozen; --force re-cuts the "
        "scope with it (blobs that change get new ids, the old ones are retired)"
    )


def partition(
    arrays: Iterable[ArrayInfo],
    scope: str,
    policy: Policy,
    previous: Manifest | None = None,
    *,
    force: bool = False,
    exclude: Iterable[str] = (),
    hot_always: Iterable[str] | None = None,
    tiers: Mapping[str, str] | None = None,
) -> Manifest:
    """The manifest for `scope`: `previous` unchanged when nothing is new, else its successor.

    New blobs belong to the newest cut while the policy is its policy, else to a new cut.
    `tiers` (blob id -> state, from the tier document) is what a re-cut records with the blobs
    it retires."""
    patterns = tuple(exclude)
    inside = [a for a in arrays if is_under(a.path, scope) and not excluded(a.path, patterns)]
    keep = previous if (previous is not None and not force) else None
    kept_blobs = keep.blobs if keep else ()
    kept_hot = keep.hot if keep else ()
    claimed = [p for b in kept_blobs for p in b.prefixes] + list(kept_hot)
    fresh = [a for a in inside if not _claimed(a.path, claimed)]
    same = previous is not None and not force and policy == previous.cut.policy
    number = 1 if previous is None else previous.cut.number + (0 if same else 1)
    epoch = previous.epoch + 1 if previous is not None else 1
    blobs, hot = cut(fresh, scope, policy, number)
    retired: tuple[Retired, ...] = previous.retired if previous is not None else ()
    if force and previous is not None:
        blobs, gone = _reuse_ids(blobs, previous.blobs)
        retired += tuple(Retired(b, epoch, states_of(b, tiers or {})) for b in gone)
    cuts = previous.cuts if previous is not None else ()
    # a new policy's cut is recorded once it decides something (blobs or hot prefixes); a
    # re-cut always opens its cut, so arrays cut later never take the id of one it retired
    if previous is None or (number > previous.cut.number and (force or bool(blobs) or bool(hot))):
        cuts = (*cuts, Cut(number, policy, epoch))
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
        epoch=epoch,
        policy=cuts[-1].policy,
        blobs=(*kept_blobs, *blobs),
        hot=(*kept_hot, *hot),
        pins=previous.pins if previous is not None else (),
        hot_always=names,
        root_array=any(a.path == scope for a in inside) or bool(previous and previous.root_array),
        cuts=cuts,
        retired=retired,
    )


def _reuse_ids(blobs: Sequence[Blob], old: Sequence[Blob]) -> tuple[list[Blob], list[Blob]]:
    """A re-cut's blobs, those identical to an old blob under its old id and cut (with today's
    figures), and the old blobs nothing reproduced (to retire)."""
    out: list[Blob] = []
    kept: set[str] = set()
    for b in blobs:
        twin = next((o for o in old if o.same_cut(b)), None)
        if twin is None:
            out.append(b)
        else:
            kept.add(twin.id)
            out.append(replace(twin, bytes=b.bytes, objects=b.objects, bucket=b.bucket))
    return out, [o for o in old if o.id not in kept]
