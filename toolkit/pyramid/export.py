"""Copy a repo's pyramid levels out to a plain Zarr store, byte for byte, as a gated graph.

The levels inside an Icechunk repo are native Zarr arrays, but Icechunk keeps their chunks
under content-addressed names: tools that read a store's keys (the archive job, a CDN, GDAL)
need them under their Zarr keys. Every key of the level groups on main (metadata and encoded
shards, undecoded) becomes the same key in the destination, with the root's zarr.json (its
multiscales layout) beside them; the gate lists the destination for every key main holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from toolkit import icechunk as R
from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, RunKeywords, Runner, Stage, runner_of
from toolkit.plan import AUTO, Each, Report
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.source import LEVEL_GROUP
from toolkit.tasks import Named, stable

__all__ = ["export_levels", "export_plan"]


@dataclass(frozen=True)
class CopyKey:
    """One object from main's snapshot to the destination, undecoded."""

    source: Any  # a ZarrView pinned to one snapshot
    dest: storage.Store

    def __call__(self, task: Named) -> str:
        storage.put(self.dest, task.name, storage.get(self.source, task.name).data)
        return task.name


@dataclass(frozen=True)
class ChunksThere:
    """The resume set: chunk keys the destination holds (metadata is always copied again:
    a level grows with level 0, and its zarr.json with it)."""

    dest: storage.Store

    def __call__(self) -> frozenset[str]:
        return frozenset(k for k in storage.list_keys(self.dest, "") if not k.endswith("zarr.json"))


def level_keys(view: Any) -> list[str]:
    """Every key of main's level groups, and the root's zarr.json (no level-0 key)."""
    groups = {k.split("/", 1)[0] for k in storage.list_keys(view, "") if "/" in k}
    levels = sorted(g for g in groups if LEVEL_GROUP.match(g))
    if not levels:
        raise PlanError(f"{view.url}: no pyramid level on main (build one first)")
    return ["zarr.json", *(k for g in levels for k in storage.list_keys(view, g + "/"))]


def export_plan(ref: R.RepoRef, dest: storage.Store) -> Plan:
    """One stage: a copy node per worker stripe of keys, gated on the destination's listing."""
    repo = ref.open(fresh=True)
    pinned = R.SessionView(ref.url, R.readonly(repo, snapshot=R.snapshot_of(repo, "main")))
    keys = level_keys(pinned)
    return Plan(
        "pyramid-export",
        (
            Stage(
                "export",
                stable(Named(k) for k in keys),
                Each(CopyKey(pinned, dest)),
                Gate(ListedKeys(dest, ""), want=tuple(keys)),
                workers=AUTO,
                done=ChunksThere(dest),
            ),
        ),
        holds_gil=False,  # GETs and PUTs of encoded bytes
    )


def export_levels(
    ref: R.RepoRef,
    dest: storage.Store,
    runner: Runner | None = None,
    **run: Unpack[RunKeywords],
) -> Report:
    """Copy main's levels to `dest` (resumable: keys already there are skipped); `runner` (or
    `cluster=`/`executor=`/`progress=`) runs it."""
    return runner_of(runner, **run).run(export_plan(ref, dest))
