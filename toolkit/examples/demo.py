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
from pathlib import Path
from typing import Any, Unpack

from toolkit import storage
from toolkit.engine import (
    AUTO,
    Gate,
    ListedKeys,
    Plan,
    RunKeywords,
    Runner,
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


def run_demo(
    workdir: Path | None = None,
    runner: Runner | None = None,
    say: Callable[[str], None] = print,
    **run: Unpack[RunKeywords],
) -> Demo:
    """Foundation plan; a pyramid built and verified; a virtual GRIB dataset backfilled and
    updated; then the Zarr stores among them partitioned for archive. Writes `report.html`
    into the workdir. `runner` (or `cluster=`/`executor=`/`progress=`; on Dask by default)
    runs every plan, on one cluster."""
    from toolkit.engine import dashboard
    from toolkit.examples import demo_report as page
    from toolkit.examples.archive_demo import demo as archive_demo
    from toolkit.examples.pyramid_demo import demo as pyramid_demo
    from toolkit.examples.virtual_demo import demo as virtual_demo

    runner = runner_of(runner, "dask", **run)
    started = time.perf_counter()
    # resolved once, here: every store below is named by it (a relative --workdir works too)
    root = Path(workdir or tempfile.mkdtemp(prefix="toolkit-demo-")).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    say(f"demo stores under {root}")
    store = storage.open_store(str(root / "foundation"))
    link = None
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
        say(f"archive: scope {scope['scope']!r} epoch {scope['epoch']}: blobs {scope['blobs']}")
    for r in summary["resolved"]:
        say(f"archive: {r['key']} -> {r.get('kind')} {r.get('blob') or ''}")
    sections = _sections(root, foundation, pyramid, virtual, summary)
    html = page.write(
        page.Page(str(root), link, time.perf_counter() - started, sections), root / "report.html"
    )
    return Demo([foundation, *pyramid, *virtual.reports], html)


def _sections(
    root: Path, foundation: Report, pyramid: list[Report], virtual: Any, summary: dict[str, Any]
) -> tuple[Any, ...]:
    """The report page's sections, one per job, each saying what it did and where."""
    import xarray as xr

    from toolkit.examples import demo_report as page

    pyramid_store = root / "pyramid-demo.zarr"
    with xr.open_zarr(str(pyramid_store)) as level0:
        grid = page.shape_text(level0["field"].dims, level0["field"].shape)
    return (
        page.Section(
            "foundation",
            "A three-level tile plan: each level's tiles hash the tiles below; "
            "each level's gate lists the store.",
            reports=(foundation,),
        ),
        page.Section(
            "pyramid",
            f"A sparse global field of {grid}, its exact mean pyramid, verified: {pyramid_store}.",
            reports=tuple(pyramid),
            pictures=page.pyramid_pictures(pyramid_store, "field"),
            opens=(page.open_datatree(pyramid_store),),
            views=(page.serve_command(pyramid_store),),
        ),
        page.Section(
            "virtual",
            f"A simulated GFS archive as an Icechunk dataset of GRIB byte ranges, decoded at "
            f"read time: backfilled, then updated while files publish: {virtual.repo}.",
            reports=tuple(virtual.reports),
            pictures=page.virtual_maps(virtual.repo, "temperature_2m", virtual.backfilled),
            opens=(page.open_dataset(virtual.repo),),
            views=(page.serve_command(virtual.repo, "temperature_2m"),),
        ),
        page.Section(
            "archive",
            _archive_summary(root, virtual, summary),
            tables=(
                (
                    "blobs",
                    ("scope", "epoch", "blob", "objects", "bytes"),
                    tuple(
                        (s["scope"], s["epoch"], b["id"], b["objects"], b["bytes"])
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


def _archive_summary(root: Path, virtual: Any, summary: dict[str, Any]) -> str:
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
    return f"{done}{rest}. Manifests in {summary['manifests']}."
