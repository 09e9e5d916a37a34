"""Backfill as a branch transaction (`toolkit.transaction`): setup -> rounds -> finalize.
This module holds the backfill's own work; the transaction holds the branch.

setup     one node: the repos created if missing, a branch from main (and a marker of main's
          head) pre-sized to the whole region (workers never resize), the region in the setup
          commit.
rounds    the region's files in contiguous rounds of `round_files` (about ten minutes of the
          cluster's work by default), one after another, each a stage of its own:
          ingest  stripe nodes: discover, build refs, write them into one Icechunk fork per
                  repo (replicas and primary) and hand them on with what they ingested,
                  skipped (with the reason) and found not published. The round's done-set is
                  the branch's manifests probed for the round's files, so a rerun skips what
                  earlier runs committed.
          commit  where the round's forks were folded, next to the workers, they are merged and
                  committed once per repo, replicas first (`transaction.SettleRound`): no fork
                  and no key per file reaches the client, which sees counts. The round's gate
                  wants every file the template expects in it up to the last published position
                  and probes the branch for each: what the workers reported only explains an
                  absence (not published, published without its index, withheld, skipped), and
                  `strict` refuses those but the files not yet readable at the newest position.
          A lost client, scheduler or worker costs at most the round in flight: the rounds
          before it are committed on the branch.
finalize  replicas, then the primary: main := the branch. Main's commits since setup that did
          not touch the region (update fires at the edge) are first brought onto the branch
          (`landing.catch_up`); commits that did fail it, naming both ways out (`--rebase`,
          `toolkit virtual abort`).

The report folds the rounds back into one `ingest` and one `commit` row (`in_rounds`).
A branch deleted under a running backfill (`toolkit virtual abort` from another shell, a
hand) fails whichever node next touches it; that is `BranchGone`, one line naming the branch
and the rerun, which sets the branch up again from main and converges.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Unpack

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.engine import RunKeywords, Runner, runner_of
from toolkit.plan import AUTO, Gate, Plan, Report, Stage, StageReport
from toolkit.virtual.dataset import Analysis, at_lead_zero
from toolkit.virtual.filetable import FileTable, Keys
from toolkit.virtual.inflight import (
    PREFIX,
    RegionOverlap,
    guard_key,
    in_flight,
    temp_branches,
    ways_out,
    what_moved,
)
from toolkit.virtual.layout import committed_extent, sync_dims_to
from toolkit.virtual.lease import Lease
from toolkit.virtual.refs import canon
from toolkit.virtual.source_io import discover, without_index
from toolkit.virtual.write import (
    Job,
    Skipped,
    ensure_repo,
    filter_already_present,
    process_virtual_refs,
    virtual_config,
    write_refs,
)

__all__ = ["BackfillOut", "BranchGone", "backfill", "backfill_plan", "temp_branch"]


@dataclass(frozen=True)
class BackfillOut:
    """What the backfill reports: how many files it ingested, those skipped (with the reason)
    and not published, the commits, the refs written. Counts, not keys, for what it wrote:
    the report of a backfill of millions of files stays small."""

    ingested: int = 0  # files ingested (and committed) by this run
    skipped: tuple[Skipped, ...] = ()
    commits: tuple[str, ...] = ()
    refs: int = 0
    empty_positions: tuple[str, ...] = ()  # pre-sized past the last published position
    unpublished: tuple[str, ...] = ()  # files of the region the source does not list
    indexless: tuple[str, ...] = ()  # listed without their .idx: not readable yet
    withheld: tuple[str, ...] = ()  # an analysis hour's statistics, its lead 0 not published
    rebases: int = 0  # times a commit lost the branch's head and rebased


def temp_branch(job: Job) -> str:
    h = hashlib.sha256(f"{job.repo.url}|{canon(job.start)}|{canon(job.end)}".encode())
    return f"{PREFIX}{h.hexdigest()[:10]}"


def _extent(job: Job) -> int:
    t = job.template
    labels = [x for x in t.coords[t.append_dim] if job.in_region(x)]
    if not labels:
        raise ValueError(f"region [{job.start}, {job.end}) holds no {t.append_dim} of the template")
    return t.position(labels[-1]) + 1


@dataclass(frozen=True)
class Presize:
    """The setup change: the branch pre-sized to the whole region (workers never resize)."""

    job: Job

    def __call__(self, _ref: R.RepoRef, session: Any, _main: str) -> None:
        sync_dims_to(session, self.job.template, _extent(self.job))


@dataclass(frozen=True)
class EnsureRepos:
    job: Job

    def __call__(self) -> None:
        ensure_repo(self.job)


@dataclass(frozen=True)
class BranchReady:
    job: Job
    branch: str

    def __call__(self) -> frozenset[str]:
        repo = self.job.repo.open(fresh=True)
        if self.branch not in R.branches(repo):
            return frozenset()
        extent = committed_extent(R.readonly(repo, self.branch), self.job.template)
        return frozenset({"setup"}) if (extent or 0) >= _extent(self.job) else frozenset()


@dataclass(frozen=True)
class PresentOnBranch:
    """Keys of the files whose probe cell is on the branch: a round's done-set and its gate
    (`files`: the round's, as columns; None: the job's region)."""

    job: Job
    branch: str
    files: FileTable | None = None

    def __call__(self) -> frozenset[str]:
        repo = self.job.repo.open(fresh=True)
        if self.branch not in R.branches(repo):
            return frozenset()
        coords = self.job.files() if self.files is None else list(self.files)
        session = R.readonly(repo, self.branch)
        todo = {c.key for c in filter_already_present(self.job, coords, session)}
        return frozenset(c.key for c in coords if c.key not in todo)


@dataclass(frozen=True)
class Ingest:
    """One worker: filter already applied by the engine; discover, build refs, write a fork."""

    job: Job
    branch: str
    through: Any = None  # an analysis' edge: the newest position with its lead-0 file listed

    def __call__(self, coords: list[Any], tick: Callable[[int], None] | None = None) -> T.Forked:
        job = self.job
        skipped: list[Skipped] = []
        held: set[str] = set()
        forks: dict[str, Any] = {}
        ingested: list[str] = []
        refs = 0
        found = process_virtual_refs(
            job, coords, skipped, on_file=tick, held_back=held, ingested_through=self.through
        )
        for batch in found:  # written as it comes: a stripe never holds its refs at once
            if not batch:
                continue
            for ref in job.repos:
                if ref.url not in forks:
                    forks[ref.url] = T.fork_of(ref, self.branch)
                n = write_refs(job, forks[ref.url], batch, grow=False)
                refs += n if ref is job.repo else 0
            ingested.extend(c.key for c, _ in batch)
        read = set(ingested) | {s.url for s in skipped} | held
        absent = [c for c in coords if c.key not in read]
        indexless = without_index(job.dataset.source, absent) if absent else set()
        unpublished = tuple(c.key for c in absent if c.key not in indexless)
        report = BackfillOut(
            ingested=len(ingested),
            skipped=tuple(skipped),
            refs=refs,
            unpublished=unpublished,
            indexless=tuple(sorted(indexless)),
            withheld=tuple(sorted(held)),
        )
        if not forks:
            return T.Forked(report=report)
        T.step("worker_forked")
        return T.Forked(tuple(forks.items()), tuple(ingested), report)


def merged(parts: list[Any]) -> BackfillOut:
    """The rounds' fold: one report of their commits and reports (associative, no I/O)."""
    outs: list[BackfillOut] = []
    for p in T.gather(parts):
        if isinstance(p, T.Committed):
            done = [o.report for o in p.outs if o.report is not None]
            outs.extend(done)
            if p.snapshot is not None:  # a commit of forks (none: nothing to commit)
                outs.append(BackfillOut(commits=(p.snapshot,), rebases=p.rebases))
        elif isinstance(p, BackfillOut):
            outs.append(p)
    return BackfillOut(
        sum(o.ingested for o in outs),
        tuple(s for o in outs for s in o.skipped),
        tuple(c for o in outs for c in o.commits),
        sum(o.refs for o in outs),
        unpublished=tuple(k for o in outs for k in o.unpublished),
        indexless=tuple(k for o in outs for k in o.indexless),
        withheld=tuple(k for o in outs for k in o.withheld),
        rebases=sum(o.rebases for o in outs),
    )


