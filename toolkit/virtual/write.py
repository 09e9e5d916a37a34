"""The write loop shared by backfills and operational updates, as plain functions over a `Job`.

A `Job` is a dataset, the repo it writes (and its replicas), a region of the append dim and
how to run there. The functions own the manifest filter (one probe per file, never a source
byte), the tick loop, whole-file atomic commits that grow the append dim in the same commit,
unreadable-file skipping and the metadata refresh; every commit goes through
`toolkit.transaction` (replicas before the primary). A job pickles (it holds Stores and
RepoRefs, never Icechunk objects), so it runs in-process or in a graph node.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.engine.heap import gathering
from toolkit.transaction import step
from toolkit.virtual.dataset import Dataset, at_lead_zero, in_region, probe, withheld
from toolkit.virtual.filetable import FileTable, file_table, file_tasks
from toolkit.virtual.gribsource import expected_cells
from toolkit.virtual.layout import committed_extent, refresh_metadata, sync_dims_to, write_template
from toolkit.virtual.refs import (
    ChunkKey,
    SourceFileCoord,
    VirtualRef,
    canon,
    chunk_cell,
    chunk_key,
)
from toolkit.virtual.source_io import discover, fetch, refs_from
from toolkit.virtual.template import Template

log = logging.getLogger(__name__)

__all__ = [
    "Batch",
    "Job",
    "RunResult",
    "Skipped",
    "commit_batch",
    "ensure_repo",
    "expected_of",
    "filter_already_present",
    "process_virtual_refs",
    "refresh",
    "run",
    "virtual_config",
    "write_refs",
]

Batch = list[tuple[SourceFileCoord, list[VirtualRef]]]


@dataclass(frozen=True)
class Skipped:
    """A published file that could not be read, and why; `size`/`modified` as listed (an
    update gives a file up after N fires, until the object changes)."""

    url: str
    reason: str
    size: int | None = None
    modified: Any = None


@dataclass
class RunResult:
    """What one write loop (`run`) did: the files committed, skipped (with the reason) and
    still pending, the commits, the refs set, and what `after_commit` returned per commit.
    The update's own outcome wraps it (`toolkit.virtual.update.Fire`); a backfill reports
    through its plan (`BackfillOut`)."""

    ingested: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    refs: int = 0
    after: list[Any] = field(default_factory=list)  # what `after_commit` returned, per commit


@dataclass(frozen=True, eq=False)
class Job:
    """Write `dataset` into `repo` (and `replicas`), append-dim labels [start, end).

    `processing_mode="backfill"` sweeps once; `"update"` polls every `tick_interval` until all
    is ingested or `poll_deadline` (epoch seconds) passes.
    """

    dataset: Dataset
    repo: R.RepoRef
    start: Any = None
    end: Any = None
    replicas: tuple[R.RepoRef, ...] = ()
    processing_mode: Literal["backfill", "update"] = "backfill"
    branch: str = "main"
    poll_deadline: float | None = None
    overwrite_chunks: bool = False
    tick_interval: float = 1.0
    download_concurrency: int = 64

    @property
    def template(self) -> Template:
        return self.dataset.template

    @property
    def repos(self) -> tuple[R.RepoRef, ...]:
        """Replicas first, then the primary (which defines "committed")."""
        return (*self.replicas, self.repo)

    def region(self, start: Any, end: Any, **changes: Any) -> Job:
        return dataclasses.replace(self, start=start, end=end, **changes)

    def files(self) -> list[Any]:
        """Every file the template expects in the job's region (pure)."""
        return file_tasks(self.dataset, self.start, self.end)

    def table(self) -> FileTable:
        """The same files as columns: the task list of a backfill at archive scale (pure)."""
        return file_table(self.dataset, self.start, self.end)

    def in_region(self, label: Any) -> bool:
        return in_region(label, self.start, self.end)


