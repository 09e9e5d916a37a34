"""`Trie.lookup_many` answers exactly what `lookup` answers, key by key, and both agree with a
plain linear scan over the manifests: generated scopes (bucketed arrays of both chunk-key
encodings, groups, coalesced blobs, hot prefixes, pins, extra hot names) and generated keys
(chunk keys, metadata, arrays no cut claims, keys outside every scope, keys whose path repeats
a "c" segment)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.archive.ids import bucket_id
from toolkit.archive.model import DEFAULT_HOT_ALWAYS, Blob, Bucket, Manifest, Pin, Policy
from toolkit.archive.resolve import Resolution, Trie

NAMES = ("tas", "pr", "c", "x", "zarr.json")
P = Policy(10, 0, 5)


def oracle(manifests: list[Manifest], key: str) -> Resolution:
    """The rules read off the manifests, by scanning every prefix (no trie)."""
    parts = key.split("/")
    under = [m for m in manifests if parts[: len(m.scope.split("/"))] == m.scope.split("/")]
    m = under[0] if under else None
    names = set(m.hot_always) if m else set(DEFAULT_HOT_ALWAYS)
    if parts[-1] in names:
        return Resolution("hot", m and m.scope, None, "hot_always", m and m.epoch)
    if m is None:
        return Resolution("unmanaged", reason="no manifest covers this key")

    def covers(prefix: str) -> bool:
        p = prefix.split("/")
        return parts[: len(p)] == p

    pins = [p for p in m.pins if covers(p.prefix)]
    if pins:
        deepest = max(pins, key=lambda p: len(p.prefix.split("/")))
        return Resolution("hot", m.scope, None, f"pinned by {deepest.who}", m.epoch)
    cuts = [(p, b) for b in m.blobs for p in b.prefixes if covers(p)]
    cuts += [(p, None) for p in m.hot if covers(p)]
    if not cuts:
        return Resolution("unmanaged", m.scope, None, "not partitioned yet", m.epoch)
    prefix, blob = max(cuts, key=lambda c: len(c[0].split("/")))
    if blob is None:
        return Resolution("hot", m.scope, None, "hot prefix", m.epoch)
    if blob.bucket is None:
        return Resolution("blob", m.scope, blob.id, "blob", m.epoch)
    index = blob.bucket.first_index("/".join(parts[len(prefix.split("/")) :]))
    if index is None:
        return Resolution(
            "unmanaged", m.scope, None, "not a chunk key of a bucketed array", m.epoch
        )
    return Resolution("blob", m.scope, bucket_id(blob.id, index, blob.bucket.width), "bucket",
                      m.epoch)  # fmt: skip


@st.composite
def scopes(draw) -> list[Manifest]:
    out = []
    for s in range(draw(st.integers(1, 3))):
        scope = f"proj/s{s}.zarr" if s % 2 else f"s{s}.zarr"
        arrays = draw(st.lists(st.sampled_from(["tas", "pr", "grp/c", "grp/v", "x"]),
                               unique=True, max_size=4))  # fmt: skip
        blobs, hot = [], []
        for j, a in enumerate(arrays):
            kind = draw(st.sampled_from(["bucket", "blob", "hot"]))
            path = f"{scope}/{a}"
            if kind == "hot":
                hot.append(path)
            elif kind == "bucket":
                enc = draw(st.sampled_from(["default", "v2"]))
                bucket = Bucket(draw(st.integers(1, 5)), enc, draw(st.sampled_from(["/", "."])))
                blobs.append(Blob(f"b_{j}", (path,), bucket))
            else:
                blobs.append(Blob(f"g_{j}", (path,)))
        pins = [Pin(f"{scope}/{a}/c/1", "ops", "why") for a in arrays[:1] if draw(st.booleans())]
        extra = ("keep.me",) if draw(st.booleans()) else ()
        out.append(Manifest(scope, draw(st.integers(1, 9)), P, tuple(blobs), tuple(hot),
                            tuple(pins), (*DEFAULT_HOT_ALWAYS, *extra)))  # fmt: skip
    return out


segment = st.sampled_from(["c", "0", "1", "7", "12", "c.3.1", "3.1", "tas", "grp", "v", "x",
                           "zarr.json", ".zarray", "keep.me", "s0.zarr", "proj", "s1.zarr"])  # fmt: skip
key = st.builds(
    lambda head, tail: "/".join([*head, *tail]),
    st.sampled_from([[], ["s0.zarr"], ["proj", "s1.zarr"], ["s2.zarr"], ["s0.zarr", "tas"],
                     ["proj", "s1.zarr", "grp"], ["elsewhere"]]),
    st.lists(segment, min_size=1, max_size=6),
)  # fmt: skip
keys = st.lists(key, max_size=60)


@settings(max_examples=300, deadline=None)
@given(scopes(), keys)
def test_lookup_many_is_lookup_is_the_linear_scan(manifests: list[Manifest], ks: list[str]) -> None:
    trie = Trie(manifests)
    many = trie.lookup_many(ks)
    assert many == [trie.lookup(k) for k in ks]
    assert many == [oracle(manifests, k) for k in ks]


def test_a_group_named_c_is_not_taken_for_a_chunk_part() -> None:
    """ "proj/a.zarr/c/tas/c/5" splits at the first "/c/" (the group): that prefix's node has
    children, so the key is walked whole and lands in the bucketed array beneath."""
    m = Manifest("a.zarr", 1, P, (Blob("b_tas", ("a.zarr/c/tas",), Bucket(4)),))
    trie = Trie([m])
    keys = ["a.zarr/c/tas/c/5", "a.zarr/c/tas/c/9", "a.zarr/c/zarr.json", "a.zarr/c/pr/c/0"]
    assert [r.blob for r in trie.lookup_many(keys)] == ["b_tas_1", "b_tas_2", None, None]
    assert trie.lookup_many(keys) == [trie.lookup(k) for k in keys]


def test_segments_between_a_bucketed_cut_and_the_chunk_part_count() -> None:
    """ "a.zarr/tas/x/c/5" is below the bucketed array a.zarr/tas but is not one of its chunk
    keys ("x/c/5" does not start with "c"): unmanaged, as `lookup` says."""
    trie = Trie([Manifest("a.zarr", 1, P, (Blob("b_tas", ("a.zarr/tas",), Bucket(4)),))])
    keys = ["a.zarr/tas/x/c/5", "a.zarr/tas/c/5", "a.zarr/tas/x/c/6"]
    assert [r.reason for r in trie.lookup_many(keys)] == [
        "not a chunk key of a bucketed array",
        "bucket",
        "not a chunk key of a bucketed array",
    ]
    assert trie.lookup_many(keys) == [trie.lookup(k) for k in keys]
