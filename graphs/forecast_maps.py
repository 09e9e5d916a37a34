"""Scripted graph: forecast maps of a virtual GRIB dataset, from backfill to archive blobs.

    .venv/bin/python graphs/forecast_maps.py /tmp/forecast-maps [--cluster ADDR] [--sync]

Writes the simulated GFS archive (real GRIB2, NOAA layout), backfills it into an Icechunk repo of
byte-range references, builds the map levels of two variables inside the same repo (level 0
decoded from the GRIB on the workers), verifies them, copies the levels to a Zarr store and
partitions that store into archive blobs with a manifest. One cluster (--cluster, or an
embedded one) runs every graph; each report is printed as JSON. Exits 1 if the verifier fails.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from datetime import datetime, timedelta

VARIABLES = ["temperature_2m", "pressure_reduced_to_mean_sea_level"]


def main() -> int:
    import numpy as np

    from toolkit import icechunk as R
    from toolkit import storage
    from toolkit.archive.model import Policy
    from toolkit.archive.service import scan
    from toolkit.archive.units import parse_size
    from toolkit.engine import Session
    from toolkit.examples.datasets import sim_gfs
    from toolkit.examples.simulate import make_archive
    from toolkit.pyramid import build, verify
    from toolkit.pyramid.export import export_levels
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.write import Job

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=pathlib.Path)
    p.add_argument("--cluster", help="Dask scheduler address (default: embedded LocalCluster)")
    p.add_argument("--sync", action="store_true", help="run in-process (no Dask cluster)")
    p.add_argument("--cycles", type=int, default=4, help="6-hourly cycles to simulate")
    p.add_argument("--levels", type=int, default=2, help="map levels (2x, 4x, ...)")
    args = p.parse_args()
    executor = "sync" if args.sync else "dask"
    src = storage.open_store(str(args.root / "source"))
    if not storage.list_keys(src):
        archive = make_archive(
            src,
            kind="gfs",
            inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(args.cycles)],
            leads=[0, 3, 6],
            publish=False,
        )
        archive.publish(archive.files())
    repo = R.RepoRef(storage.open_store(str(args.root / "repo")))
    maps = storage.open_store(str(args.root / "maps" / "forecast.zarr"))
    manifests = storage.open_store(str(args.root / "manifests"))
    reports = []
    with Session(args.cluster, announce=lambda line: print(line, file=sys.stderr)) as where:
        reports.append(
            backfill(
                Job(sim_gfs(src), repo),
                start=np.datetime64("2025-08-01T00", "ns"),
                cluster=where,
                executor=executor,
            )
        )
        reports.append(
            build(repo.url, VARIABLES, levels=args.levels, cluster=where, executor=executor)
        )
        checked = verify(repo.url, cluster=where, executor=executor)
        reports.append(export_levels(repo, maps, cluster=where, executor=executor))
        outcomes, scanned = scan(
            storage.open_store(str(args.root / "maps")),
            manifests,
            Policy(parse_size("256KiB"), parse_size("4KiB"), parse_size("16KiB")),
            cluster=where,
            executor=executor,
        )
        reports.append(scanned)
    for report in reports:
        print(json.dumps(report.as_dict(), indent=2))
    print(json.dumps({"verified": checked.ok, "archive": [o.to_dict() for o in outcomes]},
                     indent=2, default=str))  # fmt: skip
    for failure in checked.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    return 0 if checked.ok else 1


if __name__ == "__main__":
    sys.exit(main())