def virtual_config(dataset: Dataset) -> R.VirtualConfig:
    """The repo's Icechunk config: the provider's bucket as a container (anonymous), one for
    the store the source is read from when that is elsewhere, manifests split by settings."""
    s, store = dataset.settings, dataset.source.store
    containers = []
    if s.home:
        containers.append(R.s3_container(s.home, region=s.home_region))
    if not s.home or store.url.rstrip("/") != s.home.rstrip("/"):
        containers.append(R.container_for(store))
    split = None if s.split is None else R.manifest_append_dim_split(dataset.append_dim, s.split)
    return R.VirtualConfig(containers, split)


# ----------------------------------------------------------------------------- the filter


def probe_key(
    job: Job, geom: Any, c: SourceFileCoord, memo: dict[Any, Any] | None = None
) -> ChunkKey | None:
    var, loc = probe(job.dataset, c)  # type: ignore[arg-type]
    return chunk_key(geom, var, loc, memo)


def filter_already_present(
    job: Job, coords: Sequence[SourceFileCoord], session: Any | None = None
) -> list[SourceFileCoord]:
    """Files whose probe chunk is not in the manifest. Manifest probes only."""
    if session is None:
        session = R.readonly(job.repo.open(), job.branch)
    extent = committed_extent(session, job.template)
    if extent is None:
        return list(coords)
    geom = job.template.geometry(extent)
    memo: dict[Any, Any] = {}  # 20,000 files share 834 init times: each canonical once
    probes = [(c, probe_cell(job, geom, c, memo)) for c in coords]
    cells = [k for _, k in probes if k is not None]
    present = dict(zip(cells, R.chunks_present(session, cells), strict=True))
    return [c for c, k in probes if k is None or not present[k]]


def probe_cell(
    job: Job, geom: Any, c: SourceFileCoord, memo: dict[Any, Any] | None = None
) -> tuple[str, tuple[int, ...]] | None:
    """(variable, chunk index) of the file's probe chunk: `probe_key` without spelling the key."""
    var, loc = probe(job.dataset, c)  # type: ignore[arg-type]
    index = chunk_cell(geom, var, loc, memo)
    return None if index is None else (var, index)


