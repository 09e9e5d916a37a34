"""Dataset definitions: the identity of every built-in dataset is pinned, so a refactor of how
definitions are spelled cannot make an existing repo look like another dataset.

The fingerprint covers everything a repo records or a plan hashes: the template (coordinates,
variables, attributes), the source (catalog, store URL, file types, members), the repo
settings, the rules and the file table's digest (the plan's task identity). The pinned values
were computed with the 23-keyword `grib_forecast` and the 20-keyword NOAA `forecast` as they
were before the definitions became values.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolkit import storage
from toolkit.examples.datasets import sim_gfs, sim_hrrr_analysis
from toolkit.virtual.builtin import gefs, gfs, hrrr, hrrr_analysis
from toolkit.virtual.dataset import Dataset
from toolkit.virtual.define import (
    Checks,
    Grid,
    KnownMissing,
    Schedule,
    Source,
    forecast,
    grib_forecast,
    latlon_crs,
    variable,
)
from toolkit.virtual.filetable import file_table

FIRST, END = datetime(2025, 8, 1), datetime(2025, 8, 2)


def fingerprint(ds: Dataset) -> str:
    """A process-independent hash of what identifies `ds` (see the module docstring)."""
    t, src = ds.template, ds.source

    def text(x: Any) -> str:
        return json.dumps(x, default=repr)

    h = hashlib.sha256()
    for part in (
        ds.name, ds.title, repr(ds.allow_all_nan_vars), repr(ds.min_present_fraction),
        repr(ds.latency), repr(ds.settings), repr(ds.window), repr(ds.leads),
        repr(src.catalog), src.store.url, repr(src.file_types), repr(src.members),
        repr(src.member_labels), t.append_dim, repr(t.grid_dims), text(t.attrs),
        text(t.coord_attrs), file_table(ds).digest,
        *([] if src.catalog.index == "wgrib2" else [src.catalog.index]),
        *([] if src.catalog.discovery == "list" else [src.catalog.discovery]),
    ):  # fmt: skip
        h.update(part.encode() + b"\0")
    for name, c in t.coords.items():
        h.update(f"{name}\0{c.dtype}\0".encode() + np.ascontiguousarray(c).tobytes())
    for name, v in t.variables.items():
        h.update(f"{name}\0{v.dims}\0{v.dtype}\0{text(v.attrs)}\0".encode())
    return h.hexdigest()[:16]


def mymodel(**more: Any) -> Dataset:
    """The docs' example (docs/how-to/own-dataset.md, "Your own archive"), on an in-memory source."""
    keywords: dict[str, Any] = dict(
        source="memory://mymodel",
        key="{init:%Y%m%d}/{init:%H}/mymodel.t{init:%H}z.f{lead:03d}.grib2",
        variables=[
            variable("temperature_2m", "TMP", "2 m above ground"),
            variable("wind_u_10m", "UGRD", "10 m above ground"),
            variable("wind_v_10m", "VGRD", "10 m above ground"),
            variable("pressure_reduced_to_mean_sea_level", "PRMSL", "mean sea level"),
            variable("precipitation_surface", "APCP", "surface", step_type="accum", period_hours=6),
            variable("temperature", "TMP", "{level:g} mb", levels=[0.4, 500, 1000]),
        ],
        grid={
            "latitude": 50.0 - 0.25 * np.arange(32),
            "longitude": 250.0 + 0.25 * np.arange(48),
        },
        crs=latlon_crs(),
        attrs={"institution": "My Weather Service", "license": "CC-BY-4.0"},
        first_init=FIRST,
        end=END,
        every_hours=6,
        leads_hours=[0, 3, 6],
    )
    return grib_forecast("mymodel", **{**keywords, **more})


def every_keyword() -> Dataset:
    """`grib_forecast` with all 23 keywords given (an ensemble over two file types)."""
    return grib_forecast(
        "ens",
        source=storage.open_store("memory://ens"),
        key="{init:%Y%m%d%H}/{file_type}.m{member}.f{lead:03d}",
        variables=[
            variable("t2m", "TMP", "2 m above ground", file_type="a"),
            variable("tp", "APCP", "surface", step_type="accum", file_type="b"),
            variable("u", "UGRD", "{level:g} mb", levels=[850, 500], file_type="a"),
        ],
        grid={"y": np.arange(4.0), "x": np.arange(5.0)},
        first_init=FIRST,
        end=END,
        every_hours=12,
        leads_hours=(6, 0, 3, 3),
        members=(0, 1, 2),
        member_labels=("c", "p1", "p2"),
        file_types=("a", "b"),
        crs=latlon_crs(6371000.0),
        split={"^/t2m$": 4, None: 16},
        update_cycles=3,
        known_missing=(KnownMissing("b", "APCP", "surface", leads_hours=(0,)),),
        title="An ensemble",
        store_options=None,
        allow_all_nan_vars=("tp",),
        min_present_fraction=(0.5, 1.0),
        expected_latency_hours=7.5,
        attrs={"institution": "Me", "comment": "pinned"},
        grid_relative_winds=True,
    )


