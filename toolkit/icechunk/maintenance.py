"""Looking after a repo: its manifests measured and resplit, old snapshots expired and
collected, a corrupt object named."""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import icechunk as ic

from toolkit import storage
from toolkit.icechunk.locations import _storage
from toolkit.icechunk.repo_errors import corrupt, translate
from toolkit.icechunk.repositories import _fetch_config
from toolkit.icechunk.sessions import _await
from toolkit.icechunk.splitting import manifest_append_dim_split


@dataclass(frozen=True)
class ManifestReport:
    manifests: int
    refs: int
    bytes: int
    per_array: Mapping[str, Mapping[str, float]]

    @property
    def bytes_per_ref(self) -> float:
        return self.bytes / self.refs if self.refs else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "manifests": self.manifests,
            "refs": self.refs,
            "bytes": self.bytes,
            "bytes_per_ref": round(self.bytes_per_ref, 2),
            "per_array": {k: dict(v) for k, v in self.per_array.items()},
        }


def manifest_report(repo: ic.Repository, branch: str = "main") -> ManifestReport:
    """Every live manifest of `branch`'s HEAD: refs, bytes, bytes/ref, per array."""
    doc = _await(repo.inspect_snapshot_async(repo.lookup_branch(branch)))
    sizes = {m["id"]: (int(m["num_chunk_refs"]), int(m["size_bytes"])) for m in doc["manifests"]}
    per_array: dict[str, dict[str, float]] = {}
    for node in doc.get("nodes", []):
        if node.get("node_type") != "array":
            continue
        ids = {m["id"] for m in node.get("manifest_refs") or []}
        refs = sum(sizes[i][0] for i in ids if i in sizes)
        byts = sum(sizes[i][1] for i in ids if i in sizes)
        per_array[node["path"].lstrip("/")] = {
            "manifests": len(ids),
            "refs": refs,
            "bytes": byts,
            "bytes_per_ref": round(byts / refs, 2) if refs else 0.0,
        }
    total_refs = sum(r for r, _ in sizes.values())
    total_bytes = sum(b for _, b in sizes.values())
    return ManifestReport(len(sizes), total_refs, total_bytes, per_array)


def manifest_split(store: storage.Store) -> dict[str, Any] | None:
    """The manifest splitting the repo's persisted config holds (None: one manifest per array)."""
    cfg = _fetch_config(store, _storage(store))
    splitting = cfg.manifest.splitting if cfg is not None and cfg.manifest is not None else None
    return None if splitting is None else {"split_sizes": repr(splitting.split_sizes)}


def resplit(store: storage.Store, append_dim: str, size: int, message: str) -> str:
    """Split every array's manifests along `append_dim` every `size` positions from now on
    (persisted in the repo's config, so later commits follow it), and rewrite main's existing
    manifests under it in one commit (Icechunk's manifest rewrite). Returns the snapshot."""
    st = _storage(store)
    cfg = _fetch_config(store, st) or ic.RepositoryConfig.default()
    old = cfg.manifest
    fetches = old.max_concurrent_manifest_fetches_during_commit if old is not None else None
    cfg.manifest = ic.ManifestConfig(
        splitting=manifest_append_dim_split(append_dim, size),
        max_concurrent_manifest_fetches_during_commit=fetches,
    )
    repo = ic.Repository.open(st, config=cfg)
    repo.save_config()
    return repo.rewrite_manifests(message, branch="main", metadata={"split": size})


@dataclass(frozen=True)
class Expired:
    """What an expiry did: snapshots dropped from history, objects deleted, bytes freed."""

    snapshots: int
    objects: int
    bytes: int


def expire(repo: ic.Repository, older_than: _dt.datetime) -> Expired:
    """Expire the snapshots written before `older_than` and collect the objects nothing left
    refers to, with Icechunk's own expiry and GC. Main's head, every branch's and tag's tip
    (an in-flight backfill and its marker among them) are kept: no branch or tag is deleted."""
    gone = repo.expire_snapshots(older_than)
    # An in-flight transaction writes objects it has not committed yet (a level's chunks, a
    # fork's manifests), all after its branch was set up from main: collect nothing newer than
    # the oldest branch tip (a marker's tip is main's head at setup).
    tips = [
        next(iter(repo.ancestry(snapshot_id=repo.lookup_branch(b)))).written_at
        for b in repo.list_branches()
        if b != "main"
    ]
    summary = repo.garbage_collect(min([older_than, *tips]))
    objects = sum(
        int(getattr(summary, f, 0))
        for f in ("chunks_deleted", "manifests_deleted", "snapshots_deleted",
                  "attributes_deleted", "transaction_logs_deleted")
    )  # fmt: skip
    return Expired(len(gone), objects, int(getattr(summary, "bytes_deleted", 0)))


@contextlib.contextmanager
def corruption_named(store: storage.Store) -> Iterator[None]:
    """Around a job on the repo at `store`: Icechunk's error about one of the repo's objects
    that does not parse (its several lines of Rust context) becomes a `CorruptObject`; when
    the error does not say which object, the branches' snapshots are read to find it."""
    try:
        yield
    except ic.IcechunkError as err:
        named = translate(err, store.url)
        if named is None:
            raise
        if isinstance(named, storage.CorruptObject) and not named.key:
            named = _corrupt_snapshot(store) or named
        raise named from err


def _corrupt_snapshot(store: storage.Store) -> storage.CorruptObject | None:
    """The first branch head whose snapshot does not parse, named (None: every one does)."""
    try:
        repo = ic.Repository.open(_storage(store))
        heads = sorted({repo.lookup_branch(b) for b in repo.list_branches()})
    except Exception:
        return None
    for head in heads:
        try:
            _await(repo.inspect_snapshot_async(head))
        except ic.IcechunkError as err:
            named = corrupt(err, store.url, head)
            if named is not None and named.key:
                return named
    return None