def describe(group: T.Group) -> tuple[str, dict[str, Any]]:
    """A commit of a group of ingest outputs: the files and forks it brings."""
    files = sum(len(o.done) for o in group.outs if o.forks)
    forks = sum(1 for o in group.outs if o.forks)  # one fork per repo per output
    return f"backfill: {files} file(s) from {forks} fork(s)", {"files": files, "forks": forks}


@dataclass(frozen=True)
class Absences:
    """Why wanted files are not on the branch, as the ingest workers found them: the source does
    not list them, or they were listed but could not be read. It explains; the gate's probes
    decide what is there."""

    def __call__(self, folded: Any) -> dict[str, str]:
        if folded is None:
            return {}
        combined = merged([folded])
        reasons = {k: "not published (the source does not list it)" for k in combined.unpublished}
        reasons.update(
            {
                k: "published without its index (.idx): unreadable until it is"
                for k in combined.indexless
            }
        )
        reasons.update(
            {k: "withheld: at the extending edge, its hour's lead-0 file is not published yet"
             for k in combined.withheld}
        )  # fmt: skip
        reasons.update({s.url: f"skipped: {s.reason}" for s in combined.skipped})
        return reasons


@dataclass(frozen=True)
class StillPublishing:
    """What `--strict` accepts: files not yet readable at the newest published position,
    which the source may not have finished publishing; an interior gap or a skip fails."""

    newest: frozenset[str]

    def __call__(self, key: str, reason: str) -> bool:
        return key in self.newest and not reason.startswith("skipped")


