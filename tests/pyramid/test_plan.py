"""The pure planner: alignment, pruning from listed keys, level counts, targets (no I/O)."""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

from toolkit.pyramid.geometry import (
    ArrayMeta,
    PlanError,
    child_shard_size,
    decode_keys,
    desired_shard,
    inner_chunk,
    level_count,
    plan_pyramid,
)


def meta(shape, grid, dims=("y", "x"), dtype="float32", sep="/", name="v", enc="default"):
    ke = {"name": enc, "configuration": {"separator": sep}}
    return ArrayMeta(name, shape, dims, grid, grid, dtype, float("nan"), ke)


@given(st.integers(1, 20000), st.sampled_from([256, 512, 1024, 2048, 4096]))
def test_child_shard_never_partially_overlaps(parent, desired):
    c = child_shard_size(parent, desired)
    half_parent_is_whole_children = parent % 2 == 0 and (parent // 2) % c == 0
    child_is_whole_parents = (2 * c) % parent == 0
    assert half_parent_is_whole_children or child_is_whole_parents


def test_shard_sizes_first_levels_split_then_merge():
    assert child_shard_size(8192, 4096) == 4096  # one parent -> one child
    assert child_shard_size(16384, 4096) == 4096  # one parent -> 2x2 children
    assert child_shard_size(4096, 4096) == 4096  # one child covers 2x2 parents
    assert child_shard_size(1000, 1000) == 1000
    assert inner_chunk(4096) == 512 and inner_chunk(1536) == 512 and inner_chunk(384) == 384


def test_level_count_stops_at_one_tile():
    assert level_count((180 * 2**13, 360 * 2**13 + 1)) == 13
    assert level_count((100, 100)) == 1
    assert level_count((1025, 10)) == 2


@settings(max_examples=80, deadline=None)
@given(
    st.integers(5, 300),
    st.integers(5, 300),
    st.sampled_from([4, 6, 8, 16, 32]),
    st.data(),
)
def test_pruning_equals_brute_force_overlap(h, w, s, data):
    grid = (-(-h // s), -(-w // s))
    cells = list(product(range(grid[0]), range(grid[1])))
    present = data.draw(st.sets(st.sampled_from(cells), max_size=len(cells)))
    enc = parse_chunk_key_encoding({"name": "default", "configuration": {"separator": "/"}})
    keys = [enc.encode_chunk_key(c) for c in present] + ["zarr.json", "junk"]
    p = plan_pyramid({"v": meta((h, w), (s, s))}, {"v": keys}, levels=3)
    valid = {(y, x) for y, x in present}  # level-0 pixels with data live in these shards
    for lvl in p.levels:
        f = lvl.factor
        sy, sx = lvl.vars[0].shards
        want = set()
        for y, x in valid:  # a child shard is needed iff its level-0 window meets a present shard
            y0, y1 = y * s, min((y + 1) * s, h)
            x0, x1 = x * s, min((x + 1) * s, w)
            for cy in range(y0 // f // sy, (y1 - 1) // f // sy + 1):
                for cx in range(x0 // f // sx, (x1 - 1) // f // sx + 1):
                    want.add((cy, cx))
        assert {t.index for t in lvl.tasks} == want
        assert len(lvl.targets) == 2 * len(lvl.tasks)


def test_keys_follow_the_arrays_encoding():
    keys = ["0.0", "1.1", "zarr.json"]
    p = plan_pyramid({"v": meta((64, 64), (16, 16), enc="v2", sep=".")}, {"v": keys}, levels=1)
    assert [t.data_key for t in p.levels[0].tasks] == ["2x/v/0.0"]
    assert p.levels[0].tasks[0].count_key == "2x/v_count/0.0"
    enc = parse_chunk_key_encoding({"name": "default", "configuration": {"separator": "."}})
    assert decode_keys(enc, ["c.1.2", "c/1/2", "zarr.json"], 2) == {(1, 2)}


def test_band_dim_collapses_band_shards_and_count_drops_band():
    a = meta((3, 64, 64), (1, 16, 16), dims=("band", "y", "x"))
    keys = ["c/0/0/0", "c/2/0/0", "c/1/3/3"]
    p = plan_pyramid({"v": a}, {"v": keys}, band_dim="band", levels=1, max_shard=16)
    lvl = p.levels[0]
    assert lvl.vars[0].shards[0] == 3 and lvl.vars[0].count_dims == ("y", "x")
    assert sorted(t.data_key for t in lvl.tasks) == ["2x/v/c/0/0/0", "2x/v/c/0/1/1"]
    assert sorted(t.count_key for t in lvl.tasks) == ["2x/v_count/c/0/0", "2x/v_count/c/1/1"]


def test_digest_is_stable_and_tracks_listing_and_settings():
    a = {"v": meta((64, 64), (16, 16))}
    p1 = plan_pyramid(a, {"v": ["c/0/0"]}, levels=2)
    assert p1.digest == plan_pyramid(a, {"v": ["c/0/0"]}, levels=2).digest
    assert p1.digest != plan_pyramid(a, {"v": ["c/0/0", "c/1/1"]}, levels=2).digest
    assert p1.digest != plan_pyramid(a, {"v": ["c/0/0"]}, levels=2, method="max").digest


def test_planner_errors_name_the_array():
    with pytest.raises(PlanError, match=r"array 'v'.*mode"):
        plan_pyramid({"v": meta((8, 8), (4, 4))}, {}, method="mode")
    with pytest.raises(PlanError, match="array 'w': spatial dims"):
        plan_pyramid({"v": meta((8, 8), (4, 4)), "w": meta((8, 9), (4, 4), name="w")}, {})
    with pytest.raises(PlanError, match="--levels must be >= 1"):
        plan_pyramid({"v": meta((8, 8), (4, 4))}, {}, levels=0)


def test_small_shards_grow_4x4_then_2x2_and_large_ones_split():
    """256-px chunks grow 512 -> 1024 (each child covering 4x4 parents), then stay (2x2)."""
    a = meta((40000, 40000), (256, 256))
    p = plan_pyramid({"v": a}, {"v": ["c/0/0"]}, levels=5)
    assert [lvl.vars[0].shards for lvl in p.levels] == [
        (512, 512),
        (1024, 1024),
        (1024, 1024),
        (1024, 1024),
        (1024, 1024),
    ]
    assert p.levels[1].vars[0].chunks == (512, 512)  # small tiles inside real shards
    assert {t.index for t in p.levels[0].tasks} == {(0, 0)}  # level-0 shards (0..1)^2 -> one
    big = plan_pyramid({"v": meta((40000, 40000), (16384, 16384))}, {"v": ["c/0/0"]}, levels=1)
    assert big.levels[0].vars[0].shards == (4096, 4096)  # one parent -> 2x2 whole children
    assert {t.index for t in big.levels[0].tasks} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    same = plan_pyramid({"v": meta((40000, 40000), (1024, 1024))}, {"v": ["c/0/0"]}, levels=2)
    assert [lvl.vars[0].shards for lvl in same.levels] == [(1024, 1024)] * 2


def test_unaligned_shards_split_into_divisors_not_merge_into_giants():
    """A 10000-px shard does not divide by 4096: 2500 (a parent -> 2x2 children) beats 10000
    (a child covering 2x2 parents would read 20000^2 px per task)."""
    assert child_shard_size(10000, 4096) == 2500
    assert child_shard_size(3000, 4096) == 3000
    assert child_shard_size(4097, 4096) == 4097
    assert inner_chunk(2500) == 500


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 9000), st.sampled_from([256, 1000, 2048, 4096]))
def test_growth_is_bounded_and_aligned(parent, max_shard):
    c = child_shard_size(parent, desired_shard(parent, max_shard))
    assert (parent % 2 == 0 and (parent // 2) % c == 0) or (2 * c) % parent == 0
    assert c <= max(max_shard, parent)  # never larger than the cap unless nothing smaller aligns
    assert c <= 2 * parent  # a child reads at most 4x4 parent shards
    if parent >= 1024:
        assert c <= parent  # large shards never merge further: tasks stay many and small
