"""Ids are forever (pure): whatever a scope goes through -- partitions under changing policies,
forced re-cuts, appends, new arrays, blobs marked archived -- an id names the keys it named
when it was first given, and a key that was in an archived blob is still in it or is reported
as re-cut out of it (`Manifest.retired_for`), with the state that blob kept."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.archive.ids import bucket_id
from toolkit.archive.model import ArrayInfo, Manifest, Policy
from toolkit.archive.partition import partition
from toolkit.archive.resolve import Trie

S = "cx.zarr"

policies = st.builds(
    lambda a, b, c: Policy(a, b, min(c, a)),
    st.sampled_from([400, 1000, 3000, 10_000]),
    st.sampled_from([0, 50, 200]),
    st.sampled_from([100, 300, 2000]),
)


def array(name: str, slabs: int, size: int) -> ArrayInfo:
    return ArrayInfo(f"{S}/{name}", (slabs, 4), (1, 4), stored_bytes=size * slabs, objects=slabs)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("partition"), policies),
        st.tuples(st.just("force"), policies),
        st.tuples(st.just("append"), st.integers(0, 5), st.integers(1, 20)),
        st.tuples(st.just("new"), st.integers(10, 99), st.integers(1, 40)),
        st.tuples(st.just("mark"), st.integers(0, 10_000)),
    ),
    min_size=1,
    max_size=12,
)


def keys_of(arrays: dict[str, ArrayInfo]) -> list[str]:
    return [f"{a.path}/c/{i}/0" for a in arrays.values() for i in range(a.shape[0])]


def definition(blob) -> tuple:
    bucket = None if blob.bucket is None else replace(blob.bucket, count=None)
    return blob.prefixes, bucket, blob.cut


@settings(max_examples=200, deadline=None)
@given(policies, st.lists(st.integers(1, 60), min_size=1, max_size=5), ops)
def test_an_id_names_the_same_keys_for_the_life_of_its_scope(first, sizes, steps) -> None:
    arrays = {f"v{i}": array(f"v{i}", 6 + i, s) for i, s in enumerate(sizes)}
    m = partition(arrays.values(), S, first)
    given_ids: dict[str, tuple] = {b.id: definition(b) for b in m.every_blob()}
    tiers: dict[str, str] = {}  # resolved id -> state, as tiers.json keeps it
    archived: dict[str, str] = {}  # key -> the id it was in when that id was archived
    for step in steps:
        previous = m
        if step[0] in ("partition", "force"):
            m = partition(arrays.values(), S, step[1], m, force=step[0] == "force", tiers=tiers)
        elif step[0] == "append":
            name = sorted(arrays)[step[1] % len(arrays)]
            a = arrays[name]
            grown = a.shape[0] + step[2]
            arrays[name] = replace(
                a,
                shape=(grown, 4),
                stored_bytes=a.stored_bytes // a.objects * grown,
                objects=grown,
            )
            m = partition(arrays.values(), S, m.policy, m)
        elif step[0] == "new":
            arrays[f"n{step[1]}"] = array(f"n{step[1]}", 5, step[2])
            m = partition(arrays.values(), S, m.policy, m)
        else:  # the tape system archives the blob holding one key
            keys = keys_of(arrays)
            key = keys[step[1] % len(keys)]
            r = Trie([m]).lookup(key)
            if r.kind == "blob" and r.blob is not None:
                tiers[r.blob] = "archived"
                archived.update(
                    {k: r.blob for k, x in zip(keys, Trie([m]).lookup_many(keys), strict=True)
                     if x.blob == r.blob}
                )  # fmt: skip
        if m is not previous:
            m.check_successor(previous)  # what ManifestStore.write enforces
            assert Manifest.loads(m.dumps()) == m
        # every id ever given still names the same prefixes, bucket arithmetic and cut
        now = {b.id: definition(b) for b in m.every_blob()}
        for ident, d in given_ids.items():
            assert now.get(ident) == d, ident
        given_ids.update({i: d for i, d in now.items() if i not in given_ids})
        # an archived key is still in its archived id, or is reported re-cut out of it
        answers = dict(zip(archived, Trie([m]).lookup_many(list(archived)), strict=True))
        for key, held in archived.items():
            if answers[key].blob != held:
                assert (held, "archived") in m.retired_for(key), (key, held, m.retired)


def test_a_recut_bucketed_array_reports_each_key_from_its_old_bucket() -> None:
    tas = array("tas", 40, 100)  # 4000 B over 40 slabs
    p1, p2 = Policy(1000, 0, 100), Policy(2000, 0, 100)
    m1 = partition([tas], S, p1)
    (b,) = m1.blobs
    assert b.id == "b_tas" and b.bucket is not None and b.bucket.width == 10
    m2 = partition([tas], S, p2, m1, force=True, tiers={"b_tas_2": "archived"})
    (new,) = m2.blobs
    assert new.id == "b2_tas" and new.cut == 2 and new.bucket.width == 20
    assert m2.retired[0].states == {"b_tas_2": "archived"}
    for n in (0, 19, 20, 25, 39):
        key = f"{S}/tas/c/{n}/0"
        assert Trie([m2]).lookup(key).blob == bucket_id("b2_tas", n, 20)
        old = bucket_id("b_tas", n, 10)
        assert m2.retired_for(key) == ((old, "archived" if old == "b_tas_2" else "hot"),)
    assert m2.retired_for(f"{S}/tas/zarr.json") == ()  # metadata was never in a blob
    m3 = partition([tas], S, p2, m2, force=True)  # the same cut again: nothing retired
    assert m3.blobs == m2.blobs and m3.retired == m2.retired
