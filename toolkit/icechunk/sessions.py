"""Sessions and branches: views of a branch or a session as stores for `toolkit.storage`,
virtual refs set and read back, manifest probes, commits, forks, merges and history."""

from __future__ import annotations

import contextlib
import datetime as _dt
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import icechunk as ic

from toolkit import storage
from toolkit.icechunk.repo_errors import BranchMoved, OutsideContainers, translate
from toolkit.icechunk.repositories import RepoRef, _exists

Session = ic.Session


def writable(repo: ic.Repository, branch: str = "main") -> ic.Session:
    """A fresh writable session (a committed session is read-only: open one per commit)."""
    return repo.writable_session(branch)


def readonly(repo: ic.Repository, branch: str = "main", snapshot: str | None = None) -> ic.Session:
    if snapshot is not None:
        return repo.readonly_session(snapshot_id=snapshot)
    return repo.readonly_session(branch)


def is_repo(store: storage.Store) -> bool:
    """Whether an Icechunk repo is at `store` (a local path that does not exist is not one)."""
    if store.is_local and not store.local_path.exists():
        return False
    return _exists(store)


@dataclass(frozen=True)
class BranchView:
    """A branch's head as a read-only store for `toolkit.storage` (a `ZarrView`): every
    `zarr()` opens a session at the head as it is then, so a gate or a done-set that observes
    it sees every commit made so far. Picklable: it carries the repo's location, not a session."""

    ref: RepoRef
    branch: str = "main"

    @property
    def url(self) -> str:
        return f"{self.ref.url}@{self.branch}"

    def zarr(self, read_only: bool = True) -> Any:
        if not read_only:
            raise ValueError(f"{self.url}: a branch head is read-only; write through a session")
        return readonly(self.ref.open(), self.branch).store

    def explain(self, err: Exception, key: str | None) -> storage.StorageError | None:
        """An error of this view's store as `toolkit.storage` reports it: a corrupt object
        of the repo named (None: not one)."""
        head = None
        if isinstance(err, ic.IcechunkError):
            with contextlib.suppress(Exception):
                head = snapshot_of(self.ref.open(), self.branch)
        return translate(err, self.ref.url, key, head)


@dataclass(frozen=True)
class SessionView:
    """One session (writable, a fork or a snapshot) as a store for `toolkit.storage`. Pickles
    when its session does (forks and read-only sessions do; a writable session refuses)."""

    url: str
    session: Any
    # arrays opened through this view, for its user to keep (the pyramid's shard writer does,
    # for one stripe): the session's metadata is fixed while it lives
    arrays: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def zarr(self, read_only: bool = False) -> Any:
        return self.session.store

    def explain(self, err: Exception, key: str | None) -> storage.StorageError | None:
        """An error of the repo's store as `toolkit.storage` says it (None: not one)."""
        repo = self.url.rpartition("@")[0] if "@" in self.url.rpartition("/")[2] else self.url
        return translate(err, repo, key, getattr(self.session, "snapshot_id", None))


def finalize_branch(repo: ic.Repository, branch: str, marker: str, base: str = "main") -> str:
    """`base` (main) := `branch` if `base` is still where `marker` recorded it at setup; then
    drop both branches. Replayable: with the branch already gone, base's head is the answer."""
    if branch not in branches(repo):
        return snapshot_of(repo, base)
    head = snapshot_of(repo, branch)
    if head != snapshot_of(repo, base):
        reset_branch(repo, base, head, expected=snapshot_of(repo, marker))
    delete_branch(repo, branch)
    delete_branch(repo, marker)
    return head


def set_virtual_refs(
    session: Any,
    array: str,
    refs: Sequence[tuple[Sequence[int], str, int, int, _dt.datetime | None]],
    checksums: dict[Any, Any] | None = None,
) -> int:
    """Set (index, location, offset, length, last_modified) refs on `array`; return the count.

    Icechunk returns the refs it could not place instead of raising; a ref outside every
    container can never be read, so this raises `OutsideContainers` naming them.
    `checksums`: a dict the caller keeps for one batch over several arrays (a file's refs
    share one last_modified but fall in different arrays), so each is made a checksum once.
    """
    if not refs:
        return 0
    ceil = {} if checksums is None else checksums
    specs = []
    for idx, loc, off, n, mod in refs:
        try:
            checksum = ceil[mod]
        except KeyError:
            checksum = ceil[mod] = _whole_second_ceil(mod)
        specs.append(
            ic.VirtualChunkSpec(
                index=idx,
                location=loc,
                offset=int(off),
                length=int(n),
                last_updated_at_checksum=checksum,
            )
        )
    failed = session.store.set_virtual_refs(array, specs, validate_containers=True)
    if failed:
        bad = {tuple(i) for i in failed}
        shown = [f"{tuple(r[0])} -> {r[1]}" for r in refs if tuple(r[0]) in bad][:5]
        raise OutsideContainers(
            f"{len(failed)} refs for array {array!r} fall outside every virtual chunk container "
            f"(first: {shown}); register a container covering them"
        )
    return len(specs)


