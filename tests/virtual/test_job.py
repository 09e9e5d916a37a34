"""The write loop on the simulator's real GRIB2 archive: values, filter, skips, metadata."""

from __future__ import annotations

import dataclasses
import gc
import shutil
from datetime import datetime, timedelta

import numpy as np
import pytest
import xarray as xr

from tests.virtual.e2e.hooks import at_steps
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import expected_values, make_archive
from toolkit.virtual.layout import MetadataDrift
from toolkit.virtual.write import (
    Job,
    ensure_repo,
    filter_already_present,
    process_virtual_refs,
    refresh,
    run,
)

INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
VARS = (
    "temperature_2m",
    "wind_u_10m",
    "wind_v_10m",
    "pressure_reduced_to_mean_sea_level",
    "precipitation_surface",
)


def setup(tmp_path, publish: int | None = None):
    src = storage.open_store(str(tmp_path / "src"))
    archive = make_archive(src, kind="gfs", inits=INITS, leads=[0, 3, 6], publish=False)
    files = archive.files()
    archive.publish(files if publish is None else files[:publish])
    ds = Job(sim_gfs(src), R.RepoRef(storage.open_store(str(tmp_path / "repo"))))
    ensure_repo(ds)
    return archive, files, ds


def with_template(job: Job, template) -> Job:
    return dataclasses.replace(job, dataset=dataclasses.replace(job.dataset, template=template))


def open_main(ds) -> xr.Dataset:
    session = R.readonly(ds.repo.open(fresh=True))
    return xr.open_zarr(session.store, consolidated=False)


def assert_exact(x: xr.Dataset, files, skip=()) -> None:
    """Every ingested (init, lead, variable) decodes to exactly the simulator's values."""
    for f in files:
        if f in skip:
            continue
        sel = {
            "init_time": np.datetime64(f.init, "ns"),
            "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]"),
        }
        for name in VARS:
            got = x[name].sel(sel).values
            if name == "precipitation_surface" and f.lead == 0:
                assert np.isnan(got).all()  # absent at lead 0, as in the real source
                continue
            np.testing.assert_array_equal(got, expected_values(name, f.init, f.lead))
        for level in (0.4, 500.0, 1000.0):
            np.testing.assert_array_equal(
                x["temperature"].sel(sel).sel(level=level).values,
                expected_values("temperature", f.init, f.lead, level=level),
            )


def test_run_ingests_exact_values_and_grows_only_to_ingested(tmp_path):
    _, files, ds = setup(tmp_path, publish=7)  # 2 whole cycles + lead 0 of the third
    result = run(ds)
    assert len(result.ingested) == 7 and not result.skipped and len(result.commits) == 1
    assert result.pending == [f.key for f in ds.files()[7:]]
    x = open_main(ds)
    assert x.sizes["init_time"] == 3  # never padded toward the template's 4 cycles
    assert_exact(x, files[:7])
    assert np.isnan(x["temperature_2m"].isel(init_time=2, lead_time=2).values).all()
    again = run(ds)
    assert again.ingested == [] and again.commits == []


def test_filter_never_reads_the_source(tmp_path):
    _, _, ds = setup(tmp_path, publish=6)
    run(ds)
    shutil.rmtree(tmp_path / "src")  # any source read or listing would now fail
    coords = ds.files()
    todo = filter_already_present(ds, coords)
    assert [c.key for c in todo] == [c.key for c in coords[6:]]


def test_unreadable_files_are_skipped_with_reasons_and_the_rest_lands(tmp_path):
    archive, files, ds = setup(tmp_path, publish=0)
    good = [files[i] for i in (0, 1, 2, 4)]
    archive.publish(good)
    archive.publish(files[3])
    archive.reupload(files[3])  # stale index
    archive.publish(files[5], drop=[("wind_v_10m", None)])  # missing message
    archive.publish(files[6])
    archive.truncate(files[6])
    archive.index_only(files[7])  # listed index, no data object: not discoverable yet
    result = run(ds)
    reasons = {
        s.url.rsplit("/", 3)[-3] + "/" + s.url.rsplit(".", 1)[-1]: s.reason for s in result.skipped
    }
    assert len(result.skipped) == 3
    assert any("stale" in r.lower() for r in reasons.values())
    assert any("wind_v_10m" in r or "VGRD" in r for r in reasons.values())
    assert any("truncated" in r.lower() for r in reasons.values())
    assert sorted(result.ingested) == sorted(archive.data_url(f) for f in good)
    assert archive.data_url(files[7]) in result.pending
    assert_exact(open_main(ds), good)