MEMORY = storage.open_store("memory://pinned-source")
NOAA = dict(first_init=FIRST, append_dim_end=END)
BUILT_IN: dict[str, Callable[[], Dataset]] = {
    "docs-example": mymodel,
    "docs-example-store": lambda: mymodel(source=MEMORY, title="Mine", split=None),
    "every-keyword": every_keyword,
    "gfs": lambda: gfs(**NOAA),
    "gfs-pgrb2b": lambda: gfs(**NOAA, source_file_types=("pgrb2", "pgrb2b")),
    "gfs-mirror": lambda: gfs(MEMORY, **NOAA),
    "gefs": lambda: gefs(**NOAA),
    "gefs-half": lambda: gefs(**NOAA, source_file_types=("pgrb2a", "pgrb2b")),
    "hrrr": lambda: hrrr(**NOAA),
    "hrrr-hourly": lambda: hrrr(**NOAA, init_freq_hours=1),
    "hrrr-analysis": lambda: hrrr_analysis(first_time=FIRST, append_dim_end=END),
    "sim-gfs": lambda: sim_gfs(MEMORY),
    "sim-hrrr-analysis": lambda: sim_hrrr_analysis(MEMORY),
}

PINNED = {
    "docs-example": "3ae189e0e0082f5c",
    "docs-example-store": "99983780e9882c52",
    "every-keyword": "74edc0ded38bf01a",
    "gfs": "bfd99d31e3eff99b",
    "gfs-pgrb2b": "9123a05b2077049c",
    "gfs-mirror": "ab277b9347e2a23e",
    "gefs": "3fecc97879d30549",
    "gefs-half": "73a39eb135db7962",
    "hrrr": "713ce675253c9ae3",
    "hrrr-hourly": "c2fbe5bb3a911491",
    "hrrr-analysis": "b1c979e2ff078114",
    "sim-gfs": "d26c31522f17cd55",
    "sim-hrrr-analysis": "000008e0b95493db",
}


@pytest.mark.parametrize("which", sorted(BUILT_IN))
def test_every_built_in_dataset_keeps_its_identity(which):
    assert fingerprint(BUILT_IN[which]()) == PINNED[which]


# The documented keyword form: names, order, kinds and defaults, as users' modules call it.
SIGNATURE = (
    "(name: 'str', *, source: 'str | storage.Store', key: 'str', "
    "variables: 'Sequence[GribVariable]', grid: 'Mapping[str, np.ndarray]', "
    "first_init: 'datetime', end: 'datetime', every_hours: 'int', "
    "leads_hours: 'Iterable[int]', members: 'Sequence[Member]' = (None,), "
    "member_labels: 'Sequence[Any] | None' = None, "
    "file_types: 'Sequence[str]' = ('grib2',), crs: 'Mapping[str, Any] | None' = None, "
    "split: 'int | Mapping[str | None, int]' = 1000, update_cycles: 'int' = 2, "
    "known_missing: 'Sequence[KnownMissing]' = (), title: 'str' = '', "
    "store_options: 'Mapping[str, Any] | None' = None, "
    "allow_all_nan_vars: 'Sequence[str]' = (), "
    "min_present_fraction: 'Sequence[float]' = (1.0,), "
    "expected_latency_hours: 'float | None' = None, "
    "attrs: 'Mapping[str, Any] | None' = None, grid_relative_winds: 'bool' = False, "
    "index: 'str' = 'wgrib2', discovery: 'str' = 'list') -> 'Dataset'"
)


def test_grib_forecast_keeps_its_documented_signature():
    assert str(inspect.signature(grib_forecast)) == SIGNATURE


def test_grib_forecast_refuses_a_wrong_keyword_as_a_call_would():
    with pytest.raises(TypeError, match=r"grib_forecast\(\): .*unexpected keyword .*'every_hour'"):
        mymodel(every_hour=6)
    with pytest.raises(TypeError, match=r"grib_forecast\(\): missing .*'source'"):
        grib_forecast("mymodel", key="{init:%Y%m%d}.f{lead:03d}")


