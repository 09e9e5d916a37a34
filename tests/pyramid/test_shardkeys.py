"""The planner's columns (issue 52): a level's shards as raveled indices give the tasks, order,
digest and targets that one object per shard gave (`stable` over the tasks is the oracle), from a
listing read a page at a time, at tens of bytes per level-0 object on the client."""

from __future__ import annotations

import pickle
import tracemalloc
from dataclasses import dataclass
from itertools import product

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

from toolkit.pyramid.geometry import ArrayMeta, decode_keys, plan_pyramid
from toolkit.pyramid.shardkeys import decode_page
from toolkit.tasks import stable


@dataclass(frozen=True)
class Key:
    key: str


def meta(name, shape, grid, dims, enc, dtype="float32"):
    fill = float("nan") if dtype.startswith("float") else 0
    return ArrayMeta(name, shape, dims, grid, grid, dtype, fill, enc)


ENCODINGS = [
    {"name": "default", "configuration": {"separator": "/"}},
    {"name": "default", "configuration": {"separator": "."}},
    {"name": "v2", "configuration": {"separator": "."}},
]
# names whose keys sort apart from the names ("t.x/" < "t/"; "a:" starts "a:b:")
NAMES = [("v",), ("t", "t2m", "t.x"), ("a", "a:b"), ("x", "x_count")]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(ENCODINGS),
    st.sampled_from(NAMES),
    st.sampled_from(["mean", "mode"]),
    st.booleans(),
    st.integers(1, 3),
    st.data(),
)
def test_columns_are_the_tasks_stable_would_make(enc, names, method, band, levels, data):
    shape, dims, grid = ((2, 90, 130), ("band", "y", "x"), (2, 4, 4)) if band else (
        (3, 90, 130), ("time", "y", "x"), (1, 4, 4)
    )  # fmt: skip
    dtype = "uint8" if method == "mode" else "float32"
    arrays = {n: meta(n, shape, grid, dims, enc, dtype) for n in names}
    cells = list(product(*(range(-(-n // g)) for n, g in zip(shape, grid, strict=True))))
    e = parse_chunk_key_encoding(enc)
    listings = {}
    for n in names:
        chosen = data.draw(st.lists(st.sampled_from(cells), max_size=200, unique=True))
        listings[n] = [e.encode_chunk_key(c) for c in chosen] + ["zarr.json", "c/x/1"]
    classes = {n: (1, 2, 3) for n in names} if method == "mode" else None
    p = plan_pyramid(
        arrays,
        {n: iter(k) for n, k in listings.items()},  # read once, page by page
        method=method,
        band_dim="band" if band else None,
        levels=levels,
        max_shard=8,
        classes=classes,
    )
    listed = [
        Key(f"{n}:{'.'.join(map(str, i))}")
        for n in names
        for i in decode_keys(e, listings[n], len(shape))
    ]
    assert p.source_digest == stable(listed).digest
    for lvl in p.levels:
        tasks = list(lvl.tasks)
        want = stable(tasks)
        assert [t.key for t in tasks] == want.keys == lvl.tasks.keys
        assert lvl.tasks.digest == want.digest
        assert list(lvl.targets) == sorted(k for t in tasks for k in t.objects)
        assert len(lvl.targets) == sum(len(t.objects) for t in tasks)
        if tasks:
            assert lvl.tasks[-1] == tasks[-1] and list(lvl.tasks[1::3]) == tasks[1::3]


def test_listed_keys_decode_as_zarr_decodes_them():
    for enc in ENCODINGS:
        e = parse_chunk_key_encoding(enc)
        sep = e.separator
        good = [e.encode_chunk_key((i, j)) for i, j in product(range(12), range(3))]
        odd = [
            k.replace("1", r, 1)
            for k in good[13:15]
            for r in ("01", "+1", " 1", "1" * 25, "", "-1", "١")
        ]
        odd += ["zarr.json", "c", "0", sep, f"c{sep}1{sep}{sep}2", "c/1/2\x00", "1.2.3", "x/1/2"]
        keys = good + odd
        got = {tuple(r) for r in decode_page(e, keys, 2).tolist()}
        assert got == {i for i in decode_keys(e, keys, 2) if all(abs(x) < 2**62 for x in i)}


def test_a_stripe_travels_as_columns():
    a = meta("v", (64 * 200, 64 * 200), (64, 64), ("y", "x"), ENCODINGS[0])
    keys = (f"c/{y}/{x}" for y in range(200) for x in range(200))
    lvl = plan_pyramid({"v": a}, {"v": keys}, levels=1).levels[0]
    stripe = lvl.tasks[1000:2000]
    assert len(stripe) == 1000 and list(stripe) == list(lvl.tasks)[1000:2000]
    assert len(pickle.dumps(stripe)) < 20_000  # ~100 KB as ShardTask objects


def test_planning_holds_no_object_per_listed_key():
    """400,000 level-0 objects, listed by a generator: the planner's peak is bytes per object,
    not the ~300 B of a set of index tuples and a task object per shard."""
    a = meta("t2m", (40, 409600, 409600), (1, 4096, 4096), ("time", "y", "x"), ENCODINGS[0])
    keys = (f"c/{t}/{y}/{x}" for t in range(40) for y in range(100) for x in range(100))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        p = plan_pyramid({"t2m": a}, {"t2m": keys})
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(p.levels[0].tasks) == 40 * 50 * 50
    assert peak / 400_000 < 100, f"{peak / 400_000:.0f} B per listed object"
    assert isinstance(p.levels[0].tasks.lin, np.ndarray)
