"""Chunk keys and refs: label arithmetic against zarr's own key encoding."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given
from hypothesis import strategies as st

from toolkit.virtual.refs import (
    ArrayGeometry,
    Geometry,
    SourceFileCoord,
    VirtualRef,
    canon,
    canon_all,
    chunk_cell,
    chunk_index,
    chunk_key,
)

INITS = np.array(["2024-01-01T00", "2024-01-01T06", "2024-01-01T12"], dtype="datetime64[ns]")
LEADS = np.array([0, 1, 2, 3], dtype="timedelta64[h]").astype("timedelta64[ns]")


def geometry(**enc) -> Geometry:
    a = ArrayGeometry(
        "t2m", ("init_time", "lead_time", "y", "x"), (3, 4, 5, 6), (1, 1, 5, 6), **enc
    )
    return Geometry.build("init_time", [a], {"init_time": INITS, "lead_time": LEADS})


def test_chunk_key_matches_zarr_written_key(tmp_path):
    """The key we compute is the key zarr itself writes for that chunk."""
    store = zarr.storage.LocalStore(tmp_path / "z")
    arr = zarr.create_array(store, name="t2m", shape=(3, 4, 5, 6), chunks=(1, 1, 5, 6), dtype="f4")
    arr[2, 3] = 1.0
    written = sorted(
        k
        for k in (p.relative_to(tmp_path / "z").as_posix() for p in (tmp_path / "z").rglob("*"))
        if "/c/" in k
    )
    ck = chunk_key(geometry(), "t2m", {"init_time": INITS[2], "lead_time": LEADS[3]})
    assert ck is not None and ck.index == (2, 3, 0, 0)
    assert [ck.key] == [w for w in written if (tmp_path / "z" / w).is_file()]


def test_v2_style_encoding_comes_from_metadata():
    g = geometry(chunk_key_encoding={"name": "v2", "configuration": {"separator": "."}})
    ck = chunk_key(g, "t2m", {"init_time": INITS[1], "lead_time": LEADS[0]})
    assert ck is not None and ck.key == "t2m/1.0.0.0"


def test_label_types_are_interchangeable():
    g = geometry()
    a = chunk_key(g, "t2m", {"init_time": INITS[1], "lead_time": LEADS[2]})
    b = chunk_key(
        g, "t2m", {"init_time": dt.datetime(2024, 1, 1, 6), "lead_time": dt.timedelta(hours=2)}
    )
    c = chunk_key(
        g,
        "t2m",
        {
            "init_time": np.datetime64("2024-01-01T06:00", "s"),
            "lead_time": np.timedelta64(7200, "s"),
        },
    )
    assert a == b == c
    assert canon(np.float64(1000.0)) == canon(1000)


def test_missing_label_means_not_ingested():
    g = geometry()
    assert (
        chunk_key(g, "t2m", {"init_time": np.datetime64("2024-01-01T18"), "lead_time": LEADS[0]})
        is None
    )


def test_refs_must_be_exactly_one_chunk():
    a = ArrayGeometry("t2m", ("init_time", "lead_time", "y"), (3, 4, 10), (1, 2, 10))
    g = Geometry.build("init_time", [a], {"init_time": INITS, "lead_time": LEADS})
    with pytest.raises(ValueError, match=r"t2m: dim 'lead_time' is pinned .* chunked by 2"):
        chunk_key(g, "t2m", {"init_time": INITS[0], "lead_time": LEADS[0]})
    b = ArrayGeometry("u", ("init_time", "y"), (3, 10), (1, 5))
    g = Geometry.build("init_time", [b], {"init_time": INITS})
    with pytest.raises(ValueError, match=r"u: dim 'y' .* left open"):
        chunk_key(g, "u", {"init_time": INITS[0]})
    with pytest.raises(KeyError, match="'nope' is not in the template"):
        chunk_key(g, "nope", {})
    with pytest.raises(ValueError, match="dims \\['member'\\]"):
        chunk_key(g, "u", {"init_time": INITS[0], "member": 1})


def test_geometry_from_xarray_template_and_committed_extent():
    ds = xr.Dataset(
        {"t2m": (("init_time", "lead_time", "y"), np.zeros((3, 4, 5), "f4"))},
        coords={"init_time": INITS, "lead_time": LEADS},
    )
    ds["t2m"].encoding["chunks"] = (1, 1, 5)
    g = Geometry.from_dataset(ds, "init_time")
    assert g.arrays["t2m"].chunks == (1, 1, 5)
    committed = g.with_coords({"init_time": INITS[:1]})
    assert committed.arrays["t2m"].shape == (1, 4, 5)
    assert chunk_key(committed, "t2m", {"init_time": INITS[1], "lead_time": LEADS[0]}) is None
    assert chunk_key(g, "t2m", {"init_time": INITS[1], "lead_time": LEADS[0]}).index == (1, 0, 0)


def test_repeated_labels_refused():
    with pytest.raises(ValueError, match="'lead_time' repeats"):
        Geometry.build("init_time", [], {"lead_time": [LEADS[0], LEADS[0]]})
    with pytest.raises(ValueError, match=r"'init_time' repeats label .*2024-01-01T06"):
        Geometry.build("init_time", [], {"init_time": INITS[[0, 1, 2, 1]]})  # an array


UNITS = ["ns", "us", "s", "m", "h", "D"]


@given(
    ints=st.lists(st.integers(-(10**5), 10**5) | st.just(np.iinfo(np.int64).min), max_size=30),
    unit=st.sampled_from(UNITS),
    kind=st.sampled_from(["datetime64", "timedelta64", "int64", "int16", "float32", "float64"]),
)
def test_canon_all_is_canon_of_each(ints, unit, kind):
    """The vectorised path answers exactly as `canon` element by element (NaT included), for
    arrays of any unit and numeric dtype; a list takes the element path."""
    if kind in ("datetime64", "timedelta64"):
        values = np.array(ints, dtype="int64").view(f"{kind}[{unit}]")  # int64 min: NaT
    else:
        values = np.array(ints, dtype="int64").astype(kind)
    got = canon_all(values)
    want = [canon(v) for v in values]
    assert got == want or (np.isnan(np.array(got, float)) == np.isnan(np.array(want, float))).all()
    assert [type(g) for g in got] == [type(w) for w in want]
    assert canon_all(list(values)) == want or kind.startswith("float")


@dataclass(frozen=True)
class Coord(SourceFileCoord):
    init_time: np.datetime64
    lead_time: np.timedelta64
    data_vars: tuple[str, ...] = ("t2m",)

    def get_url(self) -> str:
        return f"s3://b/{self.init_time}/{self.lead_time}.grib2"


def test_source_coord_out_loc_and_key():
    c = Coord(INITS[0], LEADS[1])
    assert c.out_loc() == {"init_time": INITS[0], "lead_time": LEADS[1]}
    assert c.key == c.get_url()
    with pytest.raises(NotImplementedError, match="no sidecar index"):
        c.get_index_url()


def test_virtual_ref_validates_range():
    with pytest.raises(ValueError, match=r"t2m .* bad byte range offset=0 length=0"):
        VirtualRef.make("t2m", {"init_time": INITS[0]}, "s3://b/f", 0, 0)
    r = VirtualRef.make("t2m", {"lead_time": LEADS[0], "init_time": INITS[0]}, "s3://b/f", 5, 9)
    assert r.loc == {"init_time": INITS[0], "lead_time": LEADS[0]}


@given(st.data())
def test_chunk_index_inverts_chunk_origin(data):
    ndim = data.draw(st.integers(1, 4))
    chunks = data.draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim))
    idx = data.draw(st.lists(st.integers(0, 20), min_size=ndim, max_size=ndim))
    within = [data.draw(st.integers(0, c - 1)) for c in chunks]
    positions = [i * c + w for i, c, w in zip(idx, chunks, within, strict=True)]
    assert chunk_index(positions, chunks) == tuple(idx)


@given(st.integers(0, 2), st.integers(0, 3), st.sampled_from(["/", "."]))
def test_every_label_pair_lands_on_its_own_chunk(i, j, sep):
    g = geometry(chunk_key_encoding={"name": "default", "configuration": {"separator": sep}})
    ck = chunk_key(g, "t2m", {"init_time": INITS[i], "lead_time": LEADS[j]})
    assert ck is not None and ck.index == (i, j, 0, 0)
    assert ck.key == f"t2m/c{sep}{i}{sep}{j}{sep}0{sep}0"


def _spellings(i: int, j: int) -> list[dict]:
    """One cell's labels in the spellings sources use: numpy ns/h/D units, Python datetimes,
    pandas timestamps, timedeltas; and labels the template does not have."""
    import pandas as pd

    init, lead = INITS[i], LEADS[j]
    return [
        {"init_time": init, "lead_time": lead},
        {"init_time": init.astype("datetime64[h]"), "lead_time": lead.astype("timedelta64[h]")},
        {"init_time": pd.Timestamp(init), "lead_time": pd.Timedelta(lead)},
        {"init_time": init.astype(dt.datetime), "lead_time": dt.timedelta(hours=j)},
        {"init_time": init + np.timedelta64(1, "h"), "lead_time": lead},  # not a label
        {"init_time": init, "lead_time": np.timedelta64(99, "h")},  # not a label
    ]


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 5)), max_size=40))
def test_a_memo_shared_across_cells_answers_as_chunk_key_alone(cells) -> None:
    """completeness passes one memo for a whole window: whatever order and spelling the labels
    come in, every answer is the one chunk_key gives without it."""
    g, memo = geometry(), {}
    for i, j, k in cells:
        loc = _spellings(i, j)[k]
        assert chunk_key(g, "t2m", loc, memo) == chunk_key(g, "t2m", loc)
        ck = chunk_key(g, "t2m", loc)  # the write loop keys by index alone: the same cell
        assert chunk_cell(g, "t2m", loc, memo) == (None if ck is None else ck.index)