@dataclass(frozen=True)
class MainMoved:
    job: Job
    branch: str

    def __call__(self, url: str) -> str:
        ref = next(r for r in self.job.repos if r.url == url)
        moved = what_moved(ref.open(fresh=True), self.branch)
        return (
            f"{url}: main moved since setup of backfill {self.branch!r} ({moved}); finalize "
            f"refused and kept the branch: {ways_out(url, self.branch)}"
        )


ROUND_SECONDS = 600  # a round is about ten minutes of work: what a loss may cost at most
# files one thread ingests a second, the rounds' yardstick: a real-sized index on S3 at 20 to 50
# ms a request (benchmarks/results/virtual_throughput.md: 380 to 540 files/s a process), halved
# for real archives' larger inventories
FILES_PER_THREAD_SECOND = 200
# what a round's forks, their merge and its commit take at their peak, per ref (Icechunk's
# change sets; measured: 50,000 files of 8 refs peak 490 MiB over the command's own 118)
ROUND_REF_BYTES = 1200
IN_PROCESS_ROUND_BYTES = 128 << 20  # in the command's process: the command stays small
WORKER_ROUND_SHARE = 4  # on a cluster: a quarter of the smallest worker's memory


@dataclass(frozen=True)
class RoundSize:
    """The default round and what bounds it: time (`threads` for ROUND_SECONDS) or the memory
    its commit needs (`refs` a file within `budget` bytes)."""

    files: int
    threads: int
    refs: float
    budget: int

    @property
    def by_memory(self) -> bool:
        return self.files < self.threads * FILES_PER_THREAD_SECOND * ROUND_SECONDS


