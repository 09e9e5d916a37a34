"""Registry, update windows, chunk-key arithmetic and probe cells of the real datasets."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.virtual.builtin import DATASETS, HOMES, gefs, gfs, hrrr
from toolkit.virtual.dataset import in_region, probe
from toolkit.virtual.filetable import file_tasks
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.write import virtual_config

END = datetime(2025, 9, 1)
HRRR = hrrr(append_dim_end=END)
GFS = gfs(append_dim_end=END)
GEFS = gefs(append_dim_end=END)


def test_registry_builds_every_dataset_from_its_source():
    real = {"hrrr", "hrrr-analysis", "gfs", "gefs", "ecmwf-ifs-oper", "ecmwf-aifs-single"}
    assert set(DATASETS) == set(HOMES) == real | {"sim-gfs", "sim-hrrr-analysis"}
    assert DATASETS["sim-gfs"] is sim_gfs
    src = storage.open_store("memory://mirror")
    for name in sorted(real):
        ds = DATASETS[name](src)
        assert ds.name == name and ds.source.store == src
        assert ds.settings.home == HOMES[name]  # one bucket URL, declared by its source
        assert DATASETS[name]().source.store.url == HOMES[name]
        assert (DATASETS[name].__doc__ or "").strip()  # the CLI lists the first docstring line
    for sim in ("sim-gfs", "sim-hrrr-analysis"):
        with pytest.raises(ValueError, match="no bucket of its own"):
            DATASETS[sim]()


def test_mirror_in_memory_is_refused_with_the_store_named():
    ds = gfs(storage.open_store("memory://m2"), append_dim_end=END)
    with pytest.raises(ValueError, match="memory://m2"):
        virtual_config(ds)


@settings(max_examples=60, deadline=None)
@given(
    fire=st.datetimes(min_value=datetime(2025, 1, 2), max_value=datetime(2025, 8, 30)),
    which=st.sampled_from([HRRR, GFS, GEFS]),
)
def test_update_window_is_anchored_to_the_scheduled_fire(fire, which):
    fire64 = np.datetime64(fire, "ns")
    start, end = which.window(fire)
    inits = [x for x in which.template.coords["init_time"] if in_region(x, start, end)]
    # the newest cycles at or before the fire, never one after it
    every = np.timedelta64(which.window.every_hours, "h")
    assert len(inits) == which.window.cycles == 3
    assert max(inits) <= fire64 < max(inits) + every
    assert np.all(np.diff(inits) == every)
    # a replacement process given the same scheduled fire computes the same window
    assert which.window(fire) == (start, end)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_chunk_keys_land_on_exactly_the_labelled_chunk(data):
    ds = data.draw(st.sampled_from([HRRR, GFS, GEFS]))
    t = ds.template
    geom = t.geometry()
    name = data.draw(st.sampled_from(sorted(v for v in t.variables if v != "spatial_ref")))
    dims = t.variables[name].dims
    loc, want = {}, []
    for d in dims:
        if d in t.grid_dims:
            want.append(0)
            continue
        i = data.draw(st.integers(0, len(t.coords[d]) - 1))
        loc[d] = t.coords[d][i]
        want.append(i)
    ck = chunk_key(geom, name, loc)
    assert ck is not None and ck.index == tuple(want)
    assert ck.key == f"{name}/c/" + "/".join(map(str, want))
    # the template geometry at a smaller extent sees later inits as "not ingested"
    pos = want[0]
    assert chunk_key(t.geometry(pos), name, loc) is None
    assert chunk_key(t.geometry(pos + 1), name, loc) == ck


def test_gfs_pgrb2b_files_are_probed_at_a_level_they_own():
    ds = gfs(
        first_init=datetime(2025, 8, 1),
        append_dim_end=datetime(2025, 8, 1, 6),
        source_file_types=("pgrb2", "pgrb2b"),
    )
    t = ds.template
    assert len(t.coords["level"]) == 41 + 16
    coords = file_tasks(ds)
    assert len(coords) == 2 * 209
    geom = t.geometry()
    for c in coords[:4]:
        var, loc = probe(ds, c)
        gv = ds.source.catalog.variable(var)
        if gv.is_vertical:
            assert gv.owner(float(loc["level"])) == c.file_type
        else:
            assert c.file_type == "pgrb2" and "level" not in loc
        assert chunk_key(geom, var, loc) is not None
    b = next(c for c in coords if c.file_type == "pgrb2b")
    assert set(b.data_vars) == {v.name for v in ds.source.catalog.variables if v.is_vertical}
    assert probe(ds, b)[1]["level"] == 125.0


def test_split_sizes_keep_manifests_within_reader_budgets():
    """~16 B/ref: single-level manifests <= 3 MiB, isobaric <= 8 MiB, and >= 1000 refs each."""
    for ds in (HRRR, GFS, GEFS):
        t = ds.template
        sizes = ds.settings.split
        sizes = sizes if isinstance(sizes, dict) else {None: sizes}
        for name, v in t.variables.items():
            if name == "spatial_ref":
                continue
            per_init = int(np.prod([len(t.coords[d]) for d in v.dims[1:] if d not in t.grid_dims]))
            split = next(
                (s for k, s in sizes.items() if k is not None and re.search(k, f"/{name}")),
                sizes[None],
            )
            refs = per_init * split
            budget = (8 if v.dims.count("level") else 3) * 2**20
            assert refs >= 1000 and refs * 16 <= budget, (ds, name, refs)
    assert virtual_config(GFS).splitting is not None


def test_window_reaches_no_further_than_the_template():
    late = np.datetime64(END - timedelta(hours=1), "ns")
    start, end = GFS.window(late)
    inits = [x for x in GFS.template.coords["init_time"] if in_region(x, start, end)]
    assert inits[-1] == np.datetime64(datetime(2025, 8, 31, 18), "ns")


SMALL_HRRR = hrrr(
    first_init=datetime(2025, 8, 1), append_dim_end=datetime(2025, 8, 2), init_freq_hours=1
)


@settings(max_examples=60, deadline=None)
@given(
    start=st.none() | st.datetimes(datetime(2025, 7, 31, 20), datetime(2025, 8, 2, 4)),
    end=st.none() | st.datetimes(datetime(2025, 7, 31, 20), datetime(2025, 8, 2, 4)),
)
def test_a_region_plans_exactly_the_files_whose_init_is_inside(start, end):
    """The region is found by binary search on the append dim: the same files, in the same
    order, as filtering the whole plan label by label."""
    s = None if start is None else np.datetime64(start, "ns")
    e = None if end is None else np.datetime64(end, "ns")
    whole = file_tasks(SMALL_HRRR)
    want = [c.key for c in whole if in_region(c.init_time, s, e)]
    assert [c.key for c in file_tasks(SMALL_HRRR, s, e)] == want
    assert len(whole) == 4 * 49 + 20 * 19  # long cycles 48 h, the other hours 18 h


def test_split_none_keeps_one_manifest_per_array():
    import dataclasses

    from toolkit.virtual.dataset import RepoSettings

    one = dataclasses.replace(GFS, settings=RepoSettings(split=None, home=GFS.settings.home))
    assert virtual_config(one).splitting is None
    assert virtual_config(GFS).splitting is not None
