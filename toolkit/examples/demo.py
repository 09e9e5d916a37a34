"""`toolkit demo`: small real jobs on the embedded default (LocalCluster + a local store).

Each job contributes one function returning its reports; later jobs append theirs here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, Unpack

from toolkit import storage
from toolkit.engine import (
    AUTO,
    Gate,
    ListedKeys,
    Plan,
    RunKeywords,
    Runner,
    Session,
    Stage,
    connect,
    runner_of,
)
from toolkit.plan import Each, Report
from toolkit.tasks import stable


@dataclass(frozen=True)
class Tile:
    """One output object of the foundation demo: level `level`, tile `index`."""

    level: int
    index: int

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.index:05d}.bin"


@dataclass(frozen=True)
class WriteTile:
    """Writes a tile whose bytes are derived from the tiles of the level below."""

    store: storage.Store

    def __call__(self, tile: Tile) -> str:
        if tile.level == 0:
            body = hashlib.sha256(tile.key.encode()).digest()
        else:
            parents = [Tile(tile.level - 1, 2 * tile.index + j) for j in (0, 1)]
            h = hashlib.sha256()
            for p in parents:
                if storage.exists(self.store, p.key):
                    h.update(storage.get(self.store, p.key).data)
            body = h.digest()
        storage.put(self.store, tile.key, body)
        return tile.key


def foundation_plan(store: storage.Store, tiles: int = 64, levels: int = 3) -> Plan:
    stages = []
    for level in range(levels):
        tasks = stable(Tile(level, i) for i in range(max(1, tiles >> level)))
        gate = Gate(ListedKeys(store, f"level{level}"), want=tuple(tasks.keys))
        stages.append(Stage(f"level{level}", tasks, Each(WriteTile(store)), gate, workers=AUTO))
    return Plan("demo-foundation", tuple(stages))


@dataclass(frozen=True)
class Demo:
    """Every plan's report, in the order run, and the report page written."""

    reports: list[Report]
    html: Path


REPORT = "toolkit-demo-report.html"  # the page's name when no workdir keeps it company
DIR = "DIR"  # how the page names a workdir that was not kept (run with --workdir DIR)


def report_path(workdir: Path | None, report: Path | None = None) -> Path:
    """Where the page goes: `report`, else WORKDIR/report.html, else ./toolkit-demo-report.html
    (the stores of a run without a workdir are removed at its end; the page, self-contained,
    is what is left)."""
    if report is None:
        report = Path(workdir) / "report.html" if workdir is not None else Path(REPORT)
    return Path(report).expanduser().resolve()


def run_demo(
    workdir: Path | None = None,
    runner: Runner | None = None,
    say: Callable[[str], None] = print,
    report: Path | None = None,
    **run: Unpack[RunKeywords],
) -> Demo:
    """Foundation plan; a pyramid built and verified; a virtual GRIB dataset backfilled and
    updated; then the Zarr stores among them partitioned for archive. The stores go to
    `workdir`, kept; without one, to a temporary folder removed at the end, failed or not.
    Writes the page to `report_path(workdir, report)`. `runner` (or `cluster=`/`executor=`/
    `progress=`; on Dask by default) runs every plan, on one cluster."""
    html = report_path(workdir, report)
    with ExitStack() as scratch:
        if workdir is None:
            temp = tempfile.TemporaryDirectory(prefix="toolkit-demo-", ignore_cleanup_errors=True)
            root = Path(scratch.enter_context(temp)).resolve()
            say(f"demo stores under {root} (temporary: removed at the end; --workdir keeps them)")
        else:
            # resolved once, here: every store below is named by it (a relative one works too)
            root = Path(workdir).expanduser().resolve()
            root.mkdir(parents=True, exist_ok=True)
            say(f"demo stores under {root}")
        return _run(root, workdir is not None, html, runner_of(runner, "dask", **run), say)


