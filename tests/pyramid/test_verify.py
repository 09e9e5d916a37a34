"""The verifier passes a good pyramid and names the level, shard and check of each fault."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import zarr

from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, plan, verify
from toolkit.pyramid.verify import spread_samples


@pytest.fixture
def built() -> storage.Store:
    store = storage.open_store(f"memory://{uuid.uuid4().hex}")
    synthetic.write_store(store, kind="bands", shape=(70, 90), shards=(16, 16), seed=4)
    build(store, band_dim="band", levels=3, max_shard=16, executor="sync")  # many shards
    return store


def checks(result) -> set[tuple[str, str]]:
    return {(f.level, f.check) for f in result.failures}


def test_good_pyramid_passes(built):
    result = verify(built, executor="sync")
    assert result.ok, [str(f) for f in result.failures]
    assert result.checked["verify-samples"] > 0


def test_deleted_shard_caught(built):
    victim = plan(built, band_dim="band", levels=3, max_shard=16).level("4x").tasks[0].data_key
    storage.delete(built, victim)
    result = verify(built, executor="sync")
    assert ("4x", "count") in checks(result)
    assert any(f.shard == victim for f in result.failures)


def test_corrupted_shard_caught(built):
    p = plan(built, band_dim="band", levels=3, max_shard=16)
    task = p.level("2x").tasks[len(p.level("2x").tasks) // 2]
    arr = zarr.open_array(
        built.zarr(), path="2x/field", mode="r+", config={"write_empty_chunks": True}
    )
    sl = tuple(
        slice(i * s, min((i + 1) * s, n))
        for i, s, n in zip(task.index, arr.shards or arr.chunks, arr.shape, strict=True)
    )
    block = arr[sl]
    at = tuple(int(i[0]) for i in np.nonzero(np.isfinite(block).all(axis=0)))
    block[(0, *at)] = 0.123  # one wrong value where there is data, object count unchanged
    arr[sl] = block
    result = verify(built, sample=len(p.level("2x").tasks), executor="sync")
    assert ("2x", "reference") in checks(result)
    assert any(f.shard == task.data_key for f in result.failures)


def test_starved_stripe_caught(built):
    p = plan(built, band_dim="band", levels=3, max_shard=16)
    tasks = list(p.level("2x").tasks)
    starved = {t.data_key for t in tasks[1::4]}  # the whole of stripe 1 of 4 never written
    for t in tasks[1::4]:
        storage.delete(built, t.data_key)
        storage.delete(built, t.count_key)
    result = verify(built, sample=4, executor="sync")
    found = {f.shard for f in result.failures if f.check in ("count", "missing")}
    assert starved <= found
    every = verify(built, sample=len(tasks), executor="sync")
    assert ("2x", "missing") in checks(every)  # sampling every shard lands on them too


def test_touched_level0_metadata_caught(built):
    doc = json.loads(storage.get(built, "field/zarr.json").data)
    doc["attributes"]["note"] = "edited"
    storage.put(built, "field/zarr.json", json.dumps(doc).encode())
    result = verify(built, executor="sync")
    assert (".", "level0-metadata") in checks(result)


def test_root_change_beyond_multiscales_caught(built):
    doc = json.loads(storage.get(built, "zarr.json").data)
    doc["attributes"]["title"] = "renamed"
    storage.put(built, "zarr.json", json.dumps(doc).encode())
    assert (".", "root-diff") in checks(verify(built, executor="sync"))


def test_wrong_level_coordinates_caught(built):
    arr = zarr.open_array(built.zarr(), path="4x/lat", mode="r+")
    arr[:] = arr[:] + 0.5
    found = checks(verify(built, executor="sync"))
    assert ("4x", "metadata") in found  # recomputed from level 0 ...
    assert ("4x", "client") in found  # ... and the bounds a client sees have moved


def test_a_level_crs_a_client_sees_differently_is_caught(built):
    doc = json.loads(storage.get(built, "2x/spatial_ref/zarr.json").data)
    doc["attributes"]["crs_wkt"] = 'GEOGCS["elsewhere"]'
    storage.put(built, "2x/spatial_ref/zarr.json", json.dumps(doc).encode())
    result = verify(built, executor="sync")
    assert ("2x", "client") in checks(result) and ("4x", "client") not in checks(result)
    assert any("CRS via grid_mapping 'spatial_ref' differs" in str(f) for f in result.failures)


def test_samples_spread_over_the_level_first_and_last_included():
    tasks = [f"{i:03d}" for i in range(23)]
    assert spread_samples(tasks, 4) == ["000", "007", "015", "022"]
    assert spread_samples(tasks, 1) == ["000"] and spread_samples(tasks, 99) == tasks
    assert spread_samples([], 3) == []


def test_a_level_consistent_with_a_wrong_parent_is_caught_against_level_0(built):
    """The old check re-derived a shard from its parent with the builder's own code: a level
    built from a bad parent passed. The numpy reference pools level 0 itself."""
    from toolkit.pyramid.geometry import region

    p = plan(built, band_dim="band", levels=3, max_shard=16)
    arr = zarr.open_array(built.zarr(), path="2x/field", mode="r+")
    arr[...] = arr[...] * np.float32(1.01)  # every 2x value 1 % off ...
    build(built, band_dim="band", levels=3, max_shard=16, rebuild_from="4x", executor="sync")
    result = verify(built, sample=2, executor="sync")  # ... and 4x rebuilt from it
    assert ("2x", "reference") in checks(result) and ("4x", "reference") in checks(result)
    line = next(str(f) for f in result.failures if f.level == "4x" and f.check == "reference")
    assert "from the numpy reference pooled from level 0" in line and "ulp" in line
    assert region(p.level("4x").vars[0], p.level("4x").tasks[0].index)  # the plan is unchanged


def test_no_plan_is_a_failure():
    store = storage.open_store(f"memory://{uuid.uuid4().hex}")
    synthetic.write_store(store, shape=(40, 40), shards=(16, 16))
    result = verify(store, executor="sync")
    assert not result.ok and result.failures[0].check == "plan"
    assert "no recorded pyramid plan: build the pyramid first" in str(result.failures[0])


def test_wrong_fill_value_caught(built):
    doc = json.loads(storage.get(built, "4x/field/zarr.json").data)
    doc["fill_value"] = 0.0
    storage.put(built, "4x/field/zarr.json", json.dumps(doc).encode())
    result = verify(built, executor="sync")
    assert any(
        f.level == "4x" and f.check == "metadata" and "fill_value" in f.detail
        for f in result.failures
    )
