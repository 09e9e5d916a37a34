"""Scripted graph: partition every Zarr store under a data root, one graph node per store.

    .venv/bin/python graphs/archive_scan.py DATA_URL MANIFESTS_URL [--t-max 2GiB] [--sync]

Finds the stores under DATA_URL, partitions each into archive blobs (frozen cuts: a rerun changes
nothing), writes one manifest per store to MANIFESTS_URL by conditional PUT, and prints what
each store's manifest now holds. Exits 1 if a manifest write lost a race.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    from toolkit import storage
    from toolkit.archive.manifests import ManifestConflict
    from toolkit.archive.model import Policy
    from toolkit.archive.service import scan
    from toolkit.archive.units import parse_size
    from toolkit.engine import Session

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("manifests")
    p.add_argument("--t-max", default="2GiB")
    p.add_argument("--t-hot", default="1MiB")
    p.add_argument("--t-min", default="256MiB")
    p.add_argument("--cluster", help="Dask scheduler address (default: embedded LocalCluster)")
    p.add_argument("--sync", action="store_true", help="run in-process (no Dask cluster)")
    args = p.parse_args()
    policy = Policy(parse_size(args.t_max), parse_size(args.t_hot), parse_size(args.t_min))
    data, manifests = storage.open_store(args.data), storage.open_store(args.manifests)
    try:
        with Session(args.cluster, announce=lambda line: print(line, file=sys.stderr)) as where:
            outcomes, _ = scan(
                data,
                manifests,
                policy,
                exclude=["manifests"],
                cluster=where,
                executor="sync" if args.sync else "dask",
            )
    except ManifestConflict as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps([o.to_dict() for o in outcomes], indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
