"""A backfill lands beside a live main: main's new commits brought onto its branch.

Update fires keep committing to main while a backfill of a disjoint region is in flight, so at
finalize main is no longer at the branch's marker. `catch_up` reads what main's commits since
the marker did from their transaction logs (`R.changes`: cost follows what they wrote, never
the region or the archive), refuses when they wrote into the backfill's region, and else
replays them on the branch in one commit: the arrays grown to the larger append extent (the
coordinates from the template), the attributes and coordinate chunks main wrote copied, and
the refs of the files main wrote set again. Then the marker moves to main's head, and the
transaction's finalize (main := branch where main is at the marker) lands both.

Icechunk has no lookup of one chunk's ref, only a scan of a whole array, so the refs of the
files main wrote are rebuilt from the source as the update built them: only those files,
each refused when its object changed after main's head was committed (its rebuilt refs
would not be the ones main holds).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from toolkit import icechunk as R
from toolkit import transaction as T
from toolkit.transaction import marker
from toolkit.virtual.inflight import InFlight, RegionOverlap
from toolkit.virtual.layout import committed_extent, sync_dims_to
from toolkit.virtual.refs import chunk_cell
from toolkit.virtual.write import Batch, Job, filter_already_present, process_virtual_refs
from toolkit.virtual.write import write_refs as _write_refs

__all__ = ["Unreplayable", "catch_up", "refusal"]


class Unreplayable(RegionOverlap):
    """Main's commits since a backfill's setup did what catch-up cannot replay on its branch
    (nodes added or removed, refs not from the template's files, a source object changed)."""


@dataclass(frozen=True)
class Since:
    """Main's commits since a backfill's setup, in one repo: the marker's snapshot, main's
    head and what the commits between did (None: main does not descend from the marker)."""

    at: str
    head: str
    changes: R.Changes | None


def since_setup(repo: Any, branch: str) -> Since | None:
    """What main did since `branch`'s setup (None: main has not moved, or no such backfill)."""
    names = R.branches(repo)
    if branch not in names or marker(branch) not in names:
        return None
    at, head = R.snapshot_of(repo, marker(branch)), R.snapshot_of(repo, "main")
    return None if at == head else Since(at, head, R.changes(repo, at, head))


def positions_written(
    session: Any, changes: R.Changes, append_dim: str, data: Collection[str] | None = None
) -> list[int]:
    """The append-dim positions of the data chunks `changes` wrote, read against `session`'s
    arrays (main's head). `data`: the data arrays (default: those of 3 or more dims, the
    gridded variables; coordinates are not data)."""
    found: set[int] = set()
    for name, cells in changes.chunks.items():
        if not cells or (data is not None and name not in data):
            continue
        arr = zarr.open_array(session.store, path=name, mode="r")
        dims = tuple(arr.metadata.dimension_names or ())
        if append_dim not in dims or (data is None and len(dims) < 3):
            continue
        axis = dims.index(append_dim)
        k = arr.metadata.chunk_grid.chunk_shape[axis]
        for c in cells:
            found.update(range(c[axis] * k, min((c[axis] + 1) * k, arr.shape[axis])))
    return sorted(found)


def _unreplayable(changes: R.Changes | None) -> str:
    """What in `changes` catch-up cannot replay ("": nothing)."""
    if changes is None:
        return "main was reset to a snapshot that does not descend from the setup's"
    if changes.added or changes.removed:
        nodes = sorted(changes.added | changes.removed)
        return f"main's commits added or removed {', '.join(nodes[:5] or ['/'])}"
    return ""


def _shown(labels: Sequence[Any]) -> str:
    text = [str(x)[:19] for x in labels[:5]]
    return ", ".join(text) + (" ..." if len(labels) > 5 else "")


def refusal(repo: Any, flight: InFlight, append_dim: str, labels: np.ndarray) -> str:
    """Why finalize of `flight` will refuse ("": it lands, catching up where main moved), from
    main's commits since its setup and the region's recorded bounds; `labels` are main's
    append-dim values (decoded). A region whose bounds were not recorded always refuses."""
    seen = since_setup(repo, flight.branch)
    if seen is None:
        return ""
    why = _unreplayable(seen.changes)
    if why or seen.changes is None:
        return why
    session = R.readonly(repo, snapshot=seen.head)
    hit = [
        labels[p]
        for p in positions_written(session, seen.changes, append_dim)
        if p >= len(labels) or flight.overlaps(*_ns_span(labels[p]))
    ]
    return f"main wrote into its region, at {append_dim} {_shown(hit)}" if hit else ""


def _ns_span(label: Any) -> tuple[int, int]:
    ns = int(np.datetime64(label, "ns").astype("int64"))
    return ns, ns + 1


def _region(job: Job) -> tuple[int, int]:
    """The region's append-dim positions [lo, hi) in the template."""
    t = job.template
    inside = [i for i, x in enumerate(t.coords[t.append_dim]) if job.in_region(x)]
    return (inside[0], inside[-1] + 1) if inside else (0, 0)


def catch_up(job: Job, branch: str) -> int:
    """Bring main's commits since `branch`'s setup onto the branch, in every repo of `job`
    (replicas first), and move the branch's marker to main's head, so that finalize lands
    both; `job` is narrowed to the backfill's region. Returns the repos caught up (0: main
    never moved).

    Every repo is checked before any changes: main's commits that wrote into the region raise
    `RegionOverlap`, ones catch-up cannot replay raise `Unreplayable`, each naming the way
    out; the branch and marker are then untouched. Rerunnable: a crash between the commit
    and the marker's move replays nothing new."""
    t = job.template
    data = {n for n, v in t.variables.items() if t.append_dim in v.dims}
    lo, hi = _region(job)
    todo = []
    for ref in job.repos:
        repo = ref.open(fresh=True)
        seen = since_setup(repo, branch)
        if seen is None:
            continue
        why = _unreplayable(seen.changes)
        if why or seen.changes is None:
            raise Unreplayable(_refused(ref.url, branch, why))
        main = R.readonly(repo, snapshot=seen.head)
        written = positions_written(main, seen.changes, t.append_dim, data)
        hit = [p for p in written if lo <= p < hi]
        if hit:
            labels = [t.coords[t.append_dim][p] for p in hit]
            raise RegionOverlap(
                _refused(
                    ref.url,
                    branch,
                    f"main's commits since its setup wrote into its region, at {t.append_dim} "
                    f"{_shown(labels)}",
                )
            )
        todo.append((ref, seen, written))
    rebuilt: dict[str, Any] = {}  # a file's refs, rebuilt once for every repo
    for ref, seen, written in todo:
        batch = _files_main_wrote(job, ref, branch, seen, written, rebuilt)
        _covers(job, ref.url, branch, seen, data, batch)
        replay = Replay(job, seen.head, seen.changes, tuple(batch), frozenset(data))
        meta = {"caught_up_to": seen.head, "replayed_files": len(batch)}
        T.commit_on([ref], branch, replay, "backfill: catch up with main", meta, fresh=True)
        T.advance_marker(ref.open(fresh=True), branch, seen.head, seen.at)
    return len(todo)


def _refused(url: str, branch: str, why: str) -> str:
    return (
        f"{url}: {why}; backfill {branch!r} cannot land beside them: drop the branch "
        f"(`toolkit virtual abort {url} --branch {branch}`; main is untouched) and backfill "
        "a region main's updates do not write"
    )


def _files_main_wrote(
    job: Job, ref: R.RepoRef, branch: str, seen: Since, written: list[int], rebuilt: dict
) -> Batch:
    """The files at `written` that main holds and the branch does not, with their refs
    rebuilt from the source (refused when a file cannot be read, or changed since)."""
    if not written:
        return []
    t = job.template
    labels = t.coords[t.append_dim]
    coords = []
    for a, b in _runs(written):
        end = (
            labels[b]
            if b < len(labels)
            else np.datetime64(labels[b - 1], "ns") + np.timedelta64(1, "ns")
        )
        coords += job.region(labels[a], end).files()
    repo = ref.open(fresh=True)
    absent = filter_already_present(job, coords, R.readonly(repo, branch))
    missing_on_main = {
        c.key for c in filter_already_present(job, absent, R.readonly(repo, snapshot=seen.head))
    }
    wanted = [c for c in absent if c.key not in missing_on_main]
    need = [c for c in wanted if c.key not in rebuilt]
    if need:
        skipped: list[Any] = []
        held: set[str] = set()
        reader = job.region(job.start, job.end, processing_mode="backfill")
        for b in process_virtual_refs(reader, need, skipped, held_back=held):
            rebuilt.update({c.key: (c, refs) for c, refs in b})
        lost = [s.url for s in skipped] + sorted(held)
        lost += [c.key for c in need if c.key not in rebuilt and c.key not in lost]
        if lost:
            raise Unreplayable(
                _refused(ref.url, branch, f"main holds {lost[0]}, which cannot be read again")
            )
    committed = R.commit_time(repo, seen.head)
    batch = [rebuilt[c.key] for c in wanted]
    for c, refs in batch:
        if any(_after(r.last_modified, committed) for r in refs):
            raise Unreplayable(
                _refused(
                    ref.url,
                    branch,
                    f"{c.get_url()} changed after main's commit of it (its refs there are stale)",
                )
            )
    return batch


def _after(modified: Any, committed: _dt.datetime) -> bool:
    return modified is not None and modified > committed


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Sorted positions as contiguous [a, b) runs."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def _covers(
    job: Job, url: str, branch: str, seen: Since, data: Collection[str], batch: Batch
) -> None:
    """Every data chunk main wrote is one the rebuilt files fill: else main holds refs that
    did not come from the template's files (or rewrote refs the branch has), and replaying
    only the files would drop them."""
    assert seen.changes is not None
    t = job.template
    wrote = {(a, c) for a, cells in seen.changes.chunks.items() if a in data for c in cells}
    if not wrote:
        return
    geom = t.geometry()
    memo: dict[Any, Any] = {}
    filled = {
        (r.variable, chunk_cell(geom, r.variable, r.loc, memo)) for _c, refs in batch for r in refs
    }
    rest = sorted(wrote - filled)
    if rest:
        a, c = rest[0]
        raise Unreplayable(
            _refused(
                url,
                branch,
                f"main's commits wrote {len(rest)} chunk(s) no file of theirs fills "
                f"(first: {a} {c})",
            )
        )


