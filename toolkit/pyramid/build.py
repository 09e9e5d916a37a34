"""`plan` and `build`: read the store, plan every level, hand one gated graph to the engine."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, Runner, Stage, codecs, runner_of
from toolkit.engine.cluster import check_dask_env
from toolkit.plan import IncompleteStageError, Report
from toolkit.pyramid import metadata, records
from toolkit.pyramid.levels import level0_bytes, no_positions, plan_source, var_sources
from toolkit.pyramid.plan import (
    MAX_SHARD,
    PlanError,
    PyramidPlan,
    RecordedPlan,
    ShardTask,
    check_level_contents,
    check_level_names,
    edited_in_place,
    filled_in_place,
    stale_tasks,
)
from toolkit.pyramid.settings import Settings
from toolkit.pyramid.shards import BuildShard, DoneShards
from toolkit.pyramid.source import Source, grown_along, growth_note, open_source, read_source


def plan(
    source: str | storage.Store,
    variables: list[str] | None = None,
    method: str | None = None,
    band_dim: str | None = None,
    levels: int | None = None,
    max_shard: int = MAX_SHARD,
    force_method: bool = False,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    **options: Any,
) -> PyramidPlan:
    """Plan the pyramid of `source` from its level-0 listing (reads metadata and listings only).

    `method` None chooses the operator from what the data means (`choose_methods`). `source`
    may be an Icechunk repo (its main branch; `select`/`latest` restrict its positions)."""
    from toolkit.pyramid.repo import open_repo_source, repo_planned

    ref = open_repo_source(source, **options)
    if ref is not None:
        args = (band_dim, levels, max_shard, force_method, select, latest)
        return repo_planned(ref, variables, method, *args)[1]
    no_positions(source, select, latest)
    store = open_source(source, **options)
    try:
        old = records.read_plan(store)
    except storage.CorruptObject:  # `build` names it; the plan is what a rebuild would make
        old = None
    src, p, _ = planned(store, old, variables, method, band_dim, levels, max_shard, force_method)
    check_levels_free(src, p)
    return p


def planned(
    store: storage.Store,
    old: RecordedPlan | None,
    variables: list[str] | None,
    method: str | None,
    band_dim: str | None,
    levels: int | None,
    max_shard: int,
    force_method: bool,
    rebuilding: bool = False,
) -> tuple[Source, PyramidPlan, PyramidPlan]:
    """(source, plan, plan of the recorded variables alone): the variables asked for (every
    array on the grid when none) and those the recorded pyramid `old` holds, so a variable
    is added beside the others and never drops them. A recorded variable keeps its recorded
    operator unless `--method` names it (`--method` is for the `--variable`s given, else for
    every array). The second plan is what the record must equal for the first to extend it
    (the first itself when it adds nothing). `rebuilding`: recorded variables level 0 no longer
    has are let go (a rebuild), else refused."""
    was = old.settings if old is not None else None
    then = list(was.variables) if was is not None else []
    if not variables and then:  # a pyramid's own variables: adding one is `--variable NEW`
        variables = list(then)
    src = read_source(store, sorted({*variables, *then}) if variables and then else variables)
    gone = [v for v in then if v not in src.arrays]
    if gone and not rebuilding:
        raise PlanError(
            f"{store.url}: the pyramid holds {', '.join(map(repr, gone))}, which level 0 no "
            "longer has (or cannot be pyramided); rebuild with --rebuild-from 2x"
        )
    kept = [v for v in then if v in src.arrays]
    given = dict.fromkeys(variables, method) if method and variables and kept else method
    recorded = was.accepted() if was is not None else {}
    if was is not None and not rebuilding:  # unless given, what the kept levels were built with
        band_dim = was.band_dim if band_dim is None else band_dim
        levels = was.levels if levels is None else levels
    args = (band_dim, levels, max_shard, force_method)
    p = plan_source(src, given, *args, recorded=recorded)
    if not kept or set(kept) == set(p.variables):
        return src, p, p

    def only(d: Mapping[str, Any]) -> dict[str, Any]:
        return {n: d[n] for n in kept if n in d}

    alone = replace(
        src, arrays=only(src.arrays), listings=only(src.listings), prints=only(src.prints)
    )
    q = plan_source(
        alone, only(given) if isinstance(given, dict) else given, *args, recorded=recorded
    )
    return src, p, q


def _recorded_levels(store: storage.Store) -> list[str]:
    """The level groups the recorded plan lists (none when there is no plan this toolkit
    wrote: then only the groups' own `pyramid:factor` marks them as its)."""
    try:
        old = records.read_plan(store)
    except storage.CorruptObject:
        return []
    return list(old.groups) if old is not None else []


def check_levels_free(src: Source, p: PyramidPlan) -> None:
    """No level group or record of `p` lands on a node of the store's own, nor does a user's
    node sit inside one of the toolkit's level groups (user data is never overwritten or
    deleted): checked before the first write."""
    check_level_names(
        p, src.nodes, src.store.url, _recorded_levels(src.store), records_group=records.GROUP
    )
    check_level_contents(p, _level_children(src, p), src.store.url, *_written_in_levels(src))


def _level_children(src: Source, p: PyramidPlan) -> dict[str, list[str]]:
    """The immediate children of each level group there is (the plan's and the recorded
    ones, which `check_level_names` has found to be the toolkit's): one delimiter listing
    each, no object read (a level's shards are all under its arrays' prefixes)."""
    from zarr.core.sync import sync

    zs = src.store.zarr(read_only=True)
    groups = [*(lvl.group for lvl in p.levels), *_recorded_levels(src.store)]
    there = [g for g in dict.fromkeys(groups) if g in src.nodes]

    async def names(group: str) -> list[str]:
        return [k async for k in zs.list_dir(group)]

    return {g: sync(names(g)) for g in there}


def _written_in_levels(src: Source) -> tuple[set[str], list[str] | None]:
    """(the coordinates and grid mappings of the root a level carries, the variables of the
    recorded plan: None when there is none this toolkit wrote)."""
    try:
        old = records.read_plan(src.store)
    except storage.CorruptObject:
        old = None
    named = {c for a in src.attrs.values() for c in str(a.get("coordinates", "")).split()}
    recorded = list(old.settings.variables) if old is not None else None
    return {*src.coords, *src.crs, *named}, recorded


def recorded_prints(store: storage.Store) -> dict[str, dict[str, str]] | None:
    """The level-0 fingerprints the last build recorded (None: none, or not this toolkit's)."""
    try:
        doc = records.get_json(store, records.PRINTS)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def pyramid_stages(src: Source, p: PyramidPlan, start: int = 0) -> Plan:
    """One stage per level: a node per output shard, a gate listing the level vs its targets."""
    stages = []
    for k in range(start, len(p.levels)):
        lvl = p.levels[k]
        service = BuildShard(src.store, lvl.group, p.method, var_sources(src, p, k))
        gate = Gate(ListedKeys(src.store, lvl.group + "/"), want=lvl.targets)
        stages.append(
            Stage(
                lvl.group,
                lvl.tasks,
                service,
                gate,
                done=DoneShards(src.store, lvl.group, tuple(lvl.tasks)),
            )
        )
    return Plan(
        f"pyramid-{p.method}",
        tuple(stages),
        holds_gil=False,  # numba kernels, zarr I/O
        work_bytes=level0_bytes(src) * 4 // 3,  # level 0 once, then a third of it for the rest
    )


def _level_index(p: PyramidPlan, level: str | int) -> int:
    name = str(level)
    name = name if name.endswith("x") else f"{name}x"
    for i, lvl in enumerate(p.levels):
        if lvl.group == name:
            return i
    raise PlanError(
        f"--rebuild-from {level!r}: no such level (levels: {[x.group for x in p.levels]})"
    )


def check_complete(store: storage.Store, p: PyramidPlan, k: int) -> None:
    """Refuse to build on a partial parent: raise with have/want."""
    lvl = p.levels[k]
    have = set(storage.list_keys(store, lvl.group + "/"))
    missing = [key for key in lvl.targets if key not in have]
    if missing:
        raise IncompleteStageError(
            lvl.group,
            len(lvl.targets) - len(missing),
            len(lvl.targets),
            missing,
            extra=f"parent level {lvl.group} is partial; rebuild it first (--rebuild-from {lvl.group})",
        )


def _check_kept_levels(store: storage.Store, p: PyramidPlan, start: int) -> None:
    """Levels below `start` are kept: refuse when they were built for other settings or data."""
    old = records.read_plan(store)
    frm = p.levels[start].group
    first = p.levels[0].group
    if old is None:
        raise PlanError(
            f"{store.url}: no recorded pyramid plan, so the levels below {frm} "
            f"cannot be trusted; rebuild with --rebuild-from {first}"
        )
    then, now = _kept(old.settings), _kept(p.settings)
    if then != now:
        raise PlanError(
            f"{store.url}: the levels below {frm} were built with {then}, not {now}; "
            f"rebuild with --rebuild-from {first}"
        )
    then_classes = {v.var: list(v.classes) for v in old.levels[0].vars}
    now_classes = {v.var: list(v.classes) for v in p.levels[0].vars}
    if then_classes != now_classes:  # the kept class counts count other classes
        raise PlanError(
            f"{store.url}: the levels below {frm} count the classes {then_classes}, not "
            f"{now_classes} (flag_values changed); rebuild with --rebuild-from {first}"
        )
    if old.source_digest != p.source_digest:
        raise PlanError(
            f"{store.url}: level 0 changed since the levels below {frm} were built; "
            f"rebuild with --rebuild-from {first}"
        )


def _kept(s: Settings) -> dict[str, Any]:
    """What the levels below a rebuild must have been built with, as the refusal shows it."""
    return {
        "band_dim": s.band_dim,
        "variables": list(s.variables),
        "max_shard": s.max_shard,
        "operators": dict(s.operators),
    }


def build(
    source: str | storage.Store,
    variables: list[str] | None = None,
    method: str | None = None,
    band_dim: str | None = None,
    levels: int | None = None,
    cluster: Any = None,
    executor: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    rebuild_from: str | int | None = None,
    max_shard: int = MAX_SHARD,
    force_method: bool = False,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    credentials: Literal["anonymous", "env"] = "anonymous",
    output: str | storage.Store | None = None,
    runner: Runner | None = None,
    **options: Any,
) -> Report:
    """Build (or resume) every level, gate by gate; then add the root metadata. `method` None
    chooses each variable's operator from what its data means (`plan.choose_methods`); the
    variables a built pyramid holds are planned with those asked for (`planned`).

    An Icechunk repo as `source` (a virtual dataset's) gets its levels inside it, landed on
    main in one move (`toolkit.pyramid.repo`); `select` {dim: [values]} and `latest` restrict
    the positions built, `credentials` is how its GRIB sources are read.

    With `output` (an Icechunk repo: a path, file:// or s3://), `source` is only read: level 0
    lands in the repo as virtual references to the source's chunk objects, and the levels are
    built there (`toolkit.pyramid.output`).

    The arrays it opens in this process (planning, and the run itself in process or on the
    embedded cluster's threads) use zarr's fused codec pipeline (`toolkit.engine.codecs`).
    `runner` runs it (or the one `cluster`/`executor`/`progress` make: `toolkit.engine.Runner`)."""
    run = runner_of(runner, cluster=cluster, executor=executor, progress=progress)
    with codecs.fused():
        return _build(
            source,
            variables,
            method,
            band_dim,
            levels,
            run,
            rebuild_from,
            max_shard,
            force_method,
            select,
            latest,
            credentials,
            output,
            **options,
        )


def _build(
    source: str | storage.Store,
    variables: list[str] | None,
    method: str | None,
    band_dim: str | None,
    levels: int | None,
    runner: Runner,
    rebuild_from: str | int | None,
    max_shard: int,
    force_method: bool,
    select: Mapping[str, Sequence[str]] | None,
    latest: bool,
    credentials: Literal["anonymous", "env"],
    output: str | storage.Store | None,
    **options: Any,
) -> Report:
    from toolkit.pyramid.repo import build_repo, open_repo_source

    if runner.executor != "sync":  # read as a cluster starts: after the levels were created
        check_dask_env()
    if output is not None:
        if select or latest or rebuild_from is not None:
            raise PlanError(
                "--output builds every level of the referenced level 0: --select, --latest "
                "and --rebuild-from do not apply"
            )
        return _build_output(
            source, output, credentials, options, variables, method, band_dim, levels,
            runner, max_shard, force_method,
        )  # fmt: skip
    ref = open_repo_source(source, credentials, **options)
    if ref is not None:
        if rebuild_from is not None:
            raise PlanError(
                f"--rebuild-from: {ref.url} is an Icechunk repo, whose levels are rebuilt by "
                "position: drop the level groups in a commit, or build other --select positions"
            )
        return build_repo(
            ref,
            variables,
            method,
            band_dim,
            levels,
            select=select,
            latest=latest,
            runner=runner,
            max_shard=max_shard,
            force_method=force_method,
        )
    no_positions(source, select, latest)
    store = open_source(source, **options)
    try:
        old = records.read_plan(store)
    except storage.CorruptObject:  # a record this toolkit did not write: rewritten by a rebuild
        if rebuild_from is None:
            raise
        old = None
    src, p, q = planned(
        store, old, variables, method, band_dim, levels, max_shard, force_method,
        rebuilding=rebuild_from is not None,
    )  # fmt: skip
    check_levels_free(src, p)
    start = 0
    notes = list(p.notes)
    accepted = rebuild_from is not None  # a changed level 0 this build takes on
    grew = {} if rebuild_from is not None else _appended(old, q)  # an append since the build
    if rebuild_from is not None:
        start = _level_index(p, rebuild_from)
        if start > 0:
            _check_kept_levels(store, p, start)
            check_complete(store, p, start - 1)
        then = list(old.groups) if old is not None else []
        first = p.levels[start].factor  # this level and every coarser one, planned or left over
        for group in dict.fromkeys([*(lvl.group for lvl in p.levels[start:]), *then]):
            if int(group.rstrip("x")) >= first:
                storage.delete_prefix(store, group + "/")
    else:
        if old is not None and old.digest != q.digest and not grew:
            raise PlanError(f"{store.url}: {_unlike(old, q)}")
        if q is not p:  # the recorded variables' levels stay; their shards are done
            added = [v for v in p.variables if v not in q.variables]
            notes.append(
                f"adding {', '.join(added)} beside {', '.join(q.variables)}, whose levels "
                "are kept as they are"
            )
        prints = recorded_prints(store) if old is not None else None
        edited = edited_in_place(prints, q) if old is not None else None
        if grew:  # the digest cannot vouch for the old positions: their prints must
            if edited is None:
                raise PlanError(
                    f"{store.url}: {growth_note(grew)}, and an object of the old positions is "
                    "gone since the last build (rewritten as all-nodata?), so what changed "
                    f"cannot be told; rebuild with --rebuild-from {q.levels[0].group}"
                )
            edited = filled_in_place(edited, prints or {}, q, src.arrays, grew)
        if edited and any(edited.values()):
            notes.append(_drop_stale(store, p, stale_tasks(p, src.arrays, edited), edited))
            accepted = True
        if grew:  # an append: its positions are built, the levels grow to hold them
            notes.append(f"{growth_note(grew)} since the last build: building its new shards")
            accepted = True

    def setup() -> None:
        records.put(store, records.PLAN, p.to_json().encode())
        records.put(store, records.PRINTS, json.dumps(p.prints, sort_keys=True).encode())
        metadata.write_levels(src, p)
        if grew:
            metadata.grow_levels(src, p)

    again_while_unanswered(store, setup)
    report = runner.run(pyramid_stages(src, p, start))
    # the backup follows an accepted level 0
    again_while_unanswered(store, lambda: metadata.update_root(src, p, refresh=accepted))
    return replace(report, notes=(*report.notes, *notes))


def _build_output(
    source: str | storage.Store,
    output: str | storage.Store,
    credentials: Literal["anonymous", "env"],
    options: Mapping[str, Any],
    variables: list[str] | None,
    method: str | None,
    band_dim: str | None,
    levels: int | None,
    runner: Runner,
    max_shard: int,
    force_method: bool,
) -> Report:
    """`--output`: level 0's refresh and the levels built on it land on main in one move.
    Both go on a branch of their own (`output-`), from main's head: the level-0 commit, then
    the pyramid's transaction with that branch as its base; main moves to the branch only if
    it is still where the branch began (else nothing reached main: run the build again)."""
    from toolkit import transaction as T
    from toolkit.pyramid.output import OUTPUT_BRANCH, open_output, reference_level0
    from toolkit.pyramid.repo import build_repo

    _check_output_source(source, options, variables, method, band_dim, levels, max_shard,
                         force_method)  # fmt: skip
    ref = open_output(source, output, credentials, **options)
    txn = T.Txn((ref,), OUTPUT_BRANCH)
    T.open_branch(txn)
    level0 = reference_level0(source, output, credentials, branch=OUTPUT_BRANCH, **options)
    try:
        report = build_repo(
            level0.ref, variables, method, band_dim, levels, runner=runner, max_shard=max_shard,
            force_method=force_method, base=OUTPUT_BRANCH,
        )  # fmt: skip
    except PlanError as err:  # about level 0: named by the source the user gave, not the branch
        where = f"{ref.url}@{OUTPUT_BRANCH}: "
        if not str(err).startswith(where):
            raise
        said = str(err)[len(where) :]
        raise PlanError(f"{storage.open_store(source, **options).url}: {said}") from err
    T.finalize(txn, lambda url: f"{url}: main moved while the pyramid was built; run it again")
    return replace(report, notes=(level0.note, *report.notes))


def _check_output_source(
    source: str | storage.Store,
    options: Mapping[str, Any],
    variables: list[str] | None,
    method: str | None,
    band_dim: str | None,
    levels: int | None,
    max_shard: int,
    force_method: bool,
) -> None:
    """`--output` of a Zarr v3 source: the plan's checks on the source itself (its arrays,
    codecs, coordinates, level names), before the output repo is made. A v2 source is
    checked once its level 0 is referenced (on a branch of its own, main untouched)."""
    store = open_source(source, **options)
    if not storage.exists(store, "zarr.json"):
        return
    src = read_source(store, variables, listed=False)
    p = plan_source(src, method, band_dim, levels, max_shard, force_method)
    check_level_names(p, src.nodes, store.url, _recorded_levels(store), records.GROUP)


def again_while_unanswered(store: storage.Store, step: Callable[[], None]) -> None:
    """Run an idempotent step of the client (the records and level metadata before the levels,
    the root after them) again while the store does not answer, within its retry budget.

    The store client resends a request that failed before it was sent, but not a write whose
    connection was reset while it was sent (a server going away mid-request), and the engine's
    task retries cover the levels' shards, not these steps. A server back within the budget
    then costs only time, as it does for every other call."""
    deadline = time.monotonic() + storage.retry_seconds(store.options)
    pause = 0.05
    while True:
        try:
            step()
            return
        except Exception as err:
            named = err if isinstance(err, storage.StorageError) else storage.explain(err)
            if not isinstance(named, storage.Unreachable) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # backing off to the store's own longest pause
        pause = min(2 * pause, storage.MAX_BACKOFF.total_seconds())


def _unlike(old: RecordedPlan, q: PyramidPlan) -> str:
    """Why the recorded pyramid is not the one planned now, and the rebuild that makes it."""
    then, now = old.settings, q.settings
    frm = q.levels[0].group
    if then.core() == now.core():
        why = "level 0 changed since the last build"
    else:
        why = f"the recorded pyramid was built with {then.core()}"
        deeper = replace(then, levels=now.levels).core() == now.core()
        if deeper and then.levels < now.levels and old.source_digest == q.source_digest:
            why = f"the recorded pyramid has {then.levels} levels, not {now.levels}"
            frm = q.levels[then.levels].group  # the first new level; the rest stay
    return f"{why}; rebuild with --rebuild-from {frm}"


def _appended(old: RecordedPlan | None, q: PyramidPlan) -> dict[str, tuple[int, int]]:
    """The leading dims level 0 grew along since the recorded build, when that is all that
    changed (`toolkit.pyramid.source.grown_along`): the build then extends the levels. The
    digest alone does not tell: an append that fills a partial last shard adds no task."""
    return {} if old is None else grown_along(old, q)


def _drop_stale(
    store: storage.Store,
    p: PyramidPlan,
    stale: list[list[ShardTask]],
    edited: Mapping[str, set[tuple[int, ...]]],
) -> str:
    """Delete every object of the tasks that depend on edited level-0 shards (the rerun then
    writes exactly those); one line saying how many."""
    dropped = 0
    for tasks in stale:
        for t in tasks:
            dropped += 1
            for key in t.objects:
                with contextlib.suppress(storage.NotFound):
                    storage.delete(store, key)
    total = sum(len(lvl.tasks) for lvl in p.levels)
    n = sum(len(v) for v in edited.values())
    return (
        f"level 0 changed in place ({n} object(s)): rebuilding the {dropped} of {total} "
        "shard(s) that depend on them"
    )
