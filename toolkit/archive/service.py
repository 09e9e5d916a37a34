"""The one operation drivers call: partition a scope (propose, then commit), or many as a graph.

`partition_store` reads the arrays (listing + metadata), reads the stored manifest (body and
version from one GET), applies the pure rules, diffs, and writes conditionally; with
`check_tape` it then marks `stale` the blobs on tape whose objects changed since they went
there. `scan` finds every store under a data root and partitions each as one node of a Dask
graph.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from toolkit import storage
from toolkit.archive.diff import Diff, diff
from toolkit.archive.discover import Event, find_stores
from toolkit.archive.hierarchy import read_arrays
from toolkit.archive.manifests import ManifestConflict, ManifestStore, Stored, scope_of_key
from toolkit.archive.model import Manifest, Policy
from toolkit.archive.partition import partition, policy_note
from toolkit.archive.report import BlobStats, summarise
from toolkit.archive.resolve import Trie
from toolkit.archive.tiers import ON_TAPE
from toolkit.archive.tierstore import TierStore
from toolkit.engine import ListedKeys, Runner, runner_of
from toolkit.plan import Gate, Plan, Stage
from toolkit.tasks import stable

__all__ = [
    "Outcome",
    "PartitionScope",
    "Proposal",
    "ScopeTask",
    "commit",
    "partition_store",
    "propose",
    "report",
    "scan",
    "scan_plan",
    "tape_changes",
]


@dataclass(frozen=True)
class Proposal:
    """A computed manifest and what it was computed against (the version to condition on)."""

    scope: str
    previous: Stored | None
    manifest: Manifest
    diff: Diff
    note: str | None = None  # a policy other than the newest cut's: what it did and did not do

    @property
    def changed(self) -> bool:
        return self.previous is None or self.manifest is not self.previous.manifest


@dataclass(frozen=True)
class Outcome:
    scope: str
    epoch: int
    written: bool
    diff: Diff
    manifest: Manifest
    note: str | None = None
    stale: tuple[tuple[str, int], ...] = ()  # (blob, objects changed) newly found stale

    @property
    def orphaned(self) -> tuple[str, ...]:
        return self.diff.orphaned

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "epoch": self.epoch,
            "written": self.written,
            "blobs": len(self.manifest.blobs),
            "orphaned": list(self.orphaned),  # the name scripts knew; "retired" says what it is
            "retired": list(self.orphaned),
            "change": self.diff.describe(),
            "note": self.note,
            "stale": [{"blob": b, "changed": n} for b, n in self.stale],
        }


def propose(
    data: storage.Store,
    manifests: ManifestStore,
    scope: str,
    policy: Policy,
    *,
    force: bool = False,
    exclude: Iterable[str] = (),
    hot_always: Iterable[str] = (),
    keep_policy: bool = False,
) -> Proposal:
    """`keep_policy`: a scope that has a manifest is cut with the policy recorded in it."""
    previous = manifests.read(scope)
    if keep_policy and previous is not None:
        policy = previous.manifest.policy
    old = previous.manifest if previous else None
    tiers: dict[str, str] = {}
    if force and old is not None:  # a re-cut keeps the tier states of the blobs it retires
        state, _ = TierStore(manifests.store).read(scope)
        tiers = {b: t.state for b, t in state.blobs.items()}
    arrays = read_arrays(data, scope)
    new = partition(
        arrays,
        scope,
        policy,
        old,
        force=force,
        exclude=exclude,
        hot_always=tuple(hot_always),
        tiers=tiers,
    )
    return Proposal(scope, previous, new, diff(old, new), policy_note(old, policy, force))


def commit(manifests: ManifestStore, proposal: Proposal) -> Outcome:
    """Write a changed proposal with create / if-match; a lost race raises ManifestConflict."""
    if proposal.changed:
        manifests.write(proposal.manifest, proposal.previous)
    return Outcome(
        proposal.scope,
        proposal.manifest.epoch,
        proposal.changed,
        proposal.diff,
        proposal.manifest,
        proposal.note,
    )


def partition_store(
    data: storage.Store,
    manifests: storage.Store | ManifestStore,
    scope: str,
    policy: Policy,
    *,
    force: bool = False,
    dry_run: bool = False,
    exclude: Iterable[str] = (),
    hot_always: Iterable[str] = (),
    keep_policy: bool = False,
    check_tape: bool = False,
) -> Outcome:
    """`check_tape`: after the manifest, mark stale the blobs on tape whose objects changed
    (one listing of the scope, only when it has blobs on tape)."""
    ms = manifests if isinstance(manifests, ManifestStore) else ManifestStore(manifests)
    proposal = propose(
        data,
        ms,
        scope,
        policy,
        force=force,
        exclude=exclude,
        hot_always=hot_always,
        keep_policy=keep_policy,
    )
    if dry_run:
        return Outcome(
            scope, proposal.manifest.epoch, False, proposal.diff, proposal.manifest, proposal.note
        )
    out = commit(ms, proposal)
    if check_tape:
        out = replace(out, stale=tape_changes(data, ms.store, out.manifest, ms.break_lock))
    return out


def tape_changes(
    data: storage.Store, manifests: storage.Store, manifest: Manifest, break_lock: bool = False
) -> tuple[tuple[str, int], ...]:
    """Blobs whose copy is on tape (archived, recalling, recalled) holding objects modified
    after they got there: each goes `stale` in the tier state. Returns (blob, objects changed)
    for those. Modification times are the object store's; compared with the time the blob's
    state was marked, so the store's clock and the hook's must agree to within that margin."""
    tiers = TierStore(manifests, break_lock)
    state, _ = tiers.read(manifest.scope)
    held = {b: _when(t.since) for b, t in state.blobs.items() if t.state in ON_TAPE and t.since}
    if not held:
        return ()
    objects = storage.list_objects(data, manifest.scope)
    changed: Counter[str] = Counter()
    for o, r in zip(objects, Trie([manifest]).lookup_many(o.key for o in objects), strict=True):
        since = held.get(r.blob or "")
        if since is not None and o.last_modified > since:
            changed[r.blob or ""] += 1
    if not changed:
        return ()
    now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    new = tiers.update(manifest.scope, lambda s: s.changed(changed, now))
    return tuple((b, n) for b, n in sorted(changed.items()) if new.tier(b).state == "stale")


def _when(iso: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(iso)
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


# --------------------------------------------------------------------------- many scopes


@dataclass(frozen=True)
class ScopeTask:
    scope: str

    @property
    def key(self) -> str:
        return self.scope


@dataclass(frozen=True)
class PartitionScope:
    """The per-node service (picklable: holds store handles and the options).

    `conflicts`: how many lost manifest races a node absorbs by reading the winner's manifest
    and partitioning again (the watcher's only coordination); 0 reports the first one."""

    data: storage.Store
    manifests: storage.Store
    policy: Policy
    force: bool = False
    dry_run: bool = False
    exclude: tuple[str, ...] = ()
    hot_always: tuple[str, ...] = ()
    break_lock: bool = False
    keep_policy: bool = False
    conflicts: int = 0
    check_tape: bool = False

    def __call__(self, task: ScopeTask) -> Outcome:
        for attempt in range(self.conflicts + 1):
            try:
                return partition_store(
                    self.data,
                    ManifestStore(self.manifests, self.break_lock),
                    task.scope,
                    self.policy,
                    force=self.force,
                    dry_run=self.dry_run,
                    exclude=self.exclude,
                    hot_always=self.hot_always,
                    keep_policy=self.keep_policy,
                    check_tape=self.check_tape,
                )
            except ManifestConflict:
                if attempt == self.conflicts:
                    raise
        raise AssertionError("unreachable")


def _collect(values: list[Any]) -> tuple[Outcome, ...]:
    out: list[Outcome] = []
    for v in values:
        out.extend(v if isinstance(v, tuple) else (v,))
    return tuple(sorted(out, key=lambda o: o.scope))


def scan_plan(service: PartitionScope, scopes: Iterable[str]) -> Plan:
    """One stage, one node per scope; unless dry-run, the gate counts every scope's manifest."""
    tasks = stable(ScopeTask(s) for s in scopes)
    gate = None
    if not service.dry_run:
        gate = Gate(ListedKeys(service.manifests, "", scope_of_key), want=tuple(tasks.keys))
    stage = Stage("partition", tasks, service, gate, resume=False, combine=_collect, retries=0)
    return Plan("archive-scan", (stage,), holds_gil=False)  # listings and small GETs


def scan(
    data: storage.Store,
    manifests: storage.Store,
    policy: Policy,
    *,
    scopes: Iterable[str] | None = None,
    runner: Runner | None = None,
    **keywords: Any,
) -> tuple[list[Outcome], Any]:
    """Partition every store under `data` (or `scopes`) as a graph; returns outcomes and the
    report. `keywords`: the `PartitionScope` settings (`force=`, `dry_run=`, `exclude=`,
    `hot_always=`, `break_lock=`, `keep_policy=`, `conflicts=`, `check_tape=`); `runner` runs
    it (or the one `cluster=`/`executor=`/`progress=` make: `toolkit.engine.Runner`)."""
    run = {k: keywords.pop(k) for k in ("cluster", "executor", "progress") if k in keywords}
    unknown = sorted(set(keywords) - {f.name for f in fields(PartitionScope)})
    if unknown:
        raise TypeError(f"scan() got unexpected keyword argument(s): {', '.join(unknown)}")
    runner = runner_of(runner, "dask", **run)
    keywords["exclude"] = tuple(keywords.get("exclude", ()))
    keywords["hot_always"] = tuple(keywords.get("hot_always", ()))
    service = PartitionScope(data, manifests, policy, **keywords)
    found = list(scopes) if scopes is not None else find_stores(data, exclude=service.exclude)
    if not found:
        return [], None
    result = runner.run(scan_plan(service, found))
    return list(result.stage("partition").result or ()), result


def report(
    data: storage.Store,
    manifests: storage.Store | ManifestStore,
    scopes: Iterable[str] | None = None,
    events: Iterable[Event] = (),
    rate: float = 300e6,
    mount_s: float = 90.0,
    loaded: Sequence[Manifest] | None = None,
) -> list[BlobStats]:
    """Live per-blob sizes from a listing of each managed scope, resolved through the trie.
    `loaded`: the manifests already read (a caller that reads them per scope, naming the
    unreadable ones); otherwise every manifest is read and an unreadable one raises."""
    ms = manifests if isinstance(manifests, ManifestStore) else ManifestStore(manifests)
    wanted = set(scopes) if scopes is not None else None
    every = ms.load_all() if loaded is None else loaded
    loaded = [m for m in every if wanted is None or m.scope in wanted]
    trie = Trie(loaded)
    objects = ((o.key, o.size) for m in loaded for o in storage.list_objects(data, m.scope))
    return summarise(trie, objects, events, rate, mount_s)
