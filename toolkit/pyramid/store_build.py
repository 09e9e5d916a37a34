"""The build of a Zarr v3 store's levels beside its level 0 (`plan_store`, `build_store`):
read the store, plan every level, hand one gated graph to the engine, then the root metadata.
Where a pyramid lives (and so whether this runs) is `toolkit.pyramid.home.open_home`'s
decision; the public `plan` and `build` are `toolkit.pyramid.api`'s.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, Runner, Stage
from toolkit.plan import IncompleteStageError, Report
from toolkit.pyramid import metadata, records
from toolkit.pyramid.geometry import (
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
from toolkit.pyramid.levels import level0_bytes, plan_source, var_sources
from toolkit.pyramid.settings import Settings, Wanted
from toolkit.pyramid.shards import BuildShard, DoneShards
from toolkit.pyramid.source import Source, grown_along, growth_note, read_source


def _old_plan(store: storage.Store, rebuilding: bool) -> RecordedPlan | None:
    """The recorded plan; one this toolkit did not write is named, or let go by a rebuild
    (which rewrites it) and by a plan (which shows what a rebuild would make)."""
    try:
        return records.read_plan(store)
    except storage.CorruptObject:
        if not rebuilding:
            raise
        return None


def plan_store(store: storage.Store, wanted: Wanted) -> PyramidPlan:
    """The plan of a Zarr store's levels (`plan`)."""
    src, p, _ = planned(store, _old_plan(store, rebuilding=True), wanted)
    check_levels_free(src, p)
    return p


def planned(
    store: storage.Store, old: RecordedPlan | None, wanted: Wanted, rebuilding: bool = False
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
    variables, method, band_dim, levels = (
        wanted.names,
        wanted.method,
        wanted.band_dim,
        wanted.levels,
    )
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
    args = (band_dim, levels, wanted.max_shard, wanted.force_method)
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


def recorded_levels(store: storage.Store) -> list[str]:
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
        p, src.nodes, src.store.url, recorded_levels(src.store), records_group=records.GROUP
    )
    check_level_contents(p, _level_children(src, p), src.store.url, *_written_in_levels(src))


def _level_children(src: Source, p: PyramidPlan) -> dict[str, list[str]]:
    """The immediate children of each level group there is (the plan's and the recorded
    ones, which `check_level_names` has found to be the toolkit's): one delimiter listing
    each, no object read (a level's shards are all under its arrays' prefixes)."""
    from zarr.core.sync import sync

    zs = src.store.zarr(read_only=True)
    groups = [*(lvl.group for lvl in p.levels), *recorded_levels(src.store)]
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
                done=DoneShards(src.store, lvl.group, lvl.tasks),
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


def build_store(store: storage.Store, wanted: Wanted, runner: Runner) -> Report:
    """Build a Zarr store's levels beside its level 0: from `wanted.rebuild_from` when given,
    else what an append, an edit in place or a variable added since the recorded build asks
    (none of it: what is missing, a resume); the records and level metadata first, the root
    last."""
    rebuilding = wanted.rebuild_from is not None
    old = _old_plan(store, rebuilding)
    src, p, q = planned(store, old, wanted, rebuilding=rebuilding)
    check_levels_free(src, p)
    if wanted.rebuild_from is not None:
        start = _rebuild_from(store, p, old, wanted.rebuild_from)
        notes, accepted, grew = list(p.notes), True, {}  # a changed level 0 this build takes on
    else:
        start = 0
        notes, accepted, grew = _since_recorded(src, p, q, old)

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


def _rebuild_from(
    store: storage.Store, p: PyramidPlan, old: RecordedPlan | None, level: str | int
) -> int:
    """`--rebuild-from LEVEL`: the levels below it checked (built for these settings and this
    level 0, the parent complete), it and every coarser one deleted, planned or left over.
    Returns the index of the first level to build."""
    start = _level_index(p, level)
    if start > 0:
        _check_kept_levels(store, p, start)
        check_complete(store, p, start - 1)
    then = list(old.groups) if old is not None else []
    first = p.levels[start].factor  # this level and every coarser one, planned or left over
    for group in dict.fromkeys([*(lvl.group for lvl in p.levels[start:]), *then]):
        if int(group.rstrip("x")) >= first:
            storage.delete_prefix(store, group + "/")
    return start


def _since_recorded(
    src: Source, p: PyramidPlan, q: PyramidPlan, old: RecordedPlan | None
) -> tuple[list[str], bool, dict[str, tuple[int, int]]]:
    """(notes, level 0 accepted as changed, the dims it grew along) of a build over the
    recorded one: a variable added beside the recorded ones, level-0 objects edited in place
    (their dependent shards dropped), an append (its positions built); anything else that
    differs from the record is refused, naming the rebuild that makes it."""
    store = src.store
    notes = list(p.notes)
    accepted = False
    grew = _appended(old, q)  # an append since the build
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
    return notes, accepted, grew


def check_output_source(store: storage.Store, wanted: Wanted) -> None:
    """`--output` of a Zarr v3 source: the plan's checks on the source itself (its arrays,
    codecs, coordinates, level names), before the output repo is made. A v2 source is
    checked once its level 0 is referenced (on a branch of its own, main untouched)."""
    if not storage.exists(store, "zarr.json"):
        return
    src = read_source(store, wanted.names, listed=False)
    args = (wanted.band_dim, wanted.levels, wanted.max_shard, wanted.force_method)
    p = plan_source(src, wanted.method, *args)
    check_level_names(p, src.nodes, store.url, recorded_levels(store), records.GROUP)


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
