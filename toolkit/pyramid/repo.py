"""Pyramids inside an Icechunk repo: level 0 is an array of the repo (a virtual GRIB array,
decoded on the workers by gribberish's codec), the levels are native arrays written into the
same repo and land on main in one move, so a reader of main sees level 0 and every level from
one snapshot.

setup      one node: a branch `pyramid-<plan digest>` from main's head (and a marker of that
           head), the level groups and arrays created or grown to level 0's leading extent, the
           root's multiscales attributes and the pyramid's settings, committed on it.
<k>x       a stripe per worker: one fork of the branch; each shard is read through it (level 0
           decoded, or the parent level the previous commit landed) and written into it; the
           forks are returned, nothing is committed. The done-set is the branch's manifest, so
           a rerun resumes, and positions a previous build landed on main are not rebuilt.
<k>x-commit one node: the level's forks merged and committed on the branch; its gate lists the
           branch's manifest for every planned shard object of the level.
finalize   main := the branch, only if main has not moved since setup (else refused, naming
           the way out); the branch and its marker are dropped.

The leading dims (init_time, lead_time, level, member) are carried unreduced; `select` and
`latest` restrict the level-0 positions a build covers (the levels keep level 0's full extent,
positions never built read as nodata).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.engine import Gate, ListedKeys, Plan, Runner, Stage
from toolkit.plan import AUTO, Report
from toolkit.pyramid import metadata
from toolkit.pyramid.failure import Failure
from toolkit.pyramid.geometry import (
    MAX_SHARD,
    PlanError,
    PyramidPlan,
    RecordedPlan,
    check_level_names,
    position_cells,
    stale_tasks,
)
from toolkit.pyramid.levels import level0_bytes, plan_source, var_sources
from toolkit.pyramid.settings import Settings, Wanted
from toolkit.pyramid.shards import BuildShard, DoneShards, runs
from toolkit.pyramid.source import Source, read_source

PREFIX = "pyramid-"
RUN_SHARDS = 8  # neighbouring shards (along one leading dim) a worker builds at once
SETTINGS_ATTR = "pyramid:settings"  # root attribute: what the repo's levels were built with
BUILT_FROM = "pyramid:level0_snapshot"  # root attribute: main's snapshot the levels were built on

__all__ = [
    "PREFIX",
    "FireLevels",
    "RepoHome",
    "build_repo",
    "recorded_settings",
    "repo_at",
    "repo_source",
]
LEVEL0 = (".", "1x", "", "/")  # the names of level 0 in a layout or a request: the root


def repo_at(
    store: storage.Store, credentials: Literal["anonymous", "env"] = "anonymous"
) -> R.RepoRef | None:
    """The repo at `store`, or None when it is not an Icechunk repo (a Zarr store, or nothing
    yet); `credentials`: how its GRIB sources are read. `toolkit.pyramid.home.open_home`
    asks."""
    try:
        if storage.exists(store, "zarr.json"):
            return None  # a Zarr store (an Icechunk repo has no zarr.json at its root)
        if not R.is_repo(store):
            return None
    except storage.CorruptObject:
        raise  # a repo whose own objects do not parse: named, not taken for a Zarr store
    except (storage.StorageError, ValueError):
        return None  # not reachable as a repo: the Zarr path names the problem
    return R.RepoRef(store, credentials)


# ----------------------------------------------------------------------------- positions


def _coordinate_index(src: Source, dim: str) -> Any:
    """The decoded labels of a leading dim (CF times and durations as datetimes/timedeltas)."""
    import xarray as xr

    da = xr.DataArray(np.asarray(src.coords[dim]), dims=(dim,), attrs=dict(src.attrs.get(dim, {})))
    decoded = xr.decode_cf(xr.Dataset({dim: da}))
    return decoded.indexes[dim]


def _position(src: Source, dim: str, value: Any) -> int:
    index = _coordinate_index(src, dim)
    label = value  # a label as the dataset holds it (datetime64, timedelta64, number) is used as is
    kind = getattr(index.dtype, "kind", "O")
    if isinstance(value, str) and kind == "m":
        import pandas as pd

        with contextlib.suppress(ValueError):
            label = pd.Timedelta(value if not value.isdigit() else f"{value}h")
    elif isinstance(value, str) and kind in "fiu":
        with contextlib.suppress(ValueError):
            label = float(value)
    with contextlib.suppress(KeyError, TypeError, ValueError):
        loc = index.get_loc(label)
        if isinstance(loc, (int, np.integer)):
            return int(loc)
    shown = ", ".join(str(x) for x in list(index[:3])) + (" ..." if len(index) > 3 else "")
    raise PlanError(f"--select {dim}={value}: no such {dim} (it has {shown})")


def select_positions(
    src: Source, select: Mapping[str, Sequence[Any]] | None = None
) -> dict[str, set[int]]:
    """Positions (by leading dim) a build is restricted to: `select` {dim: [labels]}."""
    chosen: dict[str, set[int]] = {}
    leading = {d for a in src.arrays.values() for d in a.dims[:-2]}
    for dim, values in (select or {}).items():
        if dim not in leading:
            raise PlanError(
                f"--select {dim}=...: not a leading dim of the chosen arrays "
                f"(they have {', '.join(sorted(leading)) or 'none'})"
            )
        chosen[dim] = {_position(src, dim, v) for v in values}
    return chosen


def _present(session: Any, src: Source, positions: Mapping[str, set[int]]) -> dict[str, list[str]]:
    """Each array's level-0 objects that hold a chosen position: manifest probes of exactly
    those cells (no listing of the whole array, which grows with the archive)."""
    out: dict[str, list[str]] = {}
    for name, a in src.arrays.items():
        cells = position_cells(a, positions)
        found = R.chunks_present(session, [(name, c) for c in cells]) if cells else []
        out[name] = [
            a.encoding.encode_chunk_key(c) for c, ok in zip(cells, found, strict=True) if ok
        ]
    return out


def _latest(session: Any, src: Source, positions: dict[str, set[int]]) -> dict[str, set[int]]:
    """`positions` with the append dim cut to its newest position that holds any chunk
    (probed newest first: one position's cells at a time)."""
    first = {a.dims[0] for a in src.arrays.values() if len(a.dims) > 2}
    if len(first) != 1:
        raise PlanError("--latest needs arrays that share a leading (append) dim")
    dim = first.pop()
    candidates = sorted(positions.get(dim, range(len(src.coords[dim]))), reverse=True)
    for p in candidates:
        trial = {**positions, dim: {p}}
        if any(_present(session, src, trial).values()):
            return trial
    raise PlanError(f"--latest: the chosen arrays hold no chunk along {dim}")


def repo_source(
    ref: R.RepoRef,
    variables: list[str] | None = None,
    select: Mapping[str, Sequence[Any]] | None = None,
    latest: bool = False,
    base: str = "main",
) -> tuple[Source, dict[str, set[int]]]:
    """Level 0 as main's head holds it. Its objects: for chosen positions, manifest probes of
    their cells; for the whole archive, the arrays' listings (read from the manifests)."""
    repo = ref.open()
    session = R.readonly(repo, base)  # one snapshot: metadata and probes agree
    chosen = bool(select) or latest
    view = R.SessionView(f"{ref.url}@{base}", session)
    src = read_source(view, variables, listed=not chosen, versioned=True)
    if not chosen:
        return src, {}
    positions = select_positions(src, select)
    if latest:
        positions = _latest(session, src, positions)
    listings = _present(session, src, positions)
    # level-0 objects rewritten since the levels were built are rebuilt whatever is chosen
    for name, cells in rewritten_cells(repo, src.store, src.arrays, session.snapshot_id).items():
        enc = src.arrays[name].encoding
        listings[name] = sorted({*listings[name], *(enc.encode_chunk_key(c) for c in cells)})
    return dataclasses.replace(src, listings=listings), positions


# ----------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class LevelMetadata:
    """The setup change: every level's metadata on the branch, level shards that depend on
    rewritten level-0 objects dropped, the root's layout and settings."""

    src: Source
    plan: PyramidPlan

    def __call__(self, ref: R.RepoRef, session: Any, main: str) -> None:
        src = dataclasses.replace(self.src, store=R.SessionView(ref.url, session))
        metadata.write_levels(src, self.plan)
        metadata.grow_levels(src, self.plan)
        drop_rewritten(ref.open(), session, src, self.plan, main)
        built_from = main
        if not R.has_changes(session):  # nothing to rebuild: keep the snapshot recorded, so
            # a build with nothing to do commits nothing (no level-0 object was rewritten
            # since it, or a shard would have been dropped above)
            root = storage.get_json(src.store, "zarr.json").get("attributes", {})
            built_from = root.get(BUILT_FROM, main)
        metadata.set_root_attrs(
            src, self.plan, {SETTINGS_ATTR: self.plan.settings.record(), BUILT_FROM: built_from}
        )


def rewritten_cells(
    repo: Any, store: Any, arrays: Mapping[str, Any], snapshot: str
) -> dict[str, set[tuple[int, ...]]]:
    """Level-0 objects (cells of each array's object grid) written by the commits since
    main's levels were built (the snapshot recorded in `store`'s root) up to `snapshot` over
    objects that were there then: refs re-emitted in place (`virtual backfill
    --overwrite-chunks`); new positions are not rewritten, and never built yet."""
    root = storage.get_json(store, "zarr.json").get("attributes", {})
    then = root.get(BUILT_FROM)
    written = R.written_chunks(repo, then, snapshot) if then else None
    out: dict[str, set[tuple[int, ...]]] = {}
    if not written:
        return out
    before = R.readonly(repo, snapshot=then)
    for name, a in arrays.items():
        coords = written.get(name, [])
        try:  # rewritten, not new: the chunk was there when the levels were built
            was = R.chunks_present(before, [(name, c) for c in coords]) if coords else []
        except KeyError:  # the array is newer than the levels
            continue
        per = [g // c if g % c == 0 else 1 for g, c in zip(a.grid, a.chunks, strict=True)]
        cells = {
            tuple(i // k for i, k in zip(c, per, strict=True))
            for c, ok in zip(coords, was, strict=True)
            if ok
        }
        if cells:
            out[name] = cells
    return out


def drop_rewritten(repo: Any, session: Any, src: Source, p: PyramidPlan, main: str) -> int:
    """Delete, on the build's branch, every level shard that depends on a level-0 object
    written since the levels were last built: the build then rebuilds them like any missing
    shard, instead of keeping levels of the old values. Returns how many were dropped."""
    changed = rewritten_cells(repo, src.store, src.arrays, main)
    keys = [k for tasks in stale_tasks(p, src.arrays, changed) for t in tasks for k in t.objects]
    there = [k for k, ok in zip(keys, R.exists_many(session, keys), strict=True) if ok]
    for key in there:  # an appended position has no level shard yet: nothing to drop
        storage.delete(src.store, key)
    return len(there)


@dataclass(frozen=True)
class LevelForks:
    """One worker's stripe of a level: a fork of the branch, every shard written into it."""

    ref: R.RepoRef
    branch: str
    build: BuildShard  # its store is replaced by the fork

    def __call__(
        self, tasks: list[Any], tick: Callable[[int], None] | None = None
    ) -> T.Forked | None:
        if not tasks:
            return None
        fork = T.fork_of(self.ref, self.branch)
        service = dataclasses.replace(self.build, store=R.SessionView(self.ref.url, fork))
        done = 0
        for axis, shards in runs(tasks, RUN_SHARDS):  # neighbours: one read, one write
            service.together(axis, shards)
            done += len(shards)
            if tick is not None:
                tick(done)
        T.step("worker_forked")
        # the objects written, in the level gate's naming
        objects = tuple(k for t in tasks for k in t.objects)
        return T.Forked(((self.ref.url, fork),), objects, tasks=len(tasks))


@dataclass(frozen=True)
class Describe:
    """A level's commit: its group and how many forks it merges."""

    group: str
    digest: str

    def __call__(self, g: T.Group) -> tuple[str, dict[str, Any]]:
        forks = sum(len(o.forks) for o in g.outs)
        return f"pyramid {self.group}: {forks} fork(s)", {
            "pyramid": self.group,
            "plan": self.digest,
        }


@dataclass(frozen=True)
class MainMoved:
    branch: str

    def __call__(self, url: str) -> str:
        return (
            f"{url}: main moved while the pyramid was built on {self.branch!r} (an update "
            "committed); nothing reached main: run the build again, it starts from main's new "
            "head and keeps the levels main already has"
        )


def branch_name(p: PyramidPlan) -> str:
    return f"{PREFIX}{p.digest[:12]}"


def repo_plan(
    ref: R.RepoRef, src: Source, p: PyramidPlan, workers: int | str = AUTO, base: str = "main"
) -> Plan:
    """setup -> (level, level-commit) per level -> finalize, on the branch of `p` (from and
    onto `base`)."""
    branch = branch_name(p)
    txn = T.Txn((ref,), branch, base)
    view = R.BranchView(ref, branch)
    setup = T.Setup(
        txn,
        LevelMetadata(src, p),
        "pyramid setup: level metadata",
        {"pyramid": "setup"},
        replaces=PREFIX,
        restart=True,
    )
    rounds = []
    for k, lvl in enumerate(p.levels):
        build = BuildShard(view, lvl.group, p.method, var_sources(src, p, k))
        work = Stage(
            lvl.group,
            lvl.tasks,
            LevelForks(ref, branch, build),
            None,  # forks live in memory: the commit's gate checks what must exist
            workers=workers,
            done=DoneShards(view, lvl.group, lvl.tasks),
            combine=T.gather,
        )
        gate = Gate(ListedKeys(view, lvl.group + "/"), want=lvl.targets)
        rounds.append(T.Round(work, f"{lvl.group}-commit", gate, Describe(lvl.group, p.digest)))
    return Plan(
        f"pyramid-{p.method}-repo",
        T.stages(txn, setup, rounds, MainMoved(branch)),
        holds_gil=True,  # level 0 decodes GRIB (gribberish holds the GIL)
        work_bytes=level0_bytes(src) * 4 // 3,
    )


@dataclass(frozen=True)
class FireLevels:
    """The levels of what an update fire just committed, built in the fire: `update`'s
    `after_commit` hook (`toolkit virtual update --pyramid V`). The positions' levels land on
    main before the fire's next commit; the settings are those main's levels were built with
    (the defaults for a first build)."""

    ref: R.RepoRef
    variables: tuple[str, ...]

    def __call__(self, positions: Sequence[Mapping[str, Any]]) -> Report:
        select: dict[str, list[Any]] = {}
        for loc in positions:
            for dim, label in loc.items():
                if label not in select.setdefault(dim, []):
                    select[dim].append(label)
        then = recorded_settings(self.ref)
        shard = then.max_shard if then is not None else MAX_SHARD
        # each variable's operator as main's levels were built with
        wanted = Wanted(self.variables, select=select, max_shard=shard)
        return build_repo(self.ref, wanted, Runner(executor="sync"))  # in the fire's process


def recorded_settings(ref: R.RepoRef, base: str = "main") -> Settings | None:
    """The settings main's levels were built with (None: main has no levels); a record that
    is not settings this toolkit wrote is a `CorruptObject` naming it."""
    view = R.BranchView(ref, base)
    doc = storage.get_json(view, "zarr.json").get("attributes", {}).get(SETTINGS_ATTR)
    if doc is None:
        return None
    try:
        return Settings.from_record(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise storage.CorruptObject(
            ref.url,
            f"zarr.json ({SETTINGS_ATTR})",
            "pyramid settings this toolkit wrote",
            f"unreadable ({type(err).__name__}: {err})",
            "drop the level groups and the attribute in a new commit, then build again",
        ) from err


def check_settings(ref: R.RepoRef, p: PyramidPlan, base: str = "main") -> None:
    """Levels already on main were built with these settings, or are refused by name: the
    geometry, and each recorded variable's operator and classes (a variable may be added)."""
    then = recorded_settings(ref, base)
    if then is None:
        return
    diff = then.differences(p.settings)
    if diff:
        raise PlanError(
            f"{ref.url}: main's levels were built with "
            f"{', '.join(f'{k}={a!r}' for k, (a, _) in diff.items())}, "
            f"not {', '.join(f'{k}={b!r}' for k, (_, b) in diff.items())}; build with the same "
            "settings (or drop the level groups in a new commit first)"
        )


def with_recorded(
    then: Settings | None,
    variables: list[str] | None,
    method: str | Mapping[str, str] | None,
) -> tuple[list[str] | None, str | Mapping[str, str] | None]:
    """(variables, method) of a build beside main's levels: the recorded variables (their
    operators are `Settings.accepted`) and those asked for, `method` for the ones named;
    none asked for builds the recorded ones (adding one is `--variable NEW`)."""
    was = list(then.variables) if then is not None else []
    if not was:
        return variables, method
    if method is not None and not isinstance(method, Mapping):
        method = dict.fromkeys(variables or was, method)
    return sorted({*was, *(variables or ())}), method


def check_levels_free(ref: R.RepoRef, src: Source, p: PyramidPlan, base: str = "main") -> None:
    """No level group lands on a node of the repo's own (one its settings do not record and
    no `pyramid:factor` marks), before the first write."""
    then = recorded_settings(ref, base)
    recorded = [f"{2**k}x" for k in range(1, (then.levels if then is not None else 0) + 1)]
    check_level_names(p, src.nodes, ref.url, recorded)


def repo_planned(ref: R.RepoRef, wanted: Wanted, base: str = "main") -> tuple[Source, PyramidPlan]:
    """(level 0, plan) of a build on `base`: beside what its levels hold (`with_recorded`;
    their band dim and level count unless given), checked against them before any write."""
    then = recorded_settings(ref, base)
    variables, method = with_recorded(then, wanted.names, wanted.method)
    levels, band_dim = wanted.levels, wanted.band_dim
    if then is not None:
        levels = then.levels if levels is None else levels
        band_dim = then.band_dim if band_dim is None else band_dim
    src, _ = repo_source(ref, variables, wanted.select, wanted.latest, base)
    was = then.accepted() if then is not None else None
    args = (wanted.max_shard, wanted.force_method)
    p = plan_source(src, method, band_dim, levels, *args, recorded=was)
    check_settings(ref, p, base)
    check_levels_free(ref, src, p, base)
    return src, p


def build_repo(
    ref: R.RepoRef, wanted: Wanted, runner: Runner | None = None, base: str = "main"
) -> Report:
    """Build (or extend, or resume) the levels of `wanted.variables` inside the repo, onto
    main, beside the variables main's levels hold (`with_recorded`). `base`: the branch level
    0 is read from and the levels land on, when not main (the branch of `pyramid build
    --output`, which then moves main once)."""
    src, p = repo_planned(ref, wanted, base)
    return (runner or Runner()).run(repo_plan(ref, src, p, base=base))


# ----------------------------------------------------------------------------- the home


@dataclass(frozen=True)
class RepoHome:
    """A pyramid inside an Icechunk repo: built onto main, checked on main (at `select`/
    `latest` positions), read from a branch or snapshot."""

    ref: R.RepoRef
    select: Mapping[str, Sequence[str]] | None = None
    latest: bool = False
    decodes_grib = True  # level 0 is a virtual GRIB array
    striped = True  # its workers build contiguous stripes

    @property
    def url(self) -> str:
        return str(self.ref.url)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.ref.store.options)

    # ------------------------------------------------------------------ build

    def plan(self, wanted: Wanted) -> PyramidPlan:
        return repo_planned(self.ref, wanted)[1]

    def build(self, wanted: Wanted, runner: Runner) -> Report:
        if wanted.rebuild_from is not None:
            raise PlanError(
                f"--rebuild-from: {self.url} is an Icechunk repo, whose levels are rebuilt by "
                "position: drop the level groups in a commit, or build other --select positions"
            )
        return build_repo(self.ref, wanted, runner)

    # ------------------------------------------------------------------ verify

    @property
    def store(self) -> Any:
        return R.BranchView(self.ref, "main")

    def recorded(self) -> Settings | None:
        return recorded_settings(self.ref)

    def unbuilt(self) -> Failure:
        return Failure("-", "zarr.json", "plan", "no pyramid in the repo: build it first")

    def level0(self, variables: list[str]) -> Source:
        return repo_source(self.ref, variables, self.select, self.latest)[0]

    def expected(self, p: PyramidPlan) -> RecordedPlan:
        return RecordedPlan.of(p)  # a repo records settings: the plan is what level 0 asks now

    def edited(self, p: PyramidPlan) -> dict[str, Any] | None:
        return None  # the repo's history is the record of level 0's changes

    def root_failures(self, plan: RecordedPlan) -> list[Failure]:
        """Level 0's nodes are the dataset's own (their history is the repo's): the root must
        carry the layout and both conventions; the levels are checked one by one."""
        attrs = storage.get_json(self.store, "zarr.json").get("attributes", {})
        out = []
        if "multiscales" not in attrs:
            out.append(Failure(".", "zarr.json", "root-diff", "multiscales attribute missing"))
        have = {c.get("uuid") for c in attrs.get("zarr_conventions", [])}
        if not set(metadata.ADDED_UUIDS) <= have:
            out.append(Failure(".", "zarr.json", "root-diff", "conventions not registered"))
        return out

    def client_zarr(self, options: dict[str, Any], private: bool) -> Any:
        store = storage.open_store(self.url, **options)
        handle = R.open_repo(store, "env" if private else "anonymous", fresh=True)
        return R.readonly(handle).store

    # ------------------------------------------------------------------ read and serve

    def exists(self) -> bool:
        return True

    def version(self, branch: str = "main") -> tuple[str, str]:
        return "repo", R.snapshot_of(self.ref.open(fresh=True), branch)

    def open_level(
        self, level: str | None, branch: str = "main", version: str | None = None, **kwargs: Any
    ) -> Any:
        return _dataset(self.ref.open(fresh=True), branch, version, level, kwargs)

    def open_tree(self, branch: str = "main", version: str | None = None, **kwargs: Any) -> Any:
        """Level 0 and every level its root's layout names, from one snapshot (`version`, else
        the branch's head, pinned: a commit landing meanwhile cannot mix two); a repo without
        levels is a one-node tree."""
        import xarray as xr

        handle = self.ref.open(fresh=True)
        snapshot = version or R.snapshot_of(handle, branch)
        base = _dataset(handle, branch, snapshot, None, kwargs)
        layout = base.attrs.get("multiscales", {}).get("layout") or []
        if not layout:
            return xr.DataTree(base)
        tree = {"/": xr.Dataset(attrs=base.attrs)}
        for asset in (item["asset"] for item in layout):
            if asset in LEVEL0:
                tree[f"/{LEVEL0[1]}"] = base
            else:
                tree[f"/{asset}"] = _dataset(handle, branch, snapshot, asset, kwargs)
        return xr.DataTree.from_dict(tree)

    def stac(self, output_dir: str | Path) -> Any:
        raise PlanError(
            f"{storage.location(self.url)}: an Icechunk repo; its STAC entry is written by "
            "`toolkit virtual stac` (this command describes a Zarr store)"
        )


def _dataset(
    handle: Any, branch: str, snapshot: str | None, group: str | None, kwargs: dict[str, Any]
) -> Any:
    """One group of the repo as an xarray Dataset, lazily, through a read-only session; the
    CRS variable a coordinate (`toolkit.cf.crs_as_coords`), so rioxarray finds it."""
    import xarray as xr

    from toolkit.cf import crs_as_coords

    kwargs = {"consolidated": False, **kwargs}
    ds = xr.open_zarr(R.readonly(handle, branch, snapshot).store, group=group, **kwargs)
    return crs_as_coords(ds, kwargs.get("decode_coords", True))
