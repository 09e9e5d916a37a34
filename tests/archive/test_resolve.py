"""The resolver: one node per cut, scope with every id, hot and unmanaged are not errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.archive.model import Blob, Bucket, Manifest, Pin, Policy
from toolkit.archive.resolve import AmbiguousKey, Trie, relative_to

P = Policy(1000, 10, 100)


def manifest(scope: str, **kw) -> Manifest:
    return Manifest(scope, kw.pop("epoch", 1), P, **kw)


A = manifest(
    "cordex/a.zarr",
    blobs=(
        Blob("b_tas", ("cordex/a.zarr/tas",), Bucket(2048)),
        Blob("w_pr", ("cordex/a.zarr/pr", "cordex/a.zarr/ps")),
    ),
    hot=("cordex/a.zarr/time",),
    pins=(Pin("cordex/a.zarr/ps", "ana", "paper"),),
    hot_always=(".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json", "README"),
)
B = manifest("cordex/b.zarr", epoch=4, blobs=(Blob("w_pr", ("cordex/b.zarr/pr",)),))
V2 = manifest("old/v2.zarr", blobs=(Blob("b_t", ("old/v2.zarr/t",), Bucket(10, "v2", ".")),))


def test_bucket_is_arithmetic() -> None:
    trie = Trie([A])
    r = trie.lookup("cordex/a.zarr/tas/c/5000000/0/0")
    assert (r.kind, r.scope, r.blob) == ("blob", "cordex/a.zarr", "b_tas_2441")
    assert trie.lookup("cordex/a.zarr/tas/c/5000/0/0").blob == "b_tas_2"
    assert Trie([V2]).lookup("old/v2.zarr/t/25.3").blob == "b_t_2"


def test_ids_repeat_across_stores_so_the_scope_comes_with_them() -> None:
    trie = Trie([A, B])
    a, b = trie.lookup("cordex/a.zarr/pr/c/0"), trie.lookup("cordex/b.zarr/pr/c/0")
    assert a.blob == b.blob == "w_pr"
    assert (a.scope, a.epoch) == ("cordex/a.zarr", 1) and (b.scope, b.epoch) == ("cordex/b.zarr", 4)


def test_hot_always_pins_and_misses() -> None:
    trie = Trie([A, B])
    assert trie.lookup("cordex/a.zarr/tas/zarr.json").kind == "hot"
    assert trie.lookup("cordex/a.zarr/README").reason == "hot_always"  # manifest extension
    assert trie.lookup("cordex/b.zarr/README").kind == "unmanaged"  # not extended there
    assert trie.lookup("elsewhere/x.zarr/.zarray").kind == "hot"  # defaults without a scope
    assert trie.lookup("cordex/a.zarr/time/c/0").kind == "hot"
    pinned = trie.lookup("cordex/a.zarr/ps/c/3")
    assert pinned.kind == "hot" and "ana" in pinned.reason
    assert trie.lookup("nowhere/x").kind == "unmanaged" and trie.lookup("nowhere/x").scope is None
    fresh = trie.lookup("cordex/a.zarr/new_var/c/0")
    assert (fresh.kind, fresh.scope) == ("unmanaged", "cordex/a.zarr")
    assert trie.lookup("cordex/a.zarr/tas/junk").kind == "unmanaged"
    assert trie.lookup("cordex/a.zarr/tasmax/c/0").kind == "unmanaged"  # segment, not string prefix


def test_len_counts_cuts_never_objects() -> None:
    trie = Trie([A, B])
    assert len(trie) == 3 + 1 + 1 + 1  # A: 3 blob prefixes + 1 hot + 1 pin; B: 1 prefix
    nodes = trie.nodes
    for i in range(1000):
        trie.lookup(f"cordex/a.zarr/tas/c/{i}/0")
    assert trie.nodes == nodes and len(trie) == 6


def test_replace_reloads_a_scope() -> None:
    trie = Trie([A, B])
    newer = B.bumped(blobs=(Blob("w_pr", ("cordex/b.zarr/pr",)), Blob("w_x", ("cordex/b.zarr/x",))))
    trie.replace(newer)
    assert trie.lookup("cordex/b.zarr/x/c/0").blob == "w_x"
    assert trie.lookup("cordex/b.zarr/x/c/0").epoch == 5
    assert trie.lookup("cordex/a.zarr/tas/c/0").blob == "b_tas_0"


@given(st.integers(0, 10**9), st.integers(0, 99))
def test_any_chunk_index_resolves_without_growth(n: int, j: int) -> None:
    trie = Trie([A])
    assert trie.lookup(f"cordex/a.zarr/tas/c/{n}/{j}").blob == f"b_tas_{n // 2048}"
    assert len(trie) == 5


@pytest.mark.parametrize(
    ("key", "root", "rel"),
    [
        ("s3://bkt/pre/cordex/a.zarr/tas/c/0", "s3://bkt/pre", "cordex/a.zarr/tas/c/0"),
        ("s3://bkt/pre/cordex/a.zarr/tas/c/0", "s3://bkt/pre/", "cordex/a.zarr/tas/c/0"),
        ("S3://bkt/pre/x", "s3://bkt/pre", "x"),
        ("s3://bkt/prefix2/x", "s3://bkt/pre", None),  # whole segments, not string prefixes
        ("s3://other/pre/x", "s3://bkt/pre", None),
        ("/data/root/a.zarr/t/0.0", "file:///data/root", "a.zarr/t/0.0"),
        ("file:///data/root/a.zarr/t/0.0", "file:///data/root", "a.zarr/t/0.0"),
        ("/elsewhere/a.zarr/t/0.0", "file:///data/root", None),
        ("a.zarr/t/0.0", "s3://bkt/pre", "a.zarr/t/0.0"),  # already relative
    ],
)
def test_relative_to(key: str, root: str, rel: str | None) -> None:
    assert relative_to(key, root) == rel


def test_pasted_urls_and_paths_resolve_like_keys() -> None:
    trie = Trie([A, B])
    key = "cordex/a.zarr/tas/c/5000/0/0"
    want = trie.lookup(key)
    assert trie.resolve(f"s3://bkt/some/prefix/{key}") == want
    assert trie.resolve(f"s3://bkt/some/prefix/{key}", root="s3://bkt/some/prefix") == want
    assert trie.resolve(f"/mnt/data/{key}") == want
    assert trie.resolve(f"file:///mnt/data/{key}", root="file:///mnt/data") == want
    assert trie.resolve(key) == want
    outside = trie.resolve(f"s3://bkt/other/{key}", root="s3://bkt/some/prefix")
    assert outside.kind == "unmanaged" and "outside the data root" in outside.reason
    assert trie.resolve("s3://bkt/no/scope/here").kind == "unmanaged"


def test_a_url_entering_two_scopes_needs_the_data_root() -> None:
    inner = manifest("a.zarr", blobs=(Blob("w_t", ("a.zarr/t",)),))
    outer = manifest("x/a.zarr", blobs=(Blob("w_t", ("x/a.zarr/t",)),))
    trie = Trie([inner, outer])
    with pytest.raises(AmbiguousKey, match="pass the data root"):
        trie.resolve("s3://bkt/x/a.zarr/t/c/0")
    assert trie.resolve("s3://bkt/x/a.zarr/t/c/0", root="s3://bkt").scope == "x/a.zarr"
    assert trie.resolve("s3://bkt/x/a.zarr/t/c/0", root="s3://bkt/x").scope == "a.zarr"


def test_nested_scopes_are_refused_either_way() -> None:
    inner = manifest("cordex/a.zarr/sub", blobs=(Blob("w_t", ("cordex/a.zarr/sub/t",)),))
    with pytest.raises(ValueError, match="overlaps loaded scope"):
        Trie([A, inner])
    with pytest.raises(ValueError, match=r"contains loaded scope 'cordex/a\.zarr/sub'"):
        Trie([inner, A])


segments = st.text("abcxyz019._-", min_size=1, max_size=6).filter(
    lambda s: s not in ("cordex", "old", ".", "..")
)


@given(st.lists(segments, max_size=4), st.integers(0, 10**7), st.sampled_from(["s3", "gs", "file"]))
def test_any_pasted_prefix_resolves_like_the_key(prefix: list[str], n: int, scheme: str) -> None:
    trie = Trie([A, B, V2])
    for key in (f"cordex/a.zarr/tas/c/{n}/0", f"old/v2.zarr/t/{n}.1", f"cordex/b.zarr/pr/c/{n}"):
        root = f"{scheme}://" + "/".join(["bkt", *prefix])
        assert trie.resolve(f"{root}/{key}") == trie.lookup(key)
        assert trie.resolve(f"{root}/{key}", root=root) == trie.lookup(key)
