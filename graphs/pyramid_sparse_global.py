"""Scripted graph: a sparse global field, its exact mean pyramid, and the verifier.

    .venv/bin/python graphs/pyramid_sparse_global.py /tmp/pyramid-graph [--cluster ADDR] [--sync]

Writes a 1440x2880 float32 field (ocean absent, a ragged nodata coast) as a sharded Zarr v3
store, builds every level down to one tile as a gated graph, verifies it, and exits 1 if any
verifier check fails. Rerunning resumes: existing shards are skipped. One cluster (--cluster,
or an embedded one) serves the build and the verifier; its dashboard link goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def main() -> int:
    from toolkit import storage
    from toolkit.engine import Session
    from toolkit.examples import synthetic
    from toolkit.pyramid import build, verify

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=pathlib.Path)
    p.add_argument("--cluster", help="Dask scheduler address (default: embedded LocalCluster)")
    p.add_argument("--sync", action="store_true", help="run in-process (no Dask cluster)")
    p.add_argument("--shape", default="1440x2880", help="level-0 rows x columns")
    args = p.parse_args()
    rows, cols = (int(n) for n in args.shape.split("x"))
    executor = "sync" if args.sync else "dask"
    store = storage.open_store(str(args.root / "global.zarr"))
    if not storage.exists(store, "zarr.json"):
        synthetic.write_store(
            store, shape=(rows, cols), shards=(512, 512), chunks=(256, 256), seed=11
        )
    with Session(args.cluster, announce=lambda line: print(line, file=sys.stderr)) as where:
        report = build(store, cluster=where, executor=executor)
        print(json.dumps(report.as_dict(), indent=2))
        result = verify(store, cluster=where, executor=executor)
    for failure in result.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(json.dumps({"verified": result.ok, "checked": result.checked}, indent=2))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
