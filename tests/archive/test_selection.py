"""The pure selection arithmetic against brute force: every element's chunk, pandas' slicing."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.archive import selection as S

ends = st.one_of(st.none(), st.integers(-15, 15))


@st.composite
def arrays_and_slices(draw):
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 12)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, n + 2)) for n in shape)
    specs = []
    for n in shape:
        if draw(st.booleans()):
            specs.append((draw(ends), draw(ends)))
        else:
            specs.append(draw(st.integers(-n, n - 1)))
    return shape, chunks, specs


@settings(max_examples=400, deadline=None)
@given(arrays_and_slices())
def test_chunks_are_those_of_every_element_selected(case) -> None:
    shape, chunks, specs = case
    dims = [f"d{i}" for i in range(len(shape))]
    where = {d: S.positions(d, s, n) for d, s, n in zip(dims, specs, shape, strict=True)}
    ranges = S.chunk_ranges(chunks, S.spans(dims, shape, where))
    # brute force: Python's own indexing of each axis, then every element -> its chunk
    axes = [
        list(range(n)[slice(*s)]) if isinstance(s, tuple) else [range(n)[s]]
        for s, n in zip(specs, shape, strict=True)
    ]
    expected = {
        tuple(i // c for i, c in zip(element, chunks, strict=True))
        for element in itertools.product(*axes)
    }
    assert set(itertools.product(*ranges)) == expected
    assert S.size(ranges) == len(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=0, max_size=4),
    st.sampled_from([("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")]),
)
def test_keys_name_their_index_and_nothing_else(index, encoding) -> None:
    enc, sep = encoding
    key = S.chunk_key("g/a", index, enc, sep)
    assert S.chunk_index(key[len("g/a/") :], len(index), enc, sep) == tuple(index)
    assert S.chunk_index("zarr.json", len(index), enc, sep) is None
    if index:
        assert S.chunk_index(key[len("g/a/") :], len(index) + 1, enc, sep) is None


def test_key_spellings() -> None:
    assert S.chunk_key("a", (), "default") == "a/c" and S.chunk_key("a", (), "v2", ".") == "a/0"
    assert S.chunk_key("a", (1, 2), "default", ".") == "a/c.1.2"
    assert S.chunk_key("a", (1, 2), "v2", "/") == "a/1/2"
    assert list(S.chunk_keys("a", (range(1, 3), range(0, 1)))) == ["a/c/1/0", "a/c/2/0"]
    assert S.chunk_index("1.2/x", 2, "v2", ".") is None
    assert S.chunk_index("c/１", 1) is None  # a full-width digit is no index


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=1, max_size=15),
    st.one_of(st.none(), st.integers(-25, 25)),
    st.one_of(st.none(), st.integers(-25, 25)),
    st.booleans(),
)
def test_label_ranges_slice_as_pandas(values, a, b, descending) -> None:
    values = sorted(values, reverse=descending)
    got = S.label_positions("x", (a, b), np.array(values))
    want = pd.Index(values).slice_indexer(a, b)
    assert list(got) == list(range(len(values))[want])


def test_labels_by_value_and_by_date() -> None:
    times = np.array(pd.date_range("2020-01-01", periods=10, freq="12h"))
    assert S.label_positions("t", "2020-01-02", times) == range(2, 3)
    assert S.label_positions("t", "2020-01-02T12:00", times) == range(3, 4)
    assert S.label_positions("t", ("2020-01-02", "2020-01-03"), times) == range(2, 5)
    with pytest.raises(ValueError, match="no such t; t runs 2020-01-01"):
        S.label_positions("t", "2021-01-01", times)
    with pytest.raises(ValueError, match="want a date/time"):
        S.label_positions("t", "soon", times)
    with pytest.raises(ValueError, match="not sorted"):
        S.label_positions("x", ("1", "2"), np.array([3.0, 1.0, 2.0]))
    assert S.label_positions("x", "2.5", np.array([1.0, 2.5])) == range(1, 2)


def test_flags_parse() -> None:
    assert S.parse_isel("time=-3:") == ("time", (-3, None))
    assert S.parse_isel("time=4") == ("time", 4)
    assert S.parse_sel("time=2020-01-03T06:00") == ("time", "2020-01-03T06:00")
    assert S.parse_sel("time=2020-01-03T06:00:2020-01-04") == (
        "time",
        ("2020-01-03T06:00", "2020-01-04"),
    )
    assert S.parse_sel("lat=60:30") == ("lat", ("60", "30"))
    for bad in ("time", "=3", "time=", "time=1:2:3", "time=x"):
        with pytest.raises(ValueError, match="--isel"):
            S.parse_isel(bad)
    with pytest.raises(ValueError, match="--isel time=10: out of range"):
        S.positions("time", 10, 10)
