"""Template geometry is memoized per extent and equals a fresh build (labels, shapes, keys)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.virtual.refs import ArrayGeometry, Geometry, chunk_key
from toolkit.virtual.template import Template


def fresh(t: Template, extent: int | None) -> Geometry:
    coords = dict(t.coords)
    if extent is not None:
        coords[t.append_dim] = coords[t.append_dim][:extent]
    arrays = [
        ArrayGeometry(n, v.dims, t.shape(n, extent), t.chunks(n)) for n, v in t.variables.items()
    ]
    return Geometry.build(t.append_dim, arrays, coords)


def sim_template() -> Template:
    t = sim_gfs(storage.open_store("memory://src")).template
    return dataclasses.replace(t)  # a private copy: its memo starts empty


@pytest.mark.parametrize("extent", [None, 0, 1, 2, 4])
def test_memoized_geometry_equals_a_fresh_build(extent):
    t = sim_template()
    got = t.geometry(extent)
    assert got is t.geometry(extent)  # built once
    want = fresh(t, extent)
    assert got.labels == want.labels
    assert {n: (a.dims, a.shape, a.chunks) for n, a in got.arrays.items()} == {
        n: (a.dims, a.shape, a.chunks) for n, a in want.arrays.items()
    }
    loc = {"init_time": t.coords["init_time"][1], "lead_time": t.coords["lead_time"][2]}
    assert chunk_key(got, "temperature_2m", loc) == chunk_key(want, "temperature_2m", loc)


def test_memo_is_bounded_and_outside_the_fields():
    t = sim_template()
    for e in range(20):
        t.geometry(e)
    extents = [k for k in t._memo if k[0] == "geometry" and k[1] is not None]
    assert len(extents) == Template.memo_extents and extents[-1] == ("geometry", 19)
    assert "_memo" not in {f.name for f in dataclasses.fields(Template)}
    shipped = pickle.loads(pickle.dumps(t))  # a graph ships coordinates, not label maps
    assert shipped._memo == {} and "_memo" not in t.__getstate__()
    assert shipped.position(t.coords["init_time"][2]) == 2
    assert t.position(t.coords["init_time"][3]) == 3
    with pytest.raises(KeyError, match="outside the template"):
        t.position(np.datetime64("1999-01-01", "ns"))
