"""`toolkit demo`: small real jobs on the embedded default (LocalCluster + a local store).

Each job contributes one function returning its reports; later jobs append theirs here.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import storage
from toolkit.engine import AUTO, Gate, ListedKeys, Plan, Stage, connect, run
from toolkit.plan import Report
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
        stages.append(
            Stage(f"level{level}", tasks, WriteTile(store), gate, workers=AUTO, per_task=True)
        )
    return Plan("demo-foundation", tuple(stages))


def run_demo(
    workdir: Path | None = None,
    cluster: Any = None,
    executor: str = "dask",
    progress: Callable[[str, int, int], None] | None = None,
    say: Callable[[str], None] = print,
) -> list[Report]:
    """Foundation plan; a pyramid built and verified; a virtual GRIB dataset backfilled and
    updated; then every store partitioned for archive."""
    from toolkit.archive.demo import demo as archive_demo
    from toolkit.pyramid.demo import demo as pyramid_demo
    from toolkit.virtual.demo import demo as virtual_demo

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="toolkit-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    say(f"demo stores under {root}")
    store = storage.open_store(str(root / "foundation"))
    with ExitStack() as stack:
        if executor == "dask":  # one cluster for every job of the demo
            cluster = stack.enter_context(connect(cluster))
        reports = [
            run(foundation_plan(store), cluster=cluster, executor=executor, progress=progress)  # type: ignore[arg-type]
        ]
        reports += pyramid_demo(root, cluster=cluster, executor=executor, progress=progress)
        say(f"pyramid: {root / 'pyramid-demo.zarr'} built and verified")
        reports += virtual_demo(
            root / "virtual", cluster=cluster, executor=executor, progress=progress
        )
        say(f"virtual: Icechunk repo {root / 'virtual' / 'virtual-repo'} backfilled, then updated")
    summary = archive_demo(root)
    for scope in summary["scopes"]:
        say(f"archive: scope {scope['scope']!r} epoch {scope['epoch']}: blobs {scope['blobs']}")
    for r in summary["resolved"]:
        say(f"archive: {r['key']} -> {r.get('kind')} {r.get('blob') or ''}")
    return reports