def _whole_second_ceil(mod: _dt.datetime | None) -> _dt.datetime | None:
    """Icechunk keeps the checksum in whole seconds and refuses an object modified after it,
    so a fractional mtime (local files) rounds up; S3's whole-second Last-Modified is kept."""
    if mod is None or not mod.microsecond:
        return mod
    return mod.replace(microsecond=0) + _dt.timedelta(seconds=1)


def chunk_coordinates(session: Any, array: str) -> list[tuple[int, ...]]:
    """Indices of every chunk `array` holds a ref for (from the manifests, no chunk read)."""
    return sorted(_coordinates(session, array))


def _coordinates(session: Any, array: str) -> list[tuple[int, ...]]:
    async def run() -> list[tuple[int, ...]]:
        return [tuple(c) async for c in session.chunk_coordinates("/" + array.lstrip("/"))]

    return _await(run())


def chunk_refs(
    session: Any, array: str, append_range: tuple[int, int] | None = None
) -> dict[tuple[int, ...], tuple[str, int, int]]:
    """Every ref `array` holds (chunk index -> location, offset, length), read back from the
    manifests; with `append_range` (lo, hi), only chunks whose first index is in [lo, hi)."""
    lo, hi = append_range if append_range is not None else (0, None)

    async def run() -> dict[tuple[int, ...], tuple[str, int, int]]:
        out: dict[tuple[int, ...], tuple[str, int, int]] = {}
        batches = session.store.array_chunk_iterator("/" + array.lstrip("/"))
        async for coords, _kinds, paths, offsets, lengths, _inline in batches:
            for i, path in enumerate(paths):
                index = tuple(int(x) for x in coords[i])
                if index and (index[0] < lo or (hi is not None and index[0] >= hi)):
                    continue
                out[index] = (path, int(offsets[i]), int(lengths[i]))
        return out

    return _await(run())


def virtual_locations(session: Any) -> set[str]:
    """Every source location the session's manifests point at."""
    return set(session.all_virtual_chunk_locations())


# An array asked about for at least 1/LIST_RATIO of its chunk grid is listed whole (its
# chunk coordinates, ~2 us each) instead of probed cell by cell (`chunk_type`, ~11 us each).
LIST_RATIO = 4


def chunks_present(
    session: Any, cells: Sequence[tuple[str, Sequence[int]]], list_ratio: int = LIST_RATIO
) -> list[bool]:
    """For each (array, chunk index): does the manifest hold a ref (or chunk) there?

    Manifest lookups only, never a source byte. An array asked about for a large share of its
    chunk grid (a backfill's done-set and gate, a completeness check of a whole dataset) is
    answered from one listing of its chunk coordinates, which costs at most `list_ratio` times
    the cells asked; the others are probed: `Session.chunk_type` is ~100x cheaper per cell than
    `store.exists` through asyncio, but it holds the GIL while it fetches a manifest, so the
    manifests are loaded first without it -- one async probe per (array, append-dim index),
    which touches every manifest split the cells fall in -- and the sync calls then hit the
    session's cache. An array missing from the store raises KeyError naming it.
    """
    import asyncio

    asked: dict[str, int] = {}
    for array, _ in cells:
        asked[array] = asked.get(array, 0) + 1
    listed = {
        array: set(_coordinates(session, array))
        for array, n in asked.items()
        if (grid := _stored_grid(session, array)) is not None and grid <= list_ratio * n
    }
    firsts: dict[tuple[str, int | None], tuple[str, list[int]]] = {}
    for array, index in cells:
        if array in listed:
            continue
        idx = [int(i) for i in index]
        firsts.setdefault((array, idx[0] if idx else None), (array, idx))

    def path(array: str) -> str:
        return "/" + array.lstrip("/")

    async def warm() -> None:
        await asyncio.gather(*(session.chunk_type_async(path(a), i) for a, i in firsts.values()))

    try:
        if firsts:
            _await(warm())
        return [
            tuple(int(i) for i in idx) in listed[a]
            if a in listed
            else session.chunk_type(path(a), [int(i) for i in idx]) != ic.ChunkType.uninitialized
            for a, idx in cells
        ]
    except ic.NodeNotFoundError as err:
        missing = next((a for a, _ in firsts.values() if f"`{path(a)}`" in str(err)), "<unknown>")
        raise KeyError(f"array {missing!r} is not in the store") from None


