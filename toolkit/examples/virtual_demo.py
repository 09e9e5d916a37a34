"""The `toolkit demo` virtual job over the simulated GFS-shaped dataset (`examples.datasets`).

`demo()` backfills the first cycles with process workers, then runs an update while the
simulator publishes new files.
"""

from __future__ import annotations

import pathlib
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Unpack

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit.engine import RunKeywords, Runner, runner_of
from toolkit.examples.datasets import sim_gfs
from toolkit.plan import Report


@dataclass(frozen=True)
class VirtualDemo:
    """What the demo did: its reports, the repo, and main's snapshot when the backfill ended."""

    reports: list[Report]
    repo: pathlib.Path
    backfilled: str


def demo(
    root: pathlib.Path, runner: Runner | None = None, **run: Unpack[RunKeywords]
) -> VirtualDemo:
    """Backfill the first cycles with process workers, then update while new files publish
    (`runner`, or `cluster=`/`executor=`/`progress=`: where the backfill runs)."""
    from toolkit.examples.simulate import make_archive
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.update import update
    from toolkit.virtual.write import Job

    root = pathlib.Path(root)
    src = storage.open_store(str(root / "virtual-source"))
    archive = make_archive(
        src,
        kind="gfs",
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
        leads=[0, 3, 6],
        publish=False,
    )
    files = archive.files()
    first = [f for f in files if f.init < datetime(2025, 8, 1, 12)]
    archive.publish(first)
    ref = R.RepoRef(storage.open_store(str(root / "virtual-repo")))
    ds = Job(sim_gfs(src), ref)
    reports = [
        backfill(
            ds,
            start=np.datetime64("2025-08-01T00", "ns"),
            end=np.datetime64("2025-08-01T12", "ns"),
            workers=4,
            runner=runner_of(runner, "dask", **run),
        )
    ]
    backfilled = R.snapshot_of(ref.open(fresh=True))
    rest = [f for f in files if f not in first]
    publisher = threading.Thread(target=lambda: [archive.publish(f) for f in rest])
    publisher.start()
    try:
        reports.append(
            update(
                ds,
                fire_time=np.datetime64("2025-08-01T18", "ns"),
                deadline_seconds=60,
            ).as_report()  # the fire as a row of the demo's tables
        )
    finally:
        publisher.join()
    return VirtualDemo(reports, root / "virtual-repo", backfilled)
