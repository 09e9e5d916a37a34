"""The pyramid part of `toolkit demo`: a synthetic sparse global field, built and verified."""

from __future__ import annotations

import pathlib
from typing import Unpack

from toolkit import storage
from toolkit.engine import RunKeywords, Runner, runner_of
from toolkit.plan import Report


def demo(
    root: pathlib.Path, runner: Runner | None = None, **run: Unpack[RunKeywords]
) -> list[Report]:
    """Write a sparse global field under `root`, build its pyramid, verify it (raise on failure);
    `runner` (or `cluster=`/`executor=`/`progress=`; on Dask by default) runs both."""
    from toolkit.examples import synthetic
    from toolkit.pyramid import build, verify

    store = storage.open_store(str(pathlib.Path(root) / "pyramid-demo.zarr"))
    synthetic.write_store(store, shape=(720, 1440), shards=(128, 128), chunks=(64, 64), seed=7)
    runner = runner_of(runner, "dask", **run)
    report = build(store, runner=runner)
    result = verify(store, runner=runner)
    if not result.ok:
        raise RuntimeError(
            "pyramid demo failed verification:\n" + "\n".join(map(str, result.failures))
        )
    return [report, result.report] if result.report is not None else [report]
