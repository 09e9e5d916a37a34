"""The archive part of `toolkit demo`: partition the stores under a root, resolve a few keys."""

from __future__ import annotations

import pathlib
from typing import Any

from toolkit import storage
from toolkit.archive.discover import find_stores
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.model import Policy
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
    for d, scope in targets:
        keys = storage.list_keys(d, scope)
        samples += _samples(trie, keys)
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
                "blob_sizes": [
                    {"id": b.id, "bytes": b.bytes, "objects": b.objects} for b in o.manifest.blobs
                ],
                "hot": len(o.manifest.hot),
            }
            for o in outcomes
        ],
        "trie_cuts": len(trie),
        "resolved": samples,
    }