def expected_of(
    job: Job, c: SourceFileCoord, memo: dict[Any, Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Every (variable, out_loc) chunk file `c` should fill, for completeness validation
    (`memo`: one dict for a pass over many files, `source.expected_cells`)."""
    return expected_cells(job.dataset.source, job.template, c, memo)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the tick loop


def _skip(c: SourceFileCoord, err: Exception) -> Skipped:
    log.warning("skipping %s: %s", c.get_url(), err)
    return Skipped(c.get_url(), f"{type(err).__name__}: {err}")


def fetch_or_skip(job: Job, c: SourceFileCoord, size: int) -> Any:
    """The file's index and header bytes (I/O, in a pool thread), or `Skipped`."""
    try:
        return fetch(job.dataset.source, c, size)  # type: ignore[arg-type]
    except (storage.Unreachable, storage.AccessDenied):
        raise  # the source is out of reach, not this file: skipping it would commit holes
    except Exception as err:  # an unreadable file must not sink the commit
        return _skip(c, err)


def refs_or_skip(job: Job, c: SourceFileCoord, got: Any, modified: Any = None) -> Any:
    """The file's refs from its fetched bytes (CPU, one thread), or `Skipped` with the reason."""
    if isinstance(got, Skipped):
        return got
    try:
        refs = refs_from(job.dataset.source, c, got, modified)  # type: ignore[arg-type]
    except Exception as err:
        return _skip(c, err)
    if not refs:
        return Skipped(c.get_url(), "file contributed no refs")
    return refs


BACKFILL_BATCH = 512  # files a backfill's stripe hands on at once (its refs written, then freed)


def process_virtual_refs(
    job: Job,
    remaining: Sequence[SourceFileCoord],
    skipped: list[Skipped] | None = None,
    on_tick: Callable[[], None] | None = None,
    on_file: Callable[[int], None] | None = None,
    held_back: set[str] | None = None,
    ingested_through: Any = None,
) -> Iterator[Batch]:
    """Yield batches of whole files with their refs; each batch is one commit (a backfill's,
    written into one fork, comes in parts of BACKFILL_BATCH files).

    An analysis' extending edge lands whole, in backfills as in updates: a statistics file past
    the newest position a lead-0 file covers waits while its hour's lead-0 file is not
    published (`withheld`); interior hours fill in as their files arrive. What is covered:
    `ingested_through` (a label the caller knows is covered, e.g. the newest lead-0 position a
    backfill lands), the lead-0 files `job.branch` held when the run started (asked only when
    a file would wait) and those this run has read. `held_back` collects the keys still
    waiting when the sweeps end.

    `on_tick` runs at the start of every sweep (the update renews its lease there);
    `on_file(n)` hears that n of `remaining` are done (read, or skipped with a reason).
    """
    pending = list(remaining)
    skipped = skipped if skipped is not None else []
    finished = 0
    edge = Edge(job, ingested_through)
    while pending:
        tick = time.monotonic()
        if on_tick is not None:
            on_tick()
        available = discover(job.dataset.source, pending, job.download_concurrency)
        held = edge.held([a[0] for a in available], pending)
        available = [a for a in available if a[0].key not in held]
        if held_back is not None:
            held_back.clear()
            held_back.update(held)
        batch: Batch = []
        done: set[str] = set()
        threads = max(1, min(job.download_concurrency, len(available) or 1))
        with gathering(), ThreadPoolExecutor(threads) as pool:  # the batch's refs pile up
            # GETs overlap in the pool; parsing stays in this thread as each file arrives
            fetched = pool.map(lambda a: fetch_or_skip(job, a[0], a[1]), available)
            for (c, size, modified), got in zip(available, fetched, strict=True):
                res = refs_or_skip(job, c, got, modified)
                done.add(c.key)
                if on_file is not None:
                    on_file(finished + len(done))
                if isinstance(res, Skipped):
                    skipped.append(dataclasses.replace(res, size=size, modified=modified))
                else:
                    batch.append((c, res))
                if job.processing_mode == "backfill" and len(batch) >= BACKFILL_BATCH:
                    edge.read([c for c, _ in batch])  # a fork takes it in parts: fewer
                    yield batch  # refs held at once
                    batch = []
        finished += len(done)
        pending = [c for c in pending if c.key not in done]
        if batch:
            edge.read([c for c, _ in batch])
            yield batch
        if job.processing_mode == "backfill" or not pending:
            return
        if job.poll_deadline is not None and time.time() >= job.poll_deadline:
            return
        wait = job.tick_interval - (time.monotonic() - tick)
        if job.poll_deadline is not None:
            wait = min(wait, job.poll_deadline - time.time())
        if wait > 0:
            time.sleep(wait)


class Edge:
    """An analysis' ingested-through over one run of the tick loop: the newest position a
    lead-0 file covers, from the caller, the store (`stored_through`, asked lazily: an update
    whose every hour is whole never opens the repo for it) and the files this run read."""

    def __init__(self, job: Job, through: Any = None) -> None:
        self.job, self.through, self.session = job, _newest(None, through), None

    def held(self, available: Sequence[Any], pending: Sequence[Any]) -> set[str]:
        """The available files to defer this tick (`toolkit.virtual.dataset.withheld`)."""
        held = withheld(self.job.dataset, available, pending, self.through)
        if not held:
            return held
        if self.session is None:
            self.session = R.readonly(self.job.repo.open(fresh=True), self.job.branch)
        t = self.job.template
        at = sorted((c.out_loc()[t.append_dim] for c in available if c.key in held), key=canon)
        stored = stored_through(self.job, self.session, at[0], at[-1])
        if stored is None:
            return held
        self.through = _newest(self.through, stored)
        return withheld(self.job.dataset, available, pending, self.through)

    def read(self, files: Sequence[SourceFileCoord]) -> None:
        """`files` were read into a batch: their lead-0 positions are covered from now on."""
        for c in files:
            if at_lead_zero(c):
                self.through = _newest(self.through, c.out_loc()[self.job.template.append_dim])


def _newest(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return max(np.datetime64(a, "ns"), np.datetime64(b, "ns"))


def stored_through(job: Job, session: Any, since: Any, until: Any) -> Any:
    """A position at or after `since` whose lead-0 file `session` holds: the newest one found,
    searched upward from `since` in doubling windows and stopped once one at or past `until`
    is found or the store's extent is reached (None: none). Manifest probes only; a position
    past the extent costs nothing (the usual edge of an update)."""
    t = job.template
    extent = committed_extent(session, t) or 0
    labels = t.coords[t.append_dim]
    lo, span, found = t.position(since), 1, None
    while lo < extent and (found is None or canon(found) < canon(until)):
        hi = min(extent, lo + span)
        window = job.region(labels[lo], labels[hi] if hi < len(labels) else None)
        zeros = [c for c in window.files() if at_lead_zero(c)]
        absent = {c.key for c in filter_already_present(job, zeros, session)}
        there = [c.out_loc()[t.append_dim] for c in zeros if c.key not in absent]
        found = max([*there, *([] if found is None else [found])], key=canon, default=None)
        lo, span = hi, span * 2
    return found


# ----------------------------------------------------------------------------- writing


def write_refs(job: Job, session: Any, batch: Batch, *, grow: bool = True) -> int:
    """Set every ref of `batch` in `session` (growing the append dim first if allowed)."""
    with gathering():  # a row per ref, kept until the last array is set
        return _write_refs(job, session, batch, grow)


def _write_refs(job: Job, session: Any, batch: Batch, grow: bool) -> int:
    t = job.template
    if grow:
        need = 1 + max(t.position(c.out_loc()[t.append_dim]) for c, _ in batch)
        sync_dims_to(session, t, need)
    extent = committed_extent(session, t)
    geom = t.geometry(extent)
    by_var: dict[str, list[tuple[tuple[int, ...], str, int, int, Any]]] = {}
    memo: dict[Any, Any] = {}  # a batch's refs share most labels: each canonicalised once
    for c, refs in batch:
        cells = set()
        for r in refs:
            index = chunk_cell(geom, r.variable, r.loc, memo)
            if index is None:
                raise ValueError(
                    f"{c.get_url()}: ref {r.variable} at {r.loc} is outside "
                    f"the store's extent ({extent} {t.append_dim} positions)"
                )
            cells.add((r.variable, index))
            by_var.setdefault(r.variable, []).append(
                (index, r.location, r.offset, r.length, r.last_modified)
            )
        if probe_cell(job, geom, c, memo) not in cells:
            p = probe_key(job, geom, c, memo)
            raise AssertionError(
                f"{c.get_url()}: its refs do not cover the probed cell "
                f"{p.key if p else None}; the filter would never see it ingested"
            )
    step("before_set_refs")
    checksums: dict[Any, Any] = {}  # one per source file, shared by its refs in every array
    return sum(R.set_virtual_refs(session, v, specs, checksums) for v, specs in by_var.items())


@dataclass(frozen=True)
class SetRefs:
    """A whole-file commit's change: every ref of `batch` set in the session."""

    job: Job
    batch: Batch
    grow: bool = True

    def __call__(self, _ref: R.RepoRef, session: Any) -> None:
        write_refs(self.job, session, self.batch, grow=self.grow)
        step("after_set_refs")


def commit_batch(
    job: Job, batch: Batch, *, grow: bool = True, metadata: Mapping[str, Any] | None = None
) -> str:
    """Replicas first, then the primary (which defines "committed"); returns the primary's id.

    A crash between the two leaves a replica a commit ahead: the filter probes the primary,
    so the rerun re-emits the same refs to both (idempotent).
    """
    if not batch:
        raise ValueError("refusing to commit an empty batch")
    meta = {
        **(metadata or {}),
        "files": len(batch),
        "refs": sum(len(r) for _, r in batch),
        "mode": job.processing_mode,
    }
    published = [r.last_modified for _, refs in batch for r in refs if r.last_modified]
    if published:  # the newest source file's own time: status reports publish-to-main lag
        meta["published"] = max(published).isoformat()
    msg = f"{job.processing_mode}: {len(batch)} file(s)"
    snap = T.commit_on(job.repos, job.branch, SetRefs(job, batch, grow), msg, meta)
    if snap is None:
        raise ValueError(f"{job.repo.url}: a batch of {len(batch)} file(s) set no ref")
    step("committed", tuple(c.key for c, _ in batch))
    return snap


def run(
    job: Job,
    todo: Sequence[SourceFileCoord] | None = None,
    *,
    on_tick: Callable[[], None] | None = None,
    before_commit: Callable[[], None] | None = None,
    metadata: Mapping[str, Any] | None = None,
    after_commit: Callable[[list[dict[str, Any]]], Any] | None = None,
) -> RunResult:
    """The write loop: commit each yield (one tick's whole files) to `job.branch`.

    `todo`: the files to write (default: those of the region the manifest filter finds
    missing). `on_tick` runs at every sweep, `before_commit` before each commit (the update
    renews and checks its lease there), `metadata` goes into each commit, and
    `after_commit(positions)` runs after each with the committed files' positions; what it
    returns is kept in the result's `after`."""
    result = RunResult()
    if todo is None:
        coords = job.files()
        session = R.readonly(job.repo.open(fresh=True), job.branch)
        todo = coords if job.overwrite_chunks else filter_already_present(job, coords, session)
    for batch in process_virtual_refs(job, todo, result.skipped, on_tick):
        if before_commit is not None:
            before_commit()
        result.commits.append(commit_batch(job, batch, metadata=metadata))
        result.ingested.extend(c.key for c, _ in batch)
        result.refs += sum(len(r) for _, r in batch)
        if after_commit is not None:
            if before_commit is not None:
                before_commit()
            result.after.append(after_commit([c.out_loc() for c, _ in batch]))
    seen = set(result.ingested) | {s.url for s in result.skipped}
    result.pending = [c.key for c in todo if c.key not in seen]
    return result


# ----------------------------------------------------------------------------- setup


@dataclass(frozen=True)
class WriteTemplate:
    """The template's arrays at `extent`, where a repo has none yet."""

    job: Job
    extent: int

    def __call__(self, _ref: R.RepoRef, session: Any) -> None:
        if committed_extent(session, self.job.template) is None:
            write_template(session, self.job.template, self.extent)


def ensure_repo(job: Job, extent: int | None = None) -> Any:
    """Create the repo (and replicas) with the dataset's config if missing; write the template."""
    for ref in job.repos:  # each on its own: a repo's template does not wait for another's
        repo = R.open_or_create(ref.store, virtual_config(job.dataset))
        if committed_extent(R.readonly(repo, "main"), job.template) is None:
            T.commit_on([ref], "main", WriteTemplate(job, extent or 0), "template")
    return job.repo.open(fresh=True)


@dataclass(frozen=True)
class RefreshMetadata:
    job: Job

    def __call__(self, ref: R.RepoRef, session: Any) -> None:
        refresh_metadata(session, self.job.template, ref.url)


def refresh(job: Job) -> str | None:
    """Rewrite template attrs and coordinate fixes at the committed extent of every repo;
    commit only on a real change; refuse structural drift. The primary's new snapshot or None."""
    return T.commit_on(
        job.repos,
        job.branch,
        RefreshMetadata(job),
        "refresh metadata",
        {"mode": "refresh"},
        fresh=True,
    )