def round_files_for(threads: int, refs: float = 1.0, memory: int | None = None) -> RoundSize:
    """The default round: about ROUND_SECONDS of work for `threads` threads, unless the
    memory its commit needs (`refs` a file, ROUND_REF_BYTES a ref) would pass the budget: a
    share of the smallest worker's `memory` on a cluster, IN_PROCESS_ROUND_BYTES in process."""
    budget = IN_PROCESS_ROUND_BYTES if memory is None else memory // WORKER_ROUND_SHARE
    by_time = max(1, threads) * FILES_PER_THREAD_SECOND * ROUND_SECONDS
    by_memory = int(budget // (max(refs, 1.0) * ROUND_REF_BYTES))
    return RoundSize(max(1, min(by_time, by_memory)), max(1, threads), refs, budget)


def refs_per_file(job: Job, sample: int = 64) -> float:
    """The refs a file of the region brings, on average over up to `sample` files spread over
    it (the catalog's cells each expects; nothing read)."""
    from toolkit.virtual.gribsource import expected_cells

    table = job.table()
    if not len(table):
        return 1.0
    step = max(1, len(table) // sample)
    memo: dict[Any, Any] = {}
    picked = [table[i] for i in range(0, len(table), step)][:sample]
    t = job.template
    counts = [len(expected_cells(job.dataset.source, t, c, memo)) for c in picked]
    return max(1.0, sum(counts) / len(counts))


def rounds_of(n: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of each round of `size` files among `n`, in order (the last may be short)."""
    size = max(1, size)
    return [(a, min(a + size, n)) for a in range(0, n, size)]


ROUND = "ingest-"  # a round's stage name: `ingest-0001`, ... (`in_rounds` folds them back)


def _check_span(job: Job, start: Any, end: Any) -> None:
    """A region outside the template's append-dim span, or an empty one, is a usage error that
    names the span (not the source, which was never asked)."""
    t = job.template
    labels = t.coords[t.append_dim]

    def ns(x: Any) -> Any:
        return np.datetime64(x, "ns")

    def when(x: Any) -> str:
        return str(np.datetime_as_string(ns(x), unit="m"))

    first, last = ns(labels[0]), ns(labels[-1])
    span = f"{job.dataset.name}'s template spans {t.append_dim} {when(first)} .. {when(last)}"
    if end is not None and ns(end) <= ns(start):
        raise ValueError(
            f"--end {when(end)} is not after --start {when(start)}: the region is empty"
        )
    if ns(start) > last:
        raise ValueError(
            f"--start {when(start)} is after the last position: {span}; start inside it"
        )
    if end is not None and ns(end) <= first:
        raise ValueError(f"--end {when(end)} is before the first position: {span}; end inside it")


def backfill_plan(
    job: Job,
    workers: int | str = AUTO,
    strict: bool = False,
    published_through: Any = None,
    round_files: int | None = None,
    catch_up: Callable[[], object] | None = None,
    lead_zero_through: Any = None,
) -> Plan:
    """setup -> one stage per round of `round_files` files (None: the region in one round),
    each ingested by `workers` contiguous blocks and committed where its forks were folded ->
    finalize (first running `catch_up`, which brings main's new commits onto the branch).

    Each round's gate wants every file the template expects in it up to `published_through`
    (the last published position; default: all of them) and probes the branch's manifests for
    them. Files the source does not list, or lists but cannot be read, are excused with their
    reason -- unless `strict`, where they fail the gate. An analysis withholds only past
    `lead_zero_through` (the newest position whose lead-0 file the source lists): its edge."""
    branch = temp_branch(job)
    job = job.region(job.start, job.end, branch=branch, processing_mode="backfill")
    coords = job.table()  # columns: blocks ship as arrays, their workers make the coords
    if not len(coords):
        raise ValueError(f"no source files in [{job.start}, {job.end})")
    excuse: Any = True
    if strict:  # the newest published position may still be publishing: only it is excused
        newest = () if published_through is None else job.region(published_through, None).files()
        excuse = StillPublishing(frozenset(c.key for c in newest))
    txn = T.Txn(job.repos, branch)
    region = f"[{job.start}, {job.end if job.end is not None else ''})"
    setup = T.Setup(
        txn,
        Presize(job),
        "backfill setup: pre-size",
        {"region": region},
        prepare=EnsureRepos(job),
    )
    bounds = rounds_of(len(coords), round_files or len(coords))
    width = max(4, len(str(len(bounds))))
    rounds = []
    for i, (a, b) in enumerate(bounds):
        files = coords[a:b]
        present = PresentOnBranch(job, branch, files)
        name = f"{ROUND}{i + 1:0{width}d}"
        gate = Gate(
            present,
            want=Keys(files.through(published_through)),
            explain=Absences(),
            excuse=excuse,
        )
        rounds.append(
            Stage(
                name,
                files,
                Ingest(job, branch, lead_zero_through),
                gate,
                workers=workers,
                done=present,
                resume=not job.overwrite_chunks,
                combine=T.gather,
                settle=T.SettleRound(txn, name, describe, merged),
            )
        )
    return Plan(
        f"virtual-backfill-{branch}",
        T.stages(txn, setup, rounds, MainMoved(job, branch), BranchReady(job, branch), catch_up),
    )


def in_rounds(report: Report) -> Report:
    """The report with its rounds folded back into one `ingest` row (files: tasks, skipped as
    already on the branch, written by this run) and one `commit` row (tasks: rounds; written:
    commits made; the gates' have/want and excused summed; the result: `BackfillOut`)."""
    rounds = [s for s in report.stages if s.name.startswith(ROUND)]
    if not rounds:
        return report
    out = merged([s.result for s in rounds if s.result is not None])
    gated = [s for s in rounds if s.gate_want is not None]
    ingest = StageReport(
        "ingest",
        tasks=sum(s.tasks for s in rounds),
        skipped=sum(s.skipped for s in rounds),
        written=sum(s.written for s in rounds),
        seconds=sum(s.seconds for s in rounds),
        nodes=sum(s.nodes for s in rounds),
    )
    commit = StageReport(
        "commit",
        tasks=len(rounds),
        skipped=0,
        written=len(out.commits),
        seconds=0.0,
        gate_have=sum(s.gate_have or 0 for s in gated) if gated else None,
        gate_want=sum(s.gate_want or 0 for s in gated) if gated else None,
        result=out,
        nodes=len(rounds),
        excused=tuple(e for s in rounds for e in s.excused),
    )
    first = report.stages.index(rounds[0])
    kept = [s for s in report.stages if not s.name.startswith(ROUND)]
    return dataclasses.replace(report, stages=(*kept[:first], ingest, commit, *kept[first:]))


@dataclass(frozen=True)
class RoundsProgress:
    """Progress of the rounds as one `ingest` bar: a round's count follows the rounds before
    it (`before`: each round's first file; `total`: the region's files)."""

    progress: Callable[[str, int, int], None]
    before: dict[str, int]
    total: int

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage in self.before:
            self.progress("ingest", self.before[stage] + done, self.total)
        else:
            self.progress(stage, done, total)


def check_containers(job: Job) -> None:
    """Refs into the source must fall in a virtual chunk container the repo registered when it
    was created: a repo built from a source that has since moved could never read refs into
    the new place. Refused before the guard, the branch or any ref is written."""
    wanted = [c.url_prefix for c in virtual_config(job.dataset).containers]
    for ref in (*job.replicas, job.repo):
        if not R.is_repo(ref.store):
            continue  # created with these containers
        have = R.container_prefixes(ref.open(fresh=True))
        lost = [w for w in wanted if not any(w.startswith(h) for h in have)]
        if lost:
            raise ValueError(
                f"{storage.location(ref.url)}: its refs point into "
                f"{', '.join(storage.location(h) for h in have)}, and --source "
                f"{storage.location(job.dataset.source.store.url)} lies outside them (the "
                "source it was built from moved?): pass the --source the repo was built from, "
                "or backfill into a new --repo"
            )


class BranchGone(RuntimeError):
    """The backfill's temp branch was deleted while the backfill ran."""


def branch_gone(job: Job, err: BaseException) -> BranchGone | None:
    """`err`, when it is the backfill's branch missing under it: the error names the branch
    (a node failed looking it up) and a repo of the job no longer has it."""
    branch = temp_branch(job)
    said, cause = [], err
    while cause is not None and len(said) < 8:
        said.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    if not any(branch in text for text in said):
        return None
    named = sorted(job.repos, key=lambda ref: not any(ref.url in text for text in said))
    for ref in named:  # the repo the error names first: a finalized replica lacks it too
        try:
            if branch in R.branches(ref.open(fresh=True)):
                continue
        except Exception:  # the repo itself is unreadable: that error is the one to show
            return None
        return BranchGone(
            f"{ref.url}: branch {branch!r} was deleted while this backfill ran (`toolkit "
            "virtual abort`, or by hand); rerun the same backfill command: it sets the "
            "branch up again from main"
        )
    return None


def _bounds(job: Job) -> dict[str, Any]:
    """The region as its guard records it: text, and nanoseconds to compare."""
    end = None if job.end is None else int(np.datetime64(job.end, "ns").astype("int64"))
    return {
        "region": f"[{job.start}, {job.end if job.end is not None else ''})",
        "start": int(np.datetime64(job.start, "ns").astype("int64")),
        "end": end,
    }


def claim(job: Job) -> Lease:
    """The region's guard, taken before any branch is touched: refused (naming the other) when
    another backfill over an overlapping region is in flight, or when this region's is running
    in a live process; a guard whose holder is gone is taken over (`took_over` says from whom).
    """
    branch = temp_branch(job)
    bounds = _bounds(job)
    repo = ensure_repo(job)
    for other in in_flight(repo, job.repo.store, mine=branch):
        if other.branch != branch and other.overlaps(bounds["start"], bounds["end"]):
            who = f"running in {other.holder}" if other.holder else "no process runs it now"
            raise RegionOverlap(
                f"{job.repo.url}: backfill {other.branch!r} (region {other.region}, {who}) "
                f"overlaps this one's region {bounds['region']}: one backfill at a time over "
                f"a region; wait for it to finalize, or {ways_out(job.repo.url, other.branch)}"
            )
    guard = Lease(job.repo.store, guard_key(branch), 0.0, role="backfill", about=bounds)
    return guard.acquire()


def rebase_onto_main(job: Job) -> None:
    """Restart the region's backfill branch from main's head, in every repo (replicas first),
    unless main's commits since setup wrote files of the region. Nothing in flight: nothing to do.
    """
    branch = temp_branch(job)
    coords = job.files()
    refs = job.repos
    for ref in refs:  # check every repo before changing any
        repo = ref.open(fresh=True)
        if branch not in temp_branches(repo) or T.marker(branch) not in R.branches(repo):
            continue
        at_setup = R.readonly(repo, snapshot=R.snapshot_of(repo, T.marker(branch)))
        absent_at_setup = {c.key for c in filter_already_present(job, coords, at_setup)}
        absent_now = {c.key for c in filter_already_present(job, coords, R.readonly(repo))}
        touched = absent_at_setup - absent_now  # written to main since setup
        if touched:
            t = job.template
            at = {c.out_loc()[t.append_dim] for c in coords if c.key in touched}
            labels = [str(x) for x in sorted(at, key=canon)]
            raise RegionOverlap(
                f"{ref.url}: main's commits since backfill {branch!r} started wrote "
                f"{len(touched)} file(s) of its region, at {t.append_dim} {', '.join(labels[:5])}"
                f"{' ...' if len(labels) > 5 else ''}; cannot rebase onto them: "
                f"drop the branch (`toolkit virtual abort {ref.url} --branch {branch}`) "
                "and backfill a region that does not overlap"
            )
    for ref in refs:
        repo = ref.open(fresh=True)
        if branch in temp_branches(repo):
            T.abort(repo, branch)  # setup creates both again from main's head


def analysis(dataset: Any) -> bool:
    return isinstance(dataset.leads, Analysis)


def rounds_note(rounds: int, size: int, sized: RoundSize | None) -> str:
    """The rounds as the run states them: how many, their size, and where the size came from."""
    if sized is None:
        why = "--round-files"
    elif sized.by_memory:
        why = (
            f"what a round's commit holds: ~{sized.refs:.0f} refs a file at "
            f"~{ROUND_REF_BYTES} bytes a ref within {sized.budget >> 20} MiB"
        )
    else:
        why = (
            f"about {ROUND_SECONDS // 60} minutes of work each at ~{FILES_PER_THREAD_SECOND} "
            f"files/s a thread on {sized.threads} thread(s)"
        )
    return (
        f"rounds: {rounds} of up to {size:,} files ({why}); each is committed to the branch "
        "before the next starts, so a rerun after any loss resumes after the last committed one"
    )


@dataclass(frozen=True)
class CatchUp:
    """Finalize's first step: main's commits since setup brought onto the branch when they did
    not touch the region (`landing.catch_up`)."""

    job: Job

    def __call__(self) -> None:
        from toolkit.virtual.landing import catch_up

        catch_up(self.job, temp_branch(self.job))


def last_published(job: Job, lead_zero: bool = False) -> Any:
    """The newest append-dim label in `job`'s region with any file the source lists now (None
    if none); `lead_zero`: with its lead-0 file listed (an analysis' edge, `at_lead_zero`).

    Searched newest position first, one position's files at a time, so a multi-year template
    costs a listing or two, not a listing of the whole archive.
    """
    t = job.template
    labels = [x for x in t.coords[t.append_dim] if job.in_region(x)]
    for i in range(len(labels) - 1, -1, -1):
        end = labels[i + 1] if i + 1 < len(labels) else job.end
        coords = job.region(labels[i], end).files()
        if lead_zero:
            coords = [c for c in coords if at_lead_zero(c)]
        if coords and discover(job.dataset.source, coords):
            return labels[i]
    return None


def backfill(
    job: Job,
    *,
    start: Any,
    end: Any = None,
    workers: int | str = AUTO,
    runner: Runner | None = None,
    strict: bool = False,
    overwrite_chunks: bool = False,
    allow_empty_positions: bool = False,
    rebase: bool = False,
    round_files: int | None = None,
    **run: Unpack[RunKeywords],
) -> Report:
    """Backfill [start, end) of `job`'s dataset; `end` defaults to just past the last published
    position. Going past it needs `allow_empty_positions` (readers would see those empty).

    The files go to the branch in rounds of `round_files` (default: about ten minutes of work
    for the cluster's threads, or less where a round's commit would need more memory than a
    share of a worker's, `round_files_for`), each committed before the next starts: a
    rerun of the same call after any loss resumes after the last committed round.

    `rebase`: a backfill of this region that finalize refused (main moved) restarts from main's
    new head, provided main's new commits did not touch the region (else refused, naming the
    positions); its files are ingested again (refs only). `runner` runs it (or the one
    `cluster`/`executor`/`progress` make: `toolkit.engine.Runner`; on Dask by default)."""
    runner = runner_of(runner, "dask", **run)
    t = job.template
    _check_span(job, start, end)
    for ref in (*job.replicas, job.repo):
        R.refuse_foreign(ref.store)
    check_containers(job)
    if end is None:
        newest = last_published(job.region(start, None))
        if newest is None:
            raise ValueError(f"the source lists no file at or after {start}: nothing to backfill")
        end = np.datetime64(newest, "ns") + np.timedelta64(1, "ns")
    else:
        newest = last_published(job.region(start, end))
    region = job.region(start, end, overwrite_chunks=overwrite_chunks)
    empty = [
        x
        for x in t.coords[t.append_dim]
        if region.in_region(x) and (newest is None or canon(x) > canon(newest))
    ]
    if empty and not allow_empty_positions:
        published = (
            f"the last published {t.append_dim} ({newest})"
            if newest is not None
            else (f"every published {t.append_dim} (none in [{start}, {end}))")
        )
        raise ValueError(
            f"--end {end} runs past {published}: readers would "
            f"see {len(empty)} empty position(s) ({', '.join(map(str, empty[:5]))}); pass "
            "allow_empty_positions / --allow-empty-positions to pre-size them anyway"
        )
    guard = claim(region)
    try:
        with guard.heartbeat():
            if rebase:
                rebase_onto_main(region)
            sized = None
            if round_files is None:
                has = runner.capacity(Plan(f"virtual-backfill-{temp_branch(region)}", ()))
                sized = round_files_for(has.threads, refs_per_file(region), has.memory)
                round_files = sized.files
            edge = last_published(region, lead_zero=True) if analysis(region.dataset) else None
            plan = backfill_plan(
                region,
                workers=workers,
                strict=strict,
                published_through=newest,
                round_files=round_files,
                catch_up=CatchUp(region),
                lead_zero_through=edge,
            )
            rounds = [s for s in plan.stages if s.name.startswith(ROUND)]
            if runner.progress is not None:
                starts = np.cumsum([0] + [len(s.tasks) for s in rounds]).tolist()
                before = {s.name: starts[i] for i, s in enumerate(rounds)}
                runner = runner.with_progress(RoundsProgress(runner.progress, before, starts[-1]))
            report = in_rounds(runner.run(plan))
    except Exception as err:
        gone = branch_gone(region, err)
        guard.release(keep=gone is None)  # a branch in flight keeps a guard of what it covers
        if gone is not None:
            raise gone from err
        raise
    except BaseException:
        guard.release(keep=True)
        raise
    guard.release()  # finalized: the branch is gone, and its guard with it
    notes = [rounds_note(len(rounds), round_files, sized)]
    if guard.took_over:
        notes.append(guard.took_over)
    report = dataclasses.replace(report, notes=(*report.notes, *notes))
    if not empty:
        return report
    # name the positions readers will see empty (pre-sized past the last published one)
    stages = tuple(
        dataclasses.replace(
            s,
            result=dataclasses.replace(
                s.result or BackfillOut(), empty_positions=tuple(str(x) for x in empty)
            ),
        )
        if s.name == "commit"
        else s
        for s in report.stages
    )
    return dataclasses.replace(report, stages=stages)
