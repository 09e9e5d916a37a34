"""The four rules, frozen cuts, --force and appends (pure, hand-written arrays)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.archive.diff import diff
from toolkit.archive.model import ArrayInfo, Manifest, Pin, Policy, is_under
from toolkit.archive.partition import bucket_width, excluded, partition
from toolkit.archive.resolve import Trie

S = "cordex/a.zarr"
P = Policy(t_max=1000, t_hot=50, t_min=300)


def arr(name: str, size: int, n: int = 10, dims: tuple | None = None, **kw) -> ArrayInfo:
    return ArrayInfo(
        f"{S}/{name}", (n,), (1,), dimension_names=dims, stored_bytes=size, objects=n, **kw
    )


def test_coordinates_and_small_arrays_are_hot_and_the_rest_one_blob() -> None:
    arrays = [
        arr("time", 900, dims=("time",)),
        arr("lat", 500, coordinate=True),
        arr("tiny", 10),
        arr("tas", 400),
        arr("pr", 500),
    ]
    m = partition(arrays, S, P)
    assert m.epoch == 1
    assert m.hot == (f"{S}/lat", f"{S}/time", f"{S}/tiny")
    assert [(b.id, b.prefixes) for b in m.blobs] == [("w_pr", (f"{S}/pr", f"{S}/tas"))]
    assert m.blobs[0].bytes == 900 and m.blobs[0].objects == 20


def test_v3_dimension_names_mark_coordinates_like_v2() -> None:
    v2 = arr("time", 900, dims=("time",), zarr_format=2, encoding="v2", separator=".")
    v3 = arr("level", 900, dims=("level",))
    assert partition([v2, v3], S, P).hot == (f"{S}/level", f"{S}/time")


def test_big_array_is_bucketed_and_small_ones_coalesce() -> None:
    big = ArrayInfo(f"{S}/tas", (100, 4), (1, 2), stored_bytes=5000, objects=200)
    small = [arr(f"v{i}", 200) for i in range(5)]
    m = partition([big, *small], S, P)
    by_id = {b.id: b for b in m.blobs}
    assert by_id["b_tas"].bucket is not None
    # 25 bytes per object, 2 objects per first-index slab -> 20 slabs per 1000 bytes
    assert by_id["b_tas"].bucket.width == 20 == bucket_width(big, 1000)
    groups = [b for b in m.blobs if b.id.startswith("g_")]
    assert [len(g.prefixes) for g in groups] == [2, 3]  # 400 clears t_min; last 200 joins the tail
    assert all(g.bytes <= P.t_max for g in groups)


def test_no_blob_owns_an_empty_or_scope_prefix() -> None:
    m = partition([arr("a", 100), arr("b", 100)], S, P)
    for b in m.blobs:
        for p in b.prefixes:
            assert p.startswith(S + "/")


def test_repartition_with_changed_policy_changes_nothing() -> None:
    arrays = [
        ArrayInfo(f"{S}/tas", (100,), (1,), stored_bytes=5000, objects=100),
        arr("pr", 200),
        arr("ps", 200),
    ]
    first = partition(arrays, S, P)
    again = partition(arrays, S, Policy(t_max=10, t_hot=1, t_min=5), first)
    assert again is first
    assert diff(first, again).empty


def test_append_needs_no_manifest_change_and_resolves_to_new_bucket() -> None:
    tas = ArrayInfo(f"{S}/tas", (100,), (1,), stored_bytes=5000, objects=100)
    m = partition([tas], S, P)
    width = m.blob("b_tas").bucket.width
    grown = ArrayInfo(f"{S}/tas", (10_000,), (1,), stored_bytes=500_000, objects=10_000)
    assert partition([grown], S, P, m) is m
    assert Trie([m]).lookup(f"{S}/tas/c/9999").blob == f"b_tas_{9999 // width}"


def test_new_array_gets_a_new_blob_and_old_cuts_stay() -> None:
    m1 = partition([arr("pr", 200), arr("ps", 200)], S, P)
    m2 = partition([arr("pr", 999), arr("ps", 200), arr("uas", 300)], S, P, m1)
    assert m2.epoch == 2
    assert m2.blobs[0] == m1.blobs[0]
    assert [b.id for b in m2.blobs] == ["w_pr", "w_uas"]
    d = diff(m1, m2)
    assert [b.id for b in d.added] == ["w_uas"] and d.orphaned == ()
    assert "+ blob w_uas" in d.describe()


def test_force_recuts_keeps_pins_and_lists_orphans() -> None:
    m1 = partition([arr("pr", 200), arr("ps", 200)], S, P)
    m1 = m1.with_pin(Pin(f"{S}/pr", "ana", "paper"))
    m2 = partition([arr("pr", 200), arr("ps", 200)], S, Policy(1000, 50, 1), m1, force=True)
    assert m2.epoch == m1.epoch + 1 and m2.pins == m1.pins
    assert [b.id for b in m2.blobs] == ["w_pr"]  # same cut here: nothing orphaned
    m3 = partition([arr("pr", 200), arr("ps", 200)], S, Policy(300, 250, 1), m2, force=True)
    d = diff(m2, m3)
    assert d.orphaned == ("w_pr",)
    assert m3.pins == m1.pins and "- blob w_pr retired" in d.describe()
    # ids are forever: the old blob is retired, still naming its keys; cut 3 was opened
    assert m3.blobs == () and [r.blob for r in m3.retired] == list(m2.blobs)
    assert [c.number for c in m3.cuts] == [1, 2, 3] and m3.policy == Policy(300, 250, 1)


def test_an_array_without_chunks_waits_instead_of_freezing_hot() -> None:
    empty = ArrayInfo(f"{S}/fresh", (100,), (1,), stored_bytes=0, objects=0)
    m = partition([arr("pr", 400), empty], S, P)
    assert m.hot == () and [b.prefixes for b in m.blobs] == [(f"{S}/pr",)]
    assert Trie([m]).lookup(f"{S}/fresh/c/0").kind == "unmanaged"
    filled = ArrayInfo(f"{S}/fresh", (100,), (1,), stored_bytes=5000, objects=100)
    m2 = partition([arr("pr", 400), filled], S, P, m)
    assert m2.blob("b_fresh").bucket is not None and m2.blobs[0] == m.blobs[0]


def test_a_root_array_store_is_the_one_cut_that_claims_its_scope() -> None:
    root = ArrayInfo("bare/arr", (10,), (1,), stored_bytes=500, objects=10)
    m = partition([root], "bare/arr", P)
    assert m.root_array and m.blobs[0].prefixes == ("bare/arr",) and m.blobs[0].id == "w_root"
    assert Trie([m]).lookup("bare/arr/c/3").blob == "w_root"
    grown = ArrayInfo("bare/arr", (10,), (1,), stored_bytes=5000, objects=10)
    assert partition([grown], "bare/arr", P, m) is m
    assert partition([], "bare/arr", P, m, hot_always=["NOTES"]).root_array  # kept, not re-derived
    assert not partition([arr("a", 100)], S, P).root_array


def test_hot_always_extends_and_survives_repartitions() -> None:
    m1 = partition([arr("pr", 400)], S, P)
    assert partition([arr("pr", 400)], S, P, m1, hot_always=["zarr.json"]) is m1  # a default
    m2 = partition([arr("pr", 400)], S, P, m1, hot_always=["README"])
    assert m2.epoch == 2 and m2.blobs == m1.blobs and "README" in m2.hot_always
    d = diff(m1, m2)
    assert d.hot_always_added == ("README",) and "+ hot_always README" in d.describe()
    assert partition([arr("pr", 400)], S, P, m2) is m2  # not asked again: kept, no new epoch
    forced = partition([arr("pr", 400)], S, P, m2, force=True)
    assert "README" in forced.hot_always
    assert Trie([m2]).lookup(f"{S}/pr/README").kind == "hot"


def test_exclude_patterns() -> None:
    assert excluded(f"{S}/tmp/x", [f"{S}/tmp"])
    assert excluded(f"{S}/tas", ["*/tas"]) and not excluded(f"{S}/tas", ["*/pr"])
    m = partition([arr("tas", 400), arr("scratch", 400)], S, P, exclude=["*/scratch"])
    assert m.blobs[0].prefixes == (f"{S}/tas",)


def test_zero_d_array_is_never_bucketed() -> None:
    scalar = ArrayInfo(f"{S}/s", (), (), stored_bytes=5000, objects=1)
    m = partition([scalar, arr("x", 1000)], S, P)
    assert all(b.bucket is None for b in m.blobs)
    assert any(b.prefixes == (f"{S}/s",) for b in m.blobs)


@st.composite
def scopes(draw: st.DrawFn) -> list[ArrayInfo]:
    n = draw(st.integers(0, 12))
    out = []
    for i in range(n):
        chunks = draw(st.integers(1, 50))
        out.append(
            ArrayInfo(
                f"{S}/v{i:02d}",
                (chunks * 2, 3),
                (2, 3),
                stored_bytes=draw(st.integers(0, 3000)),
                objects=chunks,
                dimension_names=draw(st.sampled_from([None, (f"v{i:02d}", "x")])),
            )
        )
    return out


policies = st.builds(
    lambda a, b, c: Policy(a, b, min(c, a)),
    st.integers(1, 3000),
    st.integers(0, 100),
    st.integers(1, 3000),
)


@settings(max_examples=150, deadline=None)
@given(scopes(), policies, policies)
def test_every_array_is_claimed_exactly_once_and_cuts_are_frozen(arrays, p1, p2) -> None:
    m = partition(arrays, S, p1)
    for a in arrays:
        owners = [p for b in m.blobs for p in b.prefixes if is_under(a.path, p)]
        owners += [p for p in m.hot if is_under(a.path, p)]
        assert len(owners) == 1
    for b in m.blobs:
        if b.bucket is None and len(b.prefixes) > 1:
            assert b.bytes <= p1.t_max  # a coalesced group never exceeds t_max
    again = partition(arrays, S, p2, m)
    assert again is m
    extra = ArrayInfo(f"{S}/zz", (2,), (2,), stored_bytes=5, objects=1)
    grown = partition([*arrays, extra], S, p2, m)
    assert grown.blobs[: len(m.blobs)] == m.blobs and grown.epoch == m.epoch + 1


def test_manifest_round_trip_from_partition() -> None:
    m = partition([arr("tas", 400)], S, P)
    assert Manifest.loads(m.dumps()) == m