def test_the_value_form_builds_the_same_datasets_as_the_keyword_form():
    docs = mymodel()
    values = forecast(
        "mymodel",
        source=Source("memory://mymodel", docs.source.catalog.key_format),
        variables=docs.source.catalog.variables,
        grid=Grid(
            {"latitude": 50.0 - 0.25 * np.arange(32), "longitude": 250.0 + 0.25 * np.arange(48)},
            crs=latlon_crs(),
        ),
        schedule=Schedule(FIRST, END, every_hours=6, leads_hours=range(0, 7, 3)),
        attrs={"institution": "My Weather Service", "license": "CC-BY-4.0"},
    )
    assert fingerprint(values) == PINNED["docs-example"]
    ens = every_keyword()
    src = ens.source
    values = forecast(
        "ens",
        source=Source(
            src.store, src.catalog.key_format, ("a", "b"), (0, 1, 2), ("c", "p1", "p2"),
            src.catalog.known_missing,
        ),
        variables=src.catalog.variables,
        grid=Grid({"y": np.arange(4.0), "x": np.arange(5.0)}, latlon_crs(6371000.0), True),
        schedule=Schedule(FIRST, END, 12, (0, 3, 6), update_cycles=3),
        title="An ensemble",
        attrs={"institution": "Me", "comment": "pinned"},
        split={"^/t2m$": 4, None: 16},
        checks=Checks(("tp",), (0.5, 1.0), 7.5),
    )  # fmt: skip
    assert fingerprint(values) == PINNED["every-keyword"]


def test_the_docs_value_form_is_the_keyword_form():
    """The docs' value-form block builds what the keyword form builds from the same facts."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-dataset.md").read_text()
    section = docs.split("**The same definition as values.**", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict[str, Any] = {}
    exec(block, namespace)
    keywords = grib_forecast(
        "mymodel",
        source="s3://my-bucket/mymodel",
        store_options={"region": "eu-west-1"},
        key="{init:%Y%m%d}/{init:%H}/mymodel.t{init:%H}z.f{lead:03d}.grib2",
        variables=[variable("temperature_2m", "TMP", "2 m above ground")],
        grid={
            "latitude": 50.0 - 0.25 * np.arange(32),
            "longitude": 250.0 + 0.25 * np.arange(48),
        },
        crs=latlon_crs(),
        attrs={"institution": "My Weather Service", "license": "CC-BY-4.0"},
        first_init=datetime(2025, 8, 1),
        end=datetime(2025, 8, 2),
        every_hours=6,
        leads_hours=[0, 3, 6],
    )
    assert fingerprint(namespace["DATASET"]) == fingerprint(keywords)


def test_a_schedule_is_checked_before_the_store_is_opened():
    """A wrong schedule names the dataset and its cause; an unusable store is not reached."""
    with pytest.raises(ValueError, match="mine: first_init 2025-08-01T03 is not a 6-hourly"):
        forecast(
            "mine",
            source=Source("s3://bucket/x", "{init:%Y%m%d%H}", store_options={"region": 3}),
            variables=[variable("t2m", "TMP", "2 m above ground")],
            grid=Grid({"y": np.arange(2.0), "x": np.arange(2.0)}),
            schedule=Schedule(datetime(2025, 8, 1, 3), END, 6, [0]),
        )


DEFINITIONS = (
    "virtual/define.py",
    "virtual/dataset.py",
    "virtual/builtin",
    "examples/datasets.py",
)


def test_definitions_take_a_few_values_not_many_keywords():
    """No definition function takes more than 12 parameters or runs over 100 lines."""
    root = Path(__file__).resolve().parents[2] / "toolkit"
    files = [p for d in DEFINITIONS for p in sorted((root / d).glob("**/*.py")) or [root / d]]
    long = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                count = len(a.posonlyargs + a.args + a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                lines = (node.end_lineno or 0) - node.lineno + 1
                if count > 12 or lines > 100:
                    long.append(f"{path.name}:{node.name} {count} parameters, {lines} lines")
    assert files and not long


def test_the_old_module_paths_of_renamed_modules_still_import() -> None:
    """A user's dataset module written before the renames keeps working, warned once."""
    import importlib
    import warnings

    from toolkit.virtual import builtin, gribsource, split_sizing

    for old in ("toolkit.virtual.source", "toolkit.virtual.splits", "toolkit.virtual.datasets"):
        sys.modules.pop(old, None)
    with pytest.warns(
        DeprecationWarning, match="toolkit.virtual.source is toolkit.virtual.gribsource"
    ):
        old = importlib.import_module("toolkit.virtual.source")
    assert old is gribsource and old.GribSource is gribsource.GribSource
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module("toolkit.virtual.splits") is split_sizing
        assert importlib.import_module("toolkit.virtual.datasets") is builtin
        gfs = importlib.import_module("toolkit.virtual.datasets.gfs")
    assert gfs is importlib.import_module("toolkit.virtual.builtin.gfs")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("toolkit.virtual.no_such_module")