def test_refresh_metadata_commits_only_on_real_drift(tmp_path):
    _, _, ds = setup(tmp_path, publish=3)
    run(ds)
    repo = ds.repo.open(fresh=True)
    n = len(R.history(repo))
    assert refresh(ds) is None and len(R.history(ds.repo.open(fresh=True))) == n
    t = ds.template
    drifted = type(t)(
        t.append_dim,
        t.coords,
        t.variables,
        t.grid_dims,
        {**t.attrs, "title": "renamed"},
        t.coord_attrs,
    )
    ds = with_template(ds, drifted)
    assert refresh(ds) is not None
    assert open_main(ds).attrs["title"] == "renamed"
    vars2 = dict(t.variables)
    vars2.pop("wind_u_10m")
    ds = with_template(
        ds, type(t)(t.append_dim, t.coords, vars2, t.grid_dims, t.attrs, t.coord_attrs)
    )
    with pytest.raises(MetadataDrift, match="run a backfill"):
        refresh(ds)


def test_write_refs_canonicalises_each_label_once_a_batch(tmp_path, monkeypatch):
    """A batch's refs share their labels (12 files, 4 init times, 3 leads, a few levels): each
    label is made canonical once, not once per ref, and every ref lands in its own cell, as
    keyed one at a time."""
    from toolkit.virtual import refs as refs_module
    from toolkit.virtual.refs import chunk_key
    from toolkit.virtual.write import process_virtual_refs, write_refs

    _, _, ds = setup(tmp_path)
    (batch,) = process_virtual_refs(ds, ds.files())
    n_refs = sum(len(r) for _, r in batch)
    real = refs_module.canon
    calls = []
    write_refs(ds, R.writable(ds.repo.open(fresh=True)), batch)  # the template's geometry made
    session = R.writable(ds.repo.open(fresh=True))
    monkeypatch.setattr(refs_module, "canon", lambda x: calls.append(x) or real(x))
    assert write_refs(ds, session, batch) == n_refs
    labels = {(d, real(v)) for _, refs in batch for r in refs for d, v in r.out_loc}
    assert n_refs > 3 * len(labels) and len(calls) <= len(labels), (len(calls), len(labels))
    monkeypatch.setattr(refs_module, "canon", real)
    R.commit(session, "batch")
    geom = ds.template.geometry(len(ds.template.coords[ds.template.append_dim]))
    session = R.readonly(ds.repo.open(fresh=True))
    for _, refs in batch:
        for r in refs:
            ck = chunk_key(geom, r.variable, r.loc)
            got = R.chunk_refs(session, r.variable)[ck.index]
            assert got == (r.location, r.offset, r.length)


def test_the_filter_canonicalises_each_label_once(tmp_path, monkeypatch):
    """The filter probes every file of a region (a backfill's done-set and gates: twice a
    stage): 12 files share 4 init times and 3 leads, each made canonical once, and the filter
    finds what it finds without the memo."""
    from toolkit.virtual import refs as refs_module

    _, files, ds = setup(tmp_path, publish=5)
    run(ds)
    coords = ds.files()
    want = [c.key for c in filter_already_present(ds, coords)]
    assert len(want) == len(files) - 5
    real = refs_module.canon
    calls = []
    monkeypatch.setattr(refs_module, "canon", lambda x: calls.append(x) or real(x))
    assert [c.key for c in filter_already_present(ds, coords)] == want
    assert len(calls) <= 4 + 3 + 2, len(calls)  # init times, leads, a level or two


def test_the_write_loop_defers_full_collections_while_its_refs_pile_up(tmp_path):
    """A batch's refs live until its commit: while the loop reads files and while it sets
    their refs, full collections are rare (toolkit.engine.heap); after, the process's own."""
    _, files, ds = setup(tmp_path)
    before = gc.get_threshold()
    reading: list[int] = []
    batches = list(
        process_virtual_refs(
            ds, ds.files(), on_file=lambda n: reading.append(gc.get_threshold()[2])
        )
    )
    assert len(reading) == len(files) and set(reading) == {max(before[2], 100)}
    assert gc.get_threshold() == before and batches
    setting: list[int] = []

    def hook(step: str) -> None:
        if step == "before_set_refs":
            setting.append(gc.get_threshold()[2])

    with at_steps(hook):
        assert run(ds).ingested
    assert setting == [max(before[2], 100)]
    assert gc.get_threshold() == before
