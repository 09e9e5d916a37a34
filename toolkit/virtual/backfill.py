"""Backfill as one gated graph: setup -> workers on contiguous blocks -> merged forks -> finalize.

setup     one node: temp branch from main, pre-sized to the whole region (workers never
          resize), main's snapshot recorded in the setup commit's metadata.
ingest    N nodes, each a contiguous append-dim block of source files (its refs stay in a few
          manifest windows): discover, build refs, write them into an Icechunk fork and return
          it with the files ingested and skipped. The engine's done-set is the manifest filter,
          so a rerun resumes. Forks are merged in a bounded tree; every combine node commits
          its merge to the temp branch (memory bounded, no branch-HEAD race between workers).
          Gate: every file reported ingested has its probe cell on the branch (and, `strict`,
          nothing was skipped).
finalize  main := temp branch, only if main has not moved since setup; else fail loudly and
          keep the branch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.engine import run
from toolkit.plan import Gate, Plan, Report, Stage
from toolkit.tasks import stable
from toolkit.virtual import repo as R
from toolkit.virtual.job import Skipped, VirtualRegionJob, committed_extent, sync_dims_to
from toolkit.virtual.refs import canon

__all__ = ["BackfillOut", "backfill", "backfill_plan", "temp_branch"]


@dataclass(frozen=True)
class Step:
    name: str

    @property
    def key(self) -> str:
        return self.name


@dataclass(frozen=True)
class BackfillOut:
    """What a worker (or a combine node) hands on: forks not yet committed, and the lists."""

    forks: tuple[Any, ...] = ()
    ingested: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    commits: tuple[str, ...] = ()
    refs: int = 0


def temp_branch(job: VirtualRegionJob) -> str:
    h = hashlib.sha256(f"{job.repo.url}|{canon(job.start)}|{canon(job.end)}".encode())
    return f"backfill-{h.hexdigest()[:10]}"


def _extent(job: VirtualRegionJob) -> int:
    t = job.template()
    labels = [x for x in t.coords[t.append_dim] if job.in_region(x)]
    if not labels:
        raise ValueError(f"region [{job.start}, {job.end}) holds no {t.append_dim} of the template")
    return t.position(labels[-1]) + 1


@dataclass(frozen=True)
class Setup:
    job: VirtualRegionJob
    branch: str

    def __call__(self, _step: Step) -> str:
        repo = self.job.ensure_repo()
        main = R.snapshot_of(repo, "main")
        if self.branch not in R.branches(repo):
            # main's snapshot at setup, recorded as a marker branch finalize compares against
            if _marker(self.branch) in R.branches(repo):
                R.delete_branch(repo, _marker(self.branch))
            R.create_branch(repo, _marker(self.branch), main)
            R.create_branch(repo, self.branch, main)
        s = R.writable(repo, self.branch)
        sync_dims_to(s, self.job.template(), _extent(self.job))
        if R.has_changes(s):
            R.commit(s, "backfill setup: pre-size", {"main_at_setup": main})
        return self.branch


def _marker(branch: str) -> str:
    return f"{branch}-main-at-setup"


@dataclass(frozen=True)
class BranchReady:
    job: VirtualRegionJob
    branch: str

    def __call__(self) -> frozenset[str]:
        repo = self.job.repo.open(fresh=True)
        if self.branch not in R.branches(repo):
            return frozenset()
        extent = committed_extent(R.readonly(repo, self.branch), self.job.template())
        return frozenset({"setup"}) if (extent or 0) >= _extent(self.job) else frozenset()


@dataclass(frozen=True)
class PresentOnBranch:
    """Keys of the files whose probe cell is on the branch: the done-set and the gate."""

    job: VirtualRegionJob
    branch: str

    def __call__(self) -> frozenset[str]:
        repo = self.job.repo.open(fresh=True)
        if self.branch not in R.branches(repo):
            return frozenset()
        coords = self.job.generate_source_file_coords()
        session = R.readonly(repo, self.branch)
        todo = {c.key for c in self.job.filter_already_present(coords, session)}
        return frozenset(c.key for c in coords if c.key not in todo)


@dataclass(frozen=True)
class Ingest:
    """One worker: filter already applied by the engine; discover, build refs, write a fork."""

    job: VirtualRegionJob
    branch: str

    def __call__(self, coords: list[Any]) -> BackfillOut:
        job = self.job
        skipped: list[Skipped] = []
        batches = list(job.process_virtual_refs(coords, None, skipped))
        if not any(batches):
            return BackfillOut(skipped=tuple(skipped))
        f = R.fork(R.writable(job.repo.open(), self.branch))
        refs = sum(job.write_refs(f, b, grow=False) for b in batches)
        ingested = tuple(c.key for b in batches for c, _ in b)
        return BackfillOut((f,), ingested, tuple(skipped), (), refs)


@dataclass(frozen=True)
class Combine:
    """Merge the forks handed up and commit them to the temp branch (one commit per node)."""

    job: VirtualRegionJob
    branch: str

    def __call__(self, parts: list[BackfillOut]) -> BackfillOut:
        forks = [f for p in parts for f in p.forks]
        commits = [c for p in parts for c in p.commits]
        if forks:
            s = R.writable(self.job.repo.open(), self.branch)
            R.merge(s, forks)
            if R.has_changes(s):  # a retried node finds its merge already committed
                n = sum(len(p.ingested) for p in parts if p.forks)
                commits.append(
                    R.commit(
                        s,
                        f"backfill: {n} file(s) from {len(forks)} fork(s)",
                        {"files": n, "forks": len(forks)},
                    )
                )
        return BackfillOut(
            (),
            tuple(k for p in parts for k in p.ingested),
            tuple(s for p in parts for s in p.skipped),
            tuple(commits),
            sum(p.refs for p in parts),
        )


@dataclass(frozen=True)
class Wanted:
    strict: bool

    def __call__(self, combined: BackfillOut | None) -> Iterable[str]:
        if combined is None:
            return []
        want = list(combined.ingested)
        if self.strict:  # a skipped file is never present: the gate fails naming it
            want += [f"skipped:{s.url} ({s.reason})" for s in combined.skipped]
        return want


@dataclass(frozen=True)
class Finalize:
    job: VirtualRegionJob
    branch: str

    def __call__(self, _step: Step) -> str:
        repo = self.job.repo.open(fresh=True)
        if self.branch not in R.branches(repo):
            return R.snapshot_of(repo, "main")  # already finalized by an earlier attempt
        expected = R.snapshot_of(repo, _marker(self.branch))
        head = R.snapshot_of(repo, self.branch)
        if head != R.snapshot_of(repo, "main"):
            R.reset_branch(repo, "main", head, expected=expected)
        R.delete_branch(repo, self.branch)
        R.delete_branch(repo, _marker(self.branch))
        return head


@dataclass(frozen=True)
class MainAtBranch:
    job: VirtualRegionJob
    branch: str

    def __call__(self) -> frozenset[str]:
        repo = self.job.repo.open(fresh=True)
        return frozenset() if self.branch in R.branches(repo) else frozenset({"finalize"})


def backfill_plan(job: VirtualRegionJob, workers: int = 4, strict: bool = False) -> Plan:
    branch = temp_branch(job)
    job = job.region(job.start, job.end, branch=branch, processing_mode="backfill")
    coords = stable(job.generate_source_file_coords())
    if not coords:
        raise ValueError(f"no source files in [{job.start}, {job.end})")
    present = PresentOnBranch(job, branch)
    return Plan(
        f"virtual-backfill-{branch}",
        (
            Stage(
                "setup",
                stable([Step("setup")]),
                Setup(job, branch),
                Gate(BranchReady(job, branch), want=("setup",)),
                resume=False,
            ),
            Stage(
                "ingest",
                coords,
                Ingest(job, branch),
                Gate(present, expect=Wanted(strict)),
                workers=workers,
                stripe_mode="contiguous",
                done=present,
                resume=not job.overwrite_chunks,
                combine=Combine(job, branch),
                fan_in=4,
            ),
            Stage(
                "finalize",
                stable([Step("finalize")]),
                Finalize(job, branch),
                Gate(MainAtBranch(job, branch), want=("finalize",)),
                resume=False,
            ),
        ),
    )


def last_published(job: VirtualRegionJob) -> Any:
    """The newest append-dim label with any file the source lists now (None if none)."""
    t = job.template()
    coords = job.region(None, None).generate_source_file_coords()
    found = job.discover_available(coords, None)
    labels = [c.out_loc()[t.append_dim] for c, _ in found]
    return max(labels, key=canon) if labels else None


@dataclass(frozen=True)
class BackfillResult:
    report: Report
    empty_positions: tuple[Any, ...] = field(default=())


def backfill(
    job: VirtualRegionJob,
    *,
    start: Any,
    end: Any = None,
    workers: int = 4,
    cluster: Any = None,
    executor: str = "dask",
    progress: Callable[[str, int, int], None] | None = None,
    strict: bool = False,
    overwrite_chunks: bool = False,
    allow_empty_positions: bool = False,
) -> Report:
    """Backfill [start, end) of `job`'s dataset; `end` defaults to just past the last published
    position. Going past it needs `allow_empty_positions` (readers would see those empty)."""
    t = job.template()
    newest = last_published(job)
    if end is None:
        if newest is None:
            raise ValueError("the source has published nothing yet: nothing to backfill")
        end = np.datetime64(newest, "ns") + np.timedelta64(1, "ns")
    region = job.region(start, end, overwrite_chunks=overwrite_chunks)
    empty = [
        x
        for x in t.coords[t.append_dim]
        if region.in_region(x) and (newest is None or canon(x) > canon(newest))
    ]
    if empty and not allow_empty_positions:
        raise ValueError(
            f"--end {end} runs past the last published {t.append_dim} ({newest}): readers would "
            f"see {len(empty)} empty position(s) ({', '.join(map(str, empty[:5]))}); pass "
            "allow_empty_positions / --allow-empty-positions to pre-size them anyway"
        )
    plan = backfill_plan(region, workers=workers, strict=strict)
    return run(plan, cluster=cluster, executor=executor, progress=progress)  # type: ignore[arg-type]
