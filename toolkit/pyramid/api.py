"""The pyramid job's entry points: `plan`, `build` and `stac` open the pyramid's home once
(`toolkit.pyramid.home.open_home`) and hand it what was asked for; `verify` is
`toolkit.pyramid.verify`'s. Above every home, so no home imports its caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from toolkit import storage
from toolkit.engine import Runner, codecs, runner_of
from toolkit.engine.cluster import check_dask_env
from toolkit.plan import Report
from toolkit.pyramid.geometry import MAX_SHARD, PyramidPlan
from toolkit.pyramid.home import open_home
from toolkit.pyramid.settings import Asked, Wanted

__all__ = ["build", "plan", "stac"]


def plan(
    source: str | storage.Store,
    variables: list[str] | None = None,
    method: str | None = None,
    band_dim: str | None = None,
    levels: int | None = None,
    max_shard: int = MAX_SHARD,
    force_method: bool = False,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    options: storage.Options | None = None,
) -> PyramidPlan:
    """Plan the pyramid of `source` from its level-0 listing (reads metadata and listings only).

    `method` None chooses the operator from what the data means (`choose_methods`). `source`
    may be an Icechunk repo (its main branch; `select`/`latest` restrict its positions).
    `options`: how to reach it (`toolkit.storage.Options`)."""
    wanted = Wanted(variables, method, band_dim, levels, max_shard, force_method, select, latest)
    return open_home(source, options, select=select, latest=latest).plan(wanted)


def build(
    source: str | storage.Store,
    variables: list[str] | None = None,
    method: str | None = None,
    band_dim: str | None = None,
    levels: int | None = None,
    cluster: Any = None,
    executor: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    *,
    output: str | storage.Store | None = None,
    options: storage.Options | None = None,
    runner: Runner | None = None,
    **asked: Unpack[Asked],
) -> Report:
    """Build (or resume) every level, gate by gate; then add the root metadata. `method` None
    chooses each variable's operator from what its data means (`plan.choose_methods`); the
    variables a built pyramid holds are planned with those asked for (`planned`).
    `rebuild_from` (a level, e.g. "4x") deletes it and every coarser one first; `max_shard`
    bounds an output shard's side; `force_method` applies `method` to class arrays too.

    An Icechunk repo as `source` (a virtual dataset's) gets its levels inside it, landed on
    main in one move (`toolkit.pyramid.repo`); `select` {dim: [values]} and `latest` restrict
    the positions built, `options.credentials` is how its GRIB sources are read.

    With `output` (an Icechunk repo: a path, file:// or s3://), `source` is only read: level 0
    lands in the repo as virtual references to the source's chunk objects, and the levels are
    built there (`toolkit.pyramid.output`). `options` (`toolkit.storage.Options`) reach both.

    The arrays it opens in this process (planning, and the run itself in process or on the
    embedded cluster's threads) use zarr's fused codec pipeline (`toolkit.engine.codecs`).
    `runner` runs it (or the one `cluster`/`executor`/`progress` make: `toolkit.engine.Runner`)."""
    run = runner_of(runner, cluster=cluster, executor=executor, progress=progress)
    wanted = Wanted(variables, method, band_dim, levels, **asked)
    with codecs.fused():
        if run.executor != "sync":  # read as a cluster starts: after the levels were created
            check_dask_env()
        select, latest = wanted.select, wanted.latest
        home = open_home(source, options, select=select, latest=latest, output=output)
        return home.build(wanted, run)


def stac(
    source: str | storage.Store, output_dir: str | Path, options: storage.Options | None = None
) -> Any:
    """Write a built pyramid's STAC Collection + Item to `output_dir` (`toolkit.stac.Entry`).

    Level 0 is the `data` asset; each coarser level (`2x`, `4x`, ...) from the root's
    multiscales layout is an asset of its own with `"group"` in its open kwargs, and the level
    names are summarised as `multiscales:levels`, as the layout names them ("." is level 0,
    at the root: no group is named for it that xarray could not open). An Icechunk repo is refused (PlanError):
    its entry is `toolkit.virtual.stac`'s."""
    return open_home(source, options).stac(output_dir)