def _stored_grid(session: Any, array: str) -> int | None:
    """How many objects `array`'s chunk grid holds (shards, when sharded; None: no such array)."""
    import math

    import zarr

    try:
        meta = zarr.open_array(session.store, path=array.strip("/"), mode="r").metadata
        stored = meta.chunk_grid.chunk_shape  # the outer grid: shards, when sharded
    except (FileNotFoundError, KeyError, ValueError, TypeError, AttributeError):
        return None  # the probes name a missing array; anything unusual is probed
    return math.prod(-(-n // c) for n, c in zip(meta.shape, stored, strict=True))


def exists_many(session: Any, keys: Sequence[str], concurrency: int = 256) -> list[bool]:
    """Manifest probes (`store.exists`): never read a source byte, never decode."""
    import asyncio

    store = session.store  # one store object: building it per key dominated large probes

    async def run() -> list[bool]:
        sem = asyncio.Semaphore(concurrency)

        async def one(k: str) -> bool:
            async with sem:
                return bool(await store.exists(k))

        return list(await asyncio.gather(*(one(k) for k in keys)))

    return _await(run()) if keys else []


_STALE = "checksum of the object owning the virtual chunk has changed"


def chunk_bytes(session: Any, key: str) -> bytes | None:
    """A chunk's stored bytes, undecoded: for a virtual chunk, the source's byte range as the
    manifest names it (None if the manifest has no such chunk)."""
    from zarr.core.buffer import default_buffer_prototype

    store = session.store

    async def run() -> bytes | None:
        buf = await store.get(key, prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    return _await(run())


def stale_ref(session: Any, key: str) -> bool:
    """Whether the virtual ref at `key` no longer reads because its source object was
    modified after the ref's checksum (Icechunk refuses such a read rather than return bytes
    the ref never described)."""
    try:
        chunk_bytes(session, key)
    except ic.IcechunkError as err:
        if _STALE in str(err):
            return True
        raise
    return False


def commit(
    session: Any,
    message: str,
    metadata: Mapping[str, Any] | None = None,
    *,
    max_attempts: int = 50,
) -> str:
    """Commit, rebasing on a lost branch-HEAD race (`commit_counted`)."""
    return commit_counted(session, message, metadata, max_attempts=max_attempts)[0]


REBASE_BACKOFF = (0.05, 2.0)  # seconds: the first retry's ceiling, and every later one's


def commit_counted(
    session: Any,
    message: str,
    metadata: Mapping[str, Any] | None = None,
    *,
    max_attempts: int = 50,
) -> tuple[str, int]:
    """Commit, rebasing on a lost branch-HEAD race, and say how many rebases it took; stamps
    `rebase_attempts` into the metadata.

    Each retry first waits a random time under a ceiling that doubles (full jitter), so
    commits that lost together do not race again together; the rebase keeps the session's
    change set: a retry redoes no write. Never commits an empty change set (Icechunk refuses
    one)."""
    if not session.has_uncommitted_changes:
        raise ValueError(f"refusing an empty commit ({message!r})")
    attempts = 0
    while True:
        meta = {**(metadata or {}), "rebase_attempts": attempts}
        try:
            return session.commit(message, metadata=meta), attempts
        except ic.ConflictError:
            attempts += 1
            if attempts >= max_attempts:
                raise
            first, cap = REBASE_BACKOFF
            time.sleep(random.uniform(0.0, min(cap, first * 2 ** (attempts - 1))))
            session.rebase(ic.BasicConflictSolver())


def fork(session: Any) -> Any:
    """A picklable fork of a writable session (fork once per stage, not per task)."""
    return session.fork()


def merge(session: Any, forks: Sequence[Any]) -> None:
    if forks:
        session.merge(*forks)


def has_changes(session: Any) -> bool:
    return bool(session.has_uncommitted_changes)


def snapshot_of(repo: ic.Repository, branch: str = "main") -> str:
    return repo.lookup_branch(branch)


def written_chunks(
    repo: ic.Repository, from_snapshot: str, to_snapshot: str
) -> dict[str, list[tuple[int, ...]]] | None:
    """The chunk coordinates written (new or rewritten) by the commits between two snapshots,
    by array path; None when `from_snapshot` is not an ancestor of `to_snapshot` (a rebase
    or a reset moved the branch elsewhere): then nothing can be said."""
    if from_snapshot == to_snapshot:
        return {}
    try:
        d = repo.diff(from_snapshot_id=from_snapshot, to_snapshot_id=to_snapshot)
    except ic.IcechunkError:
        return None
    return {p.strip("/"): [tuple(c) for c in cs] for p, cs in d.updated_chunks.items()}


@dataclass(frozen=True)
class Changes:
    """What the commits between two snapshots did, by node path (no leading slash): the chunk
    coordinates written (new or rewritten), the arrays whose metadata changed (shape,
    attributes), the groups whose attributes changed, and the nodes added or removed (moved
    nodes count as both)."""

    chunks: Mapping[str, list[tuple[int, ...]]]
    arrays: frozenset[str]
    groups: frozenset[str]
    added: frozenset[str]
    removed: frozenset[str]


def changes(repo: ic.Repository, from_snapshot: str, to_snapshot: str) -> Changes | None:
    """`Changes` from `from_snapshot` to `to_snapshot`, read from the commits' transaction
    logs (cost follows what they wrote, not the repo's size); None when `from_snapshot` is not
    an ancestor of `to_snapshot`."""
    try:
        d = repo.diff(from_snapshot_id=from_snapshot, to_snapshot_id=to_snapshot)
    except ic.IcechunkError:
        return None

    def names(paths: Any) -> frozenset[str]:
        return frozenset(str(p).strip("/") for p in paths)

    moved = [p for pair in d.moved_nodes for p in pair]
    return Changes(
        {p.strip("/"): [tuple(c) for c in cs] for p, cs in d.updated_chunks.items()},
        names(d.updated_arrays),
        names(d.updated_groups),
        names([*d.new_arrays, *d.new_groups, *moved]),
        names([*d.deleted_arrays, *d.deleted_groups, *moved]),
    )


def commit_time(repo: ic.Repository, snapshot: str) -> _dt.datetime:
    """When `snapshot` was committed."""
    return repo.lookup_snapshot(snapshot).written_at


def branches(repo: ic.Repository) -> list[str]:
    return sorted(repo.list_branches())


def create_branch(repo: ic.Repository, name: str, snapshot: str) -> None:
    repo.create_branch(name, snapshot)


def delete_branch(repo: ic.Repository, name: str) -> None:
    repo.delete_branch(name)


def reset_branch(repo: ic.Repository, branch: str, to_snapshot: str, *, expected: str) -> None:
    """Point `branch` at `to_snapshot` only if it is still at `expected` (recorded at setup)."""
    try:
        repo.reset_branch(branch, to_snapshot, from_snapshot_id=expected)
    except ic.ConflictError as err:
        now = repo.lookup_branch(branch)
        raise BranchMoved(
            f"branch {branch!r} moved since setup (expected {expected}, now {now}); "
            "refusing to reset it: rerun the backfill between operational fires"
        ) from err


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parent: str | None
    written_at: _dt.datetime
    message: str
    metadata: Mapping[str, Any]

    @property
    def rebase_attempts(self) -> int | None:
        value = self.metadata.get("rebase_attempts")
        return int(value) if value is not None else None


def history(
    repo: ic.Repository, branch: str = "main", limit: int | None = None
) -> list[CommitInfo]:
    """Newest first: id, message, metadata (with `rebase_attempts` where we committed)."""
    out = []
    for i, snap in enumerate(repo.ancestry(branch=branch)):
        if limit is not None and i >= limit:
            break
        out.append(
            CommitInfo(
                snap.id, snap.parent_id, snap.written_at, snap.message, dict(snap.metadata or {})
            )
        )
    return out


def _await(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, inside or outside a running loop.

    (The sync `inspect_snapshot` holds the GIL across its I/O, which deadlocks against an
    in-process S3 emulator; the async form releases it.)
    """
    import asyncio
    import concurrent.futures

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