def _run(root: Path, kept: bool, html: Path, runner: Runner, say: Callable[[str], None]) -> Demo:
    from toolkit.engine import dashboard
    from toolkit.examples import demo_report as page
    from toolkit.examples.archive_demo import demo as archive_demo
    from toolkit.examples.pyramid_demo import demo as pyramid_demo
    from toolkit.examples.virtual_demo import demo as virtual_demo

    started = time.perf_counter()
    store = storage.open_store(str(root / "foundation"))
    link = None
    outlives = _given(runner.cluster) is not None  # a cluster the demo did not start stays up
    with ExitStack() as stack:
        if runner.executor == "dask":  # one cluster for every job of the demo
            client = stack.enter_context(connect(runner.cluster))
            runner = dataclasses.replace(runner, cluster=client)
            link = dashboard(client)
        foundation = runner.run(foundation_plan(store))
        pyramid = pyramid_demo(root, runner)
        say(f"pyramid: {root / 'pyramid-demo.zarr'} built and verified")
        virtual = virtual_demo(root / "virtual", runner)
        say(f"virtual: Icechunk repo {virtual.repo} backfilled, then updated")
    summary = archive_demo(root)
    for scope in summary["scopes"]:
        units = ", ".join(b["id"] for b in scope["blob_sizes"])
        say(f"archive: scope {scope['scope']!r} epoch {scope['epoch']}: blobs {units}")
    for r in summary["resolved"]:
        say(f"archive: {r['key']} -> {r.get('kind')} {r.get('blob') or ''}")
    shown = root if kept else PurePosixPath(DIR)
    sections = _sections(root, shown, foundation, pyramid, virtual, summary)
    where = page.Workdir(str(shown), kept)
    seconds = time.perf_counter() - started
    html.parent.mkdir(parents=True, exist_ok=True)
    page.write(page.Page(where, page.Dashboard(link, outlives), seconds, sections), html)
    return Demo([foundation, *pyramid, *virtual.reports], html)


def _given(cluster: Any) -> Any:
    """The cluster the user named (None: an embedded one, started for this run only)."""
    return cluster.cluster if isinstance(cluster, Session) else cluster


def _sections(
    root: Path,
    shown: PurePath,
    foundation: Report,
    pyramid: list[Report],
    virtual: Any,
    summary: dict[str, Any],
) -> tuple[Any, ...]:
    """The page's sections, one per job, each saying what it did and where (`shown`: the
    workdir as the page names it; `root`: where the stores are now, read for the pictures)."""
    import xarray as xr

    from toolkit.examples import demo_report as page

    pyramid_store = root / "pyramid-demo.zarr"
    shown_pyramid = shown / "pyramid-demo.zarr"
    shown_repo = shown / virtual.repo.relative_to(root)
    with xr.open_zarr(str(pyramid_store)) as level0:
        grid = page.shape_text(level0["field"].dims, level0["field"].shape)
    return (
        page.Section(
            "foundation",
            "A three-level tile plan: each level's tiles hash the tiles below; "
            "each level's gate lists the store.",
            reports=(foundation,),
            stages=stage_lines(foundation),
        ),
        page.Section(
            "pyramid",
            f"A sparse global field of {grid}, its exact mean pyramid, verified: {shown_pyramid}.",
            reports=tuple(pyramid),
            stages={k: v for r in pyramid for k, v in stage_lines(r).items()},
            pictures=page.pyramid_pictures(pyramid_store, "field"),
            opens=(page.open_datatree(shown_pyramid),),
            views=(page.serve_command(shown_pyramid),),
        ),
        page.Section(
            "virtual",
            f"A simulated GFS archive as an Icechunk dataset of GRIB byte ranges, decoded at "
            f"read time: backfilled, then updated while files publish: {shown_repo}.",
            reports=tuple(virtual.reports),
            stages={k: v for r in virtual.reports for k, v in stage_lines(r).items()},
            pictures=page.virtual_maps(virtual.repo, "temperature_2m", virtual.backfilled),
            opens=(page.open_dataset(shown_repo),),
            views=(page.serve_command(shown_repo, "temperature_2m"),),
        ),
        page.Section(
            "archive",
            _archive_summary(root, shown, virtual, summary),
            tables=(
                (
                    "blobs",
                    ("scope", "epoch", "blob", "cut as", "objects", "bytes"),
                    tuple(
                        (s["scope"], s["epoch"], b["id"], _cut_as(b), b["objects"], b["bytes"])
                        for s in summary["scopes"]
                        for b in s["blob_sizes"]
                    ),
                ),
                (
                    "keys resolved",
                    ("key", "scope", "blob"),
                    tuple(
                        (r["key"], r["scope"], r["blob"])
                        for r in summary["resolved"]
                        if r["kind"] == "blob"
                    ),
                ),
                (
                    "keys in no blob",
                    ("key", "kind", "why"),
                    tuple(
                        (r["key"], r["kind"], r.get("reason", ""))
                        for r in summary["resolved"]
                        if r["kind"] != "blob"
                    ),
                ),
            ),
            pictures=(
                page.blob_chart(
                    [{"scope": s["scope"], "blobs": s["blob_sizes"]} for s in summary["scopes"]]
                ),
            ),
        ),
    )


