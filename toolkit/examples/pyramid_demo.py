"""The pyramid part of `toolkit demo`: a synthetic sparse global field, built and verified."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from toolkit import storage
from toolkit.plan import Report


def demo(
    root: pathlib.Path,
    cluster: Any = None,
    executor: str = "dask",
    progress: Callable[[str, int, int], None] | None = None,
) -> list[Report]:
    """Write a sparse global field under `root`, build its pyramid, verify it (raise on failure)."""
    from toolkit.examples import synthetic
    from toolkit.pyramid import build, verify

    store = storage.open_store(str(pathlib.Path(root) / "pyramid-demo.zarr"))
    synthetic.write_store(store, shape=(720, 1440), shards=(128, 128), chunks=(64, 64), seed=7)
    report = build(store, cluster=cluster, executor=executor, progress=progress)
    result = verify(store, cluster=cluster, executor=executor, progress=progress)
    if not result.ok:
        raise RuntimeError(
            "pyramid demo failed verification:\n" + "\n".join(map(str, result.failures))
        )
    return [report, result.report] if result.report is not None else [report]
