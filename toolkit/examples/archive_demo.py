"""The archive part of `toolkit demo`: partition the stores under a root, resolve a few keys."""

from __future__ import annotations

import pathlib
from typing import Any

from toolkit import storage
from toolkit.archive.discover import find_stores
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.model import Manifest, Policy
from toolkit.archive.report import summarise
from toolkit.archive.resolve import Trie
from toolkit.archive.service import partition_store

# Demo stores are kilobytes to megabytes: thresholds scaled so every rule has something to do.
DEMO_POLICY = Policy(t_max=256 * 1024, t_hot=4 * 1024, t_min=64 * 1024)


def _split(url: str) -> tuple[str, str]:
    """A store URL or path -> (data root, scope)."""
    head, _, tail = url.rstrip("/").rpartition("/")
    if not head or not tail:
        raise ValueError(f"store {url!r} needs a parent to act as the data root")
    return head, tail


def _samples(trie: Trie, keys: list[str]) -> list[dict[str, Any]]:
    """One key per blob the keys resolve to (the first listed), then one key kept hot: what
    the resolver answers for each, with the key."""
    picked: dict[str | None, dict[str, Any]] = {}
    hot: list[dict[str, Any]] = []
    for key, answer in zip(keys, trie.lookup_many(keys), strict=True):
        if answer.kind == "blob":
            picked.setdefault(answer.blob, {"key": key, **answer.to_dict()})
        elif answer.kind == "hot" and not hot:
            hot.append({"key": key, **answer.to_dict()})
    return [*picked.values(), *hot]


def _units(trie: Trie, manifest: Manifest, data: storage.Store) -> list[dict[str, Any]]:
    """The scope's archive units as the resolver names them, with the objects and bytes each
    holds: a blob is one unit; a bucketed blob `b_x` is one unit per bucket, `b_x_<n>` (what
    tier state, tape addresses and `archive resolve` name), so every table names the same."""
    listed = [(o.key, o.size) for o in storage.list_objects(data, manifest.scope)]
    out = []
    for row in summarise(trie, listed):
        if row.kind != "blob" or row.scope != manifest.scope or row.blob is None:
            continue
        base = next(
            b
            for b in manifest.blobs
            if row.blob == b.id or (b.bucket and row.blob.rpartition("_")[0] == b.id)
        )
        bucket = None if base.bucket is None else int(row.blob.rpartition("_")[2])
        out.append(
            {"id": row.blob, "of": base.id, "bucket": bucket, "bytes": row.bytes,
             "objects": row.objects}
        )  # fmt: skip
    return out


def demo(root: pathlib.Path, stores: list[str] | None = None) -> dict[str, Any]:
    """Partition the Zarr stores under `root` (or `stores`), write manifests to root/manifests."""
    root = pathlib.Path(root)
    manifests = storage.open_store(str(root / "manifests"))
    if stores is None:
        data = storage.open_store(str(root))
        targets = [(data, s) for s in find_stores(data, exclude=["manifests"])]
    else:
        targets = []
        for url in stores:
            head, scope = _split(str(pathlib.Path(url).resolve()) if "://" not in url else url)
            targets.append((storage.open_store(head), scope))
    outcomes = [partition_store(d, manifests, s, DEMO_POLICY) for d, s in targets]
    trie = Trie(ManifestStore(manifests).load_all())
    samples: list[dict[str, Any]] = []
    units = {}
    for (d, scope), o in zip(targets, outcomes, strict=True):
        keys = storage.list_keys(d, scope)
        samples += _samples(trie, keys)
        units[scope] = _units(trie, o.manifest, d)
    samples.append({"key": "not/managed/object", **trie.lookup("not/managed/object").to_dict()})
    return {
        "manifests": manifests.url,
        "policy": DEMO_POLICY.to_dict(),
        "scopes": [
            {
                "scope": o.scope,
                "epoch": o.epoch,
                "written": o.written,
                "blobs": [b.id for b in o.manifest.blobs],
                "blob_sizes": units[o.scope],
                "hot": len(o.manifest.hot),
            }
            for o in outcomes
        ],
        "trie_cuts": len(trie),
        "resolved": samples,
    }