@dataclass(frozen=True)
class Replay:
    """The catch-up change on the branch's session: main's growth, attributes, coordinate
    chunks and files' refs."""

    job: Job
    head: str
    changes: R.Changes | None
    batch: tuple[Any, ...]
    data: frozenset[str]

    def __call__(self, ref: R.RepoRef, session: Any) -> None:
        t = self.job.template
        main = R.readonly(ref.open(), snapshot=self.head)
        extent = max(committed_extent(session, t) or 0, committed_extent(main, t) or 0)
        sync_dims_to(session, t, extent)
        assert self.changes is not None
        for path in sorted(self.changes.groups | self.changes.arrays):
            _copy_attrs(main, session, path)
        for path, cells in sorted(self.changes.chunks.items()):
            if path not in self.data:
                _copy_chunks(main, session, path, cells)
        if self.batch:
            _write_refs(self.job, session, list(self.batch), grow=False)


def _node(session: Any, path: str, mode: str) -> Any:
    return (
        zarr.open(session.store, path=path, mode=mode)
        if path
        else zarr.open_group(session.store, mode=mode)
    )


def _copy_attrs(main: Any, session: Any, path: str) -> None:
    want = dict(_node(main, path, "r").attrs)
    node = _node(session, path, "r+")
    if dict(node.attrs) != want:
        node.attrs.clear()
        node.attrs.update(want)


def _copy_chunks(main: Any, session: Any, path: str, cells: list[tuple[int, ...]]) -> None:
    """Main's values in the chunks it wrote of a stored (not virtual) array: coordinates."""
    src = zarr.open_array(main.store, path=path, mode="r")
    dst = zarr.open_array(session.store, path=path, mode="r+")
    grid = src.metadata.chunk_grid.chunk_shape
    for c in cells:
        sel = tuple(
            slice(i * k, min((i + 1) * k, n, m))
            for i, k, n, m in zip(c, grid, src.shape, dst.shape, strict=True)
        )
        if any(s.start >= s.stop for s in sel):
            continue
        want = src[sel]
        if not np.array_equal(dst[sel], want, equal_nan=want.dtype.kind in "fc"):
            dst[sel] = want
