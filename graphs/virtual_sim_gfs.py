"""Scripted graph: the simulated GFS virtual dataset, backfilled then updated.

    .venv/bin/python graphs/virtual_sim_gfs.py /tmp/virtual-demo [--cluster ADDR] [--sync]

Writes a NOAA-shaped GRIB2 archive with toolkit.examples.simulate, backfills its first cycles
with process workers, then runs one operational fire while the simulator publishes the rest,
and prints each report. The dataset itself is `toolkit.examples.datasets.sim_gfs`. One
cluster (--cluster, or an embedded one) serves the whole script.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def main() -> None:
    from toolkit.engine import Session
    from toolkit.examples.virtual_demo import demo

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=pathlib.Path)
    p.add_argument("--cluster", help="Dask scheduler address (default: embedded LocalCluster)")
    p.add_argument("--sync", action="store_true", help="run in-process (no Dask cluster)")
    args = p.parse_args()
    with Session(args.cluster, announce=lambda line: print(line, file=sys.stderr)) as where:
        for report in demo(
            args.root, cluster=where, executor="sync" if args.sync else "dask"
        ).reports:
            print(json.dumps(report.as_dict(), indent=2))


if __name__ == "__main__":
    main()
