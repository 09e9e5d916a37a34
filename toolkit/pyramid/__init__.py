"""Exact multiscale pyramids of Zarr v3 stores, level by level, as gated graphs.

`plan(source)` derives every level's output shards from the level-0 listing (no data read),
`build(source)` runs them through the engine (one node per shard, a gate per level) and adds the
root metadata, `verify(source)` proves the result. `open_level` / `open_datatree` read it back with xarray
(`xr.open_datatree` refuses the layout: see `toolkit.pyramid.read`).

The source may also be an Icechunk repo (a virtual GRIB dataset's): its levels are then written
into the repo and land on main with level 0 (`toolkit.pyramid.repo`), and
`toolkit.pyramid.export` copies them out to a plain Zarr store. `stac(source, output_dir)`
writes its STAC catalogue entry (`toolkit.pyramid.catalog`); `toolkit.pyramid.api` holds these
entry points. Which of the two (or an `--output`
repo) a source is, is decided once, by `toolkit.pyramid.home.open_home`; every entry point
takes the storage flags as one `options=toolkit.storage.Options(...)`.
"""

from toolkit.pyramid.api import build, plan, stac
from toolkit.pyramid.read import open_datatree, open_level
from toolkit.pyramid.verify import VerifyResult, verify

__all__ = ["VerifyResult", "build", "open_datatree", "open_level", "plan", "stac", "verify"]