def _cut_as(unit: dict[str, Any]) -> str:
    """How the manifest holds a unit: a blob of its own, or bucket n of a bucketed blob."""
    if unit["bucket"] is None:
        return "a blob"
    return f"bucket {unit['bucket']} of {unit['of']}"


_VERIFY = {
    "verify-counts": "counts each level's shard objects against the plan recorded at build time",
    "verify-metadata": "checks each level's metadata: shape, coordinates recomputed from level 0, "
    "attributes carried",
    "verify-coverage": "in sampled windows: every window with level-0 data has a value, every "
    "other is nodata",
    "verify-range": "in sampled windows: every value lies within its level-0 window's range",
    "verify-samples": "compares sampled shards with a plain numpy mean pooled from level 0 "
    "(no builder code)",
    "verify-client": "opens every level with xarray, as a reader would",
}

_VIRTUAL = {
    "setup": "makes a temporary branch and pre-sizes the arrays to the region; the gate checks "
    "the branch exists",
    "ingest": "reads each GRIB file's index and writes its messages' byte ranges as chunk "
    "references (a task per file)",
    "commit": "commits each round of files to the branch; the gate probes the branch's "
    "manifests for every file's references",
    "finalize": "merges the branch into main (main's newer commits first) and deletes it; the "
    "gate checks it is gone",
    "update": "one fire of the single-writer update loop: commits its window's files (cycles "
    "up to 18 UTC) to main as they publish; skipped: on main already",
}


def stage_lines(report: Report) -> dict[str, str]:
    """One line per stage of a demo plan: what it does, and what its gate counts."""
    out = {}
    below = "level 0"
    for s in report.stages:
        name = s.name
        if report.plan == "demo-foundation" and name.startswith("level"):
            n = int(name.removeprefix("level"))
            what = "its own key" if n == 0 else f"two tiles of level {n - 1}"
            out[name] = f"writes level {n}'s tiles, each the hash of {what}; the gate lists {name}/"
        elif report.plan.startswith("pyramid-verify"):
            out[name] = _VERIFY.get(name, "")
        elif report.plan.startswith("pyramid-"):
            out[name] = (
                f"builds level {name} from {below}: a task per output shard, the nodata-aware "
                "mean of its windows; writes the field's shard and its count shard, which the "
                "gate counts"
            )
            below = name
        elif report.plan.startswith("virtual-"):
            out[name] = _VIRTUAL.get(name, "")
    return out


def _archive_summary(root: Path, shown: PurePath, virtual: Any, summary: dict[str, Any]) -> str:
    """What was partitioned, by name, and which of the demo's outputs were not (and why)."""
    scopes = [s["scope"] for s in summary["scopes"]]
    n = len(scopes)
    done = (
        f"{n} Zarr store{'' if n == 1 else 's'} partitioned into archive blobs: {', '.join(scopes)}"
        if scopes
        else "No Zarr store found to partition"
    )
    others = {
        "foundation": "plain tile objects",
        str(virtual.repo.relative_to(root)): "an Icechunk repository",
        str((virtual.repo.parent / "virtual-source").relative_to(root)): "GRIB files",
    }
    skipped = [f"{k} ({why})" for k, why in others.items() if k not in scopes]
    rest = f"; not partitioned, not Zarr stores: {', '.join(skipped)}" if skipped else ""
    units = (
        " A bucketed blob (b_...) is archived and recalled bucket by bucket: each bucket is a "
        "blob of its own, named <id>_<n> by the resolver, the tables and the chart."
    )
    return f"{done}{rest}. Manifests in {shown / 'manifests'}.{units}"
